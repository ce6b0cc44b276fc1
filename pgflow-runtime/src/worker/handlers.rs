//! The one table of `(flow_slug, step_slug)` → step adapter a worker runs, built at startup
//! from the carried flows' steps routed to its queue. Both the pairs its claims support and
//! the dispatch of claimed tasks come from it, so the two cannot disagree.

use std::collections::HashMap;

use crate::engine::SupportedPairs;
use crate::handler::StepHandler;
use crate::names::QueueName;
use crate::state::SharedState;
use crate::worker::registry::RegisteredFlow;

/// The steps a worker runs, by flow and step.
pub struct HandlerTable {
    /// The pairs in registry and step order, as the claim takes them.
    pairs: SupportedPairs,
    /// Flow slug → its state and its routed steps' adapters (`None` if the flow has no
    /// adapter for the step).
    handlers: HashMap<String, FlowHandlers>,
}

/// One carried flow's adapters for a worker's queue, with the state they take.
struct FlowHandlers {
    state: SharedState,
    steps: HashMap<String, Option<StepHandler>>,
}

/// A step adapter ready to run: the adapter and its flow's application state.
pub struct Runnable {
    /// The step adapter.
    pub handler: StepHandler,
    /// The state it hands to its handler.
    pub state: SharedState,
}

impl HandlerTable {
    /// Every step of `flows` routed to `queue`, with its adapter.
    pub fn routed_to<'a>(
        flows: impl IntoIterator<Item = &'a RegisteredFlow>,
        queue: &QueueName,
    ) -> Self {
        let mut pairs = SupportedPairs::new();
        let mut handlers: HashMap<String, FlowHandlers> = HashMap::new();
        for flow in flows {
            let definition = &flow.definition;
            for step in definition.steps_routed_to(queue) {
                pairs.insert(&definition.slug, &step.slug);
                handlers
                    .entry(definition.slug.as_str().to_owned())
                    .or_insert_with(|| FlowHandlers {
                        state: flow.state.clone(),
                        steps: HashMap::new(),
                    })
                    .steps
                    .insert(
                        step.slug.as_str().to_owned(),
                        (flow.handler)(step.slug.as_str()),
                    );
            }
        }
        Self { pairs, handlers }
    }

    /// The exact pairs this worker's claims support.
    pub fn pairs(&self) -> &SupportedPairs {
        &self.pairs
    }

    /// The adapter of `step_slug` of `flow_slug` with its state, if this worker runs it.
    pub fn get(&self, flow_slug: &str, step_slug: &str) -> Option<Runnable> {
        let flow = self.handlers.get(flow_slug)?;
        let handler = flow.steps.get(step_slug).copied()??;
        Some(Runnable {
            handler,
            state: flow.state.clone(),
        })
    }
}
