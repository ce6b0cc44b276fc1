//! The commands and arguments of the `pgflow` binary, as clap parses them.

use clap::{Parser, Subcommand};

/// pgflow: Postgres-native durable workflows.
#[derive(Debug, Parser)]
#[command(name = "pgflow", version, about)]
pub struct Cli {
    /// Postgres connection URL.
    #[arg(long, global = true, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
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
pub enum WorkersCommand {
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
pub enum AliasCommand {
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
pub enum RolloutCommand {
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
