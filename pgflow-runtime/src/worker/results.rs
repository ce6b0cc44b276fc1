//! Batched result storage: whatever has finished goes in one completion call and one failure
//! call.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, mpsc};

use crate::engine::{
    self, ClaimedTask, CompletedAndClaimed, FailureOutcome, TaskCompletion, TaskFailure,
};
use crate::failure::{STORED_ERROR_CHARS, bounded_owned};
use crate::metrics;
use crate::names::FlowSlug;
use crate::worker::execute::{self, Outcome};
use crate::worker::handlers::Release;
use crate::worker::runtime::{Runtime, retry};

/// The most results stored in one call.
const MAX_RESULT_BATCH: usize = 500;
/// How long the result storer waits for handlers still running before storing what has
/// finished: under load, the results of a claim go in one call instead of several; a result
/// with no other handler running is stored at once.
const RESULT_LINGER: Duration = Duration::from_millis(2);

/// Stores results in batches: whatever has finished since the last call goes in one
/// completion call and one failure call. A failed call is retried (the calls are idempotent:
/// a task taken over by another attempt is left alone) until it succeeds or the worker is
/// stopped at once.
///
/// A completion call also claims, for the free slots it finds, tasks its completions release
/// on the worker's queue (see [`engine::complete_and_claim_tasks`]); their handlers start at
/// once and report to `handlers` (weak: the storer alone must not keep the results channel
/// open once the poll loop and every handler are gone).
pub async fn store_results(
    rt: Arc<Runtime>,
    mut results: mpsc::UnboundedReceiver<Outcome>,
    handlers: mpsc::WeakUnboundedSender<Outcome>,
) {
    let queue = rt.started.queue.as_str();
    while let Some(first) = results.recv().await {
        let batch = collect_results(&rt, &mut results, first).await;
        let mut completions = Vec::new();
        let mut failures = Vec::new();
        // Each failed attempt's flow, for its outcome's labels.
        let mut flows = HashMap::new();
        // How many tasks the completions may release for this worker to claim at once.
        let mut releasable: usize = 0;
        for outcome in batch {
            if outcome.result.is_ok() {
                releasable = releasable.saturating_add(releasable_by(&rt, &outcome));
            }
            if outcome.result.is_err() {
                flows.insert(
                    (
                        outcome.key.run_id,
                        outcome.key.step_slug.to_string(),
                        outcome.key.task_index,
                    ),
                    outcome.flow_slug.clone(),
                );
            }
            match outcome.result {
                Ok(output) => completions.push(TaskCompletion {
                    task: outcome.key,
                    output,
                }),
                Err(failure) => failures.push(TaskFailure {
                    task: outcome.key,
                    error_message: bounded_owned(failure.to_string(), STORED_ERROR_CHARS),
                    permanent: failure.is_permanent(),
                }),
            }
        }
        if !completions.is_empty() {
            let began = Instant::now();
            store_completions(&rt, &completions, releasable, &handlers).await;
            metrics::result_store(queue, "completions", completions.len(), began.elapsed());
        }
        if !failures.is_empty() {
            let began = Instant::now();
            let pool = rt.started.pool.clone();
            let outcomes = retry(&rt, "storing failures", || {
                let pool = pool.clone();
                let failures = failures.clone();
                async move { engine::fail_tasks(&pool, &failures).await }
            })
            .await
            .unwrap_or_default();
            metrics::result_store(queue, "failures", failures.len(), began.elapsed());
            count_failure_outcomes(queue, &failures, &outcomes, &flows);
            for outcome in &outcomes {
                log_failure_outcome(queue, outcome);
            }
        }
    }
}

/// Stores `completions` in one call, retried until it succeeds, and says why any were not
/// stored by the call that succeeded. The call claims released tasks for the slots free when
/// it begins, and starts their handlers.
async fn store_completions(
    rt: &Arc<Runtime>,
    completions: &[TaskCompletion],
    releasable: usize,
    handlers: &mpsc::WeakUnboundedSender<Outcome>,
) {
    let started = &rt.started;
    let pool = started.pool.clone();
    // Held through the call, so that the handlers of what it claims have somewhere to report
    // even if the poll loop stops meanwhile.
    let results = handlers.upgrade();
    let mut room = results.as_ref().and_then(|_| free_slots(rt, releasable));
    let quantity = room.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
    let tries = std::sync::atomic::AtomicU32::new(0);
    let Some(stored) = retry(rt, "storing completions", || {
        tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pool = pool.clone();
        async move {
            if quantity == 0 {
                let completed = engine::complete_tasks(&pool, completions).await?;
                return Ok(CompletedAndClaimed {
                    completed,
                    claimed: Vec::new(),
                });
            }
            engine::complete_and_claim_tasks(
                &pool,
                completions,
                &started.queue,
                started.worker_id,
                started.handlers.pairs(),
                i32::try_from(quantity).unwrap_or(i32::MAX),
            )
            .await
        }
    })
    .await
    else {
        return;
    };
    if let (Some(room), Some(results)) = (room.as_mut(), results) {
        run_claimed(rt, stored.claimed, room, &results);
    }
    let count = stored.completed;
    let not_stored_now = completions.len() as u64 - count;
    if not_stored_now == 0 {
        return;
    }
    let queue = rt.started.queue.as_str();
    // Only a retried call can find its own completions already stored: an earlier try
    // committed, and its reply was lost with the connection.
    let stored_earlier = if tries.load(std::sync::atomic::Ordering::Relaxed) > 1 {
        engine::count_stored_completions(&pool, completions)
            .await
            .map_or(0, |stored| stored.saturating_sub(count))
    } else {
        0
    };
    if stored_earlier > 0 {
        tracing::info!(
            queue,
            count = stored_earlier,
            "completions were already stored by an earlier try of the same call, whose reply \
             was lost with the connection; nothing was stored twice"
        );
    }
    let late = not_stored_now - stored_earlier.min(not_stored_now);
    if late > 0 {
        tracing::info!(
            queue,
            count = late,
            "late completions ignored: another attempt took those tasks over, or their run ended"
        );
    }
}

