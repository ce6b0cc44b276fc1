//! Completion calls shared by the workers of one client (see [`crate::process`]) on one queue.
//!
//! Every completion call costs a transaction, a commit and the statements around them whatever
//! it carries, and completions of one map step's tasks queue behind each other on their run's
//! row lock. Workers that store their completions each on their own split a process's stream
//! of results into more, smaller calls the more of them there are. So a process's workers on a
//! queue take turns ([`Turns`]): while one call is in flight, the completions of the others
//! wait, and the next call carries all of them (one of the waiting storers makes it). One worker
//! alone never waits for anyone.
//!
//! A call claims, at release, tasks for the free slots of every worker whose completions it
//! carries (see [`engine::complete_and_claim_tasks`]); the slots are taken when the call
//! begins, not while a storer waits for its turn, so a waiting storer keeps no slot from its
//! poll loop. Workers share a group only when their claims support the same pairs, so any of
//! them can run what the call claims.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::sync::mpsc;
use uuid::Uuid;

use crate::engine::{self, ClaimedAtRelease, CompletedAndClaimed, TaskCompletion};
use crate::worker::execute::{self, Outcome};
use crate::worker::runtime::{Runtime, retry};
use crate::worker::slots::Held;
use crate::worker::turns::{Carried, Turns, Waiting};

/// The most completions one shared call carries (each storer's own are fewer, see
/// `MAX_RESULT_BATCH` in `results`).
const MAX_CALL_COMPLETIONS: usize = 1_000;

/// One storer's completions, waiting for (or making) a call.
pub(super) struct Batch {
    /// The worker whose handlers produced them.
    pub rt: Arc<Runtime>,
    /// What to store.
    pub completions: Vec<TaskCompletion>,
    /// How many tasks they may release that this worker could run at once (an upper bound).
    pub releasable: usize,
    /// Where the handlers of tasks claimed for this worker report; `None` once the worker's
    /// poll loop and handlers are gone (it then claims nothing).
    pub results: Option<mpsc::UnboundedSender<Outcome>>,
}

impl Carried for Batch {
    fn carried(&self) -> usize {
        self.completions.len()
    }
}

/// The completion calls of one queue's workers on a client; dropped with the last of them.
pub(super) struct CompletionGroup {
    turns: Turns<Batch>,
}

impl CompletionGroup {
    fn new() -> Self {
        Self {
            turns: Turns::new(MAX_CALL_COMPLETIONS),
        }
    }

    /// The group of `rt`'s worker: the workers of its client on the same queue whose claims
    /// support the same pairs.
    pub(super) fn join(rt: &Runtime) -> Arc<Self> {
        let started = &rt.started;
        let key = (started.queue.clone(), started.handlers.pairs().clone());
        let Ok(group) = started
            .client
            .shared()
            .values
            .get_or_make(key, || Ok::<_, Infallible>(Arc::new(Self::new())));
        group
    }

    /// Stores `batch`: at once when no call of the group is in flight, else with the next
    /// call (see [`Turns`]). Returns when its completions are stored, or when its worker was
    /// stopped at once (they are then left for stalled-task recovery, as any unstored result).
    pub(super) async fn store(&self, batch: Batch) {
        self.turns.store(batch, call).await;
    }
}

