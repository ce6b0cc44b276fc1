//! The one table of `(flow_slug, step_slug)` → step adapter a worker runs, built at startup
//! from the carried flows' steps routed to its queue. Both the pairs its claims support and
//! the dispatch of claimed tasks come from it, so the two cannot disagree. It also keeps what
//! SQL says a completion of each pair may claim for the worker at release
//! (`pgflow.claims_at_release`, the rule the claim follows), by which the worker sizes the
//! slots it offers a completion call.

use std::collections::HashMap;

use crate::engine::{ReleasedClaims, SupportedPairs};
use crate::handler::StepHandler;
use crate::names::QueueName;
use crate::state::SharedState;
use crate::worker::registry::RegisteredFlow;

/// The steps a worker runs, by flow and step.
pub(super) struct HandlerTable {
    /// The pairs in registry and step order, as the claim takes them.
    pairs: SupportedPairs,
    /// Flow slug → its state and its routed steps' adapters (`None` if the flow has no
    /// adapter for the step).
    handlers: HashMap<String, FlowHandlers>,
    /// `(flow_slug, step_slug)` → how many tasks its completion in one run may release that
    /// this worker could claim at once (see [`Release`]), as SQL says; steps that release none
    /// are absent.
    releases: HashMap<(String, String), Release>,
}

/// How many tasks the completion of one step in one run may release on the worker's queue,
/// visible at once and run by the worker: tasks a completion call can claim for it (see
/// `pgflow.claims_at_release`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Release {
    /// At most this many (its single dependents).
    AtMost(usize),
    /// Any number (a map dependent has one task per element).
    Many,
}

/// One carried flow's adapters for a worker's queue, with the state they take.
struct FlowHandlers {
    state: SharedState,
    steps: HashMap<String, Option<StepHandler>>,
}

/// A step adapter ready to run: the adapter and its flow's application state.
pub(super) struct Runnable {
    /// The step adapter.
    pub handler: StepHandler,
    /// The state it hands to its handler.
    pub state: SharedState,
}

impl HandlerTable {
    /// Every step of `flows` routed to `queue`, with its adapter.
    pub(super) fn routed_to<'a>(
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
        Self {
            pairs,
            handlers,
            releases: HashMap::new(),
        }
    }

    /// Takes in what SQL says the completion of each of the worker's pairs may claim for it
    /// ([`claims_at_release`](crate::engine::claims_at_release)).
    pub(super) fn set_releases(&mut self, releases: Vec<ReleasedClaims>) {
        self.releases = releases
            .into_iter()
            .map(|released| {
                let release = released
                    .at_most
                    .map_or(Release::Many, |n| Release::AtMost(n as usize));
                (
                    (
                        released.flow_slug.as_str().to_owned(),
                        released.step_slug.as_str().to_owned(),
                    ),
                    release,
                )
            })
            .collect();
    }

    /// How many tasks completing `step_slug` of `flow_slug` in one run may release that this
    /// worker could claim at once; `None` when it releases none.
    pub(super) fn release(&self, flow_slug: &str, step_slug: &str) -> Option<Release> {
        self.releases
            .get(&(flow_slug.to_owned(), step_slug.to_owned()))
            .copied()
    }

    /// The exact pairs this worker's claims support.
    pub(super) fn pairs(&self) -> &SupportedPairs {
        &self.pairs
    }

    /// The adapter of `step_slug` of `flow_slug` with its state, if this worker runs it.
    pub(super) fn get(&self, flow_slug: &str, step_slug: &str) -> Option<Runnable> {
        let flow = self.handlers.get(flow_slug)?;
        let handler = flow.steps.get(step_slug).copied()??;
        Some(Runnable {
            handler,
            state: flow.state.clone(),
        })
    }
}
