//! A flow's DAG as SVG: `layout-rs` places the steps in layers (edge crossings reduced) and
//! draws them; each box is coloured by its step's state in a run, when there is one.

use std::collections::HashMap;

use layout::backends::svg::SVGWriter;
use layout::core::base::Orientation;
use layout::core::color::Color;
use layout::core::geometry::Point;
use layout::core::style::StyleAttr;
use layout::std_shapes::shapes::{Arrow, Element, ShapeKind};
use layout::topo::layout::VisualGraph;
use pgflow_runtime::admin::inspect::FlowGraph;

/// Fill and outline of a step box in one state.
fn colours(status: Option<&str>) -> (&'static str, &'static str) {
    match status {
        Some("completed") => ("#d3f4dc", "#1f7a3a"),
        Some("started") => ("#d6e6ff", "#1f57c4"),
        Some("waiting") => ("#f3e8ff", "#6b3fa0"),
        Some("failed") => ("#ffd9d9", "#b3261e"),
        Some("cancelled") => ("#ffe8cc", "#a35200"),
        Some("skipped") => ("#eeeeee", "#777777"),
        _ => ("#ffffff", "#555555"),
    }
}

/// The DAG of `graph` as an SVG element. With `states` (step slug to status), each box shows
/// its step's status and is coloured by it. An empty graph draws nothing.
pub(crate) fn render(graph: &FlowGraph, states: Option<&HashMap<String, String>>) -> String {
    if graph.steps.is_empty() {
        return String::new();
    }
    let mut visual = VisualGraph::new(Orientation::TopToBottom);
    let mut handles = HashMap::new();
    for step in &graph.steps {
        let status = states.and_then(|states| states.get(&step.step_slug));
        let kind = if step.step_type == "map" {
            " [map]"
        } else {
            ""
        };
        let label = match status {
            Some(status) => format!("{}{kind}\n{status}", step.step_slug),
            None => format!("{}{kind}\n{}", step.step_slug, step.queue_name),
        };
        let (fill, line) = colours(status.map(String::as_str));
        let style = StyleAttr::new(Color::fast(line), 2, Some(Color::fast(fill)), 6, 14);
        let widest = label.lines().map(str::len).max().unwrap_or(1) as f64;
        let size = Point::new(widest * 8.5 + 24.0, 52.0);
        let shape = ShapeKind::new_box(&label);
        let handle = visual.add_node(Element::create(
            shape,
            style,
            Orientation::LeftToRight,
            size,
        ));
        handles.insert(step.step_slug.as_str(), handle);
    }
    for (from, to) in &graph.edges {
        if let (Some(&from), Some(&to)) = (handles.get(from.as_str()), handles.get(to.as_str())) {
            visual.add_edge(Arrow::simple(""), from, to);
        }
    }
    let mut svg = SVGWriter::new();
    visual.do_it(false, false, false, &mut svg);
    let text = svg.finalize();
    // An inline SVG needs no XML declaration.
    match text.find("<svg") {
        Some(start) => text[start..].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use pgflow_runtime::admin::inspect::GraphStep;

    use super::*;

    fn step(slug: &str, step_type: &str) -> GraphStep {
        GraphStep {
            step_slug: slug.to_owned(),
            step_type: step_type.to_owned(),
            queue_name: "q".to_owned(),
            condition_when: None,
            condition_unless: None,
            when_unmet: "skip".to_owned(),
        }
    }

    #[test]
    fn every_step_is_drawn_with_its_state_and_colour() {
        let graph = FlowGraph {
            steps: vec![
                step("fetch", "single"),
                step("split", "map"),
                step("join", "single"),
            ],
            edges: vec![
                ("fetch".to_owned(), "split".to_owned()),
                ("split".to_owned(), "join".to_owned()),
            ],
        };
        let states = HashMap::from([
            ("fetch".to_owned(), "completed".to_owned()),
            ("split".to_owned(), "failed".to_owned()),
            ("join".to_owned(), "created".to_owned()),
        ]);
        let svg = render(&graph, Some(&states));
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in [
            "fetch",
            "split [map]",
            "join",
            "completed",
            "failed",
            "#b3261e",
        ] {
            assert!(svg.contains(text), "{text} missing from {svg}");
        }
        assert!(render(&FlowGraph::default(), None).is_empty());
    }
}
