//! Queue-centric workers: one worker polls exactly one queue and runs the tasks it claims
//! through a registry of concrete flow deployments.
//!
//! ```no_run
//! # #[pgflow::flow(slug = "triage_v1", alias = "triage", version = 1)]
//! # mod triage_v1 {
//! #     #[step(queue = "classify_threads")]
//! #     async fn classify(input: serde_json::Value) -> Result<u32, String> { Ok(1) }
//! # }
//! # #[pgflow::flow(slug = "triage_v2", alias = "triage", version = 2)]
//! # mod triage_v2 {
//! #     #[step]
//! #     async fn fetch(input: serde_json::Value) -> Result<u32, String> { Ok(1) }
//! #     #[step(depends_on = [fetch], queue = "classify_threads")]
//! #     async fn classify(fetch: u32) -> Result<u32, String> { Ok(fetch) }
//! # }
//! # fn main() {}
//! # async fn demo() -> Result<(), pgflow::WorkerError> {
//! use pgflow::{Worker, WorkerConfig};
//!
//! // The simple form: the flow's default queue (its lowercased slug), default settings.
//! let worker = Worker::start(triage_v2::deployment()).await?;
//!
//! // The queue-centric form: several deployments, one explicit queue, its own settings.
//! let worker = Worker::start_with(
//!     (triage_v1::deployment(), triage_v2::deployment()),
//!     WorkerConfig::new(triage_v2::Queue::ClassifyThreads).max_concurrent(1),
//! )
//! .await?;
//! worker.run_until_signal().await?;
//! # Ok(()) }
//! ```
//!
//! Startup (before anything is polled): connect and check the schema, reject duplicate
//! concrete slugs, compile or verify every deployment, derive the `(flow, step)` pairs routed
//! to the queue, check that those pairs cover all work waiting on the queue, register the
//! worker and log one banner. Then the loop reads at most as many messages as it has free
//! slots, claims them (refusing, without changing anything, a batch with a pair the registry
//! lacks), runs each handler with its step's timeout and stores results in batches.

mod config;
mod error;
mod execute;
mod handlers;
mod in_flight;
mod lifecycle;
mod poll;
mod registry;
mod results;
mod run;
mod runtime;
mod shared_completions;
mod slots;
mod startup;
mod turns;
mod wakeup;

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use std::future::Future;

use crate::deployment::{Deployment, FlowQueue, FlowSpec};
use crate::names::QueueName;

pub use config::{Connection, WorkerConfig, WorkerSettings};
pub use error::{COVERAGE_LIST_LIMIT, WorkerError};
pub use registry::{RegisteredFlow, Registry, Routes, at};
pub use startup::FlowStartup;

/// Starts workers. See the [module documentation](self).
#[derive(Debug)]
pub struct Worker;

impl Worker {
    /// Starts a worker for one flow on its default queue (the lowercased slug) with default
    /// settings. Fails at startup when the flow routes no step to that queue: use
    /// [`Worker::start_with`] with an explicit queue then.
    pub async fn start<F: FlowSpec>(
        deployment: Deployment<F>,
    ) -> Result<WorkerHandle, WorkerError> {
        Self::start_with_settings(deployment, WorkerSettings::default()).await
    }

    /// [`Worker::start`] (one flow, its default queue) on an explicit connection: a URL, a
    /// pool or a [`Client`](crate::Client).
    ///
    /// ```no_run
    /// # #[pgflow::flow(slug = "greet", input = String)]
    /// # mod greet {
    /// #     #[step]
    /// #     async fn hello(input: String) -> Result<String, String> { Ok(input) }
    /// # }
    /// # fn main() {}
    /// # async fn demo(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    /// use pgflow::Worker;
    ///
    /// let client = pgflow::Client::connect(url).await?;
    /// let worker = Worker::start_on(greet::deployment(), &client).await?;
    /// # Ok(()) }
    /// ```
    pub async fn start_on<F: FlowSpec>(
        deployment: Deployment<F>,
        connection: impl Into<Connection>,
    ) -> Result<WorkerHandle, WorkerError> {
        let settings = WorkerSettings {
            connection: connection.into(),
            ..WorkerSettings::default()
        };
        Self::start_with_settings(deployment, settings).await
    }

