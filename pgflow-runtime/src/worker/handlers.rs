//! The one table of `(flow_slug, step_slug)` → step adapter a worker runs, built at startup
//! from the carried flows' steps routed to its queue. Both the pairs its claims support and
//! the dispatch of claimed tasks come from it, so the two cannot disagree.

use std::collections::HashMap;

use crate::engine::SupportedPairs;
use crate::handler::StepHandler;
use crate::names::QueueName;
use crate::worker::registry::RegisteredFlow;

/// The steps a worker runs, by flow and step.
pub struct HandlerTable {
    /// The pairs in registry and step order, as the claim takes them.
    pairs: SupportedPairs,
    /// Flow slug → step slug → adapter (`None` if the flow has no adapter for the step).
    handlers: HashMap<String, HashMap<String, Option<StepHandler>>>,
}

impl HandlerTable {
    /// Every step of `flows` routed to `queue`, with its adapter.
    pub fn routed_to<'a>(
        flows: impl IntoIterator<Item = &'a RegisteredFlow>,
        queue: &QueueName,
    ) -> Self {
        let mut pairs = SupportedPairs::new();
        let mut handlers: HashMap<String, HashMap<String, Option<StepHandler>>> = HashMap::new();
        for flow in flows {
            let definition = &flow.definition;
            for step in definition.steps_routed_to(queue) {
                pairs.insert(&definition.slug, &step.slug);
                handlers
                    .entry(definition.slug.as_str().to_owned())
                    .or_default()
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

    /// The adapter of `step_slug` of `flow_slug`, if this worker runs it.
    pub fn get(&self, flow_slug: &str, step_slug: &str) -> Option<StepHandler> {
        self.handlers.get(flow_slug)?.get(step_slug).copied()?
    }
}
