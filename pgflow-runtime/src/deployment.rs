//! Flows as types: what `#[flow]` generates implements [`FlowSpec`]; a [`Deployment`] is the
//! value a worker carries and a client starts.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::definition::{FlowDefinition, FlowTypes};
use crate::handler::StepHandler;

/// A queue of a flow: the generated `Queue` enum implements it.
pub trait FlowQueue: Copy + fmt::Debug + fmt::Display + Send + Sync + 'static {
    /// The flow whose routes declare this queue.
    type Flow: FlowSpec;

    /// The queue's name.
    fn name(self) -> &'static str;
}

/// A concrete flow known at compile time. Implemented by the code `#[flow]` generates.
pub trait FlowSpec: Send + Sync + 'static {
    /// The flow input.
    type Input: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// The run output: the leaf steps' outputs by step slug.
    type Output: DeserializeOwned + Send + 'static;
    /// The queues the flow routes to.
    type Queue: FlowQueue<Flow = Self>;
    /// The application state its handlers take (`#[flow(state = T)]`; `()` when none).
    type State: Send + Sync + 'static;

    /// The concrete slug.
    const SLUG: &'static str;

    /// The alias the flow is a version of (its own slug for a plain flow).
    const ALIAS: &'static str;

    /// The flow's shape, options and routes.
    fn definition() -> FlowDefinition;

    /// The adapter of step `step_slug`.
    fn handler(step_slug: &str) -> Option<StepHandler>;
}

/// A concrete flow ready to deploy: its definition, its step handlers and the application
/// state they share, typed by the flow.
pub struct Deployment<F: FlowSpec> {
    definition: Arc<FlowDefinition>,
    state: Arc<F::State>,
    flow: PhantomData<fn() -> F>,
}

impl<F: FlowSpec<State = ()>> Deployment<F> {
    /// The deployment of a flow without application state (what the generated
    /// `deployment()` returns).
    pub fn new() -> Self {
        Self::with_state(())
    }
}

impl<F: FlowSpec> Deployment<F> {
    /// The deployment of `F` carrying `state` (what the generated `deployment(state)` of a
    /// flow with `state = T` returns).
    pub fn with_state(state: F::State) -> Self {
        Self::with_shared_state(Arc::new(state))
    }

    /// The deployment of `F` carrying state that is already shared.
    pub fn with_shared_state(state: Arc<F::State>) -> Self {
        Self {
            definition: Arc::new(F::definition().types(FlowTypes::of::<F::Input, F::Output>())),
            state,
            flow: PhantomData,
        }
    }

    /// The application state its handlers take.
    pub fn state(&self) -> &Arc<F::State> {
        &self.state
    }

    /// The flow's definition.
    pub fn definition(&self) -> &FlowDefinition {
        &self.definition
    }

    /// The concrete slug.
    pub fn slug(&self) -> &'static str {
        F::SLUG
    }

    /// The adapter of a step.
    pub fn handler(&self, step_slug: &str) -> Option<StepHandler> {
        F::handler(step_slug)
    }
}

impl<F: FlowSpec<State = ()>> Default for Deployment<F> {
    fn default() -> Self {
        Self::new()
    }
}

impl<F: FlowSpec> Clone for Deployment<F> {
    fn clone(&self) -> Self {
        Self {
            definition: Arc::clone(&self.definition),
            state: Arc::clone(&self.state),
            flow: PhantomData,
        }
    }
}

impl<F: FlowSpec> fmt::Debug for Deployment<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deployment")
            .field("flow_slug", &F::SLUG)
            .field("alias", &self.definition.alias.as_str())
            .field("version", &self.definition.version)
            .finish()
    }
}
