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
//! scans the queue's in-flight messages. Here one listener per (database, queue) and process
//! wakes **one** idle worker per notification; a worker whose claim came back full wakes the
//! next one ([`QueueWakeup::pass_on`]), so a burst still reaches every worker, one claim at a
//! time.
//!
//! A worker whose read found tasks, but fewer than it asked for, reads again after
//! [`GATHER_FOR`](crate::worker::poll::GATHER_FOR) while it is the process's one gathering
//! worker on the queue ([`WakeupMember::gather`]); any other goes idle until work is passed on
//! to it. One worker then reads what several starts left, instead of several each reading a
//! piece of it: fewer, fuller claims, and fewer completion calls after them.
//!
//! Under load the listener also coalesces: a notification that comes within [`BUSY_WITHIN`] of
//! the previous wake-up is held for [`COALESCE_FOR`], and every notification arriving meanwhile
//! rides on the same wake-up. At low load notifications are further apart than [`BUSY_WITHIN`]
//! and wake a worker at once.
//!
//! The listener holds a connection of its own, outside the workers' pools (so a worker with
//! `max_pg_connections(1)` keeps its one connection for work), opened with the pool's connect
//! options or a URL of its own ([`Notifications`]). It reconnects on its own; while it is
//! down, and after it comes back (when notifications may have been missed), workers fall back
//! to their poll interval and are all woken once. With notifications off there is no listener
//! and no request: idle workers poll, and still pass work on to each other.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::db::{Db, Pooling};
use crate::engine;
use crate::names::QueueName;
use crate::process::{Notifications, Shared, shared_entry};
use crate::worker::error::WorkerError;

/// A notification this soon after the previous wake-up means the queue is busy: it is held for
/// [`COALESCE_FOR`] so that the ones behind it share its wake-up.
pub const BUSY_WITHIN: Duration = Duration::from_millis(25);

/// How long a notification on a busy queue is held before it wakes a worker.
pub const COALESCE_FOR: Duration = Duration::from_millis(4);

/// After a request for wake-ups, one idle worker looks again at once and after each of these
/// (from the request): tasks whose transaction looked for requests just before it and committed
/// after the last empty claim. A transaction that stays open longer between its start and its
/// commit waits for the next notification or the poll interval.
pub const RECHECKS: [Duration; 2] = [Duration::from_millis(10), Duration::from_millis(100)];

/// The longest pause between attempts to (re)connect the listener.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);

/// One queue's wake-ups in this process; dropped (and its listener stopped) with the last
/// worker that holds it.
pub struct QueueWakeup {
    notify: Notify,
    stop: CancellationToken,
    members: Mutex<Members>,
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
    /// The wake-up of `queue` that `shared`'s workers share, started on first use. The
    /// process config says where its listener connects, if anywhere. Behind a transaction-mode
    /// pooler a `LISTEN` would hold no session, so without a [`Notifications::Url`] there is no
    /// listener and idle workers poll.
    pub fn subscribe(shared: &Shared, queue: &QueueName) -> Result<Arc<Self>, WorkerError> {
        shared_entry(&shared.wakeups, queue.clone(), || {
            Self::start(&shared.db, queue, shared.config.notifications())
        })
    }

