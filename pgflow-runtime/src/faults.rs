//! Faults a test plans for a step's next attempts: each is taken by the next attempt of its
//! step that a worker of the test's client claims, in place of the handler. The test kit's
//! (feature `testing`, `pgflow::testing`); a module of its own, which the client's shared state
//! and the worker reach without reaching the kit.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::deployment::FlowSpec;
use crate::handler::HandlerFuture;
use crate::handler::StepFailure;

/// A fault was planned for a step the flow does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("flow `{flow_slug}` has no step `{step_slug}` (its steps: {})", steps.join(", "))]
pub struct UnknownStep {
    /// The flow.
    pub flow_slug: String,
    /// The step asked for.
    pub step_slug: String,
    /// The flow's steps.
    pub steps: Vec<String>,
}

/// What an attempt does instead of running its handler.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Fails with this error, as a handler returning `Err` does: the task is retried while
    /// the step has attempts left, after the step's backoff.
    Fail(String),
    /// Fails at once, whatever attempts remain, as
    /// [`StepError::permanent`](crate::StepError::permanent) does.
    FailPermanently(String),
    /// Panics with this message: the worker catches it and records a failed attempt.
    Panic(String),
    /// Never returns, as a handler stuck on a dead connection: the attempt ends when its
    /// timeout fires, its worker stops or its run ends.
    Hang,
}

impl Fault {
    /// The future that stands in for the handler.
    pub(crate) fn into_handler(self) -> HandlerFuture {
        match self {
            Self::Fail(error) => Box::pin(async move { Err(StepFailure::Handler(error)) }),
            Self::FailPermanently(error) => {
                Box::pin(async move { Err(StepFailure::Permanent(error)) })
            }
            Self::Panic(message) => Box::pin(async move { std::panic::panic_any(message) }),
            Self::Hang => Box::pin(std::future::pending()),
        }
    }
}

/// The faults a test planned, by flow and step, each list taken in order by the step's next
/// attempts. Shared by every worker of the test's client; see
/// `TestEnv::faults`.
#[derive(Debug, Default)]
pub struct Faults {
    planned: Mutex<HashMap<(String, String), VecDeque<Fault>>>,
}

impl Faults {
    /// Plans `fault` for the next `times` attempts of `step` of the flow `F` (after the faults
    /// already planned for it). Fails, planning nothing, when `F` has no such step.
    pub fn plan<F: FlowSpec>(
        &self,
        step: &str,
        fault: Fault,
        times: u32,
    ) -> Result<(), UnknownStep> {
        let definition = F::definition();
        if !definition.steps.iter().any(|s| s.slug.as_str() == step) {
            return Err(UnknownStep {
                flow_slug: F::SLUG.to_owned(),
                step_slug: step.to_owned(),
                steps: definition
                    .steps
                    .iter()
                    .map(|s| s.slug.as_str().to_owned())
                    .collect(),
            });
        }
        let mut planned = self.lock();
        let queue = planned
            .entry((F::SLUG.to_owned(), step.to_owned()))
            .or_default();
        queue.extend(std::iter::repeat_n(fault, times as usize));
        Ok(())
    }

    /// The next `times` attempts of `step` fail with `error` (retried while attempts remain).
    pub fn fail<F: FlowSpec>(
        &self,
        step: &str,
        error: &str,
        times: u32,
    ) -> Result<(), UnknownStep> {
        self.plan::<F>(step, Fault::Fail(error.to_owned()), times)
    }

    /// The next `times` attempts of `step` panic with `message`.
    pub fn panic<F: FlowSpec>(
        &self,
        step: &str,
        message: &str,
        times: u32,
    ) -> Result<(), UnknownStep> {
        self.plan::<F>(step, Fault::Panic(message.to_owned()), times)
    }

    /// The next `times` attempts of `step` never return (see [`Fault::Hang`]).
    pub fn hang<F: FlowSpec>(&self, step: &str, times: u32) -> Result<(), UnknownStep> {
        self.plan::<F>(step, Fault::Hang, times)
    }

    /// How many planned faults no attempt has taken yet, over every step.
    pub fn pending(&self) -> usize {
        self.lock().values().map(VecDeque::len).sum()
    }

    /// Forgets every planned fault not taken yet.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Takes the next fault planned for the step, if any.
    pub(crate) fn take(&self, flow_slug: &str, step_slug: &str) -> Option<Fault> {
        let mut planned = self.lock();
        if planned.is_empty() {
            return None;
        }
        let key = (flow_slug.to_owned(), step_slug.to_owned());
        let queue = planned.get_mut(&key)?;
        let fault = queue.pop_front();
        if queue.is_empty() {
            planned.remove(&key);
        }
        fault
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), VecDeque<Fault>>> {
        self.planned.lock().unwrap_or_else(|e| e.into_inner())
    }
}
