//! The commands and arguments of the `pgflow` binary, as clap parses them.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::graph::Format;

/// pgflow: Postgres-native durable workflows.
#[derive(Debug, Parser)]
#[command(
    name = "pgflow",
    version,
    about,
    after_help = "Run ids may be given by a unique prefix (at least 4 characters), as `pgflow \
                  runs` prints them.\n\nExit codes: 0 done; 1 the command ran and failed (an \
                  unknown flow or run, a refusal, the database); 2 the command line is wrong \
                  (unknown flags, bad values, unreadable input). With --json, a failure is a \
                  JSON object on stderr: {\"error\": ..., \"exit_code\": ...}."
)]
pub(crate) struct Cli {
    /// Postgres connection URL.
    #[arg(long, global = true, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// A streaming replica of the database, for what only reads: the dashboard's pages and
    /// metrics, and `status`, `runs`, `run`, `graph`, `workers list`, `alias list` and
    /// `schedules list`. Everything that writes still uses --database-url.
    #[arg(long, global = true, env = "PGFLOW_READ_URL", hide_env_values = true)]
    pub read_url: Option<String>,

    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Queues, workers, aliases and open rollouts at a glance.
    Status,
    /// Recent runs.
    Runs {
        /// Only runs of this concrete flow, or of every version of this alias.
        #[arg(long)]
        flow: Option<String>,
        /// Only runs in this status.
        #[arg(long, value_enum)]
        status: Option<StatusArg>,
        /// How many.
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
    /// One run: its input and outputs, steps, attempts and errors.
    Run {
        /// The run id.
        run_id: String,
        /// Show the input and outputs whole (they are cut to 20 lines otherwise).
        #[arg(long)]
        full: bool,
    },
    /// Start a run of an alias or a concrete flow.
    Start {
        /// Alias or concrete flow slug.
        flow: String,
        /// The flow input as JSON, or `-` to read it from stdin (default: null).
        #[arg(long, conflicts_with = "input_file")]
        input: Option<String>,
        /// Read the flow input (JSON) from this file.
        #[arg(long, value_name = "PATH")]
        input_file: Option<PathBuf>,
        /// Start at most one run for this key with this flow or alias: a second start with
        /// the key answers with the first one's run (while it is kept).
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
        /// Start the run at this time (RFC 3339, e.g. 2026-12-24T18:00:00Z): it exists at once
        /// and its first tasks become visible then.
        #[arg(long, value_name = "TIME", value_parser = parse_time, conflicts_with = "after")]
        at: Option<chrono::DateTime<chrono::Utc>>,
        /// Start the run this long from now, e.g. 10m, 1h30m.
        #[arg(long, value_name = "DURATION", value_parser = parse_age)]
        after: Option<std::time::Duration>,
        /// How urgent the run is: highest, high, normal (the default), low or lowest (or 1 to
        /// 5). Its ready tasks are claimed before those of lower priority on each queue.
        #[arg(long, value_name = "PRIORITY", value_parser = parse_priority)]
        priority: Option<pgflow::Priority>,
        /// Start at most one run for this key (with this flow or alias) per --window: a start
        /// in an open window is refused (exit 1), or with --drop answers with the window's run.
        #[arg(long, value_name = "KEY", requires = "window")]
        throttle: Option<String>,
        /// The throttle or debounce window, e.g. 30s, 5m.
        #[arg(long, value_name = "DURATION", value_parser = parse_age)]
        window: Option<std::time::Duration>,
        /// With --throttle: drop a start in an open window instead of refusing it.
        #[arg(long, requires = "throttle")]
        drop: bool,
        /// Start only while no run with this key (of this flow or alias) is going.
        #[arg(long, value_name = "KEY")]
        singleton: Option<String>,
        /// With --singleton: while a run with the key is going, create the run and let it wait
        /// its turn (it begins once the runs before it have ended) instead of refusing it.
        #[arg(long, requires = "singleton", conflicts_with_all = ["at", "after"])]
        in_turn: bool,
        /// Make one run of the starts with this key less than --window apart: it begins a
        /// window after the last one, with the last input.
        #[arg(long, value_name = "KEY", requires = "window",
              conflicts_with_all = ["throttle", "singleton", "idempotency_key"])]
        debounce: Option<String>,
    },
    /// Send a signal to a run: the step that waits for it runs with the payload (or, when the
    /// run has not reached that step yet, will run without waiting).
    Signal {
        /// The run id (or its first 4 or more characters).
        run_id: String,
        /// The signal's name.
        name: String,
        /// The payload as JSON, or `-` to read it from stdin (default: null).
        #[arg(long, conflicts_with = "payload_file")]
        payload: Option<String>,
        /// Read the payload (JSON) from this file.
        #[arg(long, value_name = "PATH")]
        payload_file: Option<PathBuf>,
    },
    /// Deliver an event by key: every run waiting for a signal of this name by this key (any
    /// flow) receives the payload, and its step runs.
    Emit {
        /// The event's (the signal's) name.
        name: String,
        /// The key the runs wait by (compared as text).
        #[arg(long)]
        key: String,
        /// The payload as JSON, or `-` to read it from stdin (default: null).
        #[arg(long, conflicts_with = "payload_file")]
        payload: Option<String>,
        /// Read the payload (JSON) from this file.
        #[arg(long, value_name = "PATH")]
        payload_file: Option<PathBuf>,
    },
    /// A flow's DAG with its queues, as Mermaid or DOT (coloured by state with --run).
    Graph {
        /// The concrete flow, or an alias (its active flow).
        flow: String,
        /// The output format.
        #[arg(long, value_enum, default_value_t = Format::Mermaid)]
        format: Format,
        /// Colour the steps by this run's states.
        #[arg(long)]
        run: Option<String>,
    },
    /// Cancel runs still going: the given ones, or those a filter names (--flow,
    /// --older-than). Ended runs are left as they are, and said so.
    Cancel {
        /// The runs to cancel.
        #[arg(conflicts_with_all = ["flow", "older_than", "dry_run", "limit"])]
        run_ids: Vec<String>,
        /// Which runs, when no run ids are given.
        #[command(flatten)]
        filter: FilterArgs,
        /// Why: recorded on each run.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Retry failed runs: their failed steps run again, completed steps keep their outputs.
    /// The given runs, or the failed runs a filter names (--flow, --older-than).
    Retry {
        /// The runs to retry.
        #[arg(conflicts_with_all = ["flow", "older_than", "dry_run", "limit"])]
        run_ids: Vec<String>,
        /// Which runs, when no run ids are given.
        #[command(flatten)]
        filter: FilterArgs,
    },
    /// Run ended runs again from a step, each as a new run linked to the old one: that step
    /// and everything after it run again, the steps before keep their outputs.
    Resume {
        /// The runs to resume.
        #[arg(conflicts_with_all = ["flow", "older_than", "dry_run", "limit", "status"])]
        run_ids: Vec<String>,
        /// The step to run again from.
        #[arg(long = "from", value_name = "STEP")]
        from: String,
        /// With a filter: runs that ended this way (repeatable; default failed).
        #[arg(long, value_enum)]
        status: Vec<EndedArg>,
        /// Which runs, when no run ids are given.
        #[command(flatten)]
        filter: FilterArgs,
    },
    /// Workers: list them, or deprecate those of a function.
    #[command(subcommand)]
    Workers(WorkersCommand),
    /// Queues: pause one (no worker claims from it; nothing is lost) or resume it.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Flows: pause one (no worker runs its tasks; nothing is lost) or resume it.
    #[command(subcommand)]
    Flow(FlowCommand),
    /// Cron schedules (declared by workers): list, pause, resume, trigger, delete.
    #[command(subcommand)]
    Schedules(SchedulesCommand),
    /// Aliases: the stable names callers start.
    #[command(subcommand)]
    Alias(AliasCommand),
    /// The production rollout fence over worker functions.
    #[command(subcommand)]
    Rollout(RolloutCommand),
    /// Whether a concrete flow can be removed from the registries of a queue.
    DrainStatus {
        /// The concrete flow, or an alias (its active flow).
        flow: String,
        /// Only this queue (default: every queue).
        #[arg(long)]
        queue: Option<String>,
    },
    /// Delete a concrete flow with its runs, steps, tasks and queued messages. Refused while its
    /// alias points at it (move the alias first) and, unless --force, while live workers carry
    /// it or runs of it are going.
    DeleteFlow {
        /// The concrete flow slug (not an alias).
        flow: String,
        /// Delete even with live workers carrying it or runs going.
        #[arg(long)]
        force: bool,
    },
    /// Delete runs that ended (with their steps and tasks), archived messages of pgflow's
    /// queues and stopped workers, older than --older-than: the days of run history that ended
    /// before it are dropped whole (an archived run is kept up to a day longer), then the live
    /// tables' ended runs are deleted. Live runs are never touched.
    Prune {
        /// How long to keep them, e.g. 7days, 12h, 1h30m, 90s.
        #[arg(long, value_parser = parse_age)]
        older_than: std::time::Duration,
        /// Count what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Live runs, and archived messages, deleted per transaction at most.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(i32).range(1..))]
        batch: i32,
    },
    /// Serve the web dashboard: queues, workers, runs (live), flows; cancel and retry.
    Dashboard {
        /// Where to listen. Loopback by default: anyone who reaches the address sees runs.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// The token cancel and retry need (at least 16 characters; default: a random one,
        /// printed at start).
        #[arg(long, env = "PGFLOW_DASHBOARD_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Show only: no cancel, no retry.
        #[arg(long, conflicts_with = "token")]
        read_only: bool,
        /// Never show run inputs, outputs or step outputs (their sizes only).
        #[arg(long)]
        hide_payloads: bool,
        /// Also serve Prometheus metrics at /metrics.
        #[arg(long)]
        metrics: bool,
    },
    /// Install or upgrade PGMQ and the pgflow schema (idempotent).
    Install,
    /// Give a login one of pgflow's roles: worker, client or operator (run as the installer).
    Grant {
        /// The login role (it must exist: `create role app_worker login password '...'`).
        login: String,
        /// What the login is for.
        #[arg(long = "as", value_enum)]
        role: RoleArg,
    },
}

