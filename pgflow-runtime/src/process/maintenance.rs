//! The process's maintenance loop, apart from its workers' heartbeats so that a long pass never
//! delays them: lost workers, stalled-task recovery, for the dashboard's trends a sample of the
//! queues and runs a minute and the handler durations this process's workers measured (at
//! every pass, and once more when the loop stops) and, on servers running without autovacuum,
//! planner statistics and vacuum of pgflow's busy tables, moving runs that ended a while ago
//! into the history, and pruning of ended work when the process has a retention. One loop per client while its workers run; each part but the
//! durations runs in one process per database at a time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::db::Db;
use crate::engine;
use crate::error::EngineError;
use crate::process::{PRUNE_EVERY, Shared};

/// Runs a maintenance pass every `stalled_check_interval` until `stop`.
pub(super) async fn maintain(shared: Arc<Shared>, stop: CancellationToken) {
    let config = &shared.config;
    let db = &shared.db;
    let mut last_pruned: Option<Instant> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(config.stalled_check_interval) => {}
            () = stop.cancelled() => {
                // The last durations, unless the database is gone by now.
                let last = tokio::time::timeout(LAST_WRITE, shared.durations.write(db)).await;
                if !matches!(last, Ok(Ok(()))) {
                    tracing::debug!("the last handler durations could not be written at stop");
                }
                return;
            }
        }
        let pass = async {
            mark_lost_workers(db).await;
            recover_stalled(db, config.stalled_grace, config.max_requeues).await;
            sample_trends(db).await;
            write_task_durations(&shared).await;
            refresh_statistics(db).await;
            vacuum(db).await;
            archive(db, config.archive_after).await;
            if let Some(retention) = config.retention
                && last_pruned.is_none_or(|at| at.elapsed() >= PRUNE_EVERY)
            {
                prune(db, retention).await;
                last_pruned = Some(Instant::now());
            }
        };
        tokio::select! {
            () = pass => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Declares lost the workers that went silent without stopping (see
/// [`engine::mark_lost_workers`]), one warning each.
async fn mark_lost_workers(db: &Db) {
    match engine::mark_lost_workers(db).await {
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
        Err(error) => tracing::warn!(%error, "could not look for lost workers"),
    }
}

/// How often the trends are sampled for the dashboard, and how long samples are kept.
const SAMPLE_EVERY: Duration = Duration::from_secs(60);
const SAMPLES_KEPT: Duration = Duration::from_secs(86_400);

/// Samples the queues, runs and tasks for the dashboard's trends, when a minute has passed
/// since any process last did (see [`engine::sample_trends`]).
async fn sample_trends(db: &Db) {
    if let Err(error) = engine::sample_trends(db, SAMPLE_EVERY, SAMPLES_KEPT).await {
        tracing::warn!(%error, "sampling the trends failed");
    }
}

/// How long the loop tries to write the last handler durations when it stops.
const LAST_WRITE: Duration = Duration::from_secs(2);

/// Writes the handler durations the process's workers measured since the last pass.
async fn write_task_durations(shared: &Shared) {
    if let Err(error) = shared.durations.write(&shared.db).await {
        tracing::warn!(%error, "writing the handler durations for the trends failed; kept for the next pass");
    }
}

/// Runs, and archived messages, deleted per pruning transaction at most: small enough that
/// no transaction holds many locks or writes much for long.
const PRUNE_BATCH_SIZE: i32 = 10_000;

/// Deletes ended runs, archived messages and stopped workers older than `retention` (a no-op
/// while another worker does it).
async fn prune(db: &Db, retention: Duration) {
    match engine::prune_all(db, retention, PRUNE_BATCH_SIZE).await {
        Ok(pruned) => {
            if pruned.runs + pruned.archived_messages + pruned.workers > 0 {
                tracing::info!(
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
        Err(error) => tracing::warn!(%error, "pruning ended work failed"),
    }
}

/// Runs moved into the history per transaction at most, and how long one pass keeps moving
/// them (a backlog, after an upgrade or a pause, moves over several passes).
const ARCHIVE_BATCH_SIZE: i32 = 5_000;
const ARCHIVE_BUDGET: Duration = Duration::from_secs(10);

/// Moves runs that ended more than `after` ago into the history (a no-op while another process
/// does it).
async fn archive(db: &Db, after: Duration) {
    match engine::archive_all(db, after, ARCHIVE_BATCH_SIZE, ARCHIVE_BUDGET).await {
        Ok(0) => {}
        Ok(runs) => tracing::debug!(runs, "moved ended runs into the history"),
        Err(error) => tracing::warn!(%error, "moving ended runs into the history failed"),
    }
}

/// One pass of stalled-task recovery (a no-op while another worker does it).
async fn recover_stalled(db: &Db, grace: Duration, max_requeues: u32) {
    let grace = i32::try_from(grace.as_secs()).unwrap_or(i32::MAX);
    let max_requeues = i32::try_from(max_requeues).unwrap_or(i32::MAX);
    match engine::requeue_stalled_tasks(db, grace, max_requeues).await {
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
            tracing::warn!(%error, "stalled-task recovery failed")
        }
    }
}

/// Keeps planner statistics of pgflow's tables current when autovacuum is off (a no-op
/// otherwise, and while another worker does it).
async fn refresh_statistics(db: &Db) {
    let analyzed = engine::refresh_statistics(db, false).await;
    log_tables(
        analyzed,
        "refreshed planner statistics",
        "refreshing planner statistics",
    );
}

/// Vacuums the tables with many dead rows when autovacuum is off (a no-op otherwise, and
/// while another worker does it): PGMQ leaves two dead row versions per message.
async fn vacuum(db: &Db) {
    let vacuumed = engine::vacuum_tables(db, false).await;
    log_tables(vacuumed, "vacuumed tables", "vacuuming");
}

/// Logs the tables a maintenance step touched (nothing when it touched none), or its failure.
fn log_tables(result: Result<Vec<String>, EngineError>, done: &str, doing: &str) {
    match result {
        Ok(tables) if tables.is_empty() => {}
        Ok(tables) => tracing::info!(
            tables = tables.join(", ").as_str(),
            "autovacuum is off: {done}"
        ),
        Err(error) => tracing::warn!(%error, "{doing} failed"),
    }
}
