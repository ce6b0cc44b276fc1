//! pgflow for Rust: Postgres-native durable workflows.
//!
//! Flows are DAGs of typed Rust handlers; Postgres (schema `pgflow`) stores every run, step and
//! task, PGMQ queues the work, and workers anywhere run it. This facade re-exports the runtime
//! ([`pgflow_runtime`]) and the installer ([`pgflow_sql`]).
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use pgflow::{FlowDefinition, FlowSlug, StepDefinition, StepSlug};
//!
//! pgflow::install(&pool).await?;
//! let flow = FlowDefinition::new(FlowSlug::new("greet")?)
//!     .step(StepDefinition::single(StepSlug::new("hello")?));
//! pgflow::engine::compile_flow(&pool, &flow).await?;
//! let run = pgflow::engine::start_flow(&pool, "greet", &serde_json::json!({"name": "Ada"})).await?;
//! println!("started run {}", run.run_id);
//! # Ok(()) }
//! ```

pub use pgflow_runtime::*;

#[doc = include_str!("docs/flow.md")]
pub use pgflow_macros::flow;

/// Marks an `async fn` inside a [`flow`] module as a step (keys: `queue`, `depends_on`, `map`,
/// `max_attempts`, `base_delay`, `timeout`, `start_delay`). `#[flow]` reads and removes it;
/// anywhere else it is a compile error.
pub use pgflow_macros::step;

/// Not public API: what the macros expand to calls into this module.
#[doc(hidden)]
pub use pgflow_runtime::private as __private;
pub use pgflow_sql::{
    InstallError, InstallReport, PgmqSource, SchemaStatus, check_schema, code_functions_checksum,
    code_migration_versions, code_schema_version, connection_target, functions_current, install,
    install_url,
};

/// The documents in `docs/`, compiled as doc tests so that their code stays true.
#[cfg(doctest)]
pub mod docs {
    #[doc = include_str!("../docs/concepts.md")]
    pub struct Concepts;
    #[doc = include_str!("../docs/configuration.md")]
    pub struct Configuration;
    #[doc = include_str!("../docs/operations.md")]
    pub struct Operations;
    #[doc = include_str!("../docs/rollout.md")]
    pub struct Rollout;
    #[doc = include_str!("../docs/coming-from-typescript.md")]
    pub struct ComingFromTypescript;
}
