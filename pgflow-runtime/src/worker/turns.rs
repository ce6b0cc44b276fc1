//! Taking turns at a shared call: the protocol behind a client's shared completion calls (see
//! `shared_completions`), apart from what a call does, so that it can be tested on its own.
//!
//! Storers bring batches. One call is in flight at a time: a storer that comes while one is
//! waits, and when the call returns, the first storer still waiting makes the next call, with
//! its own batch and those of the others waiting (as many as fit in one call; the rest wait
//! for the call after). A call that fails hands the batches it did not store on, with the turn.
//! The turn is handed on however a call ends: it returns, fails, or its storer's future is
//! dropped mid-call. A storer alone never waits.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Something a call carries: its size counts against a call's limit.
pub(crate) trait Carried {
    /// How much of a call this takes (completions, for a completion batch).
    fn carried(&self) -> usize;
}

/// A storer waiting for its turn, with its batch (which a call takes from, and gives back to
/// when it fails).
pub(crate) struct Waiting<B> {
    pub(crate) batch: B,
    turn: oneshot::Sender<Turn<B>>,
}

/// What a waiting storer is told when the call in flight returns.
enum Turn<B> {
    /// Its batch was stored by another storer's call.
    Stored,
    /// It makes the next call: its own batch (handed back), and those of the storers still
    /// waiting that fit.
    Call(B, Vec<Waiting<B>>),
}

/// How a storer enters: it calls at once, or waits to be told.
enum Entry<B> {
    Call(B),
    Wait(oneshot::Receiver<Turn<B>>),
}

/// The turns of one shared call.
pub(crate) struct Turns<B> {
    /// The most a call carries (a batch larger than that still goes, alone).
    limit: usize,
    state: Mutex<State<B>>,
}

/// Whether a call is in flight, and who waits for the next one.
struct State<B> {
    calling: bool,
    waiting: Vec<Waiting<B>>,
}

impl<B: Carried> Turns<B> {
    /// Turns whose calls carry at most `limit` (see [`Carried`]).
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            state: Mutex::new(State {
                calling: false,
                waiting: Vec::new(),
            }),
        }
    }

    /// Stores `batch` through `call`: at once when no call is in flight, else in the next call
    /// (made by this storer or another). `call` gets the batch of the storer that makes it and
    /// the waiting storers it carries, and says whether it stored them all (`false`: they are
    /// handed on, with what the call gave back to them). Returns once `batch` was stored, or
    /// when this storer's own call failed.
    pub(crate) async fn store(
        &self,
        batch: B,
        call: impl AsyncFnOnce(B, &mut [Waiting<B>]) -> bool,
    ) {
        let entry = {
            let mut state = self.lock();
            if state.calling {
                let (turn, told) = oneshot::channel();
                state.waiting.push(Waiting { batch, turn });
                Entry::Wait(told)
            } else {
                state.calling = true;
                Entry::Call(batch)
            }
        };
        let (mine, others) = match entry {
            Entry::Call(batch) => (batch, Vec::new()),
            Entry::Wait(told) => match told.await {
                Ok(Turn::Call(mine, others)) => (mine, others),
                Ok(Turn::Stored) | Err(_) => return,
            },
        };
        // Hands the turn on however this call ends, even if this future is dropped mid-call.
        let mut turn = HandOver {
            turns: self,
            unstored: others,
        };
        if call(mine, &mut turn.unstored).await {
            for waiting in turn.unstored.drain(..) {
                let _ = waiting.turn.send(Turn::Stored);
            }
        }
    }

    /// Gives the next call to the first of `unstored` and the storers waiting that is still
    /// there, with as many of the others as fit in one call; or, with nobody left, ends the
    /// call.
    fn hand_over(&self, mut unstored: Vec<Waiting<B>>) {
        let mut state = self.lock();
        unstored.append(&mut state.waiting);
        let mut queue = VecDeque::from(unstored);
        while let Some(next) = queue.pop_front() {
            let mut count = next.batch.carried();
            let mut others = Vec::new();
            while let Some(waiting) = queue.front() {
                count += waiting.batch.carried();
                if count > self.limit {
                    break;
                }
                others.extend(queue.pop_front());
            }
            match next.turn.send(Turn::Call(next.batch, others)) {
                Ok(()) => {
                    state.waiting = queue.into();
                    return;
                }
                // That storer is gone (its worker's tasks were dropped at a hard stop).
                Err(Turn::Call(_, others)) => {
                    for waiting in others.into_iter().rev() {
                        queue.push_front(waiting);
                    }
                }
                Err(Turn::Stored) => {}
            }
        }
        state.calling = false;
    }

    fn lock(&self) -> MutexGuard<'_, State<B>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Passes the turn on when a call ends.
