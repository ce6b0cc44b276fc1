//! A worker's handler slots: at most `max_concurrent` handlers run at once. This type owns the
//! arithmetic of them (how many are free or busy, waiting for one or for a batch, taking some
//! for a completion call to fill, waiting for all at a drain), so that no other part of the
//! worker counts permits.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A worker's handler slots.
pub(super) struct Slots {
    semaphore: Arc<Semaphore>,
    total: usize,
}

/// Slots taken: one per running handler, or several offered to a completion call. They are
/// free again when this is dropped.
#[derive(Debug)]
pub(super) struct Held(OwnedSemaphorePermit);

impl Slots {
    /// `total` slots, all free.
    pub(super) fn new(total: usize) -> Self {
        Self {
            semaphore: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// How many are free now.
    pub(super) fn free(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// How many handlers run now.
    pub(super) fn busy(&self) -> usize {
        self.total - self.free()
    }

    /// Waits for a free slot and takes it.
    pub(super) async fn one(&self) -> Held {
        match Arc::clone(&self.semaphore).acquire_owned().await {
            Ok(permit) => Held(permit),
            // Never closed: the slots live as long as the worker.
            Err(_) => std::future::pending().await,
        }
    }

    /// Waits until at least one slot is free, taking none.
    pub(super) async fn until_one_is_free(&self) {
        drop(self.one().await);
    }

    /// The free slots once `batch` of them are free at once, or after `patience`, whichever
    /// comes first; takes none (a claim then takes what is free).
    pub(super) async fn free_after_waiting_for(&self, batch: usize, patience: Duration) -> usize {
        let free = self.free();
        let Ok(wanted) = u32::try_from(batch) else {
            return free;
        };
        if free >= batch {
            return free;
        }
        let all_at_once = Arc::clone(&self.semaphore).acquire_many_owned(wanted);
        if let Ok(Ok(permits)) = tokio::time::timeout(patience, all_at_once).await {
            drop(permits);
        }
        self.free()
    }

    /// Takes up to `at_most` of the free slots at once, without waiting; `None` when none is
    /// free (or `at_most` is 0).
    pub(super) fn take_free(&self, at_most: usize) -> Option<Held> {
        let count = u32::try_from(self.free().min(at_most))
            .ok()
            .filter(|&count| count > 0)?;
        Arc::clone(&self.semaphore)
            .try_acquire_many_owned(count)
            .ok()
            .map(Held)
    }

    /// Waits until every slot is free: no handler runs. Taken only to be given back, so later
    /// waiters are not held up.
    pub(super) async fn all_free(&self) {
        let all = u32::try_from(self.total).unwrap_or(u32::MAX);
        if let Ok(permits) = self.semaphore.acquire_many(all).await {
            drop(permits);
        }
    }
}

impl Held {
    /// How many slots this holds.
    pub(super) fn count(&self) -> usize {
        self.0.num_permits()
    }

    /// One of the held slots, as a slot of its own; `None` when none is left.
    pub(super) fn split_one(&mut self) -> Option<Held> {
        self.0.split(1).map(Held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::poll::SLOT_LINGER as LINGER;

    #[tokio::test(start_paused = true)]
    async fn a_worker_waits_a_moment_for_a_batch_of_free_slots() {
        let slots = Slots::new(10);
        let mut busy = slots.take_free(10).unwrap();

        // One handler finished, the other nine finish while the worker waits: one read of ten.
        drop(busy.split_one());
        let rest = tokio::spawn(async move {
            tokio::task::yield_now().await;
            drop(busy);
        });
        let began = tokio::time::Instant::now();
        assert_eq!(slots.free_after_waiting_for(10, LINGER).await, 10);
        assert!(began.elapsed() < LINGER, "no longer than it took");
        rest.await.unwrap();

        // Nine stay busy: after the linger, the worker reads for the one free slot.
        let mut busy = slots.take_free(10).unwrap();
        drop(busy.split_one());
        let began = tokio::time::Instant::now();
        assert_eq!(slots.free_after_waiting_for(10, LINGER).await, 1);
        assert_eq!(began.elapsed(), LINGER);
        assert_eq!(slots.free(), 1, "no slot is kept");

        // A batch's worth already free: no wait.
        drop(busy);
        let began = tokio::time::Instant::now();
        assert_eq!(slots.free_after_waiting_for(10, LINGER).await, 10);
        assert_eq!(began.elapsed(), Duration::ZERO);
    }

    #[test]
    fn slots_taken_for_a_completion_call_are_bounded_and_split_one_by_one() {
        let slots = Slots::new(4);
        let _running = slots.take_free(1).unwrap();

        assert!(
            slots.take_free(0).is_none(),
            "nothing wanted, nothing taken"
        );
        let mut offered = slots.take_free(10).expect("three are free");
        assert_eq!(offered.count(), 3, "no more than are free");
        assert_eq!(slots.free(), 0);
        assert!(slots.take_free(1).is_none(), "none left to take");

        let one = offered.split_one().unwrap();
        assert_eq!((one.count(), offered.count()), (1, 2));
        drop(offered);
        assert_eq!(slots.free(), 2, "what a call did not fill is free again");
        drop(one);
        assert_eq!((slots.free(), slots.busy()), (3, 1));
    }
}
