//! The pgflow runtime: flow definitions and the typed calls into the SQL core.
//!
//! - [`names`]: validated slugs and queue names, the same rules as the SQL `CHECK`s.
//! - [`definition`]: a concrete flow's shape, options and queue routes, as data.
//! - [`engine`]: compile/verify, start runs, claim, complete, fail and recover tasks.
//! - [`deployment`], [`handler`], [`context`]: flows as types (what `#[flow]` generates),
//!   step adapters and what a handler sees.
//! - [`client`]: typed starts and waits.
//! - [`StepError`]: a handler error that says whether retrying can help.
//! - [`State`]: the application state a flow's handlers share.
//! - `testing` (feature `testing`): a test kit for your own flows, with a clock the test moves.

#![cfg_attr(docsrs, feature(doc_cfg))]
pub mod admin;
mod backoff;
pub mod client;
pub mod connect;
pub mod context;
pub mod db;
pub mod definition;
pub mod deployment;
pub mod engine;
pub mod error;
pub mod events;
pub mod failure;
#[cfg(feature = "testing")]
mod faults;
pub mod handler;
mod histogram;
pub mod metrics;
pub mod names;
#[doc(hidden)]
pub mod private;
pub mod process;
pub mod rollout;
pub mod schedule;
pub mod state;
pub mod step_error;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod trace;
pub mod worker;

pub use client::{Client, RunError, RunHandle, Start, StartOptions};
pub use connect::ConnectError;
pub use context::{Context, ContextParts};
pub use db::{Db, Pooling};
pub use definition::{FlowDefinition, FlowOptions, StepDefinition, StepOptions, StepType};
pub use deployment::{Deployment, FlowQueue, FlowSpec};
pub use engine::{
    Activation, ClaimedTask, CompileStatus, DrainStatus, Excess, FailureOutcome, Priority, Pruned,
    Run, RunStatus, SignalOutcome, StalledTask, StartOutcome, SupportedPairs, TaskCompletion,
    TaskFailure,
};
pub use error::{
    AliasTypeMismatch, EngineError, InputMisfit, SignalRefusal, SignalRefused, UnsupportedPair,
};
pub use events::{FlowEvent, FlowEvents, RunEvent, RunEvents};
pub use failure::StepFailure;
pub use handler::{HandlerFuture, StepHandler, TaskInput};
pub use names::{FlowSlug, NameError, QueueName, StepSlug};
pub use process::{Notifications, ProcessConfig};
pub use schedule::{MissedTicks, Schedule, ScheduleError};
pub use state::State;
pub use step_error::StepError;
pub use worker::{Connection, StartingWorker, Worker, WorkerConfig, WorkerError, WorkerHandle};

/// The sqlx this crate is built with (0.8): name pools and queries through `pgflow::sqlx` and
/// their types are the ones pgflow takes, whatever sqlx your own crate depends on.
pub use sqlx;

/// The schemars this crate is built with (1.x), whose `JsonSchema` a flow's input implements for
/// `#[flow(check_input)]`: derive it with your own `schemars = "1"` dependency, or through this
/// one (`#[derive(pgflow::schemars::JsonSchema)] #[schemars(crate = "pgflow::schemars")]`).
pub use schemars;

/// The serde_json this crate is built with: the JSON values flows, inputs and outputs use.
pub use serde_json;
