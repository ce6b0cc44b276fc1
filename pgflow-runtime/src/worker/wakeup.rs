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
//! The listener reconnects on its own; while it is down, and after it comes back (when
//! notifications may have been missed), workers fall back to their poll interval and are all
//! woken once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The longest pause between attempts to (re)connect the listener.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);

/// One queue's wake-ups in this process; dropped (and its listener stopped) with the last
/// worker that holds it.
pub struct QueueWakeup {
    notify: Notify,
    stop: CancellationToken,
}

impl QueueWakeup {
    /// The shared wake-up of `channel` on the database `pool` points at, started on first use.
    pub fn subscribe(pool: &PgPool, channel: &str) -> Arc<Self> {
        let key = format!("{}\u{0}{channel}", database_identity(pool));
        let mut registry = registry().lock().unwrap_or_else(|e| e.into_inner());
        registry.retain(|_, wakeup| wakeup.strong_count() > 0);
        if let Some(existing) = registry.get(&key).and_then(Weak::upgrade) {
            return existing;
        }
        let wakeup = Arc::new(Self {
            notify: Notify::new(),
            stop: CancellationToken::new(),
        });
        registry.insert(key, Arc::downgrade(&wakeup));
        tokio::spawn(listen(
            pool.clone(),
            channel.to_owned(),
            Arc::downgrade(&wakeup),
            wakeup.stop.clone(),
        ));
        wakeup
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
fn database_identity(pool: &PgPool) -> String {
    let options = pool.connect_options();
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
        loop {
            let received = tokio::select! {
                received = listener.try_recv() => received,
                () = stop.cancelled() => return,
            };
            match received {
                Ok(Some(_)) => match wakeup.upgrade() {
                    Some(wakeup) => wakeup.notify.notify_one(),
                    None => return,
                },
                // The connection was lost (`None`) or failed: reconnect.
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(channel = channel.as_str(), %error, "listening failed; reconnecting");
                    break;
                }
            }
        }
    }
}

async fn connect(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}