/// How many tasks `outcome`'s completion may release that the worker could claim at once: an
/// upper bound, so that a completion call takes no slot it cannot fill (the poll loop's claims
/// need them). Only single steps count (see [`Release`]), once per run each.
fn releasable_by(rt: &Runtime, outcome: &Outcome) -> usize {
    let step = outcome.key.step_slug.as_str();
    match rt
        .started
        .handlers
        .release(outcome.flow_slug.as_str(), step)
    {
        None => 0,
        Some(Release::Many) => usize::MAX,
        Some(Release::AtMost(n)) => n,
    }
}

/// Takes free handler slots (at most a claim's batch, and no more than `releasable`) for a
/// completion call to fill with the tasks it releases; none while the worker stops.
fn free_slots(rt: &Arc<Runtime>, releasable: usize) -> Option<OwnedSemaphorePermit> {
    if rt.shutdown.is_cancelled() {
        return None;
    }
    let free = rt
        .slots
        .available_permits()
        .min(rt.settings.batch_size)
        .min(releasable);
    let free = u32::try_from(free).ok().filter(|&free| free > 0)?;
    Arc::clone(&rt.slots).try_acquire_many_owned(free).ok()
}

/// Starts the handlers of the tasks a completion call claimed, each with one of the slots
/// taken for them; the slots left over are freed when `room` drops.
fn run_claimed(
    rt: &Arc<Runtime>,
    claimed: Vec<ClaimedTask>,
    room: &mut OwnedSemaphorePermit,
    results: &mpsc::UnboundedSender<Outcome>,
) {
    for task in claimed {
        let Some(slot) = room.split(1) else {
            // The call never claims more than the slots it was given.
            tracing::error!(
                queue = rt.started.queue.as_str(),
                run_id = %task.run_id,
                step = task.step_slug.as_str(),
                "a completion call claimed more tasks than it had slots for; the task will be \
                 recovered as stalled"
            );
            continue;
        };
        execute::spawn(rt, task, slot, results.clone());
    }
}

/// Counts each stored failure by what it led to: another attempt, the task failed for good
/// (and with it the run), its step skipped, or nothing (its run had ended: discarded).
fn count_failure_outcomes(
    queue: &str,
    failures: &[TaskFailure],
    outcomes: &[FailureOutcome],
    flows: &HashMap<(uuid::Uuid, String, i32), FlowSlug>,
) {
    for failure in failures {
        let key = &failure.task;
        let id = (key.run_id, key.step_slug.to_string(), key.task_index);
        let flow = flows.get(&id).map_or("", FlowSlug::as_str);
        let outcome = outcomes.iter().find(|o| {
            o.run_id == key.run_id
                && o.step_slug == key.step_slug.as_str()
                && o.task_index == key.task_index
        });
        let label = match outcome {
            Some(o) if o.will_retry => "retrying",
            Some(o) if o.step_skipped => "skipped",
            Some(_) => {
                metrics::count_runs(metrics::names::RUNS_FAILED, queue, flow, 1);
                "failed"
            }
            None => "discarded",
        };
        ::metrics::counter!(
            metrics::names::TASKS_FAILED,
            "queue" => queue.to_owned(),
            "flow" => flow.to_owned(),
            "step" => key.step_slug.to_string(),
            "outcome" => label,
        )
        .increment(1);
    }
}

/// A retry is routine (the attempt was logged as a warning when it failed); a task out of
/// attempts whose step was skipped is worth a warning; one that failed its run is an error
/// someone has to look at.
fn log_failure_outcome(queue: &str, outcome: &FailureOutcome) {
    if outcome.step_skipped {
        tracing::warn!(
            queue,
            run_id = %outcome.run_id,
            step = outcome.step_slug.as_str(),
            task_index = outcome.task_index,
            "task failed for good (permanent failure or no attempts left); its step was skipped \
             (when_exhausted) and the run goes on"
        );
    } else if outcome.will_retry {
        tracing::debug!(
            queue,
            run_id = %outcome.run_id,
            step = outcome.step_slug.as_str(),
            task_index = outcome.task_index,
            retry_delay_seconds = outcome.retry_delay_seconds,
            "retry scheduled"
        );
    } else {
        tracing::error!(
            queue,
            run_id = %outcome.run_id,
            step = outcome.step_slug.as_str(),
            task_index = outcome.task_index,
            "task failed for good (permanent failure or no attempts left); its run failed"
        );
    }
}

/// The results to store in one call: `first`, whatever else has arrived, and what handlers
/// still running report within [`RESULT_LINGER`] (at most [`MAX_RESULT_BATCH`]).
async fn collect_results(
    rt: &Runtime,
    results: &mut mpsc::UnboundedReceiver<Outcome>,
    first: Outcome,
) -> Vec<Outcome> {
    let mut batch = vec![first];
    let deadline = tokio::time::Instant::now() + RESULT_LINGER;
    while batch.len() < MAX_RESULT_BATCH {
        if let Ok(outcome) = results.try_recv() {
            batch.push(outcome);
            continue;
        }
        let running = rt.settings.max_concurrent - rt.slots.available_permits();
        if running == 0 {
            break;
        }
        match tokio::time::timeout_at(deadline, results.recv()).await {
            Ok(Some(outcome)) => batch.push(outcome),
            Ok(None) | Err(_) => break,
        }
    }
    batch
}
