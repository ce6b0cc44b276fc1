//! pgflow for Rust: Postgres-native durable workflows.
//!
//! A flow is a module of typed async step handlers; [`#[flow]`](flow) checks its DAG, its
//! queues and its handler types at compile time. Postgres (schema `pgflow`) stores every run,
//! step and task and owns retries, timeouts, fan-out and recovery; PGMQ queues the work;
//! [`Worker`]s anywhere run it, one queue each.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use pgflow::{Client, Worker};
//!
//! #[pgflow::flow(slug = "greet_v1", alias = "greet", input = String)]
//! mod greet_v1 {
//!     #[step]
//!     pub async fn hello(input: String) -> Result<String, String> {
//!         Ok(format!("hello, {input}"))
//!     }
//!
//!     #[step(depends_on = [hello])]
//!     pub async fn shout(hello: String) -> Result<String, String> {
//!         Ok(hello.to_uppercase())
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::connect("postgres://postgres@127.0.0.1/postgres").await?;
//! pgflow::install(client.pool()).await?;
//! let worker = Worker::start_on(greet_v1::deployment(), &client).await?;
//!
//! let run = greet_v1::start(&client, &"Ada".to_owned()).await?;
//! let output = run.wait(&client, Duration::from_secs(10)).await?;
//! assert_eq!(output.shout, "HELLO, ADA");
//!
//! worker.shutdown();
//! worker.wait().await?;
//! # Ok(()) }
//! ```
//!
//! Where to go next:
//! - [`flow`]: every key of `#[flow]` and `#[step]`, maps, queues, options, and what it
//!   generates.
//! - [`Worker`], [`WorkerConfig`]: queue-centric workers, registries of several flows, their
//!   settings and how long they run.
//! - [`Client`], [`RunHandle`]: starting runs (typed, by alias, many at once) and waiting.
//! - [`install`]: the schema, its upgrades and PGMQ.
//! - The untyped layer under the macros: [`definition`] (flows as data), [`engine`] (one typed
//!   call per SQL function), [`names`] (validated slugs and queue names), [`schema`].

#![cfg_attr(docsrs, feature(doc_cfg))]
pub use pgflow_runtime::{
    Client, ConnectError, Connection, Context, Db, Deployment, EngineError, Excess, FlowQueue,
    FlowSpec, Notifications, Pooling, Priority, ProcessConfig, Run, RunError, RunHandle, RunStatus,
    Schedule, SignalOutcome, SignalRefusal, SignalRefused, Start, StartOptions, StartOutcome,
    State, StepError, Worker, WorkerConfig, WorkerError, WorkerHandle, schemars, serde_json, sqlx,
};
pub use pgflow_runtime::{
    client, connect, context, db, definition, deployment, engine, error, events, failure, handler,
    metrics, names, process, rollout, schedule, trace, worker,
};

/// A test kit for your own flows: a throwaway database per test, workers in the test, a run
/// driven to its end, planned faults, and a clock the test moves forward (feature `testing`).
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use pgflow_runtime::testing;

#[doc = include_str!("docs/flow.md")]
pub use pgflow_macros::flow;

/// Marks an `async fn` inside a [`flow`] module as a step (keys: `queue`, `depends_on`, `map`,
/// `max_attempts`, `base_delay`, `max_delay`, `jitter_percent`, `timeout`, `start_delay`,
/// `when`, `unless`, `when_unmet`, `when_exhausted`, `signal`, `key`, `wait_timeout`,
/// `when_timed_out`, `sleep`, `sleep_until`, `subflow`; see [`flow`]). `#[flow]` reads and removes
/// it; anywhere else it is a compile error.
pub use pgflow_macros::step;

/// The rules `#[flow]` checks a flow's handlers against at compile time, as traits: their
/// names appear in its errors. Nothing here is to be implemented or called.
pub mod rules {
    pub use pgflow_runtime::private::{
        DependencyType, FlowInputType, InputSchema, MapElement, OutputField, SignalPayload,
        SignalSchema, StateType, StepResult, SubflowInput, WakeTime, assert_output_field,
    };
}

/// Not public API: what the macros expand to calls into this module.
#[doc(hidden)]
pub use pgflow_runtime::private as __private;
pub use pgflow_sql::{InstallError, InstallReport, PgflowRole, grant_role, install, install_url};

/// The schema's state and this code's view of it: what `pgflow install` and worker startup
/// check.
pub mod schema {
    pub use pgflow_sql::{
        PgmqSource, SchemaStatus, check_schema, code_functions_checksum, code_migration_versions,
        code_schema_version, connection_target, functions_current,
    };
}

/// The documents in `docs/`, compiled as doc tests so that their code stays true.
#[cfg(doctest)]
pub mod docs {
    #[doc = include_str!("../docs/concepts.md")]
    pub struct Concepts;
    #[doc = include_str!("../docs/configuration.md")]
    pub struct Configuration;
    #[doc = include_str!("../docs/waiting.md")]
    pub struct Waiting;
    #[doc = include_str!("../docs/testing.md")]
    pub struct Testing;
    /// `docs/operations/`, one page a struct.
    pub mod operations {
        #[doc = include_str!("../docs/operations/README.md")]
        pub struct Index;
        #[doc = include_str!("../docs/operations/install-and-upgrade.md")]
        pub struct InstallAndUpgrade;
        #[doc = include_str!("../docs/operations/roles.md")]
        pub struct Roles;
        #[doc = include_str!("../docs/operations/connecting.md")]
        pub struct Connecting;
        #[doc = include_str!("../docs/operations/run-control.md")]
        pub struct RunControl;
        #[doc = include_str!("../docs/operations/observability.md")]
        pub struct Observability;
        #[doc = include_str!("../docs/operations/events-and-dashboard.md")]
        pub struct EventsAndDashboard;
        #[doc = include_str!("../docs/operations/waking-workers.md")]
        pub struct WakingWorkers;
        #[doc = include_str!("../docs/operations/flow-control.md")]
        pub struct FlowControl;
        #[doc = include_str!("../docs/operations/database-upkeep.md")]
        pub struct DatabaseUpkeep;
        #[doc = include_str!("../docs/operations/rollouts-and-draining.md")]
        pub struct RolloutsAndDraining;
        #[doc = include_str!("../docs/operations/faults.md")]
        pub struct Faults;
    }
    #[doc = include_str!("../docs/rollout.md")]
    pub struct Rollout;
    #[doc = include_str!("../docs/coming-from-typescript.md")]
    pub struct ComingFromTypescript;
}
