//! Queue-scoped worker configuration. Retries and timeouts are not here: they belong to
//! flows and steps (in the SQL core); what the process's workers share (notifications,
//! maintenance, schedules) is in [`ProcessConfig`](crate::ProcessConfig), on their client.

use std::time::Duration;

use sqlx::PgPool;

use crate::db::Db;

use crate::deployment::FlowQueue;

/// Where a worker gets its database connections: a [`Client`](crate::Client) (whose pool and
/// process services it shares with the client's other workers), a URL (`&str`, `String`) or a
/// pool; all convert with `into()`. A worker started on a URL or a pool gets a client of its own
/// with the default [`ProcessConfig`](crate::ProcessConfig).
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
    /// A client: its pool, and what its workers share.
    Client(crate::Client),
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
        Self::Client(client.clone())
    }
}

impl From<crate::Client> for Connection {
    fn from(client: crate::Client) -> Self {
        Self::Client(client)
    }
}

/// The untyped settings of a worker; [`WorkerConfig`] wraps them with a typed queue.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Handlers running at once. Default 10.
    pub max_concurrent: usize,
    /// Messages read per poll, at most (never more than the free slots). Default 10.
    pub batch_size: usize,
    /// Size of the worker's connection pool when it connects through a URL. Default 4. The
    /// notification listener's connection is not taken from it.
    pub max_pg_connections: u32,
    /// How long an idle worker waits before reading again when no new-message notification
    /// wakes it sooner (notifications wake it at once; this catches delayed retries). Default 1 s.
    pub poll_interval: Duration,
    /// How often the worker reports it is alive and checks whether it was deprecated. Default 5 s.
    pub heartbeat_interval: Duration,
    /// How long a stopping worker waits for in-flight handlers before cancelling them (their
    /// tasks are then recovered as stalled). Default 30 s.
    pub shutdown_grace: Duration,
    /// The worker function this worker belongs to. Default: `PGFLOW_WORKER_FUNCTION`, else the
    /// binary's name.
    pub function_name: Option<String>,
    /// Database connection. Default: `DATABASE_URL`.
    pub connection: Connection,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            max_concurrent: 10,
            batch_size: 10,
            max_pg_connections: 4,
            poll_interval: Duration::from_secs(1),
            heartbeat_interval: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(30),
            function_name: None,
            connection: Connection::FromEnv,
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
/// ```
/// # #[pgflow::flow(slug = "triage_v2", input = String)]
/// # mod triage_v2 {
/// #     #[step(queue = "classify_threads")]
/// #     async fn classify(input: String) -> Result<usize, String> { Ok(input.len()) }
/// # }
/// # fn main() {
/// use pgflow::WorkerConfig;
///
/// let config = WorkerConfig::new(triage_v2::Queue::ClassifyThreads)
///     .max_concurrent(1)
///     .batch_size(5);
/// # let _ = config; }
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

    /// Idle wait between reads when no notification arrives.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.settings.poll_interval = interval;
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

    /// The worker function name.
    #[must_use]
    pub fn function_name(mut self, name: impl Into<String>) -> Self {
        self.settings.function_name = Some(name.into());
        self
    }

    /// Where to connect: a [`Client`](crate::Client) (the worker shares its pool, its
    /// notification listener, its completion calls and its maintenance with the client's other
    /// workers), a URL or a pool (a client of the worker's own). Default: `DATABASE_URL`.
    #[must_use]
    pub fn connection(mut self, connection: impl Into<Connection>) -> Self {
        self.settings.connection = connection.into();
        self
    }

    /// Connect with this URL (`?pgbouncer=true` when it goes through a transaction-mode
    /// pooler: idle workers then poll; for notifications through a direct URL, start the worker
    /// on a [`Client`](crate::Client) whose [`ProcessConfig::listen_url`](crate::ProcessConfig::listen_url) names it).
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
