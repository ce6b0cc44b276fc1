//! The production rollout fence: disable the worker functions of the affected queues, wait for
//! their workers to drain and stop, deploy replacements (which wait while disabled), then
//! enable again exactly what was enabled before. See `docs/rollout.md`.

use std::time::Duration;

use sqlx::PgExecutor;

use crate::engine::{self, LiveWorker};
use crate::error::EngineError;

/// Why waiting for a rollout's workers to stop ended without them stopping.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RolloutError {
    /// Workers were still running when the wait gave up.
    #[error(
        "rollout {rollout_id}: {} worker(s) still running after {waited:?}: {}; they finish \
         in-flight tasks first (up to their shutdown grace); wait longer or check them",
        remaining.len(),
        remaining.iter().map(|w| format!("{} ({} on `{}`)", w.worker_id, w.function_name, w.queue_name)).collect::<Vec<_>>().join(", ")
    )]
    Timeout {
        /// The rollout.
        rollout_id: i64,
        /// How long the wait lasted.
        waited: Duration,
        /// The workers still running.
        remaining: Vec<LiveWorker>,
    },
    /// A database error.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Begins a rollout of `functions`: records which are enabled, disables all of them and
/// deprecates their live workers. Returns the rollout id.
pub async fn begin(pool: impl PgExecutor<'_>, functions: &[String]) -> Result<i64, EngineError> {
    engine::begin_rollout(pool, functions).await
}

/// Begins a rollout of every function with live workers on any of `queues`. Returns the
/// rollout id and the functions.
pub async fn begin_for_queues<'c>(
    pool: impl PgExecutor<'c> + Copy,
    queues: &[String],
) -> Result<(i64, Vec<String>), EngineError> {
    let functions = engine::functions_serving_queues(pool, queues).await?;
    if functions.is_empty() {
        return Err(EngineError::InvalidArguments(format!(
            "no live worker serves {}; name the worker functions instead",
            queues.join(", ")
        )));
    }
    let id = engine::begin_rollout(pool, &functions).await?;
    Ok((id, functions))
}

/// Waits until every worker of the rollout's functions has stopped, calling `progress` with
/// the ones still running after each check. A worker that is not live (the one liveness rule,
/// `pgflow.worker_is_live`: silent for 30 s) counts as gone.
pub async fn wait_for_workers<'c>(
    pool: impl PgExecutor<'c> + Copy,
    rollout_id: i64,
    timeout: Duration,
    mut progress: impl FnMut(&[LiveWorker]),
) -> Result<(), RolloutError> {
    let started = tokio::time::Instant::now();
    loop {
        let remaining = engine::rollout_progress(pool, rollout_id).await?;
        progress(&remaining);
        if remaining.is_empty() {
            return Ok(());
        }
        let waited = started.elapsed();
        if waited >= timeout {
            return Err(RolloutError::Timeout {
                rollout_id,
                waited,
                remaining,
            });
        }
        tokio::time::sleep(Duration::from_millis(200).min(timeout - waited)).await;
    }
}

/// Finishes a rollout: enables exactly the functions that were enabled when it began.
pub async fn finish(
    pool: impl PgExecutor<'_>,
    rollout_id: i64,
) -> Result<Vec<String>, EngineError> {
    engine::finish_rollout(pool, rollout_id).await
}