    /// A new wake-up of `queue`, with its listener when `notifications` allow one.
    fn start(
        db: &Db,
        queue: &QueueName,
        notifications: &Notifications,
    ) -> Result<Arc<Self>, WorkerError> {
        let channel = engine::queue_channel(queue);
        let pool = db.pool();
        let listen_options = match notifications {
            Notifications::SameDatabase if db.pooling() == Pooling::Transaction => {
                tracing::info!(
                    queue = queue.as_str(),
                    "behind a transaction-mode pooler with no listen_url: idle workers poll"
                );
                None
            }
            Notifications::SameDatabase => Some((*pool.connect_options()).clone()),
            Notifications::Url(url) => Some(listen_options(url)?),
            Notifications::Off => None,
        };
        let (wanted, wanted_changes) = watch::channel(false);
        let wakeup = Arc::new(Self {
            notify: Notify::new(),
            stop: CancellationToken::new(),
            members: Mutex::default(),
            wanted,
        });
        if let Some(options) = listen_options {
            // A pool of one, made lazily: the listener's connection is its own, never one of
            // the workers'.
            let listener_pool = PgPoolOptions::new()
                .max_connections(1)
                .min_connections(0)
                .connect_lazy_with(options);
            tokio::spawn(listen(
                Listening {
                    pool: listener_pool,
                    queue: queue.clone(),
                    channel,
                    wakeup: Arc::downgrade(&wakeup),
                    wanted: wanted_changes,
                },
                wakeup.stop.clone(),
            ));
        }
        Ok(wakeup)
    }

    /// Counts a worker in (not claiming until it says so); it counts out when the returned
    /// member is dropped.
    pub fn join(self: &Arc<Self>) -> WakeupMember {
        self.update_members(|members| members.count += 1);
        WakeupMember {
            wakeup: Arc::clone(self),
            claiming: false,
        }
    }

    /// Waits until this worker is woken: a notification arrived, another worker passed work
    /// on, the listener (re)connected, or a request for wake-ups was just made.
    pub async fn woken(&self) {
        self.notify.notified().await;
    }

