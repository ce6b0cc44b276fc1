//! What the workers of one process share, and its one owner: a [`Client`](crate::Client).
//!
//! A client owns, for every worker started on it (and for its own event streams):
//! - one notification listener (`notifier`), for the wake-ups of every queue and the run
//!   events;
//! - the values they share (`SharedValues`): the wake-ups of each queue (with its one
//!   gathering worker), the shared completion calls of each queue and set of supported pairs,
//!   the run-event hub;
//! - the handler durations its workers measured (`durations`), for the dashboard's trends;
//! - the maintenance (stalled-task recovery, lost workers, trend samples, statistics, vacuum,
//!   pruning) and the
//!   firing of cron schedules, each run once for the client while at least one of its workers
//!   runs, with the [`ProcessConfig`] it was made with.
//!
//! Workers started on the same client (`Worker::start_on(flow, &client)`,
//! `WorkerConfig::connection(&client)`) share all of it; a worker started on a URL or a pool
//! gets a client of its own. Nothing here is process-global: two clients share nothing.

mod config;
pub(crate) mod durations;
mod maintenance;
pub(crate) mod notifier;
mod schedules;
mod waits;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio_util::sync::CancellationToken;

use crate::db::{Db, Pooling};
use notifier::Notifier;

pub use config::{
    DEFAULT_ARCHIVE_AFTER, MIN_ARCHIVE_AFTER, Notifications, PRUNE_EVERY, ProcessConfig,
};
#[cfg(feature = "testing")]
pub(crate) use schedules::fire_due_schedules;

/// The state a client shares with the workers started on it. See the [module docs](self).
pub(crate) struct Shared {
    /// The client's pool.
    pub(crate) db: Db,
    /// The process-wide settings.
    pub(crate) config: ProcessConfig,
    /// The client's notification listener, started on first use (`None` inside: the client
    /// listens nowhere).
    notifier: OnceLock<Option<Notifier>>,
    /// What the client's workers and streams share: each queue's wake-ups and completion calls,
    /// the run-event hub.
    pub(crate) values: SharedValues,
    /// Maintenance and schedule firing, while workers run.
    services: Mutex<Services>,
    /// The handler durations its workers measured, until maintenance writes them.
    pub(crate) durations: durations::TaskDurations,
    /// The faults a test planned for its workers' next attempts.
    #[cfg(feature = "testing")]
    pub(crate) faults: crate::faults::Faults,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// How many workers run on the client, and how to stop the services they keep going.
#[derive(Default)]
struct Services {
    workers: usize,
    stop: Option<CancellationToken>,
}

impl Shared {
    pub(crate) fn new(db: Db, config: ProcessConfig) -> Self {
        Self {
            notifier: OnceLock::new(),
            db,
            config,
            values: SharedValues::default(),
            services: Mutex::default(),
            durations: durations::TaskDurations::default(),
            #[cfg(feature = "testing")]
            faults: crate::faults::Faults::default(),
        }
    }

    /// The client's one notification listener, started on first use; `None` when it may not
    /// listen: notifications off, or a transaction-mode pooler without a listen URL (idle
    /// workers then poll and event streams read the state).
    pub(crate) fn notifier(&self) -> Option<&Notifier> {
        self.notifier
            .get_or_init(|| {
                let (options, follow) = match self.config.notifications() {
                    Notifications::SameDatabase if self.db.pooling() == Pooling::Transaction => {
                        tracing::info!(
                            "behind a transaction-mode pooler with no listen_url: idle workers \
                             poll and event streams read the state"
                        );
                        return None;
                    }
                    Notifications::SameDatabase => {
                        let pool = self.db.pool();
                        ((*pool.connect_options()).clone(), Some(pool.clone()))
                    }
                    // A bad URL stops a worker's start (`WorkerError::InvalidListenUrl`).
                    Notifications::Url(url) => (notifier::listen_options(url).ok()?, None),
                    Notifications::Off => return None,
                };
                Some(Notifier::start(options, follow))
            })
            .as_ref()
    }

