//! The running worker: the slot-aware poll loop, task execution with timeouts and panic
//! isolation, batched result storage, heartbeats, and the drain.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::Context;
use crate::engine::{self, ClaimedTask, TaskCompletion, TaskFailure};
use crate::error::EngineError;
use crate::handler::{StepFailure, TaskInput};
use crate::worker::config::WorkerSettings;
use crate::worker::error::WorkerError;
use crate::worker::maintenance;
use crate::worker::startup::Started;
use crate::worker::wakeup::QueueWakeup;

/// The most results stored in one call.
const MAX_RESULT_BATCH: usize = 500;
/// How long the result storer waits for handlers still running before storing what has
/// finished: under load, the results of a claim go in one call instead of several; a result
/// with no other handler running is stored at once.
const RESULT_LINGER: Duration = Duration::from_millis(2);
/// How long a timed-out handler gets to react to its cancellation token before it is aborted.
const CANCEL_GRACE: Duration = Duration::from_millis(500);
/// The longest pause between retries of a failed database call.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Shared by the worker's tasks.
pub struct Runtime {
    pub started: Started,
    pub settings: WorkerSettings,
    /// Free handler slots.
    pub slots: Arc<Semaphore>,
    /// Cancelled to stop polling and drain.
    pub shutdown: CancellationToken,
    /// Cancelled to stop at once (in-flight handlers are cancelled, their tasks recovered
    /// later as stalled).
    pub hard_stop: CancellationToken,
    /// How long a read hides messages from other readers until its claim, which archives
    /// them, commits.
    pub read_visibility_seconds: i32,
}

/// What one handler run produced.
struct Outcome {
    task: ClaimedTask,
    result: Result<Value, StepFailure>,
}

/// Runs the worker until it stops; returns the fatal error that stopped it, if any.
pub async fn run(rt: Arc<Runtime>) -> Result<(), WorkerError> {
    let (results_tx, results_rx) = mpsc::unbounded_channel();
    let storer = tokio::spawn(store_results(Arc::clone(&rt), results_rx));
    let heartbeat = tokio::spawn(heartbeat(Arc::clone(&rt)));
    let maintenance = tokio::spawn(maintenance::maintain(Arc::clone(&rt)));

    let outcome = poll(&rt, results_tx).await;
    rt.shutdown.cancel();
    drain(&rt).await;

    // Every handler task held a sender; they are gone, so the storer ends after flushing.
    if let Err(error) = storer.await {
        tracing::error!(queue = rt.started.queue.as_str(), %error, "result storage task failed");
    }
    heartbeat.abort();
    maintenance.abort();
    mark_stopped(&rt).await;
    tracing::info!(
        queue = rt.started.queue.as_str(),
        worker_id = %rt.started.worker_id,
        "pgflow worker stopped"
    );
    outcome
}