    /// Wakes one more idle worker: the caller's claim came back full, so more work is likely
    /// waiting.
    pub fn pass_on(&self) {
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
pub struct WakeupMember {
    wakeup: Arc<QueueWakeup>,
    claiming: bool,
}

impl WakeupMember {
    /// Says whether this worker will read the queue again soon on its own (true), or waits to
    /// be woken or for a free slot (false).
    pub fn set_claiming(&mut self, claiming: bool) {
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
pub struct Gathering {
    wakeup: Arc<QueueWakeup>,
}

impl WakeupMember {
    /// Makes this worker the process's one gathering worker on the queue (it reads again after
    /// [`GATHER_FOR`](crate::worker::poll::GATHER_FOR) when its read was not full), unless
    /// another worker is: then `None`, and this one should wait to be woken.
    pub fn gather(&self) -> Option<Gathering> {
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

/// What a listener serves: its queue and channel, the wake-up it feeds, and the workers' wish
/// for notifications.
struct Listening {
    pool: PgPool,
    queue: QueueName,
    channel: String,
    wakeup: Weak<QueueWakeup>,
    wanted: watch::Receiver<bool>,
}

/// Listens on the queue's channel and wakes one waiting worker per notification, keeping its
/// session's request for wake-ups in line with what the workers want, until `stop`.
async fn listen(mut listening: Listening, stop: CancellationToken) {
    let mut delay = Duration::from_millis(50);
    loop {
        let connected = tokio::select! {
            connected = connect(&listening.pool, &listening.channel) => connected,
            () = stop.cancelled() => return,
        };
        let mut listener = match connected {
            Ok(listener) => listener,
            Err(error) => {
                tracing::warn!(
                    queue = listening.queue.as_str(),
                    %error,
                    retry_in_ms = delay.as_millis() as u64,
                    "cannot listen for new tasks; workers poll until it recovers"
                );
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = stop.cancelled() => return,
                }
                delay = (delay * 2).min(MAX_RECONNECT_DELAY);
                continue;
            }
        };
        delay = Duration::from_millis(50);
        // Notifications may have been missed while not listening: every idle worker looks once.
        match listening.wakeup.upgrade() {
            Some(wakeup) => wakeup.notify.notify_waiters(),
            None => return,
        }
        match serve(&mut listening, &mut listener, &stop).await {
            Served::Stopped => return,
            Served::Lost => {}
        }
    }
}

/// How serving one listening session ended.
enum Served {
    Stopped,
    Lost,
}

/// Serves one listening session: wakes workers on notifications and rechecks, and requests or
/// withdraws wake-ups as the workers want.
async fn serve(
    listening: &mut Listening,
    listener: &mut PgListener,
    stop: &CancellationToken,
) -> Served {
    let queue = listening.queue.as_str();
    // A new session holds no request.
    let mut requested = false;
    let mut rechecks: Vec<tokio::time::Instant> = Vec::new();
    let mut last_wake: Option<Instant> = None;
    loop {
        let wanted = *listening.wanted.borrow_and_update();
        if wanted != requested {
            let changed = if wanted {
                engine::request_wakeups(&mut *listener, &listening.queue).await
            } else {
                engine::withdraw_wakeups(&mut *listener, &listening.queue)
                    .await
                    .map(drop)
            };
            if let Err(error) = changed {
                tracing::warn!(queue, %error, "requesting wake-ups failed; reconnecting");
                return Served::Lost;
            }
            requested = wanted;
            rechecks.clear();
            if requested {
                // Tasks whose transaction looked for a request just before this one.
                let now = tokio::time::Instant::now();
                rechecks.extend(RECHECKS.iter().rev().map(|after| now + *after));
                if !wake_one(&listening.wakeup) {
                    return Served::Stopped;
                }
            }
        }
        let next_recheck = rechecks.last().copied();
        tokio::select! {
            received = listener.try_recv() => {
                let lost = match received {
                    Ok(Some(_)) => {
                        let busy = last_wake.is_some_and(|at| at.elapsed() < BUSY_WITHIN);
                        let lost = busy && coalesce(listener, &listening.channel, stop).await;
                        last_wake = Some(Instant::now());
                        if !wake_one(&listening.wakeup) {
                            return Served::Stopped;
                        }
                        lost
                    }
                    // The connection was lost (`None`) or failed.
                    Ok(None) => true,
                    Err(error) => {
                        tracing::warn!(queue, %error, "listening failed; reconnecting");
                        true
                    }
                };
                if lost {
                    return Served::Lost;
                }
            }
            changed = listening.wanted.changed() => {
                if changed.is_err() {
                    return Served::Stopped;
                }
            }
            () = sleep_until_some(next_recheck) => {
                rechecks.pop();
                if !wake_one(&listening.wakeup) {
                    return Served::Stopped;
                }
            }
            () = stop.cancelled() => return Served::Stopped,
        }
    }
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
async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Takes in the notifications that arrive within [`COALESCE_FOR`] (they share the wake-up
/// that follows); true when the connection was lost meanwhile (the caller still wakes a worker,
/// then reconnects).
async fn coalesce(listener: &mut PgListener, channel: &str, stop: &CancellationToken) -> bool {
    let until = tokio::time::Instant::now() + COALESCE_FOR;
    loop {
        tokio::select! {
            received = listener.try_recv() => match received {
                Ok(Some(_)) => {}
                Ok(None) => return true,
                Err(error) => {
                    tracing::warn!(channel, %error, "listening failed; reconnecting");
                    return true;
                }
            },
            () = tokio::time::sleep_until(until) => return false,
            () = stop.cancelled() => return false,
        }
    }
}

async fn connect(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}

/// The connect options of a `listen_url`: it must reach Postgres directly (or through a
/// session-mode pooler), since a `LISTEN` lasts as long as its session.
pub(crate) fn listen_options(url: &str) -> Result<PgConnectOptions, WorkerError> {
    let (options, pooling) = crate::connect::parse_url(url)
        .map_err(|source| WorkerError::InvalidListenUrl { source })?;
    if pooling == Pooling::Transaction {
        return Err(WorkerError::InvalidListenUrl {
            source: sqlx::Error::Configuration(
                "a listen URL must not go through a transaction-mode pooler (it says \
                 `pgbouncer=true`): LISTEN needs a session; give the database's direct URL"
                    .into(),
            ),
        });
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wakeup() -> Arc<QueueWakeup> {
        Arc::new(QueueWakeup {
            notify: Notify::new(),
            stop: CancellationToken::new(),
            members: Mutex::default(),
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
}
