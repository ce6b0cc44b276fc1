//! The client: deploys flows, starts runs (`start`), follows and waits for them, and owns what
//! the workers started on it share.

mod start;

pub use start::{Start, StartOptions};

use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use std::sync::Arc;

use crate::db::Db;
use crate::deployment::{Deployment, FlowSpec};
use crate::events::{FlowEvents, RunEvents};
use crate::process::{ProcessConfig, Shared};

use crate::engine::{
    self, Cancellation, CompileStatus, Retry, Run, RunStatus, StartOutcome, StartedRun, StepState,
};
use crate::error::EngineError;

/// A handle on a pgflow database: deploys flows, starts typed runs and follows them, and owns
/// what the workers started on it share (see [`ProcessConfig`]).
///
/// Cheap to clone: clones share one pool, one notification listener and the same workers'
/// services. Workers started on a client (`Worker::start_on(flow, &client)`,
/// [`WorkerConfig::connection`](crate::WorkerConfig::connection)) share its listening connection
/// (with its event streams), their completion calls per queue, and one maintenance loop and
/// schedule firer, configured by its [`ProcessConfig`]; a worker started on a URL or a pool makes
/// a client of its own. Starts: [`start`](Self::start), [`start_many`](Self::start_many),
/// [`start_in`](Self::start_in).
#[derive(Debug, Clone)]
pub struct Client {
    db: Db,
    shared: Arc<Shared>,
}

impl Client {
    /// How many connections [`Client::connect`] keeps at most.
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

    /// A client over `pool`: a `PgPool` (direct) or a [`Db`] (which says whether it goes
    /// through a transaction-mode pooler).
    pub fn new(pool: impl Into<Db>) -> Self {
        Self::with_config(pool, ProcessConfig::default())
    }

    /// A client over `pool` whose workers share the process settings `config`.
    pub fn with_config(pool: impl Into<Db>, config: ProcessConfig) -> Self {
        let db = pool.into();
        Self {
            shared: Arc::new(Shared::new(db.clone(), config)),
            db,
        }
    }

    /// The process settings its workers share.
    pub fn config(&self) -> &ProcessConfig {
        &self.shared.config
    }

    /// What the client shares with its workers.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The events of the run `run_id`, from its current state to its end (see
    /// [`RunEvents`]). The client listens on one connection of its own for all its streams.
    pub async fn run_events(&self, run_id: Uuid) -> Result<RunEvents, EngineError> {
        RunEvents::start(&self.shared, run_id).await
    }

    /// The events of every run of the flow `name` (a concrete flow, or an alias: its active
    /// version), from now on (see [`FlowEvents`]).
    pub async fn flow_events(&self, name: &str) -> Result<FlowEvents, EngineError> {
        let flow_slug = match crate::admin::inspect::resolve_flow_name(&self.db, name).await? {
            Some(resolved) => resolved.flow_slug().to_owned(),
            None => {
                return Err(EngineError::UnknownFlow {
                    flow_slug: name.to_owned(),
                });
            }
        };
        FlowEvents::start(&self.shared, &flow_slug).await
    }

