//! Wake-ups for idle workers, shared by every worker of one process that polls the same queue
//! of the same database.
//!
//! pgflow sends `pg_notify('pgflow.<queue>')` when tasks become visible. If every worker held
//! its own `LISTEN`, each notification would wake all idle workers of the queue at once; all
//! but one would then claim nothing, and each of those empty claims still scans the queue's
//! in-flight messages. Here one listener per (database, queue) and process wakes **one** idle
//! worker per notification; a worker whose claim came back full wakes the next one
//! ([`QueueWakeup::pass_on`]), so a burst still reaches every worker, one claim at a time.
//!
//! Under load the listener also coalesces: a notification that comes within [`BUSY_WITHIN`] of
//! the previous wake-up is held for [`COALESCE_FOR`], and every notification arriving meanwhile
//! rides on the same wake-up. One claim then takes the tasks of several starts instead of one
//! claim (and one completion) per task, which is where throughput went when many workers
//! shared a queue that runs were started into one at a time (BENCHMARKS.md, per-call method).
//! At low load notifications are further apart than [`BUSY_WITHIN`] and wake a worker at once.
//!
//! The listener holds a connection of its own, outside the workers' pools (so a worker with
//! `max_pg_connections(1)` keeps its one connection for work), opened with the pool's connect
//! options or a URL of its own ([`Notifications`]). It reconnects on its own; while it is
//! down, and after it comes back (when notifications may have been missed), workers fall back
//! to their poll interval and are all woken once. With notifications off there is no listener:
//! workers poll, and still pass work on to each other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::db::{Db, Pooling};
use crate::worker::config::Notifications;
use crate::worker::error::WorkerError;

/// A notification this soon after the previous wake-up means the queue is busy: it is held for
/// [`COALESCE_FOR`] so that the ones behind it share its wake-up.
pub const BUSY_WITHIN: Duration = Duration::from_millis(25);

/// How long a notification on a busy queue is held before it wakes a worker.
pub const COALESCE_FOR: Duration = Duration::from_millis(4);

/// The longest pause between attempts to (re)connect the listener.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);

/// One queue's wake-ups in this process; dropped (and its listener stopped) with the last
/// worker that holds it.
pub struct QueueWakeup {
    notify: Notify,
    stop: CancellationToken,
}

impl QueueWakeup {
    /// The shared wake-up of `channel` on the database `db` points at, started on first use;
    /// `notifications` says where its listener connects, if anywhere. Behind a
    /// transaction-mode pooler a `LISTEN` would hold no session, so without a
    /// [`Notifications::Url`] there is no listener and idle workers poll.
    pub fn subscribe(
        db: &Db,
        channel: &str,
        notifications: &Notifications,
    ) -> Result<Arc<Self>, WorkerError> {
        let pool = db.pool();
        let listen_options = match notifications {
            Notifications::SameDatabase if db.pooling() == Pooling::Transaction => {
                tracing::info!(
                    channel,
                    "behind a transaction-mode pooler with no listen_url: idle workers poll"
                );
                None
            }
            Notifications::SameDatabase => Some((*pool.connect_options()).clone()),
            Notifications::Url(url) => Some(listen_options(url)?),
            Notifications::Off => None,
        };
        let listener_identity = listen_options
            .as_ref()
            .map_or_else(|| "no listener".to_owned(), database_identity);
        let key = format!(
            "{}\u{0}{listener_identity}\u{0}{channel}",
            database_identity(&pool.connect_options())
        );
        let mut registry = registry().lock().unwrap_or_else(|e| e.into_inner());
        registry.retain(|_, wakeup| wakeup.strong_count() > 0);
        if let Some(existing) = registry.get(&key).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        let wakeup = Arc::new(Self {
            notify: Notify::new(),
            stop: CancellationToken::new(),
        });
        registry.insert(key, Arc::downgrade(&wakeup));
        if let Some(options) = listen_options {
            // A pool of one, made lazily: the listener's connection is its own, never one of
            // the workers'.
            let listener_pool = PgPoolOptions::new()
                .max_connections(1)
                .min_connections(0)
                .connect_lazy_with(options);
            tokio::spawn(listen(
                listener_pool,
                channel.to_owned(),
                Arc::downgrade(&wakeup),
                wakeup.stop.clone(),
            ));
        }
        Ok(wakeup)
    }

    /// Waits until this worker is woken: a notification arrived, another worker passed work
    /// on, or the listener (re)connected.
    pub async fn woken(&self) {
        self.notify.notified().await;
    }

    /// Wakes one more idle worker: the caller's claim came back full, so more work is likely
    /// waiting.
    pub fn pass_on(&self) {
        self.notify.notify_one();
    }
}

impl Drop for QueueWakeup {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn registry() -> &'static Mutex<HashMap<String, Weak<QueueWakeup>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Weak<QueueWakeup>>>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

/// Host, port, user and database: pools that reach the same database share a listener.
fn database_identity(options: &PgConnectOptions) -> String {
    format!(
        "{}:{}/{}@{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or_default(),
        options.get_username()
    )
}

/// Listens on `channel` and wakes one waiting worker per notification, until `stop`.
async fn listen(pool: PgPool, channel: String, wakeup: Weak<QueueWakeup>, stop: CancellationToken) {
    let mut delay = Duration::from_millis(50);
    loop {
        let connected = tokio::select! {
            connected = connect(&pool, &channel) => connected,
            () = stop.cancelled() => return,
        };
        let mut listener = match connected {
            Ok(listener) => listener,
            Err(error) => {
                tracing::warn!(
                    channel = channel.as_str(),
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
        match wakeup.upgrade() {
            Some(wakeup) => wakeup.notify.notify_waiters(),
            None => return,
        }
        let mut last_wake: Option<Instant> = None;
        loop {
            let received = tokio::select! {
                received = listener.try_recv() => received,
                () = stop.cancelled() => return,
            };
            let lost = match received {
                Ok(Some(_)) => {
                    let busy = last_wake.is_some_and(|at| at.elapsed() < BUSY_WITHIN);
                    let lost = busy && coalesce(&mut listener, &channel, &stop).await;
                    last_wake = Some(Instant::now());
                    match wakeup.upgrade() {
                        Some(wakeup) => wakeup.notify.notify_one(),
                        None => return,
                    }
                    lost
                }
                // The connection was lost (`None`) or failed.
                Ok(None) => true,
                Err(error) => {
                    tracing::warn!(channel = channel.as_str(), %error, "listening failed; reconnecting");
                    true
                }
            };
            if lost {
                break;
            }
        }
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
