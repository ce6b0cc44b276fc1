//! The one table of `(flow_slug, step_slug)` → step adapter a worker runs, built at startup
//! from the carried flows' steps routed to its queue. Both the pairs its claims support and
//! the dispatch of claimed tasks come from it, so the two cannot disagree.

use std::collections::HashMap;

use crate::definition::{FlowDefinition, StepType};
use crate::engine::SupportedPairs;
use crate::handler::StepHandler;
use crate::names::QueueName;
use crate::names::StepSlug;
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
    /// this worker could claim at once (see [`Release`]); steps that release none are absent.
    releases: HashMap<(String, String), Release>,
}

/// How many tasks the completion of one step in one run may release on the worker's queue,
/// visible at once and run by the worker: tasks a completion call can claim for it.
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
        let mut releases = HashMap::new();
        for flow in flows {
            let definition = &flow.definition;
            for step in definition.steps_routed_to(queue) {
                if let Some(release) = release_of(definition, &step.slug, queue) {
                    releases.insert(
                        (
                            definition.slug.as_str().to_owned(),
                            step.slug.as_str().to_owned(),
                        ),
                        release,
                    );
                }
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
            releases,
        }
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

/// The tasks completing `step` may release for a claim at completion: its dependents routed to
/// `queue` that start without a delay and without a condition to decide (the SQL core leaves
/// those to its slower path, which never claims). None for a map step: only the last of its
/// many tasks releases anything, and holding a slot for each of their completions would take
/// it from the poll loop's claims.
fn release_of(flow: &FlowDefinition, step: &StepSlug, queue: &QueueName) -> Option<Release> {
    let completed = flow.steps.iter().find(|s| &s.slug == step)?;
    if completed.step_type == StepType::Map {
        return None;
    }
    let mut singles = 0;
    for dependent in flow.steps_routed_to(queue) {
        let claimable = dependent.depends_on.contains(step)
            && dependent.condition.is_none()
            && dependent
                .options
                .start_delay
                .is_none_or(|delay| delay.is_zero());
        if !claimable {
            continue;
        }
        match dependent.step_type {
            StepType::Map => return Some(Release::Many),
            StepType::Single => singles += 1,
        }
    }
    (singles > 0).then_some(Release::AtMost(singles))
}
