//! The workspace's module layout: no crate has an import cycle between sibling modules (a
//! module that, through its siblings, imports back into itself). A cycle means two modules
//! that cannot be understood, or moved, one without the other.
//!
//! Reads every crate's `src/`: each file is a module; `crate::a::b` and `super::x` paths (uses
//! and qualified calls, outside `#[cfg(test)] mod tests`) are its edges to the module they name,
//! counted between the two siblings under their closest common parent (a parent and its own
//! children do not count).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside a crate: `["worker", "poll"]`.
type Module = Vec<String>;

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

fn module_of(src: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Module = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The identifiers of a path starting at `text` (`a::b::{c, d::e}` gives `[a, b]`; a group
/// gives each member as a path of its own through `groups`).
fn path_segments(text: &str) -> (Vec<String>, Option<&str>) {
    let mut segments = Vec::new();
    let mut rest = text;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        segments.push(rest[..end].to_owned());
        rest = &rest[end..];
        match rest.strip_prefix("::") {
            Some(after) if after.starts_with('{') => {
                let close = after.find('}').unwrap_or(after.len());
                return (segments, Some(&after[1..close]));
            }
            Some(after) => rest = after,
            None => break,
        }
    }
    (segments, None)
}

/// The modules `source` (the file of `module`) names through `crate::` and `super::` paths.
fn references(module: &Module, source: &str) -> Vec<Module> {
    let source = source.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    let code: String = source
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut named = Vec::new();
    for (prefix, base) in [("crate::", Vec::new()), ("super::", parent(module))] {
        for (at, _) in code.match_indices(prefix) {
            let before = code[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let after = &code[at + prefix.len()..];
            if let Some(group) = after.strip_prefix('{') {
                let close = group.find('}').unwrap_or(group.len());
                for member in group[..close].split(',') {
                    let (segments, _) = path_segments(member.trim());
                    named.push([base.clone(), segments].concat());
                }
                continue;
            }
            let (segments, group) = path_segments(after);
            named.push([base.clone(), segments.clone()].concat());
            for member in group.into_iter().flat_map(|g| g.split(',')) {
                let (more, _) = path_segments(member.trim());
                named.push([base.clone(), segments.clone(), more].concat());
            }
        }
    }
    named
}

fn parent(module: &Module) -> Module {
    module[..module.len().saturating_sub(1)].to_vec()
}

/// The sibling modules of `src` that import into each other, in cycles.
fn cycles(src: &Path) -> Vec<BTreeSet<Module>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|file| (module_of(src, file), file.clone()))
        .collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &modules {
        let source = std::fs::read_to_string(file).unwrap();
        for mut target in references(module, &source) {
            while !target.is_empty() && !modules.contains_key(&target) {
                target.pop();
            }
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common == module.len() || common == target.len() {
                continue;
            }
            edges
                .entry(module[..=common].to_vec())
                .or_default()
                .insert(target[..=common].to_vec());
        }
    }
    // A module is in a cycle when it reaches itself.
    let reach = |from: &Module| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(next) = stack.pop() {
            for to in edges.get(&next).into_iter().flatten() {
                if seen.insert(to.clone()) {
                    stack.push(to.clone());
                }
            }
        }
        seen
    };
    let mut found: Vec<BTreeSet<Module>> = Vec::new();
    for module in edges.keys() {
        let reached = reach(module);
        if !reached.contains(module) {
            continue;
        }
        let cycle: BTreeSet<Module> = reached
            .into_iter()
            .filter(|other| reach(other).contains(module))
            .collect();
        if !found.contains(&cycle) {
            found.push(cycle);
        }
    }
    found
}

#[test]
fn no_crate_has_an_import_cycle_between_sibling_modules() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crates = [
        ".",
        "pgflow-cli",
        "pgflow-dashboard",
        "pgflow-macros",
        "pgflow-names",
        "pgflow-runtime",
        "pgflow-sql",
        "pgflow-testkit",
    ];
    let mut found = Vec::new();
    for name in crates {
        for cycle in cycles(&workspace.join(name).join("src")) {
            let modules: Vec<String> = cycle.iter().map(|m| m.join("::")).collect();
            found.push(format!("{name}: {}", modules.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn the_check_finds_a_cycle() {
    let dir = std::env::temp_dir().join(format!("pgflow-layout-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(dir.join("a.rs"), "use crate::b::{inner, Thing};\n").unwrap();
    std::fs::write(dir.join("b/mod.rs"), "mod inner;\n").unwrap();
    std::fs::write(dir.join("b/inner.rs"), "fn f() { crate::a::g() }\n").unwrap();
    let found = cycles(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        [BTreeSet::from([vec!["a".to_owned()], vec!["b".to_owned()]])]
    );
}
