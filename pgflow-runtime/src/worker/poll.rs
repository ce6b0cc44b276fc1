//! The slot-aware poll loop: claims at most the free slots' worth of tasks and hands each to
//! a handler task.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::backoff::Backoff;
use crate::engine::{self, Claim};
use crate::error::EngineError;
use crate::metrics;
use crate::worker::error::WorkerError;
use crate::worker::execute::{self, Outcome};
use crate::worker::runtime::Runtime;
use crate::worker::wakeup::QueueWakeup;

/// How long a worker whose read found tasks, but fewer than it asked for, lets new ones gather
/// before it reads again (one such worker per process and queue). While it does so it counts
/// as claiming: new tasks wake nobody (see [`crate::worker::wakeup`]), and the next read takes
/// the tasks of several starts at once.
pub(super) const GATHER_FOR: Duration = Duration::from_millis(4);

/// How long a worker with every slot busy still counts as claiming: short handlers free a
/// slot sooner, and flipping the process's request for wake-ups on every full claim would cost
/// more than it saves.
pub(super) const SLOT_PATIENCE: Duration = Duration::from_millis(25);

/// How long a worker whose last read was full (more tasks are waiting) waits for a batch's
/// worth of free slots before it reads with fewer. Handlers claimed together finish a moment
/// apart; without this wait the first to finish starts a claim of one task, and from then on
/// the worker's claims alternate between a few tasks and the rest (at one worker of batch 10
/// under a map step: as many claims of 1 task as of 9).
pub(super) const SLOT_LINGER: Duration = Duration::from_millis(1);

/// Reads at most the free slots' worth of messages, claims them and hands each to a handler
/// task; reads again at once when the read was full (waking the next idle worker of the queue
/// too; with fewer free slots than a batch, after up to [`SLOT_LINGER`] for more), after [`GATHER_FOR`] when it found some tasks and no other worker of the process is
/// gathering, and otherwise waits to be woken (or the poll interval).
pub(super) async fn poll(
    rt: &Arc<Runtime>,
    results: mpsc::UnboundedSender<Outcome>,
) -> Result<(), WorkerError> {
    let started = &rt.started;
    let wakeup = QueueWakeup::subscribe(started.client.shared(), &started.queue)?;
    let mut member = wakeup.join();
    let mut backoff = Backoff::default();
    // Whether the last read was full: more tasks were waiting than it asked for.
    let mut more_waiting = false;
    loop {
        if rt.shutdown.is_cancelled() {
            return Ok(());
        }
        let free = rt.slots.free();
        if free == 0 {
            // Wait until a handler finishes. A slot that frees within SLOT_PATIENCE keeps this
            // worker claiming; after that it reads nothing until one does, and new tasks must
            // wake another worker.
            tokio::select! {
                freed = tokio::time::timeout(SLOT_PATIENCE, rt.slots.until_one_is_free()) => {
                    if freed.is_err() {
                        member.set_claiming(false);
                        tokio::select! {
                            () = rt.slots.until_one_is_free() => {}
                            () = rt.shutdown.cancelled() => return Ok(()),
                        }
                    }
                }
                () = rt.shutdown.cancelled() => return Ok(()),
            }
            continue;
        }
        let free = if more_waiting {
            let batch = rt.settings.batch_size.min(rt.settings.max_concurrent);
            rt.slots.free_after_waiting_for(batch, SLOT_LINGER).await
        } else {
            free
        };
        let quantity = free.min(rt.settings.batch_size);
        let claim_began = std::time::Instant::now();
        let claimed = engine::read_and_start_tasks(
            &started.pool,
            &started.queue,
            started.worker_id,
            started.handlers.pairs(),
            i32::try_from(quantity).unwrap_or(i32::MAX),
        )
        .await;
        metrics::claim_duration(started.queue.as_str(), claim_began.elapsed());
        if let Ok(claim) = &claimed
            && !claim.stale_message_ids.is_empty()
        {
            report_stale(rt, &claim.stale_message_ids);
        }
        match claimed {
            // Tasks sent back to wait for a rate token were read too: a read full of them is
            // not a drained queue.
            Ok(claim)
                if claim.tasks.is_empty()
                    && claim.stale_message_ids.len() + claim.deferred < quantity =>
            {
                backoff.reset();
                more_waiting = false;
                member.set_claiming(false);
                wait_for_work(rt, &wakeup).await;
            }
            Ok(Claim {
                tasks,
                stale_message_ids,
                deferred,
            }) => {
                backoff.reset();
                let drained = tasks.len() + stale_message_ids.len() + deferred < quantity;
                more_waiting = !drained;
                if !drained {
                    wakeup.pass_on();
                }
                // This worker reads again soon on its own: new tasks need wake nobody.
                member.set_claiming(true);
                for task in tasks {
                    let slot = rt.slots.one().await;
                    execute::spawn(rt, task, slot, results.clone());
                }
                if drained {
                    // The read took everything visible: reading again now would find nothing.
                    // The process's gathering worker lets the tasks of the next starts gather
                    // first; another goes idle until a full read passes work on to it.
                    if let Some(_gathering) = member.gather() {
                        tokio::select! {
                            () = tokio::time::sleep(GATHER_FOR) => {}
                            () = rt.shutdown.cancelled() => return Ok(()),
                        }
                    } else {
                        member.set_claiming(false);
                        wait_for_work(rt, &wakeup).await;
                    }
                }
            }
            Err(error @ EngineError::UnsupportedTasks { .. }) => {
                tracing::error!(
                    queue = started.queue.as_str(),
                    %error,
                    "fatal configuration error; no task was changed and the batch is visible \
                     again; stopping the worker"
                );
                return Err(WorkerError::UnsupportedTasks(error));
            }
            Err(error) => {
                member.set_claiming(false);
                more_waiting = false;
                let pause = backoff.next_pause();
                tracing::warn!(
                    queue = started.queue.as_str(),
                    %error,
                    retry_in_ms = pause.as_millis() as u64,
                    "claiming tasks failed; retrying"
                );
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = rt.shutdown.cancelled() => return Ok(()),
                }
            }
        }
    }
}

