//! Flow control: holding work back. A paused queue is claimed from by no one until it is
//! resumed; nothing on it is lost, and runs keep starting and queueing tasks on it.

use sqlx::PgExecutor;

use crate::error::EngineError;

/// Pauses `queue` (`pgflow.pause_queue`): claims that began before the pause commits finish,
/// none begins after, and what its completions release is queued rather than claimed. Returns
/// false when it was already paused. [`EngineError::UnknownQueue`] for a queue no flow routes
/// to.
pub async fn pause_queue(
    executor: impl PgExecutor<'_>,
    queue: &str,
    reason: Option<&str>,
) -> Result<bool, EngineError> {
    let paused = sqlx::query_scalar("select pgflow.pause_queue($1, $2)")
        .bind(queue)
        .bind(reason)
        .fetch_one(executor)
        .await?;
    Ok(paused)
}

/// Resumes `queue` (`pgflow.resume_queue`) and wakes its idle workers. Returns false when it was
/// not paused.
pub async fn resume_queue(executor: impl PgExecutor<'_>, queue: &str) -> Result<bool, EngineError> {
    let resumed = sqlx::query_scalar("select pgflow.resume_queue($1)")
        .bind(queue)
        .fetch_one(executor)
        .await?;
    Ok(resumed)
}