    /// Counts a running worker in: the first starts the maintenance loop, the loop that ends
    /// timed-out waits and (unless the config says not to) schedule firing; they stop when the
    /// last enlisted worker's guard is dropped.
    pub(crate) fn enlist(self: &Arc<Self>) -> Enlisted {
        let mut services = lock(&self.services);
        services.workers += 1;
        if services.workers == 1 {
            let stop = CancellationToken::new();
            tokio::spawn(maintenance::maintain(Arc::clone(self), stop.clone()));
            tokio::spawn(waits::expire_waits(Arc::clone(self), stop.clone()));
            if self.config.fire_schedules {
                tokio::spawn(schedules::fire_schedules(Arc::clone(self), stop.clone()));
            }
            services.stop = Some(stop);
        }
        Enlisted {
            shared: Arc::clone(self),
        }
    }
}

/// A running worker's place in its client's services; see [`Shared::enlist`].
pub(crate) struct Enlisted {
    shared: Arc<Shared>,
}

impl Drop for Enlisted {
    fn drop(&mut self) {
        let mut services = lock(&self.shared.services);
        services.workers -= 1;
        if services.workers == 0
            && let Some(stop) = services.stop.take()
        {
            stop.cancel();
        }
    }
}

/// Values the client's workers and streams share, each kind under keys of its own (a queue's
/// wake-ups by queue, its completion calls by queue and pairs, the event hub once), kept while
/// someone holds them. The owner knows none of the kinds: the modules that share them do.
#[derive(Default)]
pub(crate) struct SharedValues {
    kinds: Mutex<HashMap<TypeId, Box<dyn Any + Send>>>,
}

impl SharedValues {
    /// The live value of kind `V` at `key`, or a new one from `make` (kept weakly: it goes when
    /// the last holder drops it).
    pub(crate) fn get_or_make<K, V, E>(
        &self,
        key: K,
        make: impl FnOnce() -> Result<Arc<V>, E>,
    ) -> Result<Arc<V>, E>
    where
        K: Eq + Hash + Send + 'static,
        V: Send + Sync + 'static,
    {
        let mut kinds = lock(&self.kinds);
        let values = kinds
            .entry(TypeId::of::<(K, V)>())
            .or_insert_with(|| Box::new(HashMap::<K, Weak<V>>::new()))
            .downcast_mut::<HashMap<K, Weak<V>>>();
        // The entry of `(K, V)` always holds that map; were it not so, the value goes unshared.
        let Some(values) = values else {
            return make();
        };
        values.retain(|_, value| value.strong_count() > 0);
        if let Some(existing) = values.get(&key).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        let value = make()?;
        values.insert(key, Arc::downgrade(&value));
        Ok(value)
    }
}

/// Locks `mutex`, whatever a panicking holder left (the guarded values stay consistent).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's shared state over a pool that never connects (nothing listens on port 1).
    fn shared() -> Arc<Shared> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://nobody@127.0.0.1:1/none")
            .unwrap();
        Arc::new(Shared::new(pool.into(), ProcessConfig::new()))
    }

    fn running(shared: &Shared) -> Option<CancellationToken> {
        lock(&shared.services).stop.clone()
    }

    #[tokio::test]
    async fn the_services_run_from_the_first_enlisted_worker_until_the_last_leaves() {
        let shared = shared();
        assert!(running(&shared).is_none(), "no worker, no services");

        let first = shared.enlist();
        let stop = running(&shared).expect("the first worker starts them");
        let second = shared.enlist();
        drop(first);
        assert!(!stop.is_cancelled(), "a worker is left: the services go on");
        drop(second);
        assert!(
            stop.is_cancelled(),
            "the last worker left: the services the first one started stop (the second joined \
             them rather than starting its own)"
        );
        assert!(running(&shared).is_none());

        let _again = shared.enlist();
        let restarted = running(&shared).expect("a new first worker starts them again");
        assert!(!restarted.is_cancelled());
    }
}