/// Reads at most the free slots' worth of messages, claims them and hands each to a handler
/// task; waits to be woken (or the poll interval) when the queue is empty, and wakes the next
/// idle worker of the queue when its claim came back full.
async fn poll(
    rt: &Arc<Runtime>,
    results: mpsc::UnboundedSender<Outcome>,
) -> Result<(), WorkerError> {
    let started = &rt.started;
    let wakeup = QueueWakeup::subscribe(&started.pool, &engine::queue_channel(&started.queue));
    let mut backoff = Duration::from_millis(50);
    loop {
        if rt.shutdown.is_cancelled() {
            return Ok(());
        }
        let free = rt.slots.available_permits();
        if free == 0 {
            // Wait until a handler finishes.
            tokio::select! {
                permit = Arc::clone(&rt.slots).acquire_owned() => drop(permit),
                () = rt.shutdown.cancelled() => return Ok(()),
            }
            continue;
        }
        let quantity = free.min(rt.settings.batch_size);
        let claimed = engine::read_and_start_tasks(
            &started.pool,
            &started.queue,
            started.worker_id,
            &started.pairs,
            i32::try_from(quantity).unwrap_or(i32::MAX),
            rt.read_visibility_seconds,
        )
        .await;
        match claimed {
            Ok(tasks) if tasks.is_empty() => {
                backoff = Duration::from_millis(50);
                wait_for_work(rt, &wakeup).await;
            }
            Ok(tasks) => {
                backoff = Duration::from_millis(50);
                let drained = tasks.len() < quantity;
                if !drained {
                    wakeup.pass_on();
                }
                for task in tasks {
                    let Ok(permit) = Arc::clone(&rt.slots).acquire_owned().await else {
                        return Ok(());
                    };
                    let rt = Arc::clone(rt);
                    let results = results.clone();
                    tokio::spawn(async move {
                        let outcome = execute(&rt, task).await;
                        // The slot is free before the result is handed on, so the result
                        // storer never waits for a handler that has already finished.
                        drop(permit);
                        if let Some(outcome) = outcome {
                            let _ = results.send(outcome);
                        }
                    });
                }
                if drained {
                    // The read took everything visible: reading again now would find nothing.
                    // New work wakes us (a notification that came meanwhile is kept).
                    wait_for_work(rt, &wakeup).await;
                }
            }
            Err(EngineError::UnsupportedTasks {
                queue_name,
                message_ids,
                unsupported,
            }) => {
                let pairs = unsupported
                    .iter()
                    .map(|p| {
                        format!(
                            "{}.{} (message ids {:?})",
                            p.flow_slug, p.step_slug, p.message_ids
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                tracing::error!(
                    queue = queue_name.as_str(),
                    message_ids = ?message_ids,
                    unsupported = pairs.as_str(),
                    "fatal configuration error: the queue holds tasks of flow steps this worker \
                     does not carry; no task was changed and the batch is visible again; \
                     stopping the worker"
                );
                return Err(WorkerError::UnsupportedTasks {
                    queue_name,
                    message_ids,
                    unsupported,
                });
            }
            Err(error) => {
                tracing::warn!(
                    queue = started.queue.as_str(),
                    %error,
                    retry_in_ms = backoff.as_millis() as u64,
                    "claiming tasks failed; retrying"
                );
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = rt.shutdown.cancelled() => return Ok(()),
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Waits to be woken for new tasks, the poll interval, or shutdown.
async fn wait_for_work(rt: &Runtime, wakeup: &QueueWakeup) {
    tokio::select! {
        () = wakeup.woken() => {}
        () = tokio::time::sleep(rt.settings.poll_interval) => {}
        () = rt.shutdown.cancelled() => {}
    }
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
    async move {
        let started_at = Instant::now();
        let handler = rt
            .started
            .flows
            .get(&task.flow_slug)
            .and_then(|flow| (flow.handler)(&task.step_slug));
        let result = match handler {
            None => Err(StepFailure::NoHandler {
                flow_slug: task.flow_slug.clone(),
                step_slug: task.step_slug.clone(),
            }),
            Some(handler) => {
                let cancellation = rt.hard_stop.child_token();
                let context = Context::for_task(&task, rt.started.pool.clone(), cancellation.clone());
                let timeout = Duration::from_secs(u64::try_from(task.timeout_seconds).unwrap_or(1));
                let mut running = tokio::spawn(handler(TaskInput::new(task.clone(), context)));
                tokio::select! {
                    joined = &mut running => match joined {
                        Ok(result) => result,
                        Err(error) if error.is_panic() => Err(StepFailure::Panicked {
                            step_slug: task.step_slug.clone(),
                            message: panic_message(error.into_panic()),
                        }),
                        Err(_) => Err(StepFailure::Panicked {
                            step_slug: task.step_slug.clone(),
                            message: "handler task was cancelled".to_owned(),
                        }),
                    },
                    () = tokio::time::sleep(timeout) => {
                        // Fire the token and give the handler a moment to wind down.
                        cancellation.cancel();
                        let _ = tokio::time::timeout(CANCEL_GRACE, &mut running).await;
                        running.abort();
                        Err(StepFailure::TimedOut {
                            step_slug: task.step_slug.clone(),
                            seconds: timeout.as_secs(),
                        })
                    }
                    () = rt.hard_stop.cancelled() => {
                        running.abort();
                        tracing::warn!("worker stopped while the handler ran; the task will be recovered as stalled");
                        return None;
                    }
                }
            }
        };
        let duration_ms = started_at.elapsed().as_millis() as u64;
        match &result {
            Ok(_) => tracing::info!(duration_ms, outcome = "completed", "task finished"),
            Err(failure) => tracing::warn!(duration_ms, outcome = "failed", error = %failure, "task finished"),
        }
        Some(Outcome { task, result })
    }
    .instrument(span)
    .await
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

/// Stores results in batches: whatever has finished since the last call goes in one
/// completion call and one failure call. A failed call is retried (the calls are idempotent:
/// a task taken over by another attempt is left alone) until it succeeds or the worker is
/// stopped at once.
async fn store_results(rt: Arc<Runtime>, mut results: mpsc::UnboundedReceiver<Outcome>) {
    while let Some(first) = results.recv().await {
        let batch = collect_results(&rt, &mut results, first).await;
        let mut completions = Vec::new();
        let mut failures = Vec::new();
        for outcome in batch {
            match outcome.result {
                Ok(output) => completions.push(TaskCompletion::of(&outcome.task, output)),
                Err(failure) => failures.push(TaskFailure::of(&outcome.task, failure.to_string())),
            }
        }
        if !completions.is_empty() {
            let pool = rt.started.pool.clone();
            let stored = retry(&rt, "storing completions", || {
                let pool = pool.clone();
                let completions = completions.clone();
                async move { engine::complete_tasks(&pool, &completions).await }
            })
            .await;
            if let Some(count) = stored {
                let ignored = completions.len() as u64 - count;
                if ignored > 0 {
                    tracing::info!(
                        queue = rt.started.queue.as_str(),
                        ignored,
                        "late completions ignored: those tasks were taken over"
                    );
                }
            }
        }
        if !failures.is_empty() {
            let pool = rt.started.pool.clone();
            let outcomes = retry(&rt, "storing failures", || {
                let pool = pool.clone();
                let failures = failures.clone();
                async move { engine::fail_tasks(&pool, &failures).await }
            })
            .await;
            for outcome in outcomes.unwrap_or_default() {
                tracing::info!(
                    queue = rt.started.queue.as_str(),
                    run_id = %outcome.run_id,
                    step = outcome.step_slug.as_str(),
                    task_index = outcome.task_index,
                    will_retry = outcome.will_retry,
                    retry_delay_seconds = outcome.retry_delay_seconds,
                    "task attempt failed"
                );
            }
        }
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

/// Retries `call` with backoff until it succeeds; gives up only on a hard stop.
async fn retry<T, F, Fut>(rt: &Runtime, what: &str, mut call: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EngineError>>,
{
    let mut backoff = Duration::from_millis(50);
    loop {
        match call().await {
            Ok(value) => return Some(value),
            Err(error) => {
                tracing::warn!(
                    queue = rt.started.queue.as_str(),
                    %error,
                    retry_in_ms = backoff.as_millis() as u64,
                    "{what} failed; retrying"
                );
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = rt.hard_stop.cancelled() => return None,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Heartbeats, stopping the worker when it was deprecated.
async fn heartbeat(rt: Arc<Runtime>) {
    let started = &rt.started;
    loop {
        tokio::select! {
            () = tokio::time::sleep(rt.settings.heartbeat_interval) => {}
            () = rt.shutdown.cancelled() => return,
        }
        match engine::heartbeat(&started.pool, started.worker_id).await {
            Ok(true) => {
                tracing::info!(
                    queue = started.queue.as_str(),
                    worker_id = %started.worker_id,
                    "worker deprecated: finishing in-flight tasks, then stopping"
                );
                rt.shutdown.cancel();
                return;
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(queue = started.queue.as_str(), %error, "heartbeat failed");
            }
        }
    }
}

/// Waits for in-flight handlers for the shutdown grace, then cancels what is left.
async fn drain(rt: &Runtime) {
    let all = u32::try_from(rt.settings.max_concurrent).unwrap_or(u32::MAX);
    let drained = tokio::select! {
        permits = rt.slots.acquire_many(all) => permits.is_ok(),
        () = tokio::time::sleep(rt.settings.shutdown_grace) => false,
        () = rt.hard_stop.cancelled() => false,
    };
    if !drained {
        tracing::warn!(
            queue = rt.started.queue.as_str(),
            "in-flight handlers did not finish within the shutdown grace; cancelling them \
             (their tasks will be recovered as stalled)"
        );
        rt.hard_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(1), rt.slots.acquire_many(all)).await;
    }
}

async fn mark_stopped(rt: &Runtime) {
    let started = &rt.started;
    for _ in 0..3 {
        match engine::stop_worker(&started.pool, started.worker_id).await {
            Ok(()) => return,
            Err(error) => {
                tracing::warn!(queue = started.queue.as_str(), %error, "cannot mark the worker stopped; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
