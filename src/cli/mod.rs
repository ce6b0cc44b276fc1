//! Commands of the `pgflow` binary. Each prints a human table by default or JSON with
//! `--json`; failures are one line on stderr with exit code 2 for bad input (unknown flow,
//! rollout or alias, pgflow not installed) and 1 for everything else.

mod commands;

use clap::{Parser, Subcommand};

/// pgflow: Postgres-native durable workflows.
#[derive(Debug, Parser)]
#[command(name = "pgflow", version, about)]
pub struct Cli {
    /// Postgres connection URL.
    #[arg(long, global = true, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,

    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install or upgrade PGMQ and the pgflow schema (idempotent).
    Install,
    /// Aliases: the stable names callers start.
    #[command(subcommand)]
    Alias(AliasCommand),
    /// Whether a concrete flow can be removed from the registries of a queue.
    DrainStatus {
        /// The concrete flow.
        flow: String,
        /// Only this queue (default: every queue).
        #[arg(long)]
        queue: Option<String>,
    },
    /// The production rollout fence over worker functions.
    #[command(subcommand)]
    Rollout(RolloutCommand),
}

#[derive(Debug, Subcommand)]
enum AliasCommand {
    /// Point an alias at one of its concrete flows (an explicit rollback included).
    Set {
        /// The alias.
        alias: String,
        /// The concrete flow.
        flow: String,
    },
    /// List aliases and their active versions.
    List,
}

#[derive(Debug, Subcommand)]
enum RolloutCommand {
    /// Disable worker functions, deprecate their workers and wait until all have stopped.
    Begin {
        /// Worker functions to fence.
        functions: Vec<String>,
        /// Also fence every function with live workers on this queue (repeatable).
        #[arg(long = "queue")]
        queues: Vec<String>,
        /// Give up waiting after this many seconds (the rollout stays open).
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        /// Do not wait for the workers to stop.
        #[arg(long)]
        no_wait: bool,
    },
    /// Enable again exactly the functions that were enabled when the rollout began.
    Finish {
        /// The rollout id `begin` printed.
        rollout_id: i64,
    },
    /// Show open rollouts (all with `--all`).
    Status {
        /// Include finished rollouts.
        #[arg(long)]
        all: bool,
    },
}

/// A failed command: its one-line message and exit code.
pub struct Failure {
    pub message: String,
    pub exit_code: u8,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            exit_code: 2,
        }
    }

    fn runtime(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            exit_code: 1,
        }
    }
}

impl From<pgflow::EngineError> for Failure {
    fn from(error: pgflow::EngineError) -> Self {
        use pgflow::EngineError as E;
        let message = error.to_string().replace('\n', " ");
        match error {
            E::UnknownFlow { .. }
            | E::UnknownRun { .. }
            | E::NotInstalled(_)
            | E::AliasMismatch(_)
            | E::Rollout(_)
            | E::InvalidArguments(_) => Self::usage(message),
            _ => Self::runtime(message),
        }
    }
}

/// Runs one command.
pub async fn run(cli: Cli) -> Result<(), Failure> {
    let url = cli.database_url.clone().ok_or_else(|| {
        Failure::usage("no database given: pass --database-url or set DATABASE_URL")
    })?;
    let out = commands::Output { json: cli.json };
    match cli.command {
        Command::Install => commands::install(&url, &out).await,
        command => {
            let pool = commands::connect(&url).await?;
            match command {
                Command::Install => unreachable!("handled above"),
                Command::Alias(AliasCommand::Set { alias, flow }) => {
                    commands::alias_set(&pool, &out, &alias, &flow).await
                }
                Command::Alias(AliasCommand::List) => commands::alias_list(&pool, &out).await,
                Command::DrainStatus { flow, queue } => {
                    commands::drain_status(&pool, &out, &flow, queue.as_deref()).await
                }
                Command::Rollout(RolloutCommand::Begin {
                    functions,
                    queues,
                    timeout,
                    no_wait,
                }) => {
                    commands::rollout_begin(&pool, &out, functions, queues, timeout, no_wait).await
                }
                Command::Rollout(RolloutCommand::Finish { rollout_id }) => {
                    commands::rollout_finish(&pool, &out, rollout_id).await
                }
                Command::Rollout(RolloutCommand::Status { all }) => {
                    commands::rollout_status(&pool, &out, all).await
                }
            }
        }
    }
}