/// Which runs a bulk `cancel`, `retry` or `resume` takes.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct FilterArgs {
    /// Runs of this flow, or of any version of this alias.
    #[arg(long)]
    pub flow: Option<String>,
    /// Only runs started more than this long ago, e.g. 1h, 30m, 7days.
    #[arg(long, value_parser = parse_age)]
    pub older_than: Option<std::time::Duration>,
    /// At most this many runs, oldest first.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(i32).range(1..))]
    pub limit: i32,
    /// List the runs the filter names; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// How a run to resume ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum EndedArg {
    /// A step failed for good.
    Failed,
    /// It completed.
    Completed,
    /// It was cancelled.
    Cancelled,
}

impl EndedArg {
    /// The engine's status.
    pub(crate) fn status(self) -> pgflow::RunStatus {
        match self {
            Self::Failed => pgflow::RunStatus::Failed,
            Self::Completed => pgflow::RunStatus::Completed,
            Self::Cancelled => pgflow::RunStatus::Cancelled,
        }
    }
}

/// The roles `pgflow grant --as` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum RoleArg {
    /// pgflow_worker: runs workers.
    Worker,
    /// pgflow_client: starts runs and reads them.
    Client,
    /// pgflow_operator: a client that also runs aliases, rollouts, drains and retention.
    Operator,
}

