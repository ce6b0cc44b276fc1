//! Running one step handler on one claimed task: decoding its input, encoding its output, and
//! the failures on the way.

use std::future::Future;
use std::pin::Pin;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::Context;
use crate::engine::ClaimedTask;
pub use crate::failure::StepFailure;
use crate::failure::decode;
use crate::state::{SharedState, State};

/// The future a step adapter returns: the encoded output, or why the attempt failed.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, StepFailure>> + Send>>;

/// A step adapter: decodes the task's input into the handler's parameters, calls the handler
/// and encodes its output. `#[flow]` generates one per step.
pub type StepHandler = fn(TaskInput) -> HandlerFuture;

/// The claimed task as a step adapter sees it.
#[derive(Debug)]
pub struct TaskInput {
    task: ClaimedTask,
    context: Context,
    state: SharedState,
}

impl TaskInput {
    /// Pairs a claimed task with its context and its flow's application state.
    pub fn new(task: ClaimedTask, context: Context, state: SharedState) -> Self {
        Self {
            task,
            context,
            state,
        }
    }

    /// The claimed task.
    pub fn task(&self) -> &ClaimedTask {
        &self.task
    }

    /// The task's context (cheap to clone).
    pub fn context(&self) -> Context {
        self.context.clone()
    }

    /// The flow's application state as `T` (the flow's declared `state` type, which the
    /// macro checks at compile time; a mismatch here means a hand-built registry).
    pub fn state<T: Send + Sync + 'static>(&self) -> Result<State<T>, StepFailure> {
        std::sync::Arc::clone(&self.state)
            .downcast::<T>()
            .map(State::new)
            .map_err(|_| StepFailure::StateType {
                step_slug: self.task.step_slug.to_string(),
                type_name: std::any::type_name::<T>(),
            })
    }

    /// The whole claimed input as `T`: the flow input of a root single step, or the element
    /// of a map step. `parameter` names the handler parameter in errors. The input is moved
    /// out, not copied: a handler takes it once.
    pub fn whole<T: DeserializeOwned>(&mut self, parameter: &str) -> Result<T, StepFailure> {
        let input = std::mem::take(&mut self.task.input);
        decode(self.task.step_slug.as_str(), parameter, input)
    }

    /// The output of dependency `dependency` as `T`, moved out of the input (each dependency
    /// is one parameter).
    pub fn dependency<T: DeserializeOwned>(&mut self, dependency: &str) -> Result<T, StepFailure> {
        let value = self
            .task
            .input
            .as_object_mut()
            .and_then(|outputs| outputs.remove(dependency))
            .ok_or_else(|| StepFailure::MissingDependency {
                step_slug: self.task.step_slug.to_string(),
                dependency: dependency.to_owned(),
            })?;
        decode(self.task.step_slug.as_str(), dependency, value)
    }

    /// The payload of signal `signal`, which the step waited for, as `T`, read from the run.
    pub async fn signal<T: DeserializeOwned>(&self, signal: &str) -> Result<T, StepFailure> {
        self.context.signal_payload(signal).await
    }

    /// The flow input as `T`, read from the run (for steps that are not roots).
    pub async fn flow_input<T: DeserializeOwned>(&self) -> Result<T, StepFailure> {
        self.context.flow_input().await
    }
}
