//! A flow's DAG as Mermaid or DOT text, its steps coloured by a run's states.

use std::collections::HashMap;

use pgflow_runtime::admin::inspect::{FlowGraph, GraphStep};

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

/// A step's label, line by line: its name (with `(map)` for a map step), its queue and its
/// conditions (`when {...}`, `unless {...}`, and what an unmet one does when not `skip`).
fn label_lines(step: &GraphStep) -> Vec<String> {
    let mut lines = vec![if step.step_type == "map" {
        format!("{} (map)", step.step_slug)
    } else {
        step.step_slug.clone()
    }];
    lines.push(format!("queue: {}", step.queue_name));
    if let Some(pattern) = &step.condition_when {
        lines.push(format!("when {pattern}"));
    }
    if let Some(pattern) = &step.condition_unless {
        lines.push(format!("unless {pattern}"));
    }
    let conditional = step.condition_when.is_some() || step.condition_unless.is_some();
    if conditional && step.when_unmet != "skip" {
        lines.push(format!("when unmet: {}", step.when_unmet));
    }
    lines
}

fn mermaid(graph: &FlowGraph, states: &HashMap<String, String>) -> String {
    let mut text = "flowchart TD\n".to_owned();
    for step in &graph.steps {
        let slug = &step.step_slug;
        // Mermaid reads `"` as the end of a label: an entity stands for it.
        let label = label_lines(step)
            .iter()
            .map(|line| line.replace('"', "#quot;"))
            .collect::<Vec<_>>()
            .join("<br/>");
        let shape = if step.step_type == "map" {
            format!("{slug}[[\"{label}\"]]")
        } else {
            format!("{slug}[\"{label}\"]")
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
        let slug = &step.step_slug;
        let label = label_lines(step)
            .iter()
            .map(|line| line.replace('\\', "\\\\").replace('"', "\\\""))
            .collect::<Vec<_>>()
            .join("\\n");
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
            "  \"{slug}\" [shape={shape}, label=\"{label}\"{fill}];\n"
        ));
    }
    for (from, to) in &graph.edges {
        text.push_str(&format!("  \"{from}\" -> \"{to}\";\n"));
    }
    text.push('}');
    text
}
