//! Queue-scoped worker configuration. Retries and timeouts are not here: they belong to
//! flows and steps (in the SQL core).

use std::time::Duration;

use sqlx::PgPool;

use crate::db::Db;

use crate::deployment::FlowQueue;

/// How often, at most, a worker with a [`WorkerSettings::retention`] prunes. Finding ended
/// runs reads the runs table (no index is kept for it on the hot path), so pruning is rare.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Where a worker gets its database connections: a URL (`&str`, `String`), a pool, or a
/// [`Client`](crate::Client)'s pool; all convert with `into()`.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum Connection {
    /// `DATABASE_URL` from the environment (the default).
    #[default]
    FromEnv,
    /// A connection URL.
    Url(String),
    /// An existing pool, direct or behind a transaction-mode pooler (its own size applies;
    /// `max_pg_connections` is ignored).
    Pool(Db),
}

impl From<&str> for Connection {
    fn from(url: &str) -> Self {
        Self::Url(url.to_owned())
    }
}

impl From<String> for Connection {
    fn from(url: String) -> Self {
        Self::Url(url)
    }
}

impl From<PgPool> for Connection {
    fn from(pool: PgPool) -> Self {
        Self::Pool(pool.into())
    }
}

impl From<&PgPool> for Connection {
    fn from(pool: &PgPool) -> Self {
        Self::Pool(pool.into())
    }
}

impl From<Db> for Connection {
    fn from(db: Db) -> Self {
        Self::Pool(db)
    }
}

impl From<&crate::Client> for Connection {
    fn from(client: &crate::Client) -> Self {
        Self::Pool(client.db().clone())
    }
}

/// How idle workers learn that tasks became visible.
///
/// By default they `LISTEN` on a connection of their own to the worker's database (one per
/// queue and process, outside the worker's pool). A transaction-mode pooler such as PgBouncer
/// cannot carry `LISTEN`: the session that listens is handed to other clients between
/// transactions. Behind one, give the listener a direct (or session-mode) URL, or turn
/// notifications off and let idle workers poll every `poll_interval`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notifications {
    /// `LISTEN` on a connection of its own, opened with the worker pool's connect options.
    #[default]
    SameDatabase,
    /// `LISTEN` through this URL: a direct or session-mode connection to the same database.
    Url(String),
    /// No `LISTEN`: idle workers poll every `poll_interval`.
    Off,
}

/// The untyped settings of a worker; [`WorkerConfig`] wraps them with a typed queue.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Handlers running at once. Default 10.
    pub max_concurrent: usize,
    /// Messages read per poll, at most (never more than the free slots). Default 10.
    pub batch_size: usize,
    /// Size of the worker's connection pool. Default 4. The notification listener's connection
    /// is not taken from it (one more per queue and process; see [`Notifications`]).
    pub max_pg_connections: u32,
    /// How idle workers learn of new tasks. Default: `LISTEN` on the worker's database.
    pub notifications: Notifications,
    /// How long an idle worker waits before reading again when no new-message notification
    /// wakes it sooner (notifications wake it at once; this catches delayed retries). Default 1 s.
    pub poll_interval: Duration,
    /// How often the worker reports it is alive and checks whether it was deprecated. Default 5 s.
    pub heartbeat_interval: Duration,
    /// How long a stopping worker waits for in-flight handlers before cancelling them (their
    /// tasks are then recovered as stalled). Default 30 s.
    pub shutdown_grace: Duration,
    /// How often the worker looks for stalled tasks (one worker per database does it at a
    /// time). Default 15 s.
    pub stalled_check_interval: Duration,
    /// How long past its timeout a started task must be before it counts as stalled. Default 30 s.
    pub stalled_grace: Duration,
    /// How often a task may be requeued after stalling before it fails for good. Default 3.
    pub max_requeues: u32,
    /// How long ended runs (with their step states and tasks), archived messages of pgflow's
    /// queues and stopped workers are kept. When set, the maintenance pass deletes what is
    /// older: at the first pass, then at most once every [`PRUNE_EVERY`] (one worker per
    /// database at a time). Default: `None`, everything is kept (prune with `pgflow prune`).
    pub retention: Option<Duration>,
    /// The worker function this worker belongs to. Default: `PGFLOW_WORKER_FUNCTION`, else the
    /// binary's name.
    pub function_name: Option<String>,
    /// Database connection. Default: `DATABASE_URL`.
    pub connection: Connection,
    /// Cron schedules this worker declares at startup (created, or updated when their
    /// definition changed). Default: none.
    pub schedules: Vec<crate::schedule::Schedule>,
    /// Whether this worker fires due schedules (any schedule of the database, declared by any
    /// worker; the SQL core lets one firer start each tick's run). Default `true`.
    pub fire_schedules: bool,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            max_concurrent: 10,
            batch_size: 10,
            max_pg_connections: 4,
            notifications: Notifications::SameDatabase,
            poll_interval: Duration::from_secs(1),
            heartbeat_interval: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(30),
            stalled_check_interval: Duration::from_secs(15),
            stalled_grace: Duration::from_secs(30),
            max_requeues: 3,
            retention: None,
            function_name: None,
            connection: Connection::FromEnv,
            schedules: Vec::new(),
            fire_schedules: true,
        }
    }
}

