//! The worker's maintenance loop, apart from its heartbeats so that a long pass never delays
//! them: stalled-task recovery and, on servers running without autovacuum, planner statistics
//! and vacuum of pgflow's busy tables, and pruning of ended work when the worker has a
//! retention. Each part runs in one worker per database at a time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine;
use crate::error::EngineError;
use crate::worker::config::PRUNE_EVERY;
use crate::worker::runtime::Runtime;

/// Runs a maintenance pass every `stalled_check_interval` until the worker shuts down.
pub async fn maintain(rt: Arc<Runtime>) {
    let mut last_pruned: Option<Instant> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(rt.settings.stalled_check_interval) => {}
            () = rt.shutdown.cancelled() => return,
        }
        mark_lost_workers(&rt).await;
        recover_stalled(&rt).await;
        refresh_statistics(&rt).await;
        vacuum(&rt).await;
        if let Some(retention) = rt.settings.retention
            && last_pruned.is_none_or(|at| at.elapsed() >= PRUNE_EVERY)
        {
            prune(&rt, retention).await;
            last_pruned = Some(Instant::now());
        }
    }
}

/// Declares lost the workers that went silent without stopping (see
/// [`engine::mark_lost_workers`]), one warning each.
async fn mark_lost_workers(rt: &Runtime) {
    match engine::mark_lost_workers(&rt.started.pool).await {
        Ok(lost) => {
            for worker in lost {
                tracing::warn!(
                    queue = worker.queue_name.as_str(),
                    lost_worker_id = %worker.worker_id,
                    function = worker.function_name.as_str(),
                    last_heartbeat_at = %worker.last_heartbeat_at,
                    "declared a silent worker lost (no heartbeat for ten of its intervals); its \
                     started tasks are recovered once their timeout passes"
                );
            }
        }
        Err(error) => tracing::warn!(
            queue = rt.started.queue.as_str(),
            %error,
            "could not look for lost workers"
        ),
    }
}

/// Runs, and archived messages, deleted per pruning transaction at most: small enough that
/// no transaction holds many locks or writes much for long.
const PRUNE_BATCH_SIZE: i32 = 10_000;

/// Deletes ended runs, archived messages and stopped workers older than `retention` (a no-op
/// while another worker does it).
async fn prune(rt: &Runtime, retention: Duration) {
    let queue = rt.started.queue.as_str();
    match engine::prune_all(&rt.started.pool, retention, PRUNE_BATCH_SIZE).await {
        Ok(pruned) => {
            if pruned.runs + pruned.archived_messages + pruned.workers > 0 {
                tracing::info!(
                    queue,
                    retention_s = retention.as_secs(),
                    runs = pruned.runs,
                    step_states = pruned.step_states,
                    tasks = pruned.tasks,
                    archived_messages = pruned.archived_messages,
                    workers = pruned.workers,
                    "pruned ended work older than the retention"
                );
            }
        }
        Err(error) => tracing::warn!(queue, %error, "pruning ended work failed"),
    }
}

/// One pass of stalled-task recovery (a no-op while another worker does it).
async fn recover_stalled(rt: &Runtime) {
    let started = &rt.started;
    let grace = i32::try_from(rt.settings.stalled_grace.as_secs()).unwrap_or(i32::MAX);
    let max_requeues = i32::try_from(rt.settings.max_requeues).unwrap_or(i32::MAX);
    match engine::requeue_stalled_tasks(&started.pool, grace, max_requeues).await {
        Ok(stalled) => {
            for task in &stalled {
                crate::metrics::count_queue(
                    crate::metrics::names::TASKS_STALLED,
                    &task.queue_name,
                    1,
                );
                if task.requeued {
                    crate::metrics::count_queue(
                        crate::metrics::names::TASKS_REQUEUED,
                        &task.queue_name,
                        1,
                    );
                }
                tracing::warn!(
                    queue = task.queue_name.as_str(),
                    run_id = %task.run_id,
                    step = task.step_slug.as_str(),
                    task_index = task.task_index,
                    message_id = task.message_id,
                    requeued = task.requeued,
                    "stalled task recovered"
                );
            }
        }
        Err(error) => {
            tracing::warn!(queue = started.queue.as_str(), %error, "stalled-task recovery failed")
        }
    }
}

/// Keeps planner statistics of pgflow's tables current when autovacuum is off (a no-op
/// otherwise, and while another worker does it).
async fn refresh_statistics(rt: &Runtime) {
    let analyzed = engine::refresh_statistics(&rt.started.pool, false).await;
    log_tables(
        rt,
        analyzed,
        "refreshed planner statistics",
        "refreshing planner statistics",
    );
}

/// Vacuums the tables with many dead rows when autovacuum is off (a no-op otherwise, and
/// while another worker does it): PGMQ leaves two dead row versions per message.
async fn vacuum(rt: &Runtime) {
    let vacuumed = engine::vacuum_tables(&rt.started.pool, false).await;
    log_tables(rt, vacuumed, "vacuumed tables", "vacuuming");
}

/// Logs the tables a maintenance step touched (nothing when it touched none), or its failure.
fn log_tables(rt: &Runtime, result: Result<Vec<String>, EngineError>, done: &str, doing: &str) {
    let queue = rt.started.queue.as_str();
    match result {
        Ok(tables) if tables.is_empty() => {}
        Ok(tables) => tracing::info!(
            queue,
            tables = tables.join(", ").as_str(),
            "autovacuum is off: {done}"
        ),
        Err(error) => tracing::warn!(queue, %error, "{doing} failed"),
    }
}
