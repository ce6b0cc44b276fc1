//! Batched result storage: whatever has finished goes in one completion call and one failure
//! call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::engine::{self, FailureOutcome, TaskCompletion, TaskFailure};
use crate::failure::{LOGGED_ERROR_CHARS, STORED_ERROR_CHARS, bounded, bounded_owned};
use crate::metrics;
use crate::worker::execute::Outcome;
use crate::worker::handlers::Release;
use crate::worker::runtime::{Runtime, retry};
use crate::worker::shared_completions::{Batch, CompletionGroup};

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
/// Completions go through the process's [`CompletionGroup`] for the queue: they share a call
/// with those of the process's other workers on it. The call also claims, for this worker's
/// free slots, tasks its completions release on the queue; their handlers start at once and
/// report to `handlers` (weak: the storer alone must not keep the results channel open once
/// the poll loop and every handler are gone).
pub(super) async fn store_results(
    rt: Arc<Runtime>,
    mut results: mpsc::UnboundedReceiver<Outcome>,
    handlers: mpsc::WeakUnboundedSender<Outcome>,
) {
    let queue = rt.started.queue.as_str();
    let group = CompletionGroup::join(&rt);
    while let Some(first) = results.recv().await {
        let batch = collect_results(&rt, &mut results, first).await;
        let mut completions = Vec::new();
        let mut failures = Vec::new();
        // How many tasks the completions may release for this worker to claim at once.
        let mut releasable: usize = 0;
        for outcome in batch {
            if outcome.result.is_ok() {
                releasable = releasable.saturating_add(releasable_by(&rt, &outcome));
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
                    snooze_seconds: failure.snooze_seconds(),
                }),
            }
        }
        if !completions.is_empty() {
            let began = Instant::now();
            let count = completions.len();
            group
                .store(Batch {
                    rt: Arc::clone(&rt),
                    completions,
                    releasable,
                    // Held through the call, so that the handlers of what it claims have
                    // somewhere to report even if the poll loop stops meanwhile.
                    results: handlers.upgrade(),
                })
                .await;
            metrics::result_store(queue, "completions", count, began.elapsed());
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
            count_failure_outcomes(queue, &failures, &outcomes);
            for (failure, outcome) in failures.iter().zip(&outcomes) {
                log_failure_outcome(queue, failure, outcome);
            }
        }
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
        .release(outcome.key.flow_slug.as_str(), step)
    {
        None => 0,
        Some(Release::Many) => usize::MAX,
        Some(Release::AtMost(n)) => n,
    }
}

/// Counts each stored failure by what it led to: another attempt, the task failed for good
/// (and with it the run), its step skipped, or nothing (late, or its run had ended:
/// discarded). `outcomes` answers `failures` one by one, in order; a failure without an answer
/// (the call was given up at a hard stop) is counted as discarded.
fn count_failure_outcomes(queue: &str, failures: &[TaskFailure], outcomes: &[FailureOutcome]) {
    let answers = outcomes.iter().map(Some).chain(std::iter::repeat(None));
    for (failure, outcome) in failures.iter().zip(answers) {
        let key = &failure.task;
        let flow = key.flow_slug.as_str();
        let label = match outcome {
            Some(o) if o.discarded => "discarded",
            Some(o) if o.will_retry && failure.snooze_seconds.is_some() => "snoozed",
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
/// someone has to look at, and its line carries the error (cut to
/// [`LOGGED_ERROR_CHARS`]): alerting reads that line alone. A discarded report changed
/// nothing. `failure` is what was stored, `outcome` the SQL core's answer to it.
fn log_failure_outcome(queue: &str, failure: &TaskFailure, outcome: &FailureOutcome) {
    let flow = failure.task.flow_slug.as_str();
    let error = bounded(&failure.error_message, LOGGED_ERROR_CHARS);
    if outcome.discarded {
        tracing::debug!(
            queue,
            run_id = %outcome.run_id,
            step = outcome.step_slug.as_str(),
            task_index = outcome.task_index,
            "late failure ignored: another attempt took the task over, or its run ended"
        );
    } else if outcome.step_skipped {
        tracing::warn!(
            queue,
            flow,
            run_id = %outcome.run_id,
            step = outcome.step_slug.as_str(),
            task_index = outcome.task_index,
            %error,
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
            flow,
            run_id = %outcome.run_id,
            step = outcome.step_slug.as_str(),
            task_index = outcome.task_index,
            %error,
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
        if rt.slots.busy() == 0 {
            break;
        }
        match tokio::time::timeout_at(deadline, results.recv()).await {
            Ok(Some(outcome)) => batch.push(outcome),
            Ok(None) | Err(_) => break,
        }
    }
    batch
}