    /// Connects to the database at `url` (a pool of at most
    /// [`DEFAULT_MAX_CONNECTIONS`](Self::DEFAULT_MAX_CONNECTIONS); `?sslmode=require` or
    /// `verify-full` for TLS; `&pgbouncer=true` through a transaction-mode pooler such as
    /// PgBouncer in `pool_mode = transaction`). Fails at once when the server does not answer or refuses the
    /// login.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), pgflow::EngineError> {
    /// let client = pgflow::Client::connect("postgres://app@db.internal/app").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, EngineError> {
        Self::connect_with(url, ProcessConfig::default()).await
    }

    /// [`connect`](Self::connect), with the process settings `config` for the workers started
    /// on the client.
    pub async fn connect_with(url: &str, config: ProcessConfig) -> Result<Self, EngineError> {
        let db = crate::connect::db(url, Self::DEFAULT_MAX_CONNECTIONS).await?;
        Ok(Self::with_config(db, config))
    }

    /// The pool, for queries of your own (see [`Db::pool`]).
    pub fn pool(&self) -> &PgPool {
        self.db.pool()
    }

    /// The pool and how it reaches Postgres: the executor to give `pgflow::engine` calls.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Compiles (or verifies) a deployment's flow, as a worker does at startup.
    pub async fn deploy<F: FlowSpec>(
        &self,
        deployment: &Deployment<F>,
    ) -> Result<CompileStatus, EngineError> {
        engine::compile_flow(&self.db, deployment.definition()).await
    }

    /// Cancels the run `run_id` if it is still going: it becomes `cancelled` (with `reason`),
    /// its queued tasks never reach a handler, a running handler's result is discarded and its
    /// `Context` cancellation fires at its worker's next heartbeat; no further attempt runs
    /// and no step starts. A run that already ended is left as it is: the answer says so
    /// (`cancelled: false` and its status), which is not an error.
    /// [`EngineError::UnknownRun`] when no such run exists.
    pub async fn cancel(
        &self,
        run_id: Uuid,
        reason: Option<&str>,
    ) -> Result<Cancellation, EngineError> {
        engine::cancel_runs(&self.db, &[run_id], reason)
            .await?
            .pop()
            .ok_or(EngineError::UnknownRun { run_id })
    }

    /// Retries the run `run_id` if it failed: it goes back to `started` and records the retry;
    /// its failed steps, and only they, run again with a fresh budget of attempts (a map
    /// step's completed elements keep their outputs); completed steps keep theirs. A run that
    /// is not failed is left as it is (`retried: false` and its status).
    /// [`EngineError::UnknownRun`] when no such run exists.
    pub async fn retry(&self, run_id: Uuid) -> Result<Retry, EngineError> {
        engine::retry_runs(&self.db, &[run_id])
            .await?
            .pop()
            .ok_or(EngineError::UnknownRun { run_id })
    }

    /// Runs the ended run `run_id` again from `step_slug`, as a new run linked to it (see
    /// [`engine::resume_run`]); returns the new run, as it stands.
    pub async fn resume(&self, run_id: Uuid, step_slug: &str) -> Result<Run, EngineError> {
        engine::resume_run(&self.db, run_id, step_slug).await
    }

    /// Sends signal `name` with `payload` to run `run_id`: the step that waits for it starts
    /// (or, when the run has not reached it yet, will start without waiting). Untyped: a flow
    /// module's generated `signal_<name>` takes only the payload type its step declares;
    /// here a payload the step cannot decode is refused only when the flow checks what comes
    /// in (`check_input`), and otherwise fails the step when it runs.
    ///
    /// Refused, changing nothing: [`EngineError::UnknownRun`], or
    /// [`EngineError::SignalRefused`] saying why. Sending the same signal with an equal
    /// payload again is [`SignalOutcome::Duplicate`](engine::SignalOutcome::Duplicate) and
    /// changes nothing.
    pub async fn signal<T: Serialize + ?Sized>(
        &self,
        run_id: Uuid,
        name: &str,
        payload: &T,
    ) -> Result<engine::SignalOutcome, EngineError> {
        engine::send_signal(&self.db, run_id, name, payload).await
    }

    /// Delivers event `name` with `payload` to every run, of any flow, whose step waits for a
    /// signal of that name by `key` (`#[step(signal = name, key = input.order_id)]`), in one
    /// statement; returns the runs it reached (none is no error). A key is compared as text: a
    /// string's text, or a number's JSON text. Only runs waiting now are reached: an event is
    /// not kept for a run that reaches its wait later (signal that run by id).
    ///
    /// [`EngineError::SignalRefused`] when the payload does not fit the schema of a step it
    /// would reach (flows with `check_input`); nothing is delivered then.
    pub async fn emit_event<K: Serialize + ?Sized, P: Serialize + ?Sized>(
        &self,
        name: &str,
        key: &K,
        payload: &P,
    ) -> Result<Vec<engine::EventDelivery>, EngineError> {
        self.emit_event_in(&self.db, name, key, payload).await
    }

    /// [`emit_event`](Self::emit_event) in the caller's transaction (or on a connection of
    /// theirs): delivered when it commits, never when it rolls back.
    pub async fn emit_event_in<'c, K: Serialize + ?Sized, P: Serialize + ?Sized>(
        &self,
        executor: impl PgExecutor<'c>,
        name: &str,
        key: &K,
        payload: &P,
    ) -> Result<Vec<engine::EventDelivery>, EngineError> {
        engine::emit_event(executor, name, &engine::event_key(key)?, payload).await
    }

    /// [`signal`](Self::signal) in the caller's transaction (or on a connection of theirs):
    /// the signal is sent when the transaction commits, together with the caller's own writes,
    /// and never when it rolls back.
    ///
    /// ```no_run
    /// # use pgflow::{Client, EngineError};
    /// # async fn demo(client: &Client, run_id: pgflow::sqlx::types::Uuid) -> Result<(), EngineError> {
    /// let mut tx = client.pool().begin().await?;
    /// // ... mark the refund approved in the application's own tables, in `tx` ...
    /// client
    ///     .signal_in(&mut *tx, run_id, "approval", &pgflow::serde_json::json!({ "by": "ana" }))
    ///     .await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn signal_in<'c, T: Serialize + ?Sized>(
        &self,
        executor: impl PgExecutor<'c>,
        run_id: Uuid,
        name: &str,
        payload: &T,
    ) -> Result<engine::SignalOutcome, EngineError> {
        engine::send_signal(executor, run_id, name, payload).await
    }
}

