//! A test kit for your own flows (feature `testing`): a throwaway database per test, workers
//! in the test's process, a run driven to its end with its typed output and step states,
//! faults planned for a step's next attempts, and a clock the test moves forward, so that a
//! retry an hour away, a delayed start, a cron tick or a stalled task's recovery happen at once.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use pgflow::testing::TestEnv;
//!
//! #[pgflow::flow(slug = "charge_v1", input = u32)]
//! mod charge_v1 {
//!     #[step(max_attempts = 3, base_delay = 3600)]
//!     pub async fn charge(input: u32) -> Result<u32, String> {
//!         Ok(input * 100)
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let env = TestEnv::new().await?;
//! env.start_workers(charge_v1::deployment()).await?;
//! // The first attempt fails; the retry is due an hour later.
//! env.faults().fail::<charge_v1::Flow>("charge", "card declined", 1)?;
//!
//! let run = charge_v1::start(env.client(), &7).await?;
//! let finished = env.run_to_end(&run).await?; // skips the hour: well under a second
//! assert_eq!(finished.output()?.charge, 700);
//! assert_eq!(finished.step("charge").and_then(|s| s.max_attempt), Some(2));
//! // The hour, less the real time between the failure and the skip.
//! assert!(finished.time_skipped() > Duration::from_secs(3590));
//! env.close().await?;
//! # Ok(()) }
//! ```
//!
//! # The clock
//!
//! Every time the engine records or compares (a task's start, a heartbeat, a retry's or a
//! start's due time, a schedule's next tick, a wait's deadline, a debounce window) reads one SQL
//! function, `pgflow.clock()`. In a production database it is `now()`, inlined into every
//! query. In a [`TestEnv`]'s database only, it is replaced by `now()` plus a lead that
//! [`TestEnv::advance`] moves forward; the engine runs the same SQL as in production, on a later
//! time. PGMQ keeps its messages' visibility on the server's own clock, so an advance moves
//! them back by the same amount. The test's live workers and event streams count as having
//! kept their heartbeats and subscriptions fresh while the time passed.
//!
//! After moving the clock, [`advance`](TestEnv::advance) does at once what the process's
//! loops would do within a second or so: recovers stalled tasks, ends waits past their
//! deadline, begins debounced runs, gives held tasks free slots, fires due cron schedules, and
//! wakes every queue's idle workers. [`run_to_end`](TestEnv::run_to_end) skips time by itself
//! whenever nothing can run until later, as Temporal's test environment does; it never skips
//! while a task is started (a handler may be running), so a stalled task's recovery is
//! reached with an explicit [`advance`](TestEnv::advance) past its timeout.
//!
//! The time only moves forward, and a handler's own timers (`tokio::time`) keep real time.

mod clock;
mod database;
mod finished;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;

use crate::client::{Client, RunHandle};
use crate::deployment::{Deployment, FlowSpec};
use crate::error::EngineError;
use crate::process::ProcessConfig;
use crate::worker::{WorkerError, WorkerHandle, WorkerSettings};

pub use crate::faults::{Fault, Faults, UnknownStep};
pub use finished::Finished;

/// How long [`TestEnv::run_to_end`] waits in real time, by default, before giving up on a run.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(30);

/// How long a run may sit with nothing to run and nothing the time brings (it waits for a
/// signal or an event, or is held by an operator's pause) before
/// [`TestEnv::run_to_end`] says so.
const STUCK_AFTER: Duration = Duration::from_millis(500);

/// How often [`TestEnv::run_to_end`] looks at the run.
const LOOK_EVERY: Duration = Duration::from_millis(5);

/// How long [`TestEnv::advance`] waits, at each due time it stops at, for the workers to claim
/// what came due.
const CLAIM_WAIT: Duration = Duration::from_secs(1);