/// Stores `mine` and the batches of `others` in one call, retried until it succeeds (then
/// `true`) or `mine`'s worker is stopped at once (`false`: `others` keep their completions,
/// for the next storer to call with). The call claims released tasks for the slots free when
/// it begins, and starts their handlers.
async fn call(mut mine: Batch, others: &mut [Waiting<Batch>]) -> bool {
    let rt = Arc::clone(&mine.rt);
    let started = &rt.started;
    let mut lengths = Vec::with_capacity(others.len() + 1);
    let mut completions = std::mem::take(&mut mine.completions);
    lengths.push(completions.len());
    for waiting in others.iter_mut() {
        lengths.push(waiting.batch.completions.len());
        completions.append(&mut waiting.batch.completions);
    }
    if completions.is_empty() {
        // Only after a storer was dropped mid-call, its worker's runtime gone.
        return true;
    }
    let mut rooms: Vec<_> = std::iter::once(&mine)
        .chain(others.iter().map(|waiting| &waiting.batch))
        .map(|batch| {
            let room = batch
                .results
                .as_ref()
                .and_then(|_| free_slots(&batch.rt, batch.releasable));
            (batch, room)
        })
        .collect();
    // One element per slot offered: the id of the worker offering it.
    let slots: Vec<Uuid> = rooms
        .iter()
        .filter_map(|(batch, room)| Some((batch.rt.started.worker_id, room.as_ref()?)))
        .flat_map(|(worker_id, room)| std::iter::repeat_n(worker_id, room.count()))
        .collect();
    let pool = started.pool.clone();
    let tries = AtomicU32::new(0);
    let stored = retry(&rt, "storing completions", || {
        tries.fetch_add(1, Ordering::Relaxed);
        let pool = pool.clone();
        let completions = &completions;
        let slots = &slots;
        async move {
            if slots.is_empty() {
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
                started.handlers.pairs(),
                slots,
            )
            .await
        }
    })
    .await;
    let Some(stored) = stored else {
        drop(rooms);
        // Give each waiting storer its completions back (they follow `mine`'s, in order).
        let mut rest = completions.split_off(lengths[0]);
        for (waiting, length) in others.iter_mut().zip(&lengths[1..]) {
            let tail = rest.split_off(*length);
            waiting.batch.completions = rest;
            rest = tail;
        }
        return false;
    };
    run_claimed(&rt, stored.claimed, &mut rooms);
    drop(rooms);
    report_unstored(&rt, &completions, stored.completed, tries.into_inner()).await;
    true
}

/// Takes free handler slots of `rt`'s worker (at most a claim's batch, and no more than
/// `releasable`) for a completion call to fill with the tasks it releases; none while the
/// worker stops.
fn free_slots(rt: &Runtime, releasable: usize) -> Option<Held> {
    if rt.shutdown.is_cancelled() {
        return None;
    }
    rt.slots.take_free(rt.settings.batch_size.min(releasable))
}

/// Starts the handlers of the tasks a completion call claimed, each on the worker whose slot
/// it took, with that slot; the slots left over are freed when the rooms drop.
fn run_claimed(rt: &Runtime, claimed: Vec<ClaimedAtRelease>, rooms: &mut [(&Batch, Option<Held>)]) {
    for ClaimedAtRelease { worker_id, task } in claimed {
        let taker = rooms.iter_mut().find_map(|(batch, room)| {
            if batch.rt.started.worker_id != worker_id {
                return None;
            }
            Some((
                &batch.rt,
                batch.results.as_ref()?,
                room.as_mut()?.split_one()?,
            ))
        });
        let Some((worker, results, slot)) = taker else {
            // The call claims one task per slot it was given, for the slot's worker.
            tracing::error!(
                queue = rt.started.queue.as_str(),
                run_id = %task.run_id,
                step = task.step_slug.as_str(),
                %worker_id,
                "a completion call claimed a task for a slot it was not given; the task will be \
                 recovered as stalled"
            );
            continue;
        };
        execute::spawn(worker, task, slot, results.clone());
    }
}

/// Says why any of `completions` were not stored by the call that succeeded (`tries` in all):
/// an earlier try had stored them, or another attempt took their tasks over.
async fn report_unstored(rt: &Runtime, completions: &[TaskCompletion], completed: u64, tries: u32) {
    let not_stored_now = completions.len() as u64 - completed;
    if not_stored_now == 0 {
        return;
    }
    let queue = rt.started.queue.as_str();
    // Only a retried call can find its own completions already stored: an earlier try
    // committed, and its reply was lost with the connection.
    let stored_earlier = if tries > 1 {
        engine::count_stored_completions(&rt.started.pool, completions)
            .await
            .map_or(0, |stored| stored.saturating_sub(completed))
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