    /// [`Worker::start`] (one flow, its default queue) with explicit settings, e.g. a
    /// connection or a concurrency limit.
    pub async fn start_with_settings<F: FlowSpec>(
        deployment: Deployment<F>,
        settings: WorkerSettings,
    ) -> Result<WorkerHandle, WorkerError> {
        let queue = deployment.definition().slug.default_queue();
        let flow_slug = deployment.slug().to_owned();
        launch(
            deployment.flows(),
            queue,
            startup::QueueChoice::DefaultOf(flow_slug),
            settings,
        )
        .await
    }

    /// Starts a worker polling `config`'s queue with a registry of deployments (one
    /// deployment or a tuple of them); await the answer for its handle. The queue must be a
    /// `Queue` of a flow in the registry; anything else does not compile, with one error at
    /// the registry. (Not an `async fn`: its future would carry the rule along, and the
    /// compiler would report a broken rule again at the call and at the `.await`.)
    pub fn start_with<R, Q, At>(registry: R, config: WorkerConfig<Q>) -> StartingWorker
    where
        R: Registry + Routes<Q::Flow, At>,
        Q: FlowQueue,
    {
        let queue = config.queue.name();
        let flows = registry.flows();
        StartingWorker(Box::pin(async move {
            let queue = QueueName::new(queue).map_err(|e| {
                WorkerError::Schema(format!("generated queue name is invalid: {e}"))
            })?;
            launch(
                flows,
                queue,
                startup::QueueChoice::Explicit,
                config.settings,
            )
            .await
        }))
    }
}

/// A worker being started by [`Worker::start_with`]: await it for the worker's handle. The
/// worker starts only when awaited (or polled).
#[must_use = "the worker starts only when this is awaited"]
pub struct StartingWorker(
    std::pin::Pin<Box<dyn Future<Output = Result<WorkerHandle, WorkerError>> + Send>>,
);

impl Future for StartingWorker {
    type Output = Result<WorkerHandle, WorkerError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for StartingWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StartingWorker")
    }
}

/// Starts a worker of `deployment` on `queue`, one of the queues its flow routes a step to (the
/// test kit's workers, one per queue).
#[cfg(feature = "testing")]
pub(crate) async fn start_on_queue<F: FlowSpec>(
    deployment: Deployment<F>,
    queue: QueueName,
    settings: WorkerSettings,
) -> Result<WorkerHandle, WorkerError> {
    launch(
        deployment.flows(),
        queue,
        startup::QueueChoice::Explicit,
        settings,
    )
    .await
}

async fn launch(
    flows: Vec<RegisteredFlow>,
    queue: QueueName,
    choice: startup::QueueChoice,
    settings: WorkerSettings,
) -> Result<WorkerHandle, WorkerError> {
    // A rate-limited step on the queue sends tasks back for later: an idle worker wakes when
    // the next one is due (see poll::wait_for_work).
    let rate_limited = flows.iter().any(|flow| {
        flow.definition
            .steps_routed_to(&queue)
            .any(|step| step.rate_limit.is_some())
    });
    let started = startup::start(flows, queue.clone(), choice, &settings).await?;
    let worker_id = started.worker_id;
    let flow_states = started.flow_states.clone();
    let stale_messages = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let runtime = Arc::new(runtime::Runtime {
        stale_messages: Arc::clone(&stale_messages),
        slots: slots::Slots::new(settings.max_concurrent),
        started,
        settings,
        shutdown: CancellationToken::new(),
        hard_stop: CancellationToken::new(),
        in_flight: Arc::default(),
        worker_label: worker_id.to_string(),
        rate_limited,
    });
    let shutdown = runtime.shutdown.clone();
    let hard_stop = runtime.hard_stop.clone();
    let join = tokio::spawn(run::run(runtime));
    Ok(WorkerHandle {
        worker_id,
        queue,
        flow_states,
        shutdown,
        hard_stop,
        stale_messages,
        join,
        detached: false,
    })
}

/// A running worker.
///
/// **Dropping the handle drains the worker**: it stops polling, finishes its in-flight tasks
/// (within its shutdown grace) and marks itself stopped, as [`shutdown`](Self::shutdown)
/// does. Keep the handle for as long as the worker should run: await
/// [`run_until_signal`](Self::run_until_signal), [`run_until`](Self::run_until) or
/// [`wait`](Self::wait), or store it. [`detach`](Self::detach) lets a worker run on without a
/// handle, until the process ends.
#[derive(Debug)]
#[must_use = "dropping a WorkerHandle drains the worker at once; await it, store it or detach it"]
pub struct WorkerHandle {
    worker_id: Uuid,
    queue: QueueName,
    flow_states: Vec<FlowStartup>,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
    stale_messages: Arc<std::sync::atomic::AtomicU64>,
    join: JoinHandle<Result<(), WorkerError>>,
    detached: bool,
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        if !self.detached {
            self.shutdown.cancel();
        }
    }
}