/// Why waiting for a run's output did not produce it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The run failed.
    #[error("run {run_id} failed at step `{step_slug}`: {error}")]
    Failed {
        /// The run.
        run_id: Uuid,
        /// The step that failed.
        step_slug: String,
        /// Its error.
        error: String,
    },
    /// The run was cancelled.
    #[error("run {run_id} was cancelled{}", reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    Cancelled {
        /// The run.
        run_id: Uuid,
        /// Why, as the canceller said.
        reason: Option<String>,
    },
    /// The run has no step of that name.
    #[error("run {run_id} has no step `{step_slug}`")]
    UnknownStep {
        /// The run.
        run_id: Uuid,
        /// The step asked for.
        step_slug: String,
    },
    /// The run ended without the step ending: it never ran (the run failed or was cancelled
    /// first).
    #[error("run {run_id} ended ({status}) before step `{step_slug}` did")]
    StepNotReached {
        /// The run.
        run_id: Uuid,
        /// The step waited for.
        step_slug: String,
        /// How the run ended.
        status: &'static str,
    },
    /// The run had not ended when the wait gave up.
    #[error("run {run_id} has not ended after {waited:?}")]
    StillRunning {
        /// The run.
        run_id: Uuid,
        /// How long the wait lasted.
        waited: Duration,
    },
    /// The run's output does not decode as the flow's output type.
    #[error("run {run_id}: cannot decode its output: {source}")]
    Decode {
        /// The run.
        run_id: Uuid,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
    /// A database error.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// A started run whose output decodes as `O`. Two handles are equal when they name the same
/// run.
#[derive(Debug, Clone, Copy)]
pub struct RunHandle<O> {
    run_id: Uuid,
    outcome: Option<StartOutcome>,
    output: PhantomData<fn() -> O>,
}

impl<O> PartialEq for RunHandle<O> {
    fn eq(&self, other: &Self) -> bool {
        self.run_id == other.run_id
    }
}

impl<O> Eq for RunHandle<O> {}

impl<O: DeserializeOwned> RunHandle<O> {
    /// A handle on an existing run.
    pub fn new(run_id: Uuid) -> Self {
        Self {
            run_id,
            outcome: None,
            output: PhantomData,
        }
    }

    /// The handle a start gives back.
    pub(crate) fn of_start(started: &StartedRun) -> Self {
        Self {
            run_id: started.run.run_id,
            outcome: Some(started.outcome),
            output: PhantomData,
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> Uuid {
        self.run_id
    }

    /// What the start that gave this handle did: [`StartOutcome::Started`], or
    /// [`StartOutcome::AlreadyExisted`] when its idempotency key already had this run. `None`
    /// for a handle made with [`RunHandle::new`].
    pub fn start_outcome(&self) -> Option<StartOutcome> {
        self.outcome
    }

    /// Whether the start that gave this handle found the run under its idempotency key
    /// instead of starting one.
    pub fn already_existed(&self) -> bool {
        self.outcome == Some(StartOutcome::AlreadyExisted)
    }

    /// The run as stored now.
    pub async fn run(&self, client: &Client) -> Result<Run, EngineError> {
        engine::run(client.db(), self.run_id).await
    }

    /// Each step of the run as it stands: status, attempts, output and error, in the flow's
    /// step order.
    pub async fn steps(&self, client: &Client) -> Result<Vec<StepState>, EngineError> {
        engine::run_step_states(client.db(), self.run_id).await
    }

    /// Waits (polling) until the step `step_slug` ends (completed, failed, skipped or
    /// cancelled), at most `timeout`, and returns its state. A run that ends without the step
    /// ending is [`RunError::StepNotReached`]; a step the run does not have is
    /// [`RunError::UnknownStep`].
    pub async fn wait_for_step(
        &self,
        client: &Client,
        step_slug: &str,
        timeout: Duration,
    ) -> Result<StepState, RunError> {
        let started = tokio::time::Instant::now();
        let mut interval = Duration::from_millis(5);
        loop {
            let steps = self.steps(client).await?;
            let Some(step) = steps.into_iter().find(|s| s.step_slug == step_slug) else {
                return Err(RunError::UnknownStep {
                    run_id: self.run_id,
                    step_slug: step_slug.to_owned(),
                });
            };
            if step.status.is_ended() {
                return Ok(step);
            }
            let status = self.run(client).await?.status;
            if status.is_ended() {
                // Read the step once more: it may have ended with the run.
                let again = self.steps(client).await?;
                if let Some(step) = again
                    .into_iter()
                    .find(|s| s.step_slug == step_slug && s.status.is_ended())
                {
                    return Ok(step);
                }
                return Err(RunError::StepNotReached {
                    run_id: self.run_id,
                    step_slug: step_slug.to_owned(),
                    status: status.as_str(),
                });
            }
            let waited = started.elapsed();
            if waited >= timeout {
                return Err(RunError::StillRunning {
                    run_id: self.run_id,
                    waited,
                });
            }
            tokio::time::sleep(interval.min(timeout - waited)).await;
            interval = (interval * 2).min(Duration::from_millis(200));
        }
    }

    /// Retries the run if it failed (see [`Client::retry`]).
    pub async fn retry(&self, client: &Client) -> Result<Retry, EngineError> {
        client.retry(self.run_id).await
    }

    /// Runs this ended run again from `step_slug` as a new run linked to it (see
    /// [`Client::resume`]); returns the new run's handle, with the same output type.
    pub async fn resume_from(&self, client: &Client, step_slug: &str) -> Result<Self, EngineError> {
        let run = client.resume(self.run_id, step_slug).await?;
        Ok(Self::new(run.run_id))
    }

    /// Cancels the run if it is still going (see [`Client::cancel`]).
    pub async fn cancel(
        &self,
        client: &Client,
        reason: Option<&str>,
    ) -> Result<Cancellation, EngineError> {
        client.cancel(self.run_id, reason).await
    }

    /// The run's events, from its current state to its end (see [`Client::run_events`]).
    pub async fn events(&self, client: &Client) -> Result<RunEvents, EngineError> {
        client.run_events(self.run_id).await
    }

    /// Waits until the run ends, at most `timeout`, following its events (no polling while
    /// notifications flow); returns its typed output.
    pub async fn wait(&self, client: &Client, timeout: Duration) -> Result<O, RunError> {
        let started = tokio::time::Instant::now();
        let ended = tokio::time::timeout(timeout, async {
            let mut events = self.events(client).await?;
            while let Some(event) = events.next().await {
                if event?.ends_run() {
                    break;
                }
            }
            Ok::<(), EngineError>(())
        })
        .await;
        match ended {
            Ok(result) => result?,
            Err(_) => {
                return Err(RunError::StillRunning {
                    run_id: self.run_id,
                    waited: started.elapsed(),
                });
            }
        }
        let run = self.run(client).await?;
        match run.status {
            RunStatus::Completed => {
                let output = run.output.unwrap_or_default();
                serde_json::from_value(output).map_err(|source| RunError::Decode {
                    run_id: self.run_id,
                    source,
                })
            }
            RunStatus::Failed => {
                let (step_slug, error) = engine::run_error(client.db(), self.run_id)
                    .await?
                    .unwrap_or_else(|| ("(unknown)".to_owned(), "failed".to_owned()));
                Err(RunError::Failed {
                    run_id: self.run_id,
                    step_slug,
                    error,
                })
            }
            RunStatus::Cancelled => Err(RunError::Cancelled {
                run_id: self.run_id,
                reason: run.cancel_reason,
            }),
            // The events said it ended; a retry since has started it again.
            RunStatus::Started => Err(RunError::StillRunning {
                run_id: self.run_id,
                waited: started.elapsed(),
            }),
        }
    }
}