impl WorkerSettings {
    /// The function name: configured, else `PGFLOW_WORKER_FUNCTION`, else the binary's name.
    pub fn resolved_function_name(&self) -> String {
        if let Some(name) = &self.function_name {
            return name.clone();
        }
        if let Ok(name) = std::env::var("PGFLOW_WORKER_FUNCTION")
            && !name.trim().is_empty()
        {
            return name;
        }
        std::env::current_exe()
            .ok()
            .and_then(|path| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "pgflow-worker".to_owned())
    }
}

/// A worker's configuration: the one queue it polls (a generated `Queue` variant) and its
/// queue-scoped settings.
///
/// ```ignore
/// WorkerConfig::new(triage_v2::Queue::ClassifyThreads).max_concurrent(1).batch_size(5)
/// ```
#[derive(Debug, Clone)]
pub struct WorkerConfig<Q> {
    pub(crate) queue: Q,
    pub(crate) settings: WorkerSettings,
}

impl<Q: FlowQueue> WorkerConfig<Q> {
    /// Defaults for polling `queue`.
    pub fn new(queue: Q) -> Self {
        Self {
            queue,
            settings: WorkerSettings::default(),
        }
    }

    /// The queue.
    pub fn queue(&self) -> Q {
        self.queue
    }

    /// The settings.
    pub fn settings(&self) -> &WorkerSettings {
        &self.settings
    }

    /// Handlers running at once (at least 1).
    #[must_use]
    pub fn max_concurrent(mut self, n: usize) -> Self {
        self.settings.max_concurrent = n.max(1);
        self
    }

    /// Messages read per poll (at least 1).
    #[must_use]
    pub fn batch_size(mut self, n: usize) -> Self {
        self.settings.batch_size = n.max(1);
        self
    }

    /// Connection pool size (at least 1).
    #[must_use]
    pub fn max_pg_connections(mut self, n: u32) -> Self {
        self.settings.max_pg_connections = n.max(1);
        self
    }

    /// `LISTEN` for new tasks through `url` (a direct or session-mode connection to the same
    /// database) while the worker's pool goes through a transaction-mode pooler.
    #[must_use]
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.settings.notifications = Notifications::Url(url.into());
        self
    }

    /// No `LISTEN`: idle workers poll every `poll_interval` (behind a transaction-mode pooler
    /// with no direct URL for the listener).
    #[must_use]
    pub fn without_notifications(mut self) -> Self {
        self.settings.notifications = Notifications::Off;
        self
    }

    /// Idle wait between reads when no notification arrives.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.settings.poll_interval = interval;
        self
    }

    /// Has no effect: a claim takes its messages off the queue (PGMQ's `pop`) in the
    /// transaction that claims their tasks, so no message is ever hidden and waiting for one.
    #[deprecated(note = "claims pop their messages; there is no visibility timeout to set")]
    #[must_use]
    pub fn visibility_timeout(self, timeout: Duration) -> Self {
        let _ = timeout;
        self
    }

    /// Heartbeat interval.
    #[must_use]
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.settings.heartbeat_interval = interval;
        self
    }

    /// How long shutdown waits for in-flight handlers.
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.settings.shutdown_grace = grace;
        self
    }

    /// How often to look for stalled tasks.
    #[must_use]
    pub fn stalled_check_interval(mut self, interval: Duration) -> Self {
        self.settings.stalled_check_interval = interval;
        self
    }

    /// How long past its timeout a task counts as stalled.
    #[must_use]
    pub fn stalled_grace(mut self, grace: Duration) -> Self {
        self.settings.stalled_grace = grace;
        self
    }

    /// How often a stalled task is requeued before it fails.
    #[must_use]
    pub fn max_requeues(mut self, n: u32) -> Self {
        self.settings.max_requeues = n;
        self
    }

    /// Keep ended runs, archived messages and stopped workers this long, then delete them
    /// (see [`WorkerSettings::retention`]).
    #[must_use]
    pub fn retention(mut self, keep: Duration) -> Self {
        self.settings.retention = Some(keep);
        self
    }

    /// Declares a cron schedule at startup (see [`Schedule`](crate::schedule::Schedule)): an
    /// invalid one stops the start with [`WorkerError::InvalidSchedule`](crate::WorkerError).
    #[must_use]
    pub fn schedule(mut self, schedule: crate::schedule::Schedule) -> Self {
        self.settings.schedules.push(schedule);
        self
    }

    /// Whether this worker fires due schedules (default `true`).
    #[must_use]
    pub fn fire_schedules(mut self, fire: bool) -> Self {
        self.settings.fire_schedules = fire;
        self
    }

    /// The worker function name.
    #[must_use]
    pub fn function_name(mut self, name: impl Into<String>) -> Self {
        self.settings.function_name = Some(name.into());
        self
    }

    /// Where to connect: a URL, a pool or a [`Client`](crate::Client) (whose pool the worker
    /// shares). Default: `DATABASE_URL`.
    #[must_use]
    pub fn connection(mut self, connection: impl Into<Connection>) -> Self {
        self.settings.connection = connection.into();
        self
    }

    /// Connect with this URL (`?pgbouncer=true` when it goes through a transaction-mode
    /// pooler; pair it with [`listen_url`](Self::listen_url) or
    /// [`without_notifications`](Self::without_notifications)).
    #[must_use]
    pub fn database_url(mut self, url: impl Into<String>) -> Self {
        self.settings.connection = Connection::Url(url.into());
        self
    }

    /// Use this pool: a `PgPool` (direct) or a [`Db`] (which says whether it goes through a
    /// transaction-mode pooler).
    #[must_use]
    pub fn pool(mut self, pool: impl Into<Db>) -> Self {
        self.settings.connection = Connection::Pool(pool.into());
        self
    }
}