/// Why the test kit could not do what a test asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestError {
    /// `DATABASE_URL` (or the URL given) is not a Postgres URL.
    #[error(
        "the test server's URL is not a Postgres URL ({source}); set DATABASE_URL to one such as postgres://postgres@127.0.0.1:5432/postgres"
    )]
    ServerUrl {
        /// What the parser said.
        #[source]
        source: sqlx::Error,
    },
    /// The server did not answer, or refused to create a database.
    #[error(
        "could not create a test database on {server} ({source}); the test kit needs a running Postgres server whose role may create databases, at DATABASE_URL or postgres://postgres@127.0.0.1:5432/postgres"
    )]
    Server {
        /// The server (host, port, database).
        server: String,
        /// What the server or the driver said.
        #[source]
        source: sqlx::Error,
    },
    /// Installing pgflow in the test database failed.
    #[error("installing pgflow in the test database failed: {0}")]
    Install(#[from] pgflow_sql::InstallError),
    /// A query of the test database failed.
    #[error("the test database failed: {0}")]
    Database(#[source] sqlx::Error),
    /// Setting up or moving the test clock failed.
    #[error("the test clock failed: {0}")]
    Clock(#[source] sqlx::Error),
    /// The clock cannot move that far at once.
    #[error("the test clock cannot move by {by:?} at once; move it in smaller steps")]
    TooFar {
        /// What was asked.
        by: Duration,
    },
    /// An engine call failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A worker did not start.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// A fault was planned for a step the flow does not have.
    #[error(transparent)]
    UnknownStep(#[from] UnknownStep),
    /// The run did not end within the patience.
    #[error(
        "run {run_id} did not end within {patience:?} of real time (its status: {status}); a handler may be slow or hung, or a worker missing for one of its queues"
    )]
    StillRunning {
        /// The run.
        run_id: uuid::Uuid,
        /// Its status when the wait ended.
        status: String,
        /// How long the kit waited.
        patience: Duration,
    },
    /// Nothing can run and the time brings nothing: the run waits for something only the test
    /// can do.
    #[error(
        "run {run_id} cannot go on by itself: nothing can run and no time brings anything (waiting: {waiting}); send it its signal or event, or resume what is paused"
    )]
    Stuck {
        /// The run.
        run_id: uuid::Uuid,
        /// The steps that have not ended, with their status.
        waiting: String,
    },
    /// The ended run has no output of the flow's type.
    #[error(transparent)]
    NoOutput(#[from] NoOutput),
}

/// Why an ended run has no typed output (see [`Finished::output`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NoOutput {
    /// The run failed or was cancelled.
    #[error("run {run_id} {status}, without an output{}", failure.as_ref().map(|(step, error)| format!(": step `{step}` failed: {error}")).unwrap_or_default())]
    NotCompleted {
        /// The run.
        run_id: uuid::Uuid,
        /// How it ended: `failed` or `cancelled`.
        status: String,
        /// The step that failed and its error, for a failed run.
        failure: Option<(String, String)>,
    },
    /// The completed run's output does not decode into the flow's output type.
    #[error("run {run_id}'s output does not decode into the flow's output type: {reason}")]
    Decode {
        /// The run.
        run_id: uuid::Uuid,
        /// What serde said.
        reason: String,
    },
}

/// One test's pgflow: a database of its own with pgflow installed and the test clock, a
/// [`Client`] on it, the workers the test starts, and the faults it plans. See the
/// [module documentation](self).
///
/// End it with [`close`](Self::close), which stops the workers and drops the database; a
/// `TestEnv` dropped without it drops its database too, from a thread of its own.
#[derive(Debug)]
pub struct TestEnv {
    database: database::Throwaway,
    client: Client,
    workers: Mutex<Vec<WorkerHandle>>,
    /// Whether the kit fires due cron schedules (the process's settings asked for it): the
    /// kit does it itself, where the clock moves, so that each tick is fired when the clock
    /// passes it and seen at once.
    fires_schedules: bool,
    patience: Duration,
    closed: bool,
}

impl TestEnv {
    /// A new database on the server at `DATABASE_URL` (unset: the local server,
    /// `postgres://postgres@127.0.0.1:5432/postgres`) with pgflow installed and the test clock.
    pub async fn new() -> Result<Self, TestError> {
        Self::with_config(ProcessConfig::new()).await
    }