impl RoleArg {
    /// The library's role.
    pub(crate) fn role(self) -> pgflow::PgflowRole {
        match self {
            Self::Worker => pgflow::PgflowRole::Worker,
            Self::Client => pgflow::PgflowRole::Client,
            Self::Operator => pgflow::PgflowRole::Operator,
        }
    }
}

/// The run states `--status` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StatusArg {
    /// Started for a later time that has not come yet.
    Scheduled,
    /// Still running (not waiting for its time, nor only waiting).
    Started,
    /// Running, but only waiting: for a signal, an event or the end of a sleep.
    Waiting,
    /// Ended with an output.
    Completed,
    /// Ended with a failure.
    Failed,
    /// Cancelled from outside.
    Cancelled,
}

impl StatusArg {
    /// The state listings filter by.
    pub(crate) fn state(self) -> pgflow_runtime::admin::inspect::ShownState {
        use pgflow_runtime::admin::inspect::ShownState;
        match self {
            Self::Scheduled => ShownState::Scheduled,
            Self::Started => ShownState::Started,
            Self::Waiting => ShownState::Waiting,
            Self::Completed => ShownState::Completed,
            Self::Failed => ShownState::Failed,
            Self::Cancelled => ShownState::Cancelled,
        }
    }
}

/// A time in RFC 3339 (`2026-12-24T18:00:00Z`, `2026-12-24T19:00:00+01:00`).
fn parse_time(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .map(|time| time.with_timezone(&chrono::Utc))
        .map_err(|e| {
            format!("`{text}` is not an RFC 3339 time ({e}); write it like 2026-12-24T18:00:00Z")
        })
}

/// A duration as humantime reads it (`7days`, `1h30m`, `90s`), at least a second.
fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    let age = humantime::parse_duration(text.trim()).map_err(|e| {
        format!("`{text}` is not a duration ({e}); write it like 7days, 12h, 1h30m or 90s")
    })?;
    if age < std::time::Duration::from_secs(1) {
        return Err(format!("`{text}` is under a second; keep at least 1s"));
    }
    Ok(age)
}

