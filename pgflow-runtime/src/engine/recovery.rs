//! Recovering tasks whose worker stalled.

use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use crate::error::EngineError;

/// A stalled task found by [`requeue_stalled_tasks`].
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
#[non_exhaustive]
pub struct StalledTask {
    /// The task's run.
    pub run_id: Uuid,
    /// The task's step.
    pub step_slug: String,
    /// The task's index.
    pub task_index: i32,
    /// The task's queue.
    pub queue_name: String,
    /// The task's message as it now stands (a requeued task's new one); `None` for a task
    /// failed for good that was claimed when its dependency completed (it never had one).
    pub message_id: Option<i64>,
    /// `true`: queued again; `false`: stalled too often and failed for good.
    pub requeued: bool,
}

/// Puts back tasks whose worker stalled: started longer ago than their timeout plus
/// `grace_seconds`. Each task is requeued at most `max_requeues` times, then fails for good.
/// Only one caller per database does the work at a time; concurrent callers get nothing.
pub async fn requeue_stalled_tasks(
    executor: impl PgExecutor<'_>,
    grace_seconds: i32,
    max_requeues: i32,
) -> Result<Vec<StalledTask>, EngineError> {
    let tasks =
        sqlx::query_as::<_, StalledTask>("select * from pgflow.requeue_stalled_tasks($1, $2)")
            .bind(grace_seconds)
            .bind(max_requeues)
            .fetch_all(executor)
            .await?;
    Ok(tasks)
}