    /// [`new`](Self::new), with the process settings `config` for the test's workers (cron
    /// schedules, stalled-task grace, requeue limits). The kit fires the schedules itself
    /// (unless `config` says not to), each tick as the test clock passes it: in
    /// [`advance`](Self::advance) and [`run_to_end`](Self::run_to_end), not in real time.
    pub async fn with_config(config: ProcessConfig) -> Result<Self, TestError> {
        let server =
            std::env::var("DATABASE_URL").unwrap_or_else(|_| database::LOCAL_SERVER.to_owned());
        Self::on_server(&server, config).await
    }

    /// A new database on the server at `server_url` (any database of it: the test's is made
    /// beside it), with the process settings `config`.
    pub async fn on_server(server_url: &str, config: ProcessConfig) -> Result<Self, TestError> {
        let fires_schedules = config.fire_schedules;
        let config = config.fire_schedules(false);
        let database = database::Throwaway::create(server_url).await?;
        let client = match database.pool().await {
            Ok(pool) => Client::with_config(pool, config),
            Err(error) => {
                let _ = database.drop_database().await;
                return Err(error);
            }
        };
        Ok(Self {
            database,
            client,
            workers: Mutex::new(Vec::new()),
            fires_schedules,
            patience: DEFAULT_PATIENCE,
            closed: false,
        })
    }

    /// How long [`run_to_end`](Self::run_to_end) waits in real time before giving up
    /// (default [`DEFAULT_PATIENCE`]).
    #[must_use]
    pub fn patience(mut self, patience: Duration) -> Self {
        self.patience = patience;
        self
    }

    /// The client on the test's database: start runs with it, send signals, read runs.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The test database's name (`pgflow_test_…`).
    pub fn database_name(&self) -> &str {
        &self.database.name
    }

    /// Starts a worker for each queue the flow routes a step to, on the test's client; they
    /// run until [`close`](Self::close).
    pub async fn start_workers<F: FlowSpec>(
        &self,
        deployment: Deployment<F>,
    ) -> Result<(), TestError> {
        let definition = deployment.definition().clone();
        let mut queues: Vec<_> = definition
            .steps
            .iter()
            .map(|step| definition.queue_of(step))
            .collect();
        queues.sort();
        queues.dedup();
        for queue in queues {
            let settings = WorkerSettings {
                connection: (&self.client).into(),
                poll_interval: Duration::from_millis(200),
                shutdown_grace: Duration::from_secs(1),
                ..WorkerSettings::default()
            };
            let worker = crate::worker::start_on_queue(deployment.clone(), queue, settings).await?;
            lock(&self.workers).push(worker);
        }
        Ok(())
    }

    /// The faults planned for the next attempts of steps run by the test's workers.
    pub fn faults(&self) -> &Faults {
        &self.client.shared().faults
    }

    /// The engine's time (`pgflow.clock()`): the server's time plus what the test advanced.
    pub async fn now(&self) -> Result<DateTime<Utc>, TestError> {
        clock::now(self.client.db()).await
    }

    /// Lets `by` of engine time pass, with what it brings: the clock stops at each due time on
    /// the way (a retry, a delayed start, a cron tick, a wait's deadline, a debounce's end) and
    /// does what is due there (recovers stalled tasks, ends waits past their deadline, begins
    /// debounced runs, gives held tasks free slots, fires due schedules, wakes every queue's
    /// workers), and lets the workers claim what came due (up to a second of real time) before
    /// it moves on. Handlers run in real time meanwhile: a task still started when the clock
    /// passes its timeout is stalled, as it would be in production. Returns the new time.
    pub async fn advance(&self, by: Duration) -> Result<DateTime<Utc>, TestError> {
        let db = self.client.db();
        let mut left = by;
        let mut due_now_seen = false;
        loop {
            let next = clock::next_due(db).await?;
            let step = match next.due_in {
                // Something due now that the last stop could not do (a schedule whose flow is
                // gone, say) does not hold the clock.
                Some(due) if due < left && !(due.is_zero() && due_now_seen) => due,
                _ => left,
            };
            due_now_seen = step.is_zero();
            self.move_clock(step).await?;
            left -= step;
            if left.is_zero() {
                return self.now().await;
            }
            self.until_claimed().await?;
        }
    }

