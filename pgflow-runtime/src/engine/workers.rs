//! Workers: registration, heartbeats, deprecation, and the coverage of a queue's work.

use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use super::SupportedPairs;
use crate::error::EngineError;
use crate::names::QueueName;

/// A `(flow_slug, step_slug)` pair that work on a queue needs and a registry lacks.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct CoverageGap {
    /// The concrete flow.
    pub flow_slug: String,
    /// Its step routed to the queue.
    pub step_slug: String,
    /// The alias whose active target the flow is, if any: new runs will need the pair, and it
    /// never drains.
    pub active_alias: Option<String>,
    /// Queued (executable) tasks of the pair on the queue.
    pub queued_tasks: i64,
    /// Started (recoverable) tasks of the pair on the queue.
    pub started_tasks: i64,
    /// Started runs whose step of the pair has not completed (draining work).
    pub started_runs: i64,
}

/// The pairs that work on `queue` needs but `supported` lacks.
pub async fn queue_coverage_gaps(
    executor: impl PgExecutor<'_>,
    queue: &QueueName,
    supported: &SupportedPairs,
) -> Result<Vec<CoverageGap>, EngineError> {
    let gaps =
        sqlx::query_as::<_, CoverageGap>("select * from pgflow.queue_coverage_gaps($1, $2, $3)")
            .bind(queue.as_str())
            .bind(&supported.flow_slugs)
            .bind(&supported.step_slugs)
            .fetch_all(executor)
            .await?;
    Ok(gaps)
}

/// Records a started worker of `function_name` on `queue` carrying `flow_slugs`, beating every
/// `heartbeat_interval`. Returns `false`, registering nothing, when the function is disabled
/// by a rollout.
pub async fn register_worker(
    executor: impl PgExecutor<'_>,
    worker_id: Uuid,
    queue: &QueueName,
    function_name: &str,
    flow_slugs: &[String],
    heartbeat_interval: std::time::Duration,
) -> Result<bool, EngineError> {
    let interval_ms = i32::try_from(heartbeat_interval.as_millis())
        .unwrap_or(i32::MAX)
        .max(1);
    let registered = sqlx::query_scalar("select pgflow.register_worker($1, $2, $3, $4, $5)")
        .bind(worker_id)
        .bind(queue.as_str())
        .bind(function_name)
        .bind(flow_slugs)
        .bind(interval_ms)
        .fetch_one(executor)
        .await?;
    Ok(registered)
}

/// A worker the maintenance sweep declared lost: silent for ten of its heartbeat intervals
/// (at least 60 s) without having stopped.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
#[non_exhaustive]
pub struct LostWorker {
    /// The worker.
    pub worker_id: Uuid,
    /// The queue it served.
    pub queue_name: String,
    /// Its worker function.
    pub function_name: String,
    /// Its last heartbeat.
    pub last_heartbeat_at: chrono::DateTime<chrono::Utc>,
}

/// Declares lost (stopped and deprecated, with the time) every worker silent for ten of its
/// heartbeat intervals and at least 60 s; returns them.
pub async fn mark_lost_workers(
    executor: impl PgExecutor<'_>,
) -> Result<Vec<LostWorker>, EngineError> {
    let lost = sqlx::query_as("select * from pgflow.mark_lost_workers()")
        .fetch_all(executor)
        .await?;
    Ok(lost)
}

/// Whether workers of `function_name` may start (no rollout has disabled it).
pub async fn function_enabled(
    executor: impl PgExecutor<'_>,
    function_name: &str,
) -> Result<bool, EngineError> {
    let enabled = sqlx::query_scalar("select pgflow.function_enabled($1)")
        .bind(function_name)
        .fetch_one(executor)
        .await?;
    Ok(enabled)
}

/// Records a heartbeat of a worker running handlers of `running_runs`; returns whether it has
/// been deprecated and which of those runs ended meanwhile (see [`Heartbeat`]).
pub async fn heartbeat(
    executor: impl PgExecutor<'_>,
    worker_id: Uuid,
    running_runs: &[Uuid],
) -> Result<Heartbeat, EngineError> {
    let row: Option<(bool, Vec<Uuid>)> =
        sqlx::query_as("select deprecated, ended_runs from pgflow.heartbeat($1, $2)")
            .bind(worker_id)
            .bind(running_runs)
            .fetch_optional(executor)
            .await?;
    // An unknown worker (pruned, or another database) is told to stop.
    let (deprecated, ended_runs) = row.unwrap_or((true, Vec::new()));
    Ok(Heartbeat {
        deprecated,
        ended_runs,
    })
}

/// What a heartbeat answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Heartbeat {
    /// The worker was deprecated (or is unknown): it should drain and stop.
    pub deprecated: bool,
    /// Of the runs it said it runs handlers of, those no longer going (cancelled or failed).
    pub ended_runs: Vec<Uuid>,
}

/// Records that a worker stopped.
pub async fn stop_worker(
    executor: impl PgExecutor<'_>,
    worker_id: Uuid,
) -> Result<(), EngineError> {
    sqlx::query("select pgflow.stop_worker($1)")
        .bind(worker_id)
        .execute(executor)
        .await?;
    Ok(())
}

/// Asks every live worker of `function_name` to drain and stop; returns how many were asked.
pub async fn deprecate_workers(
    executor: impl PgExecutor<'_>,
    function_name: &str,
) -> Result<i32, EngineError> {
    let count = sqlx::query_scalar("select pgflow.deprecate_workers($1)")
        .bind(function_name)
        .fetch_one(executor)
        .await?;
    Ok(count)
}

/// The channel a queue's idle workers listen on for new messages.
pub fn queue_channel(queue: &QueueName) -> String {
    format!("pgflow.{}", queue.as_str())
}

/// From now until [`withdraw_wakeups`] (or the end of the session `executor` runs on), every
/// transaction that makes tasks of `queue` visible notifies [`queue_channel`]. Without a
/// request, starts and completions send no notification: each one would make its commit wait
/// for every other notifying commit of the server. Call it on the session that listens, when
/// every worker it serves is idle, then claim once more (and again a little later): a
/// transaction that looked for requests just before this one may still commit without
/// notifying. Session state: never call it through a transaction-mode pooler.
pub async fn request_wakeups(
    executor: impl PgExecutor<'_>,
    queue: &QueueName,
) -> Result<(), EngineError> {
    sqlx::query("select pgflow.request_wakeups($1)")
        .bind(queue.as_str())
        .execute(executor)
        .await?;
    Ok(())
}

/// Ends this session's [`request_wakeups`] on `queue`; false when it held none.
pub async fn withdraw_wakeups(
    executor: impl PgExecutor<'_>,
    queue: &QueueName,
) -> Result<bool, EngineError> {
    let withdrawn = sqlx::query_scalar("select pgflow.withdraw_wakeups($1)")
        .bind(queue.as_str())
        .fetch_one(executor)
        .await?;
    Ok(withdrawn)
}
