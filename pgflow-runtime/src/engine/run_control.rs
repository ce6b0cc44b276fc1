//! Run control from outside: cancelling, retrying and resuming runs, one by one or by filter;
//! deleting a flow.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use crate::engine::{Run, RunStatus};
use crate::error::EngineError;

/// Which runs a bulk operation takes: runs of a flow or of any version of an alias, started
/// before a time; oldest first, at most `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunFilter {
    /// A concrete flow slug or an alias (every version); `None` for every flow.
    pub name: Option<String>,
    /// Only runs started before this time.
    pub started_before: Option<DateTime<Utc>>,
    /// At most this many runs (oldest first).
    pub limit: i32,
}

impl RunFilter {
    /// The default bound of a bulk operation.
    pub const DEFAULT_LIMIT: i32 = 1000;

    /// Every run (up to [`DEFAULT_LIMIT`](Self::DEFAULT_LIMIT)).
    pub fn all() -> Self {
        Self {
            name: None,
            started_before: None,
            limit: Self::DEFAULT_LIMIT,
        }
    }

    /// Only runs of this flow, or of any version of this alias.
    #[must_use]
    pub fn flow(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Only runs started before `time`.
    #[must_use]
    pub fn started_before(mut self, time: DateTime<Utc>) -> Self {
        self.started_before = Some(time);
        self
    }

    /// At most `limit` runs.
    #[must_use]
    pub fn limit(mut self, limit: i32) -> Self {
        self.limit = limit;
        self
    }
}

impl Default for RunFilter {
    fn default() -> Self {
        Self::all()
    }
}

/// What cancelling one run did.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
#[non_exhaustive]
pub struct Cancellation {
    /// The run.
    pub run_id: Uuid,
    /// Its status after the call: `cancelled`, or how it had already ended.
    pub status: RunStatus,
    /// Whether this call cancelled it (false: it had already ended, and nothing changed).
    pub cancelled: bool,
}

/// Cancels the runs among `run_ids` that are still going (`pgflow.cancel_runs`): each becomes
/// cancelled with `reason`; its queued tasks never reach a handler, a running task's result is
/// discarded, and its worker cancels the handler at its next heartbeat. Returns one entry per
/// run found (a run id that does not exist has none), in run id order.
pub async fn cancel_runs(
    executor: impl PgExecutor<'_>,
    run_ids: &[Uuid],
    reason: Option<&str>,
) -> Result<Vec<Cancellation>, EngineError> {
    let rows = sqlx::query_as::<_, Cancellation>("select * from pgflow.cancel_runs($1, $2)")
        .bind(run_ids)
        .bind(reason)
        .fetch_all(executor)
        .await?;
    Ok(rows)
}

/// Cancels the runs still going that `filter` names (`pgflow.cancel_matching`); with
/// `dry_run`, cancels nothing. Returns the runs it cancelled (or would cancel), oldest first.
pub async fn cancel_matching(
    executor: impl PgExecutor<'_>,
    filter: &RunFilter,
    reason: Option<&str>,
    dry_run: bool,
) -> Result<Vec<Uuid>, EngineError> {
    let runs = sqlx::query_scalar("select * from pgflow.cancel_matching($1, $2, $3, $4, $5)")
        .bind(filter.name.as_deref())
        .bind(filter.started_before)
        .bind(reason)
        .bind(filter.limit)
        .bind(dry_run)
        .fetch_all(executor)
        .await?;
    Ok(runs)
}

/// What retrying one run did.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
#[non_exhaustive]
pub struct Retry {
    /// The run.
    pub run_id: Uuid,
    /// Its status after the call: `started` when retried, or its status when it was not failed.
    pub status: RunStatus,
    /// Whether this call retried it (false: it was not failed, and nothing changed).
    pub retried: bool,
}

/// Retries the failed runs among `run_ids` (`pgflow.retry_runs`): each goes back to `started`
/// and counts the retry; its failed steps, and only they, run again with a fresh budget of
/// attempts (a map step's completed elements keep their outputs); completed and skipped steps
/// keep their outputs. Returns one entry per run found, in run id order.
pub async fn retry_runs(
    executor: impl PgExecutor<'_>,
    run_ids: &[Uuid],
) -> Result<Vec<Retry>, EngineError> {
    let rows = sqlx::query_as::<_, Retry>("select * from pgflow.retry_runs($1)")
        .bind(run_ids)
        .fetch_all(executor)
        .await?;
    Ok(rows)
}

/// Retries the failed runs `filter` names (`pgflow.retry_matching`); with `dry_run`, retries
/// nothing. Returns the runs it retried (or would retry), oldest first.
pub async fn retry_matching(
    executor: impl PgExecutor<'_>,
    filter: &RunFilter,
    dry_run: bool,
) -> Result<Vec<Uuid>, EngineError> {
    let runs = sqlx::query_scalar("select * from pgflow.retry_matching($1, $2, $3, $4)")
        .bind(filter.name.as_deref())
        .bind(filter.started_before)
        .bind(filter.limit)
        .bind(dry_run)
        .fetch_all(executor)
        .await?;
    Ok(runs)
}

/// Runs the ended run `run_id` again from `step_slug` (`pgflow.resume_run`): a new run of the
/// same flow and input, linked to the old one (`resumed_from`), in which that step, everything
/// downstream of it and every step the old run did not complete run again, and the other steps
/// keep the old run's outputs. The old run stays as it was. Returns the new run.
/// [`EngineError::RunControl`] when the run is still going or its flow has no such step.
pub async fn resume_run(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
    step_slug: &str,
) -> Result<Run, EngineError> {
    let run = sqlx::query_as::<_, Run>("select * from pgflow.resume_run($1, $2)")
        .bind(run_id)
        .bind(step_slug)
        .fetch_one(executor)
        .await?;
    Ok(run)
}

/// A run a bulk resume took, and the run it was resumed as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromRow)]
#[non_exhaustive]
pub struct Resumed {
    /// The ended run.
    pub run_id: Uuid,
    /// The new run it was resumed as (`None` in a dry run).
    pub resumed_as: Option<Uuid>,
}

/// Resumes from `step_slug` the ended runs of `statuses` (failed ones when empty) that
/// `filter` names (`pgflow.resume_matching`); with `dry_run`, resumes nothing. Returns each run
/// resumed (or that would be), oldest first, with its new run.
pub async fn resume_matching(
    executor: impl PgExecutor<'_>,
    filter: &RunFilter,
    step_slug: &str,
    statuses: &[RunStatus],
    dry_run: bool,
) -> Result<Vec<Resumed>, EngineError> {
    let statuses: Option<Vec<&str>> =
        (!statuses.is_empty()).then(|| statuses.iter().map(|s| s.as_str()).collect());
    let runs = sqlx::query_as::<_, Resumed>(
        "select * from pgflow.resume_matching($1, $2, $3, $4, $5, $6)",
    )
    .bind(filter.name.as_deref())
    .bind(step_slug)
    .bind(statuses)
    .bind(filter.started_before)
    .bind(filter.limit)
    .bind(dry_run)
    .fetch_all(executor)
    .await?;
    Ok(runs)
}

/// What deleting a flow removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct DeletedFlow {
    /// Its runs.
    pub runs: i64,
    /// Their tasks.
    pub tasks: i64,
    /// Queued messages of those tasks.
    pub messages: i64,
}

/// Deletes the concrete flow `flow_slug` with its runs, step states, tasks, attempt history
/// and queued messages (`pgflow.delete_flow`; its queues stay). [`EngineError::FlowInUse`]
/// while its alias points at it and has other versions, and, unless `force`, while live
/// workers carry it or runs of it are going. A flow that is its alias's only version takes the
/// alias with it. [`EngineError::UnknownFlow`] when there is no such flow.
pub async fn delete_flow(
    executor: impl PgExecutor<'_>,
    flow_slug: &str,
    force: bool,
) -> Result<DeletedFlow, EngineError> {
    let deleted = sqlx::query_as::<_, DeletedFlow>("select * from pgflow.delete_flow($1, $2)")
        .bind(flow_slug)
        .bind(force)
        .fetch_one(executor)
        .await?;
    Ok(deleted)
}
