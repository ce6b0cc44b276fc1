//! Flow control: holding work back. A paused queue is claimed from by no one until it is
//! resumed; nothing on it is lost, and runs keep starting and queueing tasks on it. A paused
//! flow's tasks are parked by the workers that meet them until it is resumed. A step with
//! a concurrency cap holds its tasks until a slot of their key is free; the calls that end
//! tasks give their slots out, and [`release_capped_tasks`], which every process with a running
//! worker calls each second, gives out the rest. A run's priority orders the claims of its
//! tasks (see [`crate::Priority`]); [`set_priority_aging`] bounds how long a low one waits. A
//! capped queue ([`set_queue_concurrency`]) runs at most so many tasks at once.

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

/// Pauses the flow `name` (`pgflow.pause_flow`): a concrete slug, or an alias (each of its
/// versions). Claims that began before the pause commits finish; after it, a worker that meets a
/// task of the flow parks it (queued, without a message) and no completion claims one; runs keep
/// starting. Returns false when it was already paused. [`EngineError::UnknownFlow`] for a name
/// that is no flow or alias.
pub async fn pause_flow(
    executor: impl PgExecutor<'_>,
    name: &str,
    reason: Option<&str>,
) -> Result<bool, EngineError> {
    let paused = sqlx::query_scalar("select pgflow.pause_flow($1, $2)")
        .bind(name)
        .bind(reason)
        .fetch_one(executor)
        .await?;
    Ok(paused)
}

/// Resumes the flow `name` (`pgflow.resume_flow`): its parked tasks get a message each, visible
/// at once. Returns false when it was not paused.
pub async fn resume_flow(executor: impl PgExecutor<'_>, name: &str) -> Result<bool, EngineError> {
    let resumed = sqlx::query_scalar("select pgflow.resume_flow($1)")
        .bind(name)
        .fetch_one(executor)
        .await?;
    Ok(resumed)
}

/// Caps `queue` at `concurrency` tasks running at once across every worker and process,
/// whatever their flow and step (`pgflow.set_queue_concurrency`; 1 to 10,000), or lifts its cap
/// (`None`). A claim on a capped queue takes no more messages than it finds free slots; the
/// tasks running when a cap is first set count against it. Returns the cap before.
/// [`EngineError::UnknownQueue`] for a queue no flow routes to.
pub async fn set_queue_concurrency(
    executor: impl PgExecutor<'_>,
    queue: &str,
    concurrency: Option<u32>,
) -> Result<Option<u32>, EngineError> {
    let concurrency = concurrency
        .map(|n| {
            i32::try_from(n).map_err(|_| {
                EngineError::InvalidArguments(format!(
                    "a queue's cap is 1 to 10000 tasks at once, got {n}"
                ))
            })
        })
        .transpose()?;
    let before: Option<i32> = sqlx::query_scalar("select pgflow.set_queue_concurrency($1, $2)")
        .bind(queue)
        .bind(concurrency)
        .fetch_one(executor)
        .await?;
    Ok(before.and_then(|n| u32::try_from(n).ok()))
}

/// Sets how long a task may wait, ready, on `queue`'s priority lanes before it counts as aged
/// and shares in every claim whatever its priority (`pgflow.set_priority_aging`; see
/// [`crate::Priority`]): `Some(seconds)` (at least 1), or `None`
/// for the default of 60 s. [`EngineError::UnknownQueue`] for a queue no flow routes to.
pub async fn set_priority_aging(
    executor: impl PgExecutor<'_>,
    queue: &str,
    seconds: Option<i32>,
) -> Result<(), EngineError> {
    sqlx::query("select pgflow.set_priority_aging($1, $2)")
        .bind(queue)
        .bind(seconds)
        .execute(executor)
        .await?;
    Ok(())
}

/// Begins the runs whose deferred start is due (`pgflow.begin_deferred_runs`), at most
/// `limit`: those whose debounce window ended, oldest first, and the first run in line of
/// each singleton key whose run has ended. Every process with a running worker calls it each
/// second. Returns how many it began.
pub async fn begin_deferred_runs(
    executor: impl PgExecutor<'_>,
    limit: i32,
) -> Result<i32, EngineError> {
    let begun = sqlx::query_scalar("select pgflow.begin_deferred_runs($1)")
        .bind(limit)
        .fetch_one(executor)
        .await?;
    Ok(begun)
}

/// Gives out the slots of capped steps that ended tasks freed without giving them out (a
/// cancel, a failed run, a skip), for at most `limit` keys (`pgflow.release_capped_tasks`).
/// One caller works at a time; the others return 0 at once. Returns how many held tasks it
/// released.
pub async fn release_capped_tasks(
    executor: impl PgExecutor<'_>,
    limit: i32,
) -> Result<u32, EngineError> {
    let released: i32 = sqlx::query_scalar("select pgflow.release_capped_tasks($1)")
        .bind(limit)
        .fetch_one(executor)
        .await?;
    Ok(u32::try_from(released).unwrap_or(0))
}