struct HandOver<'a, B: Carried> {
    turns: &'a Turns<B>,
    /// The waiting storers whose batches the call did not store (all of them, unless it
    /// succeeded).
    unstored: Vec<Waiting<B>>,
}

impl<B: Carried> Drop for HandOver<'_, B> {
    fn drop(&mut self) {
        self.turns.hand_over(std::mem::take(&mut self.unstored));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::Notify;

    use super::*;

    /// A test batch: a storer's name and how much it carries.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Named(&'static str, usize);

    impl Carried for Named {
        fn carried(&self) -> usize {
            self.1
        }
    }

    /// What the calls did: each call's batches, the caller's first.
    #[derive(Default)]
    struct Calls {
        made: Mutex<Vec<Vec<&'static str>>>,
        /// Calls wait here until the test lets them return.
        release: Notify,
    }

    impl Calls {
        fn made(&self) -> Vec<Vec<&'static str>> {
            self.made.lock().unwrap().clone()
        }
    }

    /// A call that records its batches, waits to be released, and returns `stored`.
    async fn recorded(
        calls: &Calls,
        mine: Named,
        others: &mut [Waiting<Named>],
        stored: bool,
    ) -> bool {
        let mut batches = vec![mine.0];
        batches.extend(others.iter().map(|w| w.batch.0));
        calls.made.lock().unwrap().push(batches);
        calls.release.notified().await;
        stored
    }

    /// Lets the tasks spawned so far run until each waits.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    /// Stores `batch` on a task of its own through a recorded call that succeeds; the handle
    /// ends when `store` returns.
    fn spawn_store(
        turns: &Arc<Turns<Named>>,
        calls: &Arc<Calls>,
        batch: Named,
    ) -> tokio::task::JoinHandle<()> {
        spawn_storer(turns, calls, batch, true)
    }

    /// [`spawn_store`] through a recorded call that returns `stored` (false: it failed, as when
    /// its worker was stopped at once).
    fn spawn_storer(
        turns: &Arc<Turns<Named>>,
        calls: &Arc<Calls>,
        batch: Named,
        stored: bool,
    ) -> tokio::task::JoinHandle<()> {
        let (turns, calls) = (Arc::clone(turns), Arc::clone(calls));
        tokio::spawn(async move {
            turns
                .store(batch, async |mine, others| {
                    recorded(&calls, mine, others, stored).await
                })
                .await;
        })
    }

    /// Whether `handle` finishes within a (paused-clock) second: a storer left waiting for a
    /// turn nobody hands on never does.
    async fn finishes(handle: tokio::task::JoinHandle<()>) -> bool {
        tokio::time::timeout(Duration::from_secs(1), handle)
            .await
            .is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn a_storer_alone_calls_at_once_and_the_next_call_carries_everyone_waiting() {
        let turns = Arc::new(Turns::new(100));
        let calls = Arc::new(Calls::default());

        let first = spawn_store(&turns, &calls, Named("a", 1));
        settle().await;
        assert_eq!(calls.made(), [vec!["a"]], "alone, it calls at once");

        // While `a`'s call is in flight, three more storers wait.
        let waiting: Vec<_> = [Named("b", 1), Named("c", 1), Named("d", 1)]
            .into_iter()
            .map(|batch| spawn_store(&turns, &calls, batch))
            .collect();
        settle().await;
        assert_eq!(
            calls.made().len(),
            1,
            "nobody calls while a call is in flight"
        );

        calls.release.notify_one();
        assert!(finishes(first).await);
        settle().await;
        assert_eq!(
            calls.made(),
            [vec!["a"], vec!["b", "c", "d"]],
            "the first waiting storer makes the next call, carrying the others"
        );
        calls.release.notify_one();
        for handle in waiting {
            assert!(
                finishes(handle).await,
                "every waiting storer returns once stored"
            );
        }
        assert_eq!(calls.made().len(), 2, "three batches, one call");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_carries_what_fits_and_the_rest_waits_for_the_call_after() {
        let turns = Arc::new(Turns::new(10));
        let calls = Arc::new(Calls::default());
        let first = spawn_store(&turns, &calls, Named("a", 1));
        settle().await;
        let rest: Vec<_> = [Named("b", 6), Named("c", 4), Named("d", 1)]
            .into_iter()
            .map(|batch| spawn_store(&turns, &calls, batch))
            .collect();
        settle().await;
        for _ in 0..3 {
            calls.release.notify_one();
            settle().await;
        }
        assert!(finishes(first).await);
        for handle in rest {
            assert!(finishes(handle).await);
        }
        assert_eq!(
            calls.made(),
            [vec!["a"], vec!["b", "c"], vec!["d"]],
            "6 + 4 fit in 10; 1 more does not"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_call_hands_its_unstored_batches_on_with_the_turn() {
        let turns = Arc::new(Turns::new(100));
        let calls = Arc::new(Calls::default());
        let first = spawn_store(&turns, &calls, Named("a", 1));
        settle().await;
        // `b` waits; `c` makes a call that fails (its worker stopped at once).
        let b = spawn_store(&turns, &calls, Named("b", 1));
        let c = spawn_storer(&turns, &calls, Named("c", 1), false);
        let d = spawn_store(&turns, &calls, Named("d", 1));
        settle().await;
        calls.release.notify_one(); // a's call
        settle().await;
        assert_eq!(
            calls.made()[1],
            ["b", "c", "d"],
            "b calls, carrying c and d"
        );
        calls.release.notify_one(); // b's call succeeds
        settle().await;
        assert!(finishes(first).await && finishes(b).await && finishes(c).await);
        assert!(finishes(d).await);

        // Now c makes a call of its own that fails while e waits: e still gets a turn.
        let c_again = spawn_storer(&turns, &calls, Named("c", 1), false);
        settle().await;
        let e = spawn_store(&turns, &calls, Named("e", 1));
        settle().await;
        calls.release.notify_one(); // c's failing call
        settle().await;
        calls.release.notify_one(); // e's call
        assert!(
            finishes(c_again).await,
            "a failed call returns to its storer"
        );
        assert!(
            finishes(e).await,
            "the storer waiting behind a failed call gets its turn"
        );
        assert_eq!(calls.made().last().unwrap(), &vec!["e"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_storer_dropped_mid_call_still_hands_the_turn_on() {
        let turns = Arc::new(Turns::new(100));
        let calls = Arc::new(Calls::default());
        let first = spawn_store(&turns, &calls, Named("a", 1));
        settle().await;
        let b = spawn_store(&turns, &calls, Named("b", 1));
        settle().await;

        // a's future is dropped while its call is in flight (a hard stop aborts its task).
        first.abort();
        settle().await;
        assert_eq!(
            calls.made(),
            [vec!["a"], vec!["b"]],
            "b got the turn at once"
        );
        calls.release.notify_one();
        assert!(finishes(b).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_storer_that_is_gone_is_passed_over() {
        let turns = Arc::new(Turns::new(100));
        let calls = Arc::new(Calls::default());
        let first = spawn_store(&turns, &calls, Named("a", 1));
        settle().await;
        let gone = spawn_store(&turns, &calls, Named("gone", 1));
        settle().await;
        let c = spawn_store(&turns, &calls, Named("c", 1));
        settle().await;
        gone.abort();
        settle().await;

        calls.release.notify_one();
        settle().await;
        calls.release.notify_one();
        assert!(finishes(first).await && finishes(c).await);
        assert_eq!(
            calls.made(),
            [vec!["a"], vec!["c"]],
            "the storer that is gone neither calls nor is carried"
        );
    }
}
