//! What a worker carries: deployments of concrete flows, keyed by flow slug, and the
//! compile-time link between a registry and the queue a worker polls.

use std::sync::Arc;

use crate::definition::FlowDefinition;
use crate::deployment::{Deployment, FlowSpec};
use crate::handler::StepHandler;
use crate::state::SharedState;

/// One concrete flow in a worker's registry, type-erased.
#[derive(Clone)]
pub struct RegisteredFlow {
    /// The flow's definition.
    pub definition: Arc<FlowDefinition>,
    /// Its step adapters.
    pub handler: fn(&str) -> Option<StepHandler>,
    /// The application state its adapters hand to handlers.
    pub state: SharedState,
}

impl std::fmt::Debug for RegisteredFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredFlow")
            .field("flow_slug", &self.definition.slug.as_str())
            .finish()
    }
}

/// A set of deployments a worker carries: one [`Deployment`] or a tuple of them.
pub trait Registry: Send + 'static {
    /// The carried flows.
    fn flows(&self) -> Vec<RegisteredFlow>;
}

impl<F: FlowSpec> Registry for Deployment<F> {
    fn flows(&self) -> Vec<RegisteredFlow> {
        vec![RegisteredFlow {
            definition: Arc::new(self.definition().clone()),
            handler: F::handler,
            state: self.state().clone(),
        }]
    }
}

macro_rules! tuple_registry {
    ($($T:ident),+) => {
        impl<$($T: Registry),+> Registry for ($($T,)+) {
            #[allow(non_snake_case)]
            fn flows(&self) -> Vec<RegisteredFlow> {
                let ($($T,)+) = self;
                let mut flows = Vec::new();
                $(flows.extend($T.flows());)+
                flows
            }
        }
    };
}

tuple_registry!(A);
tuple_registry!(A, B);
tuple_registry!(A, B, C);
tuple_registry!(A, B, C, D);
tuple_registry!(A, B, C, D, E);
tuple_registry!(A, B, C, D, E, G);

/// Position markers that keep the [`Routes`] impls of a tuple apart.
pub mod at {
    /// First position (or a lone deployment).
    pub struct P0;
    /// Second position.
    pub struct P1;
    /// Third position.
    pub struct P2;
    /// Fourth position.
    pub struct P3;
    /// Fifth position.
    pub struct P4;
    /// Sixth position.
    pub struct P5;
}

/// `Self` (a registry) carries a deployment of flow `F` at position `At`: a worker may poll a
/// queue of `F` only then.
#[diagnostic::on_unimplemented(
    message = "this worker's queue belongs to flow `{F}`, which is not in its registry",
    label = "no deployment of `{F}` here",
    note = "a worker polls a queue routed by a flow it carries: add that flow's `deployment()` to the registry, or pick a `Queue` of a carried flow"
)]
pub trait Routes<F, At> {}

// `do_not_recommend` on every impl: the error names the flow and the fix, and does not go on
// to list these impls, whose positions and helper types mean nothing to the reader.
#[diagnostic::do_not_recommend]
impl<F: FlowSpec> Routes<F, at::P0> for Deployment<F> {}

/// Never a flow: the impl below gives a lone deployment a second `Routes` impl, so that the
/// compiler cannot take the first as the only candidate. With one candidate it would unify the
/// worker's flow with the deployment's and report a bare type mismatch (E0271) before the
/// clear "this worker's queue belongs to flow ..." error of `Routes`.
#[doc(hidden)]
pub enum NoFlow {}

#[diagnostic::do_not_recommend]
impl<F: FlowSpec> Routes<NoFlow, at::P1> for Deployment<F> {}

macro_rules! routes_at {
    ($at:ident; $($before:ident),*; $($after:ident),*) => {
        #[diagnostic::do_not_recommend]
        impl<F: FlowSpec, $($before,)* $($after,)*> Routes<F, at::$at>
            for ($($before,)* Deployment<F>, $($after,)*)
        {
        }
    };
}

routes_at!(P0; ;);
routes_at!(P0; ; B);
routes_at!(P1; A;);
routes_at!(P0; ; B, C);
routes_at!(P1; A; C);
routes_at!(P2; A, B;);
routes_at!(P0; ; B, C, D);
routes_at!(P1; A; C, D);
routes_at!(P2; A, B; D);
routes_at!(P3; A, B, C;);
routes_at!(P0; ; B, C, D, E);
routes_at!(P1; A; C, D, E);
routes_at!(P2; A, B; D, E);
routes_at!(P3; A, B, C; E);
routes_at!(P4; A, B, C, D;);
routes_at!(P0; ; B, C, D, E, G);
routes_at!(P1; A; C, D, E, G);
routes_at!(P2; A, B; D, E, G);
routes_at!(P3; A, B, C; E, G);
routes_at!(P4; A, B, C, D; G);
routes_at!(P5; A, B, C, D, E;);