impl WorkerHandle {
    /// The worker's id (its row in `pgflow.workers`).
    pub fn worker_id(&self) -> Uuid {
        self.worker_id
    }

    /// The queue it polls.
    pub fn queue(&self) -> &QueueName {
        &self.queue
    }

    /// What startup did to each carried flow (compiled or verified; activated, active or
    /// inactive), in registry order.
    pub fn flows(&self) -> &[FlowStartup] {
        &self.flow_states
    }

    /// How many stale messages (no queued task behind them: sent by hand, for an unknown run,
    /// or left over) this worker's claims have removed from its queue; each claim that meets
    /// some logs them at WARN with their ids.
    pub fn stale_messages_removed(&self) -> u64 {
        self.stale_messages
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Asks the worker to stop polling, finish in-flight tasks (within its shutdown grace)
    /// and stop.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Stops at once: in-flight handlers are cancelled and their tasks are recovered as
    /// stalled later.
    pub fn stop_now(&self) {
        self.shutdown.cancel();
        self.hard_stop.cancel();
    }

    /// Whether the worker has stopped.
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }

    /// Lets the worker run on without its handle, until the process ends or a fatal error
    /// stops it (logged). It can no longer be stopped from code; a signal handler of the
    /// application's own, or `pgflow workers deprecate`, still drains it.
    pub fn detach(mut self) {
        self.detached = true;
    }

    /// Waits until the worker has stopped; returns the fatal error that stopped it, if any.
    pub async fn wait(mut self) -> Result<(), WorkerError> {
        stopped((&mut self.join).await)
    }

    /// Runs until `signal` completes, then drains (as [`shutdown`](Self::shutdown)) and waits
    /// for the worker to stop; returns early with the fatal error that stops the worker
    /// before that. The signal is any future: an application's own shutdown future, a
    /// `tokio_util::sync::CancellationToken`'s `cancelled_owned()`, a channel receiver.
    ///
    /// ```no_run
    /// # #[pgflow::flow(slug = "greet", input = String)]
    /// # mod greet {
    /// #     #[step]
    /// #     async fn hello(input: String) -> Result<String, String> { Ok(input) }
    /// # }
    /// # fn main() {}
    /// # async fn demo() -> Result<(), pgflow::WorkerError> {
    /// use pgflow::Worker;
    /// use tokio_util::sync::CancellationToken;
    ///
    /// let token = CancellationToken::new();
    /// let worker = Worker::start(greet::deployment()).await?;
    /// tokio::spawn(worker.run_until(token.clone().cancelled_owned()));
    /// // ... later, when the application stops:
    /// token.cancel();
    /// # Ok(()) }
    /// ```
    pub async fn run_until(mut self, signal: impl Future<Output = ()>) -> Result<(), WorkerError> {
        tokio::select! {
            () = signal => {
                tracing::info!(queue = self.queue.as_str(), "shutdown requested: draining");
                self.shutdown.cancel();
            }
            finished = &mut self.join => {
                return stopped(finished);
            }
        }
        self.wait().await
    }

    /// Runs until SIGTERM or SIGINT: the first drains (stop polling, finish in-flight tasks,
    /// mark stopped), a second stops at once.
    pub async fn run_until_signal(self) -> Result<(), WorkerError> {
        let shutdown = self.shutdown.clone();
        let hard_stop = self.hard_stop.clone();
        let signals = tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("signal received: draining (send it again to stop at once)");
            shutdown.cancel();
            wait_for_signal().await;
            tracing::warn!("second signal: stopping at once");
            hard_stop.cancel();
        });
        let result = self.wait().await;
        signals.abort();
        result
    }
}

/// What a finished worker task means: its own result, or its panic re-raised.
fn stopped(
    finished: Result<Result<(), WorkerError>, tokio::task::JoinError>,
) -> Result<(), WorkerError> {
    match finished {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        // Cancelled: the runtime is shutting down.
        Err(_) => Ok(()),
    }
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}
