//! Why a worker did not start, or stopped on a fatal error.

use crate::connect::ConnectError;
use crate::engine::CoverageGap;
use crate::error::EngineError;

/// How many missing pairs a coverage error lists before summarising the rest.
pub const COVERAGE_LIST_LIMIT: usize = 10;

/// A worker's startup failure or fatal runtime error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The configured database URL gave no connection.
    #[error("worker cannot connect: {0}")]
    Connect(#[from] ConnectError),

    /// A schedule given with `WorkerConfig::schedule` is not valid.
    #[error(transparent)]
    InvalidSchedule(#[from] crate::schedule::ScheduleError),

    /// The notification listener's URL (`ProcessConfig::listen_url`) does not parse.
    #[error(
        "the listen URL is not a valid Postgres URL ({source}); give a direct or session-mode \
         URL of the worker's database, e.g. postgres://user@db-host:5432/app"
    )]
    InvalidListenUrl {
        /// sqlx's parse error.
        #[source]
        source: sqlx::Error,
    },

    /// `DATABASE_URL` is not set and no connection was configured.
    #[error(
        "no database configured: set DATABASE_URL, or pass a URL, a pool or a client with \
         `Worker::start_on` or `WorkerConfig::connection`"
    )]
    NoDatabase,

    /// The database's pgflow schema does not match this code.
    #[error("{0}")]
    Schema(String),

    /// Two deployments of the registry have the same concrete slug.
    #[error(
        "the registry carries concrete flow `{flow_slug}` twice; each concrete flow may appear once"
    )]
    DuplicateFlow {
        /// The duplicated slug.
        flow_slug: String,
    },

    /// Compiling or verifying a deployment failed.
    #[error("cannot deploy flow `{flow_slug}`: {source}")]
    Compile {
        /// The flow.
        flow_slug: String,
        /// Why.
        #[source]
        source: EngineError,
    },

    /// `Worker::start(flow)` was given a flow that routes no step to its default queue.
    #[error(
        "flow `{flow_slug}` routes no step to its default queue `{queue_name}` (its queues: \
         {queues}); start the worker with an explicit queue: \
         `Worker::start_with(deployment, WorkerConfig::new(Queue::...))`"
    )]
    NothingOnDefaultQueue {
        /// The flow.
        flow_slug: String,
        /// Its default queue.
        queue_name: String,
        /// The queues it does route to.
        queues: String,
    },

    /// Work on the queue needs flow steps the registry lacks.
    #[error("{}", coverage_message(queue_name, gaps))]
    Coverage {
        /// The worker's queue.
        queue_name: String,
        /// Every missing pair and what needs it.
        gaps: Vec<CoverageGap>,
    },

    /// A claim met tasks of flow steps the registry lacks
    /// ([`EngineError::UnsupportedTasks`], which names the queue, the messages and the
    /// pairs); the worker stopped without changing them (their messages are visible again,
    /// no attempt was consumed).
    #[error("{0}; the worker stopped: add the missing concrete flows to its registry")]
    UnsupportedTasks(EngineError),

    /// Any other database error at startup.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

fn coverage_message(queue_name: &str, gaps: &[CoverageGap]) -> String {
    let listed: Vec<String> = gaps
        .iter()
        .take(COVERAGE_LIST_LIMIT)
        .map(|gap| {
            let mut needs = Vec::new();
            if let Some(alias) = &gap.active_alias {
                needs.push(format!("active target of alias `{alias}`"));
            }
            if gap.queued_tasks > 0 {
                needs.push(format!("{} queued tasks", gap.queued_tasks));
            }
            if gap.started_tasks > 0 {
                needs.push(format!("{} started tasks", gap.started_tasks));
            }
            if gap.started_runs > 0 {
                needs.push(format!("{} started runs", gap.started_runs));
            }
            format!("{}.{} ({})", gap.flow_slug, gap.step_slug, needs.join(", "))
        })
        .collect();
    let more = gaps.len().saturating_sub(COVERAGE_LIST_LIMIT);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    let flows: std::collections::BTreeSet<&str> =
        gaps.iter().map(|g| g.flow_slug.as_str()).collect();
    let aliases: std::collections::BTreeSet<&str> = gaps
        .iter()
        .filter_map(|g| g.active_alias.as_deref())
        .collect();
    let draining = gaps.iter().any(|g| g.active_alias.is_none());
    let mut repairs = vec![format!(
        "add the concrete flows ({}) to this worker's registry",
        flows.into_iter().collect::<Vec<_>>().join(", ")
    )];
    if !aliases.is_empty() {
        // An active target keeps getting new runs: it never drains while the alias points at it.
        repairs.push(format!(
            "for an active target, first point its alias at a version this worker carries \
             (`pgflow alias set {} <flow>`) and let the old one drain",
            aliases.into_iter().collect::<Vec<_>>().join("|")
        ));
    }
    if draining {
        repairs.push(format!(
            "for the others, let them drain first (`pgflow drain-status <flow> --queue \
             {queue_name}` shows progress)"
        ));
    }
    format!(
        "queue `{queue_name}`: this worker's registry lacks flow steps that work on the queue \
         still needs: {}{more}; {}",
        listed.join(", "),
        repairs.join("; or, ")
    )
}
