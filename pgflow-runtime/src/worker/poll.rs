//! The slot-aware poll loop: claims at most the free slots' worth of tasks and hands each to
//! a handler task.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};

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
        let free = rt.slots.available_permits();
        if free == 0 {
            // Wait until a handler finishes. A slot that frees within SLOT_PATIENCE keeps this
            // worker claiming; after that it reads nothing until one does, and new tasks must
            // wake another worker.
            let slot = Arc::clone(&rt.slots);
            tokio::select! {
                permit = tokio::time::timeout(SLOT_PATIENCE, slot.acquire_owned()) => {
                    if permit.is_err() {
                        member.set_claiming(false);
                        tokio::select! {
                            permit = Arc::clone(&rt.slots).acquire_owned() => drop(permit),
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
            linger_for_slots(&rt.slots, batch).await
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
            Ok(claim) if claim.tasks.is_empty() && claim.stale_message_ids.len() < quantity => {
                backoff.reset();
                more_waiting = false;
                member.set_claiming(false);
                wait_for_work(rt, &wakeup).await;
            }
            Ok(Claim {
                tasks,
                stale_message_ids,
            }) => {
                backoff.reset();
                let drained = tasks.len() + stale_message_ids.len() < quantity;
                more_waiting = !drained;
                if !drained {
                    wakeup.pass_on();
                }
                // This worker reads again soon on its own: new tasks need wake nobody.
                member.set_claiming(true);
                for task in tasks {
                    let Ok(slot) = Arc::clone(&rt.slots).acquire_owned().await else {
                        return Ok(());
                    };
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

/// The free slots of `slots` after waiting up to [`SLOT_LINGER`] for `batch` of them to be
/// free at once.
async fn linger_for_slots(slots: &Arc<Semaphore>, batch: usize) -> usize {
    let free = slots.available_permits();
    let Ok(wanted) = u32::try_from(batch) else {
        return free;
    };
    if free >= batch {
        return free;
    }
    // Taken and given back at once: the read takes what is free then.
    if let Ok(Ok(permits)) =
        tokio::time::timeout(SLOT_LINGER, Arc::clone(slots).acquire_many_owned(wanted)).await
    {
        drop(permits);
    }
    slots.available_permits()
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

/// Waits to be woken for new tasks, the poll interval, or shutdown.
async fn wait_for_work(rt: &Runtime, wakeup: &QueueWakeup) {
    tokio::select! {
        () = wakeup.woken() => {}
        () = tokio::time::sleep(rt.settings.poll_interval) => {}
        () = rt.shutdown.cancelled() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_worker_waits_a_moment_for_a_batch_of_free_slots() {
        let slots = Arc::new(Semaphore::new(10));
        let mut busy = Arc::clone(&slots).try_acquire_many_owned(10).unwrap();

        // One handler finished, the other nine finish while the worker waits: one read of ten.
        drop(busy.split(1));
        let rest = tokio::spawn(async move {
            tokio::task::yield_now().await;
            drop(busy);
        });
        let began = tokio::time::Instant::now();
        assert_eq!(linger_for_slots(&slots, 10).await, 10);
        assert!(began.elapsed() < SLOT_LINGER, "no longer than it took");
        rest.await.unwrap();

        // Nine stay busy: after the linger, the worker reads for the one free slot.
        let mut busy = Arc::clone(&slots).try_acquire_many_owned(10).unwrap();
        drop(busy.split(1));
        let began = tokio::time::Instant::now();
        assert_eq!(linger_for_slots(&slots, 10).await, 1);
        assert_eq!(began.elapsed(), SLOT_LINGER);
        assert_eq!(slots.available_permits(), 1, "no slot is kept");

        // A batch's worth already free: no wait.
        drop(busy);
        let began = tokio::time::Instant::now();
        assert_eq!(linger_for_slots(&slots, 10).await, 10);
        assert_eq!(began.elapsed(), Duration::ZERO);
    }
}
