//! A flow's DAG as Mermaid or DOT text, its steps coloured by a run's states.

use std::collections::HashMap;

use pgflow_runtime::admin::inspect::FlowGraph;

/// The formats `pgflow graph` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// A Mermaid flowchart.
    Mermaid,
    /// Graphviz DOT.
    Dot,
}

impl Format {
    /// `mermaid` or `dot`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Mermaid => "mermaid",
            Self::Dot => "dot",
        }
    }
}

/// Renders `graph` of `flow`; `states` maps step slugs to their state in a run.
pub(crate) fn render(
    format: Format,
    flow: &str,
    graph: &FlowGraph,
    states: &HashMap<String, String>,
) -> String {
    match format {
        Format::Mermaid => mermaid(graph, states),
        Format::Dot => dot(flow, graph, states),
    }
}

fn state_colour(state: &str) -> &'static str {
    match state {
        "completed" => "#b7e4c7",
        "started" => "#ffe8a3",
        "failed" => "#f4a3a3",
        "skipped" => "#d6e4f0",
        "cancelled" => "#d3d3d3",
        _ => "#e9ecef",
    }
}

/// A skipped or cancelled step is drawn with a dashed border, so that it reads as "did not
/// run" without colour.
fn is_dashed(state: &str) -> bool {
    state == "skipped" || state == "cancelled"
}

fn mermaid(graph: &FlowGraph, states: &HashMap<String, String>) -> String {
    let mut text = "flowchart TD\n".to_owned();
    for step in &graph.steps {
        let (slug, queue) = (&step.step_slug, &step.queue_name);
        let shape = if step.step_type == "map" {
            format!("{slug}[[\"{slug} (map)<br/>queue: {queue}\"]]")
        } else {
            format!("{slug}[\"{slug}<br/>queue: {queue}\"]")
        };
        text.push_str(&format!("  {shape}\n"));
    }
    for (from, to) in &graph.edges {
        text.push_str(&format!("  {from} --> {to}\n"));
    }
    for step in &graph.steps {
        if let Some(state) = states.get(&step.step_slug) {
            let dash = if is_dashed(state) {
                ",stroke-dasharray:5 5"
            } else {
                ""
            };
            text.push_str(&format!(
                "  style {} fill:{}{dash}\n",
                step.step_slug,
                state_colour(state)
            ));
        }
    }
    text.trim_end().to_owned()
}

fn dot(flow: &str, graph: &FlowGraph, states: &HashMap<String, String>) -> String {
    let mut text = format!("digraph \"{flow}\" {{\n  rankdir=TB;\n");
    for step in &graph.steps {
        let (slug, queue) = (&step.step_slug, &step.queue_name);
        let shape = if step.step_type == "map" {
            "box3d"
        } else {
            "box"
        };
        let fill = states
            .get(slug)
            .map(|s| {
                let style = if is_dashed(s) {
                    "\"filled,dashed\""
                } else {
                    "filled"
                };
                format!(", style={style}, fillcolor=\"{}\"", state_colour(s))
            })
            .unwrap_or_default();
        text.push_str(&format!(
            "  \"{slug}\" [shape={shape}, label=\"{slug}\\nqueue: {queue}\"{fill}];\n"
        ));
    }
    for (from, to) in &graph.edges {
        text.push_str(&format!("  \"{from}\" -> \"{to}\";\n"));
    }
    text.push('}');
    text
}
