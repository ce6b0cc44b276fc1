//! Settings whose effect is per process (or per database), not per queue: where the process
//! listens for notifications, and the maintenance its workers do together. A queue's own
//! settings (concurrency, batch, poll interval, shutdown grace) are in
//! [`WorkerConfig`](crate::WorkerConfig); two queues of one process cannot disagree on these.

use std::time::Duration;

use crate::schedule::Schedule;

/// How often, at most, a process with a [`ProcessConfig::retention`] prunes. Finding ended runs
/// reads the runs table (no index is kept for it on the hot path), so pruning is rare.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// How long after its end a run moves into the history by default (see
/// [`ProcessConfig::archive_after`]).
pub const DEFAULT_ARCHIVE_AFTER: Duration = Duration::from_secs(3600);

/// The shortest wait before a run is archived (see [`ProcessConfig::archive_after`]).
pub const MIN_ARCHIVE_AFTER: Duration = Duration::from_secs(900);

/// How the process's idle workers learn that tasks became visible.
///
/// By default the process `LISTEN`s on one connection of its own to its database (outside the
/// pool). A transaction-mode pooler such as PgBouncer cannot carry `LISTEN`: the session that
/// listens is handed to other clients between transactions. Behind one, give the listener a
/// direct (or session-mode) URL, or turn notifications off and let idle workers poll every
/// `poll_interval`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notifications {
    /// `LISTEN` on a connection of its own, opened with the pool's connect options.
    #[default]
    SameDatabase,
    /// `LISTEN` through this URL: a direct or session-mode connection to the same database.
    Url(String),
    /// No `LISTEN`: idle workers poll every `poll_interval`.
    Off,
}

/// The settings a [`Client`](crate::Client) applies to everything the workers started on it
/// share: the notification listener, stalled-task recovery, pruning and cron schedules. Each
/// runs once per client, however many queues its workers poll.
///
/// ```no_run
/// # async fn demo() -> Result<(), pgflow::EngineError> {
/// use std::time::Duration;
/// use pgflow::{Client, ProcessConfig};
///
/// let config = ProcessConfig::new()
///     .retention(Duration::from_secs(7 * 24 * 3600))
///     .stalled_grace(Duration::from_secs(60));
/// let client = Client::connect_with("postgres://app@db.internal/app", config).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    pub(crate) notifications: Notifications,
    pub(crate) stalled_check_interval: Duration,
    pub(crate) stalled_grace: Duration,
    pub(crate) max_requeues: u32,
    pub(crate) retention: Option<Duration>,
    pub(crate) archive_after: Duration,
    pub(crate) schedules: Vec<Schedule>,
    pub(crate) fire_schedules: bool,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        Self {
            notifications: Notifications::SameDatabase,
            stalled_check_interval: Duration::from_secs(15),
            stalled_grace: Duration::from_secs(30),
            max_requeues: 3,
            retention: None,
            archive_after: DEFAULT_ARCHIVE_AFTER,
            schedules: Vec::new(),
            fire_schedules: true,
        }
    }
}

impl ProcessConfig {
    /// The defaults: `LISTEN` on the pool's database, a stalled-task sweep every 15 s with a
    /// grace of 30 s and 3 requeues, no retention, no schedules, firing due schedules.
    pub fn new() -> Self {
        Self::default()
    }

    /// How idle workers learn of new tasks (see [`Notifications`]).
    pub fn notifications(&self) -> &Notifications {
        &self.notifications
    }

    /// `LISTEN` for new tasks through `url` (a direct or session-mode connection to the same
    /// database) while the pool goes through a transaction-mode pooler.
    #[must_use]
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.notifications = Notifications::Url(url.into());
        self
    }

    /// No `LISTEN`: idle workers poll every `poll_interval` (behind a transaction-mode pooler
    /// with no direct URL for the listener).
    #[must_use]
    pub fn without_notifications(mut self) -> Self {
        self.notifications = Notifications::Off;
        self
    }

    /// How often the process looks for stalled tasks and lost workers (one process per
    /// database does it at a time). Default 15 s.
    #[must_use]
    pub fn stalled_check_interval(mut self, interval: Duration) -> Self {
        self.stalled_check_interval = interval;
        self
    }

    /// How long past its timeout a started task must be before it counts as stalled. Default
    /// 30 s.
    #[must_use]
    pub fn stalled_grace(mut self, grace: Duration) -> Self {
        self.stalled_grace = grace;
        self
    }

    /// How often a task may be requeued after stalling before it fails for good. Default 3.
    #[must_use]
    pub fn max_requeues(mut self, n: u32) -> Self {
        self.max_requeues = n;
        self
    }

    /// Keep ended runs (with their step states and tasks), archived messages of pgflow's queues
    /// and stopped workers this long, then delete them: at the first maintenance pass, then at
    /// most once every [`PRUNE_EVERY`] (one process per database at a time). Default: kept
    /// (prune with `pgflow prune`). Pruning needs the `pgflow_operator` role.
    #[must_use]
    pub fn retention(mut self, keep: Duration) -> Self {
        self.retention = Some(keep);
        self
    }

    /// How long after its end a run moves from the live tables into the history, which is
    /// partitioned by the day runs ended so that [`retention`](Self::retention) drops whole
    /// days (one process per database moves them, at each maintenance pass). Readers find a run
    /// in either place; retrying or resuming an archived run brings it back first. Default one
    /// hour; at least 15 minutes (a shorter value counts as 15 minutes: the dashboard's trends
    /// count the last minutes' runs from the live tables).
    #[must_use]
    pub fn archive_after(mut self, after: Duration) -> Self {
        self.archive_after = after.max(MIN_ARCHIVE_AFTER);
        self
    }

    /// Declares a cron schedule at each worker's startup (see [`Schedule`]): created, or
    /// updated when its definition changed. An invalid one stops the worker's start with
    /// [`WorkerError::InvalidSchedule`](crate::WorkerError).
    #[must_use]
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedules.push(schedule);
        self
    }

    /// Whether the process fires due schedules while it runs workers (any schedule of the
    /// database, declared by any process; the SQL core lets one firer start each tick's run).
    /// Default `true`.
    #[must_use]
    pub fn fire_schedules(mut self, fire: bool) -> Self {
        self.fire_schedules = fire;
        self
    }
}
