//! Wake-ups for idle workers, shared by the workers of one client (see [`crate::process`]) that
//! poll the same queue.
//!
//! A notification makes its commit wait for every other notifying commit of the server
//! (Postgres serializes them, WAL flush included), so pgflow notifies `pgflow.<queue>` only when
//! someone asks for it. This process's listener asks (`pgflow.request_wakeups`, a shared
//! advisory lock on its own session) while every worker it serves on the queue is idle, and
//! withdraws the request as soon as one of them is claiming again: a claiming worker reads
//! again within [`GATHER_FOR`](crate::worker::poll::GATHER_FOR) and finds new tasks without
//! being woken. Under load, then, starts and completions send nothing. A transaction that
//! looked for requests just before one was made may still commit without notifying; so after
//! each request one idle worker looks at once, and again after each of [`RECHECKS`].
//!
//! If every worker held its own `LISTEN`, each notification would wake all idle workers of the
//! queue at once; all but one would then claim nothing, and each of those empty claims still
//! scans the queue's in-flight messages. Here each of the queue's notifications, as the
//! client's one listener (see [`crate::process`]) receives it, wakes **one** idle worker; a
//! worker whose claim came back full wakes the next one ([`QueueWakeup::pass_on`]), so a burst
//! still reaches every worker, one claim at a time.
//!
//! A worker whose read found tasks, but fewer than it asked for, reads again after
//! [`GATHER_FOR`](crate::worker::poll::GATHER_FOR) while it is the process's one gathering
//! worker on the queue ([`WakeupMember::gather`]); any other goes idle until work is passed on
//! to it. One worker then reads what several starts left, instead of several each reading a
//! piece of it: fewer, fuller claims, and fewer completion calls after them.
//!
//! At low load notifications are further apart than [`BUSY_WITHIN`], and the listening task
//! wakes a worker itself, at once ([`FirstHand`]). Under load it hands them to the queue's
//! wake-up task, which coalesces: a notification that comes within [`BUSY_WITHIN`] of the
//! previous wake-up is held for [`COALESCE_FOR`], and every notification arriving meanwhile
//! rides on the same wake-up. The same task keeps the listening session's request for
//! wake-ups in line with the workers, and wakes them after a reconnect.
//!
//! The listener holds a connection of its own, outside the client's pool (so a worker with
//! `max_pg_connections(1)` keeps its one connection for work), opened with the pool's connect
//! options or a URL of its own ([`Notifications`](crate::Notifications)); the request for
//! wake-ups lives on that session. It reconnects on its own; while it is down, workers fall
//! back to their poll interval, and after it comes back (when notifications may have been
//! missed) they are all woken once. With notifications off there is no listener and no
//! request: idle workers poll, and still pass work on to each other.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::engine;
use crate::names::QueueName;
use crate::process::Shared;
use crate::process::notifier::{Signal, Sink, Topic};
use crate::worker::error::WorkerError;

/// A notification this soon after the previous wake-up means the queue is busy: it is held for
/// [`COALESCE_FOR`] so that the ones behind it share its wake-up.
pub(super) const BUSY_WITHIN: Duration = Duration::from_millis(25);

/// How long a notification on a busy queue is held before it wakes a worker.
pub(super) const COALESCE_FOR: Duration = Duration::from_millis(4);

/// After a request for wake-ups, one idle worker looks again at once and after each of these
/// (from the request): tasks whose transaction looked for requests just before it and committed
/// after the last empty claim. A transaction that stays open longer between its start and its
/// commit waits for the next notification or the poll interval.
pub(super) const RECHECKS: [Duration; 2] = [Duration::from_millis(10), Duration::from_millis(100)];

/// One queue's wake-ups in this process; dropped (and its listener stopped) with the last
/// worker that holds it.
pub(super) struct QueueWakeup {
    notify: Notify,
    stop: CancellationToken,
    members: Mutex<Members>,
    /// When a notification last woke a worker: within [`BUSY_WITHIN`], the queue is busy.
    notified_at: Mutex<Option<Instant>>,
    /// Whether this process wants notifications: it has workers on the queue and none of them
    /// is claiming. The listener keeps its session's request in line with it.
    wanted: watch::Sender<bool>,
}

