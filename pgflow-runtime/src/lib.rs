//! The pgflow runtime: flow definitions and the typed calls into the SQL core.
//!
//! - [`names`]: validated slugs and queue names, the same rules as the SQL `CHECK`s.
//! - [`definition`]: a concrete flow's shape, options and queue routes, as data.
//! - [`engine`]: compile/verify, start runs, claim, complete, fail and recover tasks.

pub mod definition;
pub mod engine;
pub mod error;
pub mod names;

pub use definition::{FlowDefinition, FlowOptions, StepDefinition, StepOptions, StepType};
pub use engine::{
    ClaimedTask, CompileStatus, FailureOutcome, Run, RunStatus, StalledTask, SupportedPairs,
    TaskCompletion, TaskFailure,
};
pub use error::{EngineError, UnsupportedPair};
pub use names::{FlowSlug, NameError, QueueName, StepSlug};
