//! The step graph: unknown, self and duplicate dependencies, duplicate steps, cycles (each
//! reported at the entry that closes it) and the topological order.

use std::collections::HashMap;

use crate::errors::{Errors, msg};
use crate::model::Step;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    New,
    Visiting,
    Done,
}

/// Checks the graph; returns the steps' indexes in topological order (declaration order where
/// the dependencies allow), or `None` when the graph is not a DAG of known steps.
pub(crate) fn check(steps: &[Step], errors: &mut Errors) -> Option<Vec<usize>> {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut valid = true;
    for (i, step) in steps.iter().enumerate() {
        if index.insert(step.slug.clone(), i).is_some() {
            errors.at(&step.ident, msg::duplicate_step(&step.slug));
            valid = false;
        }
    }

    // Edges: step -> its dependencies.
    let mut edges: Vec<Vec<(usize, &syn::Ident)>> = vec![Vec::new(); steps.len()];
    for (i, step) in steps.iter().enumerate() {
        let mut listed: Vec<String> = Vec::new();
        for dep in &step.deps {
            let name = dep.to_string();
            if listed.contains(&name) {
                errors.at(dep, msg::duplicate_dependency(&step.slug, &name));
                valid = false;
                continue;
            }
            listed.push(name.clone());
            if name == step.slug {
                errors.at(dep, msg::self_dependency(&step.slug));
                valid = false;
                continue;
            }
            match index.get(&name) {
                Some(&j) => edges[i].push((j, dep)),
                None => {
                    let slugs: Vec<&str> = steps.iter().map(|s| s.slug.as_str()).collect();
                    errors.at(dep, msg::unknown_dependency(&step.slug, &name, &slugs));
                    valid = false;
                }
            }
        }
    }

    let mut marks = vec![Mark::New; steps.len()];
    let mut order = Vec::with_capacity(steps.len());
    let mut path = Vec::new();
    for start in 0..steps.len() {
        visit(
            start, steps, &edges, &mut marks, &mut order, &mut path, errors, &mut valid,
        );
    }
    valid.then_some(order)
}

/// Depth-first: a step is placed after all its dependencies. Meeting a step that is being
/// visited means the edge just followed closes a cycle.
#[allow(clippy::too_many_arguments)]
fn visit(
    node: usize,
    steps: &[Step],
    edges: &[Vec<(usize, &syn::Ident)>],
    marks: &mut [Mark],
    order: &mut Vec<usize>,
    path: &mut Vec<usize>,
    errors: &mut Errors,
    valid: &mut bool,
) {
    if marks[node] != Mark::New {
        return;
    }
    marks[node] = Mark::Visiting;
    path.push(node);
    for &(dep, written) in &edges[node] {
        match marks[dep] {
            Mark::New => visit(dep, steps, edges, marks, order, path, errors, valid),
            Mark::Visiting => {
                // path[at..] is the cycle dep -> ... -> node (each depending on the next);
                // name it in "runs before" order: dep runs before ... before node before dep.
                let at = path.iter().position(|&p| p == dep).unwrap_or(0);
                let mut cycle: Vec<String> = path[at..]
                    .iter()
                    .rev()
                    .map(|&p| steps[p].slug.clone())
                    .collect();
                cycle.rotate_right(1);
                cycle.push(cycle[0].clone());
                errors.at(written, msg::cycle(&cycle));
                *valid = false;
            }
            Mark::Done => {}
        }
    }
    path.pop();
    marks[node] = Mark::Done;
    order.push(node);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    fn steps(source: &str) -> (Vec<Step>, Errors) {
        let mut module: syn::ItemMod = syn::parse_str(source).expect("test module parses");
        let mut errors = Errors::default();
        let flow = crate::model::read(parse::FlowArgs::default(), &mut module, &mut errors);
        (flow.steps, errors)
    }

    fn order_of(source: &str) -> Result<Vec<String>, String> {
        let (steps, mut errors) = steps(source);
        match check(&steps, &mut errors) {
            Some(order) if errors.is_empty() => {
                Ok(order.into_iter().map(|i| steps[i].slug.clone()).collect())
            }
            _ => Err(errors.to_compile_errors().to_string()),
        }
    }

    #[test]
    fn dependencies_come_first_whatever_the_declaration_order() {
        let order = order_of(
            "mod f {
                #[step(depends_on = [b, a])] async fn c() -> Result<(), E> {}
                #[step(depends_on = [a])] async fn b() -> Result<(), E> {}
                #[step] async fn a() -> Result<(), E> {}
                #[step] async fn d() -> Result<(), E> {}
            }",
        );
        assert_eq!(
            order,
            Ok(vec!["a".into(), "b".into(), "c".into(), "d".into()])
        );
    }

    #[test]
    fn a_cycle_is_reported_with_its_path() {
        let error = order_of(
            "mod f {
                #[step(depends_on = [c])] async fn a() -> Result<(), E> {}
                #[step(depends_on = [a])] async fn b() -> Result<(), E> {}
                #[step(depends_on = [b])] async fn c() -> Result<(), E> {}
            }",
        )
        .unwrap_err();
        assert!(
            error.contains("closes a cycle: `a` -> `b` -> `c` -> `a`"),
            "{error}"
        );
    }

    #[test]
    fn unknown_self_and_duplicate_dependencies_are_all_reported() {
        let error = order_of(
            "mod f {
                #[step(depends_on = [ghost, a, a])] async fn a() -> Result<(), E> {}
                #[step] async fn b() -> Result<(), E> {}
                #[step] async fn b() -> Result<(), E> {}
            }",
        )
        .unwrap_err();
        assert!(
            error.contains("depends on `ghost`, which is not a step"),
            "{error}"
        );
        assert!(error.contains("depends on itself"), "{error}");
        assert!(error.contains("lists dependency `a` twice"), "{error}");
        assert!(error.contains("step `b` is defined twice"), "{error}");
    }
}