    /// Moves the clock by `by` and does what is due.
    async fn move_clock(&self, by: Duration) -> Result<(), TestError> {
        clock::advance(self.client.db(), by).await?;
        self.do_what_is_due().await
    }

    /// Waits, up to [`CLAIM_WAIT`], until no message is visible: the workers claimed what came
    /// due.
    async fn until_claimed(&self) -> Result<(), TestError> {
        let began = Instant::now();
        while clock::next_due(self.client.db()).await?.visible && began.elapsed() < CLAIM_WAIT {
            tokio::time::sleep(LOOK_EVERY).await;
        }
        Ok(())
    }

    /// What the process's loops do when time passes, at once.
    async fn do_what_is_due(&self) -> Result<(), TestError> {
        let db = self.client.db();
        let config = self.client.config();
        let grace = i32::try_from(config.stalled_grace.as_secs()).unwrap_or(i32::MAX);
        let max_requeues = i32::try_from(config.max_requeues).unwrap_or(i32::MAX);
        crate::engine::requeue_stalled_tasks(db, grace, max_requeues).await?;
        crate::engine::expire_waits(db, 10_000).await?;
        crate::engine::begin_deferred_runs(db, 10_000).await?;
        crate::engine::release_capped_tasks(db, 10_000).await?;
        if self.fires_schedules {
            crate::process::fire_due_schedules(db).await?;
        }
        clock::wake(db).await
    }

    /// Drives the run to its end and returns it: its status, typed output and step states.
    ///
    /// Whenever nothing can run (no task started, no message visible) it moves the clock to
    /// the next thing the time brings (a retry, a delayed start or step, a wait's deadline, a
    /// debounce's end, a cron tick) and does what is due, so that hours of backoff pass at
    /// once. Fails with [`TestError::Stuck`] when nothing can run and no time brings anything
    /// (the run waits for a signal, say), and with [`TestError::StillRunning`] after the
    /// patience in real time.
    pub async fn run_to_end<O: DeserializeOwned>(
        &self,
        run: &RunHandle<O>,
    ) -> Result<Finished<O>, TestError> {
        let began = Instant::now();
        let mut skipped = Duration::ZERO;
        let mut idle_since: Option<Instant> = None;
        loop {
            let state = run.run(&self.client).await?;
            if state.status.is_ended() {
                return Finished::read(&self.client, state, skipped).await;
            }
            if began.elapsed() > self.patience {
                return Err(TestError::StillRunning {
                    run_id: run.run_id(),
                    status: state.shown_status().to_owned(),
                    patience: self.patience,
                });
            }
            let next = clock::next_due(self.client.db()).await?;
            match next.due_in {
                _ if next.busy() => idle_since = None,
                Some(due_in) => {
                    idle_since = None;
                    self.move_clock(due_in).await?;
                    skipped += due_in;
                }
                None => {
                    let since = *idle_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > STUCK_AFTER {
                        let steps = run.steps(&self.client).await?;
                        let waiting = steps
                            .iter()
                            .filter(|step| !step.status.is_ended())
                            .map(|step| format!("{} ({:?})", step.step_slug, step.status))
                            .collect::<Vec<_>>()
                            .join(", ");
                        return Err(TestError::Stuck {
                            run_id: run.run_id(),
                            waiting,
                        });
                    }
                }
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
    }

    /// Stops the workers (draining them) and drops the test database.
    pub async fn close(mut self) -> Result<(), TestError> {
        self.closed = true;
        let workers = std::mem::take(&mut *lock(&self.workers));
        for worker in &workers {
            worker.shutdown();
        }
        for worker in workers {
            let _ = worker.wait().await;
        }
        self.client.pool().close().await;
        self.database.drop_database().await
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        for worker in std::mem::take(&mut *lock(&self.workers)) {
            worker.stop_now();
        }
        // Dropped without `close` (a failed assertion, say): drop the database from a thread
        // of its own, which may block, unlike the test's runtime.
        let database = self.database.clone();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime {
                let _ = runtime.block_on(database.drop_database());
            }
        });
        let _ = dropped.join();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
