//! One handler run on one claimed task, with its timeout and panic isolation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::context::Context;
use crate::engine::{ClaimedTask, TaskKey};
use crate::failure::StepFailure;
use crate::handler::TaskInput;
use crate::metrics;
use crate::worker::runtime::Runtime;
use crate::worker::slots::Held;

/// How long a timed-out handler gets to react to its cancellation token before it is aborted.
const CANCEL_GRACE: Duration = Duration::from_millis(500);

/// What one handler run produced, for the result storer: the attempt's key (its flow included,
/// for the labels of what is reported) and its result.
pub(super) struct Outcome {
    /// The attempt.
    pub key: TaskKey,
    /// The encoded output, or why the attempt failed.
    pub result: Result<Value, StepFailure>,
}

/// Starts `task`'s handler on its own tokio task, holding `slot` until the handler finishes;
/// its outcome goes to `results` (nothing when the worker was stopped at once).
pub(super) fn spawn(
    rt: &Arc<Runtime>,
    task: ClaimedTask,
    slot: Held,
    results: mpsc::UnboundedSender<Outcome>,
) {
    metrics::count_task(
        metrics::names::TASKS_CLAIMED,
        rt.started.queue.as_str(),
        task.flow_slug.as_str(),
        task.step_slug.as_str(),
    );
    let rt = Arc::clone(rt);
    report_busy(&rt);
    tokio::spawn(async move {
        let outcome = execute(&rt, task).await;
        // The slot is free before the result is handed on, so the result storer never waits
        // for a handler that has already finished.
        drop(slot);
        report_busy(&rt);
        if let Some(outcome) = outcome {
            let _ = results.send(outcome);
        }
    });
}

/// Sets the busy-slot gauge.
fn report_busy(rt: &Runtime) {
    let busy = rt.slots.busy();
    metrics::slots_busy(rt.started.queue.as_str(), &rt.worker_label, busy);
}

/// Runs one task's handler with its timeout; a panic or timeout is a failed attempt. Returns
/// `None` when the worker was stopped at once (the task is left for stalled recovery).
async fn execute(rt: &Runtime, task: ClaimedTask) -> Option<Outcome> {
    let span = tracing::info_span!(
        "task",
        queue = task.queue_name.as_str(),
        flow = task.flow_slug.as_str(),
        step = task.step_slug.as_str(),
        run_id = %task.run_id,
        task_index = task.task_index,
        message_id = task.message_id,
        attempt = task.attempt,
    );
    // One run is one trace: the task continues the trace its run was started in.
    crate::trace::continue_trace(&span, task.trace_context.as_deref());
    async move {
        let started_at = Instant::now();
        let key = task.key();
        let queue = task.queue_name.clone();
        let result = match rt.started.handlers.get(task.flow_slug.as_str(), task.step_slug.as_str()) {
            None => Err(StepFailure::NoHandler {
                flow_slug: task.flow_slug.to_string(),
                step_slug: task.step_slug.to_string(),
            }),
            Some(runnable) => {
                let in_flight = rt.in_flight.enter(task.run_id);
                let cancellation = rt.hard_stop.child_token();
                let context = Context::for_task(&task, rt.started.pool.clone(), cancellation.clone());
                let timeout = Duration::from_secs(u64::try_from(task.timeout_seconds).unwrap_or(1));
                // The task (and its input) moves into the handler; the key stays here. A fault
                // a test planned stands in for the handler.
                let handler = match planned_fault(rt, &task) {
                    Some(fault) => fault,
                    None => (runnable.handler)(TaskInput::new(task, context, runnable.state)),
                };
                let mut running = tokio::spawn(handler);
                tokio::select! {
                    joined = &mut running => match joined {
                        Ok(result) => result,
                        Err(error) if error.is_panic() => Err(StepFailure::Panicked {
                            step_slug: key.step_slug.to_string(),
                            message: panic_message(error.into_panic()),
                        }),
                        Err(_) => Err(StepFailure::Panicked {
                            step_slug: key.step_slug.to_string(),
                            message: "handler task was cancelled".to_owned(),
                        }),
                    },
                    () = tokio::time::sleep(timeout) => {
                        // Fire the token and give the handler a moment to wind down.
                        cancellation.cancel();
                        let _ = tokio::time::timeout(CANCEL_GRACE, &mut running).await;
                        running.abort();
                        Err(StepFailure::TimedOut {
                            step_slug: key.step_slug.to_string(),
                            seconds: timeout.as_secs(),
                        })
                    }
                    () = rt.hard_stop.cancelled() => {
                        running.abort();
                        tracing::warn!("worker stopped while the handler ran; the task will be recovered as stalled");
                        return None;
                    }
                    () = in_flight.ended().cancelled() => {
                        // The run was cancelled (or failed) elsewhere: its result would be
                        // discarded. Fire the token, give the handler a moment, stop it.
                        cancellation.cancel();
                        let _ = tokio::time::timeout(CANCEL_GRACE, &mut running).await;
                        running.abort();
                        tracing::info!("run ended while the handler ran; handler cancelled, nothing stored");
                        return None;
                    }
                }
            }
        };
        let took = started_at.elapsed();
        let (queue, flow, step) = (queue.as_str(), key.flow_slug.as_str(), key.step_slug.as_str());
        metrics::handler_duration(queue, flow, step, took);
        match &result {
            Ok(_) => {
                metrics::count_task(metrics::names::TASKS_COMPLETED, queue, flow, step);
                rt.started.client.shared().durations.record(flow, step, took);
            }
            Err(StepFailure::TimedOut { .. }) => {
                metrics::count_task(metrics::names::TASKS_TIMED_OUT, queue, flow, step);
            }
            Err(StepFailure::Panicked { .. }) => {
                metrics::count_task(metrics::names::TASKS_PANICKED, queue, flow, step);
            }
            Err(_) => {}
        }
        let duration_ms = took.as_millis() as u64;
        match &result {
            Ok(_) => tracing::debug!(duration_ms, outcome = "completed", "task finished"),
            Err(StepFailure::Snoozed { seconds, reason }) => tracing::debug!(
                duration_ms,
                outcome = "snoozed",
                snooze_seconds = seconds,
                reason = %crate::failure::bounded(reason, crate::failure::LOGGED_ERROR_CHARS),
                "task snoozed: it runs again later, without spending an attempt"
            ),
            Err(failure) => tracing::warn!(
                duration_ms,
                outcome = "failed",
                permanent = failure.is_permanent(),
                error = %crate::failure::bounded(&failure.to_string(), crate::failure::LOGGED_ERROR_CHARS),
                "task attempt failed"
            ),
        }
        Some(Outcome { key, result })
    }
    .instrument(span)
    .await
}

/// The fault a test planned for this attempt of the task's step, as its handler (the test kit,
/// feature `testing`); never any without the feature.
#[cfg(feature = "testing")]
fn planned_fault(rt: &Runtime, task: &ClaimedTask) -> Option<crate::handler::HandlerFuture> {
    let faults = &rt.started.client.shared().faults;
    faults
        .take(task.flow_slug.as_str(), task.step_slug.as_str())
        .map(crate::faults::Fault::into_handler)
}

#[cfg(not(feature = "testing"))]
fn planned_fault(_: &Runtime, _: &ClaimedTask) -> Option<crate::handler::HandlerFuture> {
    None
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
