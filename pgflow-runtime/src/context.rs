//! What a step handler can know about the task it runs.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::db::Db;
use crate::failure::{StepFailure, decode};
use crate::names::{FlowSlug, QueueName, StepSlug};

/// The task a handler is running: run, flow, step, queue, task index and attempt, a
/// cancellation token that fires when the step's timeout passes or the worker shuts down, and
/// lazy access to the flow input.
///
/// Take it as a handler parameter of type `pgflow::Context`.
#[derive(Debug, Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

#[derive(Debug)]
struct ContextInner {
    run_id: Uuid,
    flow_slug: FlowSlug,
    step_slug: StepSlug,
    queue_name: QueueName,
    task_index: i32,
    attempt: i32,
    cancellation: CancellationToken,
    db: Db,
}

/// The parts a [`Context`] is built from (the worker fills it in).
#[derive(Debug, Clone)]
pub struct ContextParts {
    /// The run.
    pub run_id: Uuid,
    /// The concrete flow.
    pub flow_slug: FlowSlug,
    /// The step.
    pub step_slug: StepSlug,
    /// The queue the task came from.
    pub queue_name: QueueName,
    /// 0 for a single step; the element index for a map step.
    pub task_index: i32,
    /// 1 for the first attempt.
    pub attempt: i32,
    /// Fires on timeout, shutdown, or when the run is cancelled.
    pub cancellation: CancellationToken,
    /// Where the flow input is read from, when asked for (a `PgPool` converts with `into()`).
    pub pool: Db,
}

impl Context {
    /// A context from its parts.
    pub fn new(parts: ContextParts) -> Self {
        Self {
            inner: Arc::new(ContextInner {
                run_id: parts.run_id,
                flow_slug: parts.flow_slug,
                step_slug: parts.step_slug,
                queue_name: parts.queue_name,
                task_index: parts.task_index,
                attempt: parts.attempt,
                cancellation: parts.cancellation,
                db: parts.pool,
            }),
        }
    }

    /// The context of a claimed task.
    pub fn for_task(
        task: &crate::engine::ClaimedTask,
        pool: Db,
        cancellation: CancellationToken,
    ) -> Self {
        Self::new(ContextParts {
            run_id: task.run_id,
            flow_slug: task.flow_slug.clone(),
            step_slug: task.step_slug.clone(),
            queue_name: task.queue_name.clone(),
            task_index: task.task_index,
            attempt: task.attempt,
            cancellation,
            pool,
        })
    }

    /// The run this task belongs to.
    pub fn run_id(&self) -> Uuid {
        self.inner.run_id
    }

    /// The concrete flow slug recorded on the task.
    pub fn flow_slug(&self) -> &FlowSlug {
        &self.inner.flow_slug
    }

    /// The step being run.
    pub fn step_slug(&self) -> &StepSlug {
        &self.inner.step_slug
    }

    /// The queue the task was claimed from.
    pub fn queue_name(&self) -> &QueueName {
        &self.inner.queue_name
    }

    /// 0 for a single step; the index of the element for a map step.
    pub fn task_index(&self) -> i32 {
        self.inner.task_index
    }

    /// This attempt's number, 1 for the first.
    pub fn attempt(&self) -> i32 {
        self.inner.attempt
    }

    /// Fires when the step's timeout passes, the worker shuts down, or the run is cancelled (or
    /// fails elsewhere; the worker learns of it at its next heartbeat). Long handlers should
    /// stop early when it does (`ctx.cancellation().cancelled().await`).
    pub fn cancellation(&self) -> &CancellationToken {
        &self.inner.cancellation
    }

    /// Whether the task has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancellation.is_cancelled()
    }

    /// The worker's pool on the flow's database (pgflow's `ctx.sql`): run your own SQL there,
    /// for example to write a step's effect in the same database as the run. It is the pool
    /// the worker claims and completes with, so long transactions here take connections from
    /// the worker (size it with `WorkerConfig::max_pg_connections`); an application database of
    /// its own belongs in the flow's state.
    ///
    /// Behind a transaction-mode pooler (`pgbouncer=true`), run your queries inside a
    /// transaction with `.persistent(false)`, or use [`db`](Self::db) as the executor.
    pub fn pool(&self) -> &PgPool {
        self.inner.db.pool()
    }

    /// The same pool with how it reaches Postgres: an executor that is safe behind a
    /// transaction-mode pooler too (each query its own transaction there).
    pub fn db(&self) -> &Db {
        &self.inner.db
    }

    /// The callback token of signal `signal` of this run: put it in a link (an approval
    /// e-mail, a provider's callback URL) and whoever follows it sends the signal once, with no
    /// credentials of their own, to the dashboard's `POST /signals/{token}` or a route of your
    /// own that calls `pgflow::engine::send_signal_by_token`. Errors when no step of the flow
    /// waits for `signal`.
    pub async fn signal_token(&self, signal: &str) -> Result<String, crate::EngineError> {
        crate::engine::signal_token(&self.inner.db, self.inner.run_id, signal).await
    }

    /// Reads the payload of signal `signal`, which this step waited for, and decodes it as
    /// `T` (the macro's adapter for the step's signal parameter).
    pub(crate) async fn signal_payload<T: DeserializeOwned>(
        &self,
        signal: &str,
    ) -> Result<T, StepFailure> {
        let failure = |reason: String| StepFailure::Signal {
            step_slug: self.inner.step_slug.to_string(),
            signal: signal.to_owned(),
            reason,
        };
        let payload = crate::engine::signal_payload(
            &self.inner.db,
            self.inner.run_id,
            self.inner.step_slug.as_str(),
        )
        .await
        .map_err(|e| failure(e.to_string()))?
        .ok_or_else(|| failure("the run has not received it".to_owned()))?;
        decode::<T>(self.inner.step_slug.as_str(), signal, payload)
    }

    /// Reads the run's flow input from the database and decodes it as `T`.
    pub async fn flow_input<T: DeserializeOwned>(&self) -> Result<T, StepFailure> {
        let input: serde_json::Value = crate::engine::run_input(&self.inner.db, self.inner.run_id)
            .await
            .map_err(|e| StepFailure::FlowInput {
                step_slug: self.inner.step_slug.to_string(),
                reason: e.to_string(),
            })?;
        decode::<T>(self.inner.step_slug.as_str(), "input", input)
    }
}