/// Says which stale messages (no queued task behind them) a claim removed, and counts them.
fn report_stale(rt: &Runtime, message_ids: &[i64]) {
    let count = message_ids.len() as u64;
    metrics::count_queue(
        metrics::names::STALE_MESSAGES,
        rt.started.queue.as_str(),
        count,
    );
    let total = rt
        .stale_messages
        .fetch_add(count, std::sync::atomic::Ordering::Relaxed)
        + count;
    tracing::warn!(
        queue = rt.started.queue.as_str(),
        count,
        total,
        message_ids = ?message_ids,
        "removed messages with no queued task behind them (sent by hand, for an unknown run, \
         or left over); nothing was run for them"
    );
}

/// The shortest wait for a message that comes due: a visible message another claim is taking
/// must not make idle workers spin.
const DUE_WAIT_FLOOR: Duration = Duration::from_millis(5);

/// Waits to be woken for new tasks, the poll interval, or shutdown. A worker of a rate-limited
/// step waits at most until the queue's next message is due (by the database's clock; a task
/// sent for a token comes back then, and nothing wakes a worker for it): a limit is reached
/// only if its tasks start when due.
async fn wait_for_work(rt: &Runtime, wakeup: &QueueWakeup) {
    let mut pause = rt.settings.poll_interval;
    if rt.rate_limited
        && let Ok(Some(due_in)) = engine::next_message_in(&rt.started.pool, &rt.started.queue).await
    {
        pause = pause.min(due_in.max(DUE_WAIT_FLOOR));
    }
    tokio::select! {
        () = wakeup.woken() => {}
        () = tokio::time::sleep(pause) => {}
        () = rt.shutdown.cancelled() => {}
    }
}
