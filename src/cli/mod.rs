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
    /// Queues, workers, aliases and open rollouts at a glance.
    Status,
    /// Recent runs.
    Runs {
        /// Only runs of this concrete flow.
        #[arg(long)]
        flow: Option<String>,
        /// Only runs in this status (started, completed, failed).
        #[arg(long)]
        status: Option<String>,
        /// How many.
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
    /// One run: its steps, attempts and errors.
    Run {
        /// The run id.
        run_id: String,
    },
    /// Start a run of an alias or a concrete flow.
    Start {
        /// Alias or concrete flow slug.
        flow: String,
        /// The flow input as JSON.
        #[arg(long, default_value = "null")]
        input: String,
    },
    /// A flow's DAG with its queues, as Mermaid or DOT (coloured by state with --run).
    Graph {
        /// The concrete flow.
        flow: String,
        /// `mermaid` or `dot`.
        #[arg(long, default_value = "mermaid")]
        format: String,
        /// Colour the steps by this run's states.
        #[arg(long)]
        run: Option<String>,
    },
    /// Workers: list them, or deprecate those of a function.
    #[command(subcommand)]
    Workers(WorkersCommand),
    /// Delete runs that ended (with their steps and tasks), archived messages of pgflow's
    /// queues and stopped workers, older than --older-than. Live runs are never touched.
    Prune {
        /// How long to keep them: a whole number with a unit, s, m, h, d or w (e.g. 7d, 12h).
        #[arg(long, value_parser = parse_age)]
        older_than: std::time::Duration,
        /// Runs, and archived messages, deleted per transaction at most.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(i32).range(1..))]
        batch: i32,
    },
}

/// `7d`, `12h`, `30m`, `90s`, `2w`: a whole number of one unit.
fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit: add s, m, h, d or w (e.g. 7d)"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a whole number (e.g. 7d)"))?;
    let seconds_per_unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => {
            return Err(format!(
                "`{unit}` is not a unit: use s, m, h, d or w (e.g. 7d)"
            ));
        }
    };
    number
        .checked_mul(seconds_per_unit)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| format!("`{text}` is too long"))
}

#[derive(Debug, Subcommand)]
enum WorkersCommand {
    /// Live workers (all with --all).
    List {
        /// Include stopped workers.
        #[arg(long)]
        all: bool,
    },
    /// Ask every live worker of a function to drain and stop.
    Deprecate {
        /// The worker function.
        function: String,
    },
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
                Command::Status => commands::status(&pool, &out).await,
                Command::Runs {
                    flow,
                    status,
                    limit,
                } => commands::runs(&pool, &out, flow.as_deref(), status.as_deref(), limit).await,
                Command::Run { run_id } => commands::run(&pool, &out, &run_id).await,
                Command::Start { flow, input } => commands::start(&pool, &out, &flow, &input).await,
                Command::Graph { flow, format, run } => {
                    commands::graph(&pool, &out, &flow, &format, run.as_deref()).await
                }
                Command::Workers(WorkersCommand::List { all }) => {
                    commands::workers(&pool, &out, all).await
                }
                Command::Workers(WorkersCommand::Deprecate { function }) => {
                    commands::deprecate(&pool, &out, &function).await
                }
                Command::Prune { older_than, batch } => {
                    commands::prune(&pool, &out, older_than, batch).await
                }
            }
        }
    }
}
