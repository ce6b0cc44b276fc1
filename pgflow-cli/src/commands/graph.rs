//! `pgflow graph`: a flow's DAG (of a concrete flow or an alias's active flow).

use std::collections::HashMap;

use pgflow_runtime::admin::inspect::{self, FlowName};
use serde_json::json;

use super::{resolve_flow, resolve_run_id};
use crate::failure::Failure;
use crate::graph::{Format, render};
use crate::output::Output;

/// Prints the DAG, coloured by `run`'s step states when given.
pub(super) async fn graph(
    pool: &pgflow::Db,
    out: &Output,
    name: &str,
    format: Format,
    run: Option<&str>,
) -> Result<(), Failure> {
    let run = match run {
        Some(text) => Some(resolve_run_id(pool, text).await?),
        None => None,
    };
    let resolved = resolve_flow(pool, name).await?;
    let flow = match run {
        None => resolved.flow_slug().to_owned(),
        // With a run, the graph is that run's flow: an alias may have moved on since.
        Some(run_id) => {
            let run = pgflow::engine::run(pool, run_id).await?;
            let belongs = match &resolved {
                FlowName::Concrete(slug) => *slug == run.flow_slug,
                FlowName::Alias { alias, .. } => {
                    inspect::flow_alias(pool, &run.flow_slug).await?.as_deref()
                        == Some(alias.as_str())
                }
            };
            if !belongs {
                return Err(Failure::runtime(format!(
                    "run {run_id} is of flow `{}`, not of `{name}`",
                    run.flow_slug
                )));
            }
            run.flow_slug
        }
    };
    let dag = inspect::flow_graph(pool, &flow).await?;
    let states: HashMap<String, String> = match run {
        None => HashMap::new(),
        Some(run_id) => inspect::step_states(pool, run_id)
            .await?
            .into_iter()
            .collect(),
    };
    let text = render(format, &flow, &dag, &states);
    out.print(
        json!({ "format": format.as_str(), "flow_slug": flow, "graph": text }),
        || text.clone(),
    );
    Ok(())
}
