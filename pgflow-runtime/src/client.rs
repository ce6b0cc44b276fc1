//! Starting typed runs and waiting for their outputs.

use std::marker::PhantomData;
use std::time::Duration;

use serde::de::DeserializeOwned;
use sqlx::PgPool;
use uuid::Uuid;

use crate::db::Db;
use crate::definition::FlowTypes;
use crate::deployment::{Deployment, FlowSpec};
use crate::engine::{self, CompileStatus, Run, RunStatus};
use crate::error::EngineError;

/// A handle on a pgflow database for callers: deploys flows and starts typed runs.
#[derive(Debug, Clone)]
pub struct Client {
    db: Db,
}

impl Client {
    /// How many connections [`Client::connect`] keeps at most.
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

    /// A client over `pool`: a `PgPool` (direct) or a [`Db`] (which says whether it goes
    /// through a transaction-mode pooler).
    pub fn new(pool: impl Into<Db>) -> Self {
        Self { db: pool.into() }
    }

    /// Connects to the database at `url` (a pool of at most
    /// [`DEFAULT_MAX_CONNECTIONS`](Self::DEFAULT_MAX_CONNECTIONS); `?sslmode=require` or
    /// `verify-full` for TLS; `&pgbouncer=true` through a transaction-mode pooler such as
    /// PgBouncer in `pool_mode = transaction`). Fails at once when the server does not answer or refuses the
    /// login.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), pgflow_runtime::EngineError> {
    /// let client = pgflow_runtime::Client::connect("postgres://app@db.internal/app").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, EngineError> {
        Ok(Self::new(
            crate::connect::db(url, Self::DEFAULT_MAX_CONNECTIONS).await?,
        ))
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

    /// Starts a run of exactly the concrete flow `F` with `input` (typed output).
    pub async fn start<F: FlowSpec>(
        &self,
        input: &F::Input,
    ) -> Result<RunHandle<F::Output>, EngineError> {
        let mut handles = self.start_many::<F>(std::slice::from_ref(input)).await?;
        handles.pop().ok_or_else(|| EngineError::UnknownFlow {
            flow_slug: F::SLUG.to_owned(),
        })
    }

    /// Starts a run of an alias: its active concrete version at this moment (the run keeps
    /// it). The output is untyped since versions may differ; the run records which version ran.
    /// Versions that share their input and output types start typed with
    /// [`start_alias_typed`](Self::start_alias_typed).
    pub async fn start_alias<I: serde::Serialize>(
        &self,
        alias: &str,
        input: &I,
    ) -> Result<RunHandle<serde_json::Value>, EngineError> {
        let input = serde_json::to_value(input).map_err(|source| EngineError::Encode {
            what: "the flow input",
            source,
        })?;
        let run = engine::start_flow(&self.db, alias, &input).await?;
        Ok(RunHandle::new(run.run_id))
    }

    /// Starts a run of `F`'s alias, typed: the alias's active version at this moment (the run
    /// keeps it), which may be `F` or another version taking `F::Input` and producing
    /// `F::Output`. Versions share those types when each declares the same `input` and
    /// `output` (`#[flow(alias = "triage", input = TriageInput, output = TriageOutput)]`); the
    /// SQL core checks the active version's recorded types in the same call, and a version
    /// with other types (or a generated `Output` of its own) is refused with
    /// [`EngineError::AliasTypeMismatch`] before anything starts.
    pub async fn start_alias_typed<F: FlowSpec>(
        &self,
        input: &F::Input,
    ) -> Result<RunHandle<F::Output>, EngineError> {
        let mut handles = self
            .start_alias_typed_many::<F>(std::slice::from_ref(input))
            .await?;
        handles.pop().ok_or_else(|| EngineError::UnknownFlow {
            flow_slug: F::ALIAS.to_owned(),
        })
    }

    /// Starts one typed run of `F`'s alias per input, in one transaction, in input order, all
    /// on the alias's active version (see [`start_alias_typed`](Self::start_alias_typed)).
    pub async fn start_alias_typed_many<F: FlowSpec>(
        &self,
        inputs: &[F::Input],
    ) -> Result<Vec<RunHandle<F::Output>>, EngineError> {
        let runs = engine::start_alias_typed(
            &self.db,
            F::ALIAS,
            &encode_inputs(inputs)?,
            &FlowTypes::of::<F::Input, F::Output>(),
        )
        .await?;
        Ok(runs.iter().map(|r| RunHandle::new(r.run_id)).collect())
    }

    /// Starts one run of an alias per input, in one transaction, in input order: all on the
    /// alias's active version at this moment.
    pub async fn start_alias_many<I: serde::Serialize>(
        &self,
        alias: &str,
        inputs: &[I],
    ) -> Result<Vec<RunHandle<serde_json::Value>>, EngineError> {
        let runs = engine::start_flows(&self.db, alias, &encode_inputs(inputs)?).await?;
        Ok(runs.iter().map(|r| RunHandle::new(r.run_id)).collect())
    }

    /// Starts one run of exactly the concrete flow `F` per input, in one transaction, in input
    /// order.
    pub async fn start_many<F: FlowSpec>(
        &self,
        inputs: &[F::Input],
    ) -> Result<Vec<RunHandle<F::Output>>, EngineError> {
        let runs = engine::start_concrete_flows(&self.db, F::SLUG, &encode_inputs(inputs)?).await?;
        Ok(runs.iter().map(|r| RunHandle::new(r.run_id)).collect())
    }
}

/// Flow inputs as JSON.
fn encode_inputs<I: serde::Serialize>(inputs: &[I]) -> Result<Vec<serde_json::Value>, EngineError> {
    inputs
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| EngineError::Encode {
            what: "a flow input",
            source,
        })
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

/// A started run whose output decodes as `O`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunHandle<O> {
    run_id: Uuid,
    output: PhantomData<fn() -> O>,
}

impl<O: DeserializeOwned> RunHandle<O> {
    /// A handle on an existing run.
    pub fn new(run_id: Uuid) -> Self {
        Self {
            run_id,
            output: PhantomData,
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> Uuid {
        self.run_id
    }

    /// The run as stored now.
    pub async fn run(&self, client: &Client) -> Result<Run, EngineError> {
        engine::run(client.db(), self.run_id).await
    }

    /// Waits (polling) until the run ends, at most `timeout`; returns its typed output.
    pub async fn wait(&self, client: &Client, timeout: Duration) -> Result<O, RunError> {
        let started = tokio::time::Instant::now();
        let mut interval = Duration::from_millis(5);
        loop {
            let run = self.run(client).await?;
            match run.status {
                RunStatus::Completed => {
                    let output = run.output.unwrap_or_default();
                    return serde_json::from_value(output).map_err(|source| RunError::Decode {
                        run_id: self.run_id,
                        source,
                    });
                }
                RunStatus::Failed => {
                    let (step_slug, error) = engine::run_error(client.db(), self.run_id)
                        .await?
                        .unwrap_or_else(|| ("(unknown)".to_owned(), "failed".to_owned()));
                    return Err(RunError::Failed {
                        run_id: self.run_id,
                        step_slug,
                        error,
                    });
                }
                RunStatus::Started => {}
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
}