/// The workers of this process on one queue, how many of them are claiming, and whether one
/// is gathering.
#[derive(Default)]
struct Members {
    count: usize,
    claiming: usize,
    gathering: bool,
}

impl QueueWakeup {
    /// The wake-up of `queue` that `shared`'s workers share, started on first use. It listens
    /// through the client's notifier when the client has one (see
    /// [`Notifications`](crate::Notifications)); otherwise idle workers poll.
    pub(super) fn subscribe(shared: &Shared, queue: &QueueName) -> Result<Arc<Self>, WorkerError> {
        shared.values.get_or_make(queue.clone(), || {
            let (wanted, wanted_changes) = watch::channel(false);
            let wakeup = Arc::new(Self {
                notify: Notify::new(),
                stop: CancellationToken::new(),
                members: Mutex::default(),
                notified_at: Mutex::default(),
                wanted,
            });
            if let Some(notifier) = shared.notifier() {
                let (busy, signals) = mpsc::unbounded_channel();
                let topic = notifier.topic_into(FirstHand {
                    wakeup: Arc::downgrade(&wakeup),
                    busy,
                });
                tokio::spawn(serve(
                    Serving {
                        topic,
                        signals,
                        queue: queue.clone(),
                        wakeup: Arc::downgrade(&wakeup),
                        wanted: wanted_changes,
                    },
                    wakeup.stop.clone(),
                ));
            }
            Ok(wakeup)
        })
    }

    /// Counts a worker in (not claiming until it says so); it counts out when the returned
    /// member is dropped.
    pub(super) fn join(self: &Arc<Self>) -> WakeupMember {
        self.update_members(|members| members.count += 1);
        WakeupMember {
            wakeup: Arc::clone(self),
            claiming: false,
        }
    }

    /// Waits until this worker is woken: a notification arrived, another worker passed work
    /// on, the listener (re)connected, or a request for wake-ups was just made.
    pub(super) async fn woken(&self) {
        self.notify.notified().await;
    }

    /// Wakes one more idle worker: the caller's claim came back full, so more work is likely
    /// waiting.
    pub(super) fn pass_on(&self) {
        self.notify.notify_one();
    }

    /// Wakes one idle worker for a notification, unless the queue is busy (a notification
    /// woke one within [`BUSY_WITHIN`]): then false, and the notification is to be coalesced.
    fn notified_if_quiet(&self) -> bool {
        let mut notified_at = self.notified_at.lock().unwrap_or_else(|e| e.into_inner());
        if notified_at.is_some_and(|at| at.elapsed() < BUSY_WITHIN) {
            return false;
        }
        *notified_at = Some(Instant::now());
        drop(notified_at);
        self.notify.notify_one();
        true
    }

    /// Wakes one idle worker for the notifications coalesced on a busy queue.
    fn notified_after_coalescing(&self) {
        *self.notified_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        self.notify.notify_one();
    }

    fn lock_members(&self) -> std::sync::MutexGuard<'_, Members> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update_members(&self, change: impl FnOnce(&mut Members)) {
        let mut members = self.lock_members();
        change(&mut members);
        let wanted = members.count > 0 && members.claiming == 0;
        self.wanted.send_if_modified(|current| {
            let changed = *current != wanted;
            *current = wanted;
            changed
        });
    }
}