/// A priority by name (`highest` to `lowest`) or level (`1` to `5`).
fn parse_priority(text: &str) -> Result<pgflow::Priority, String> {
    pgflow::Priority::parse(text.trim().to_ascii_lowercase().as_str()).ok_or_else(|| {
        format!("`{text}` is no priority; write highest, high, normal, low or lowest (or 1 to 5)")
    })
}

#[derive(Debug, Subcommand)]
pub(crate) enum WorkersCommand {
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
pub(crate) enum QueueCommand {
    /// Stop every worker from claiming from the queue: runs keep starting and tasks keep
    /// queueing on it, and resuming picks them all up.
    Pause {
        /// The queue.
        queue: String,
        /// Why: shown with the pause.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Let workers claim from the queue again (and wake the idle ones).
    Resume {
        /// The queue.
        queue: String,
    },
    /// How long a task may wait, ready, on the queue's priority lanes before it counts as
    /// aged: aged tasks get up to a quarter of each claim, whatever their priority (so no
    /// priority starves another).
    Aging {
        /// The queue.
        queue: String,
        /// The limit, e.g. 30s, 5m (at least 1s), or `default` (60 s).
        #[arg(value_name = "DURATION|default", value_parser = parse_aging)]
        limit: Aging,
    },
    /// At most this many of the queue's tasks run at once, across every worker and process
    /// (whatever their flow and step), or `none` to lift the cap.
    Cap {
        /// The queue.
        queue: String,
        /// The cap, 1 to 10000, or `none`.
        #[arg(value_name = "N|none", value_parser = parse_queue_cap)]
        concurrency: QueueCap,
    },
}

/// A queue's cap as `pgflow queue cap` takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum QueueCap {
    /// No cap.
    None,
    /// At most this many at once.
    AtMost(u32),
}

/// `none`, or a whole number from 1 to 10000.
fn parse_queue_cap(text: &str) -> Result<QueueCap, String> {
    match text.trim() {
        "none" => Ok(QueueCap::None),
        n => match n.parse::<u32>() {
            Ok(n) if (1..=10_000).contains(&n) => Ok(QueueCap::AtMost(n)),
            _ => Err(format!("`{text}` is no cap: give 1 to 10000, or `none`")),
        },
    }
}

/// An aging limit as `pgflow queue aging` takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Aging {
    /// Back to the default.
    Default,
    /// This many seconds.
    Seconds(i32),
}

/// `default`, or a duration of at least a second (whole seconds, rounded up).
fn parse_aging(text: &str) -> Result<Aging, String> {
    if text.trim() == "default" {
        return Ok(Aging::Default);
    }
    let limit = parse_age(text)?;
    let seconds = limit.as_secs() + u64::from(limit.subsec_nanos() > 0);
    i32::try_from(seconds)
        .map(Aging::Seconds)
        .map_err(|_| format!("`{text}` is too long for an aging limit"))
}

#[derive(Debug, Subcommand)]
pub(crate) enum FlowCommand {
    /// Stop every worker from running the flow's tasks (a worker that meets one parks it):
    /// runs keep starting, other flows on its queues run on, and resuming picks everything up.
    Pause {
        /// A concrete flow slug, or an alias (each of its versions).
        name: String,
        /// Why: shown with the pause.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Let workers run the flow's tasks again (those parked meanwhile first).
    Resume {
        /// A concrete flow slug, or an alias (each of its versions).
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum SchedulesCommand {
    /// Every schedule with its state.
    List,
    /// Start nothing until resumed.
    Pause {
        /// The schedule.
        name: String,
    },
    /// Fire again from now on (ticks missed while paused are not caught up).
    Resume {
        /// The schedule.
        name: String,
    },
    /// Start one run of the schedule now, outside its ticks.
    Trigger {
        /// The schedule.
        name: String,
    },
    /// Delete the schedule (its runs stay; a worker declaring it creates it again).
    Delete {
        /// The schedule.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum AliasCommand {
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
pub(crate) enum RolloutCommand {
    /// Disable worker functions, deprecate their workers and wait until all have stopped.
    Begin {
        /// Worker functions to fence.
        functions: Vec<String>,
        /// Also fence every function with live workers on this queue (repeatable).
        #[arg(long = "queue")]
        queues: Vec<String>,
        /// Give up waiting after this long, e.g. 2m, 90s, 1h (the rollout stays open).
        #[arg(long, value_parser = parse_age, default_value = "2m")]
        timeout: std::time::Duration,
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
