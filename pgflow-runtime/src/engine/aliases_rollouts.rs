//! Aliases (which concrete flow new runs start on), drain checks and the rollout fence.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use crate::error::EngineError;

/// A concrete flow's standing within its alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Activation {
    /// This call moved the alias to the flow.
    Activated,
    /// The flow already was the alias's target.
    Active,
    /// Another (newer, or explicitly set) version is the target.
    Inactive,
}

impl Activation {
    fn from_sql(text: &str) -> Self {
        match text {
            "activated" => Self::Activated,
            "active" => Self::Active,
            _ => Self::Inactive,
        }
    }

    /// `activated`, `active` or `inactive`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Activated => "activated",
            Self::Active => "active",
            Self::Inactive => "inactive",
        }
    }
}

/// Moves the flow's alias to it if it is newer than the alias's target (never backwards).
pub async fn activate_flow(
    executor: impl PgExecutor<'_>,
    flow_slug: &str,
) -> Result<Activation, EngineError> {
    let state: String = sqlx::query_scalar("select pgflow.activate_flow($1)")
        .bind(flow_slug)
        .fetch_one(executor)
        .await?;
    Ok(Activation::from_sql(&state))
}

/// Whether the flow is its alias's target (`Active`) or not (`Inactive`); changes nothing.
pub async fn alias_state(
    executor: impl PgExecutor<'_>,
    flow_slug: &str,
) -> Result<Activation, EngineError> {
    let state: String = sqlx::query_scalar("select pgflow.alias_state($1)")
        .bind(flow_slug)
        .fetch_one(executor)
        .await?;
    Ok(Activation::from_sql(&state))
}

/// Points `alias` at `flow_slug` (an operator's explicit move, rollbacks included). Returns
/// the previous target.
pub async fn set_alias(
    executor: impl PgExecutor<'_>,
    alias: &str,
    flow_slug: &str,
) -> Result<Option<String>, EngineError> {
    let previous = sqlx::query_scalar("select pgflow.set_alias($1, $2)")
        .bind(alias)
        .bind(flow_slug)
        .fetch_one(executor)
        .await?;
    Ok(previous)
}

/// Whether a concrete flow can leave the registries of a queue (or of all queues).
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct DrainStatus {
    /// The concrete flow.
    pub flow_slug: String,
    /// The queue asked about (`None`: every queue).
    pub queue_name: Option<String>,
    /// The flow is its alias's active target (new runs start on it).
    pub active: bool,
    /// Started runs that can still reach the queue.
    pub started_runs: i64,
    /// Queued tasks of the flow on the queue.
    pub queued_tasks: i64,
    /// Started tasks of the flow on the queue.
    pub started_tasks: i64,
    /// Steps of those runs, not completed yet, that route to the queue.
    pub pending_steps: Vec<String>,
    /// Nothing of the flow can reach the queue any more.
    pub safe_to_remove: bool,
}

/// Reports whether `flow_slug` can be removed from the registries of `queue` (or of all).
pub async fn drain_status(
    executor: impl PgExecutor<'_>,
    flow_slug: &str,
    queue: Option<&str>,
) -> Result<DrainStatus, EngineError> {
    let status = sqlx::query_as::<_, DrainStatus>("select * from pgflow.drain_status($1, $2)")
        .bind(flow_slug)
        .bind(queue)
        .fetch_one(executor)
        .await?;
    Ok(status)
}

/// A rollout record.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct Rollout {
    /// Its id.
    pub rollout_id: i64,
    /// The worker functions it disabled.
    pub function_names: Vec<String>,
    /// Those that were enabled when it began (enabled again when it finishes).
    pub enabled_before: Vec<String>,
    /// `open` or `finished`.
    pub status: String,
    /// When it began.
    pub begun_at: DateTime<Utc>,
    /// When it finished.
    pub finished_at: Option<DateTime<Utc>>,
}

/// A worker a rollout still waits for.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
pub struct LiveWorker {
    /// The worker.
    pub worker_id: Uuid,
    /// Its function.
    pub function_name: String,
    /// Its queue.
    pub queue_name: String,
    /// Its last heartbeat.
    pub last_heartbeat_at: DateTime<Utc>,
}

/// Records which functions are enabled, disables them and deprecates their live workers.
pub async fn begin_rollout(
    executor: impl PgExecutor<'_>,
    function_names: &[String],
) -> Result<i64, EngineError> {
    let id = sqlx::query_scalar("select pgflow.begin_rollout($1)")
        .bind(function_names)
        .fetch_one(executor)
        .await?;
    Ok(id)
}

/// The functions with live workers on any of `queues`.
pub async fn functions_serving_queues(
    executor: impl PgExecutor<'_>,
    queues: &[String],
) -> Result<Vec<String>, EngineError> {
    let names = sqlx::query_scalar("select pgflow.functions_serving_queues($1)")
        .bind(queues)
        .fetch_one(executor)
        .await?;
    Ok(names)
}

/// The workers of a rollout's functions that are still running: live, by the one liveness
/// rule (`pgflow.worker_is_live`: a worker silent for 30 s counts as gone).
pub async fn rollout_progress(
    executor: impl PgExecutor<'_>,
    rollout_id: i64,
) -> Result<Vec<LiveWorker>, EngineError> {
    let workers = sqlx::query_as::<_, LiveWorker>("select * from pgflow.rollout_progress($1)")
        .bind(rollout_id)
        .fetch_all(executor)
        .await?;
    Ok(workers)
}

/// Enables exactly the functions that were enabled when the rollout began; returns them.
pub async fn finish_rollout(
    executor: impl PgExecutor<'_>,
    rollout_id: i64,
) -> Result<Vec<String>, EngineError> {
    let names = sqlx::query_scalar("select pgflow.finish_rollout($1)")
        .bind(rollout_id)
        .fetch_one(executor)
        .await?;
    Ok(names)
}

/// Rollouts, open ones first, newest first.
pub async fn rollouts(
    executor: impl PgExecutor<'_>,
    open_only: bool,
) -> Result<Vec<Rollout>, EngineError> {
    let rows = sqlx::query_as::<_, Rollout>(
        "select * from pgflow.rollouts where not $1 or status = 'open'
         order by status = 'open' desc, rollout_id desc",
    )
    .bind(open_only)
    .fetch_all(executor)
    .await?;
    Ok(rows)
}