impl Drop for QueueWakeup {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One worker's place in its queue's [`QueueWakeup`]: whether it is claiming (it will read
/// again soon without being woken) decides, with the others', whether the process asks for
/// notifications.
pub(super) struct WakeupMember {
    wakeup: Arc<QueueWakeup>,
    claiming: bool,
}

impl WakeupMember {
    /// Says whether this worker will read the queue again soon on its own (true), or waits to
    /// be woken or for a free slot (false).
    pub(super) fn set_claiming(&mut self, claiming: bool) {
        if self.claiming == claiming {
            return;
        }
        self.claiming = claiming;
        self.wakeup.update_members(|members| {
            if claiming {
                members.claiming += 1;
            } else {
                members.claiming -= 1;
            }
        });
    }
}

/// Held by the process's one gathering worker on a queue (see [`WakeupMember::gather`]);
/// another may gather once it is dropped.
pub(super) struct Gathering {
    wakeup: Arc<QueueWakeup>,
}

impl WakeupMember {
    /// Makes this worker the process's one gathering worker on the queue (it reads again after
    /// [`GATHER_FOR`](crate::worker::poll::GATHER_FOR) when its read was not full), unless
    /// another worker is: then `None`, and this one should wait to be woken.
    pub(super) fn gather(&self) -> Option<Gathering> {
        let mut members = self.wakeup.lock_members();
        if members.gathering {
            return None;
        }
        members.gathering = true;
        Some(Gathering {
            wakeup: Arc::clone(&self.wakeup),
        })
    }
}

impl Drop for Gathering {
    fn drop(&mut self) {
        self.wakeup.lock_members().gathering = false;
    }
}

impl Drop for WakeupMember {
    fn drop(&mut self) {
        let claiming = self.claiming;
        self.wakeup.update_members(|members| {
            members.count -= 1;
            if claiming {
                members.claiming -= 1;
            }
        });
    }
}

/// The queue's sink on the client's notifier: on a quiet queue it wakes a worker from the
/// listening task itself; the rest (notifications on a busy queue, reconnects) goes to the
/// queue's wake-up task.
struct FirstHand {
    wakeup: Weak<QueueWakeup>,
    busy: mpsc::UnboundedSender<Signal>,
}

impl Sink for FirstHand {
    fn deliver(&self, signal: Signal) {
        if matches!(signal, Signal::Notified { .. })
            && self
                .wakeup
                .upgrade()
                .is_some_and(|wakeup| wakeup.notified_if_quiet())
        {
            return;
        }
        let _ = self.busy.send(signal);
    }
}

/// What a queue's wake-up task serves: its topic on the client's notifier, the wake-up it
/// feeds, and the workers' wish for notifications.
struct Serving {
    topic: Topic,
    /// What [`FirstHand`] did not handle itself.
    signals: mpsc::UnboundedReceiver<Signal>,
    queue: QueueName,
    wakeup: Weak<QueueWakeup>,
    wanted: watch::Receiver<bool>,
}

/// Listens on the queue's channel and wakes one waiting worker per busy notification (after
/// coalescing), keeping the
/// listening session's request for wake-ups in line with what the workers want, until `stop`.
/// After the notifier reconnects (notifications may have been missed), every idle worker looks
/// once.
async fn serve(mut serving: Serving, stop: CancellationToken) {
    let channel = engine::queue_channel(&serving.queue);
    tokio::select! {
        listening = serving.topic.listen(channel) => if !listening { return },
        () = stop.cancelled() => return,
    }
    let mut requested = false;
    let mut rechecks: Vec<Instant> = Vec::new();
    loop {
        let wanted = *serving.wanted.borrow_and_update();
        if wanted != requested {
            tokio::select! {
                done = serving.topic.request_wakeups(&serving.queue, wanted) => if !done { return },
                () = stop.cancelled() => return,
            }
            requested = wanted;
            rechecks.clear();
            if requested {
                // Tasks whose transaction looked for a request just before this one.
                schedule_rechecks(&mut rechecks);
                if !wake_one(&serving.wakeup) {
                    return;
                }
            }
        }
        let next_recheck = rechecks.last().copied();
        tokio::select! {
            signal = serving.signals.recv() => match signal {
                Some(Signal::Notified { .. }) => {
                    // The queue was busy when it came (a quiet one was woken by the sink).
                    let reconnected = coalesce(&mut serving.signals, &stop).await;
                    let Some(wakeup) = serving.wakeup.upgrade() else {
                        return;
                    };
                    wakeup.notified_after_coalescing();
                    if reconnected && !woken_after_reconnect(&serving, requested, &mut rechecks) {
                        return;
                    }
                }
                Some(Signal::Connected) => {
                    if !woken_after_reconnect(&serving, requested, &mut rechecks) {
                        return;
                    }
                }
                None => return,
            },
            changed = serving.wanted.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = sleep_until_some(next_recheck) => {
                rechecks.pop();
                if !wake_one(&serving.wakeup) {
                    return;
                }
            }
            () = stop.cancelled() => return,
        }
    }
}

/// The rechecks after a request for wake-ups, from now (latest first, so the next is last).
fn schedule_rechecks(rechecks: &mut Vec<Instant>) {
    let now = Instant::now();
    rechecks.clear();
    rechecks.extend(RECHECKS.iter().rev().map(|after| now + *after));
}

/// After the notifier reconnected: every idle worker looks once (notifications were missed),
/// and a request in place again gets its rechecks. False when the wake-up is gone.
fn woken_after_reconnect(serving: &Serving, requested: bool, rechecks: &mut Vec<Instant>) -> bool {
    let Some(wakeup) = serving.wakeup.upgrade() else {
        return false;
    };
    wakeup.notify.notify_waiters();
    if requested {
        schedule_rechecks(rechecks);
    }
    true
}

/// Wakes one idle worker; false when the wake-up is gone (its last worker stopped).
fn wake_one(wakeup: &Weak<QueueWakeup>) -> bool {
    match wakeup.upgrade() {
        Some(wakeup) => {
            wakeup.notify.notify_one();
            true
        }
        None => false,
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Takes in the notifications that arrive within [`COALESCE_FOR`] (they share the wake-up
/// that follows); true when the notifier reconnected meanwhile (the caller then wakes every
/// idle worker).
async fn coalesce(signals: &mut mpsc::UnboundedReceiver<Signal>, stop: &CancellationToken) -> bool {
    let until = Instant::now() + COALESCE_FOR;
    let mut reconnected = false;
    loop {
        tokio::select! {
            signal = signals.recv() => match signal {
                Some(Signal::Notified { .. }) => {}
                Some(Signal::Connected) => reconnected = true,
                None => return reconnected,
            },
            () = tokio::time::sleep_until(until) => return reconnected,
            () = stop.cancelled() => return reconnected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wakeup() -> Arc<QueueWakeup> {
        Arc::new(QueueWakeup {
            notify: Notify::new(),
            stop: CancellationToken::new(),
            members: Mutex::default(),
            notified_at: Mutex::default(),
            wanted: watch::channel(false).0,
        })
    }

    #[test]
    fn one_worker_of_a_process_gathers_at_a_time() {
        let wakeup = wakeup();
        let (first, second) = (wakeup.join(), wakeup.join());

        let gathering = first.gather().expect("nobody gathers: the first may");
        assert!(
            second.gather().is_none(),
            "the first gathers: the second waits"
        );
        assert!(first.gather().is_none(), "not twice, either");

        drop(gathering);
        assert!(
            second.gather().is_some(),
            "the first is done: the second may gather"
        );
    }

    fn notified() -> Signal {
        Signal::Notified {
            channel: "pgflow.q".into(),
            payload: String::new(),
        }
    }

    /// Whether a worker waiting now would be woken at once (a wake-up is stored for it).
    async fn a_worker_is_woken(wakeup: &QueueWakeup) -> bool {
        tokio::time::timeout(Duration::ZERO, wakeup.woken())
            .await
            .is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_queue_is_woken_from_the_listener_and_a_busy_one_coalesces_in_its_task() {
        let wakeup = wakeup();
        let (busy, mut handed_on) = mpsc::unbounded_channel();
        let sink = FirstHand {
            wakeup: Arc::downgrade(&wakeup),
            busy,
        };

        sink.deliver(notified());
        assert!(
            a_worker_is_woken(&wakeup).await,
            "a quiet queue: the listener wakes a worker itself"
        );
        assert!(handed_on.try_recv().is_err(), "and hands nothing on");

        tokio::time::advance(BUSY_WITHIN / 2).await;
        sink.deliver(notified());
        assert!(
            !a_worker_is_woken(&wakeup).await,
            "a busy queue: no wake-up before coalescing"
        );
        assert_eq!(
            handed_on.try_recv().ok(),
            Some(notified()),
            "the notification goes to the queue's task"
        );

        sink.deliver(Signal::Connected);
        assert_eq!(
            handed_on.try_recv().ok(),
            Some(Signal::Connected),
            "a reconnect always goes to the queue's task"
        );

        tokio::time::advance(BUSY_WITHIN).await;
        sink.deliver(notified());
        assert!(
            a_worker_is_woken(&wakeup).await,
            "quiet again: woken at once"
        );
        assert!(handed_on.try_recv().is_err());
    }
}
