//! Subflows: steps that run another flow. The SQL core starts a step's children when its tasks
//! are done and settles the step when they end, in the transactions that do so; the one thing
//! those paths leave over (a child a parent's cancel could not take at that moment) is done by
//! [`settle_subflows`], which every process with a running worker calls each second.

use sqlx::PgExecutor;
use uuid::Uuid;

use crate::error::EngineError;

/// Cancels the children of cancelled runs that their parent's cancel could not take at that
/// moment, at most `limit` (`pgflow.settle_subflows`). Returns how many it cancelled.
pub async fn settle_subflows(
    executor: impl PgExecutor<'_>,
    limit: i32,
) -> Result<u32, EngineError> {
    let changed: i32 = sqlx::query_scalar("select pgflow.settle_subflows($1)")
        .bind(limit)
        .fetch_one(executor)
        .await?;
    Ok(u32::try_from(changed).unwrap_or(0))
}

/// A run started by a step of another run (see [`run_children`]).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct ChildRun {
    /// The child run.
    pub run_id: Uuid,
    /// Its concrete flow.
    pub flow_slug: String,
    /// Its status.
    pub status: String,
    /// The parent's step that started it.
    pub parent_step_slug: String,
    /// The parent's task it was started for (a map step's element).
    pub parent_task_index: i32,
}

/// The children of run `run_id`, in step and task order.
pub async fn run_children(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
) -> Result<Vec<ChildRun>, EngineError> {
    let rows = sqlx::query_as(
        "select c.run_id, c.flow_slug, c.status, c.parent_step_slug, c.parent_task_index
         from pgflow.all_runs c
         join pgflow.all_runs p on p.run_id = c.parent_run_id
         join pgflow.steps s on s.flow_slug = p.flow_slug and s.step_slug = c.parent_step_slug
         where c.parent_run_id = $1
         order by s.step_index, c.parent_task_index",
    )
    .bind(run_id)
    .fetch_all(executor)
    .await?;
    Ok(rows)
}
