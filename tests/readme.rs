//! README.md shows `examples/readme.rs` whole, and a dependency block for it; CI runs the
//! example. These tests keep the README's copy and the file the same, and the block's versions
//! those the workspace builds with.

use std::path::Path;

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The fenced block that follows `marker` in the README, without its fences.
fn block_after(readme: &str, marker: &str) -> String {
    let after = readme
        .split_once(marker)
        .unwrap_or_else(|| panic!("README.md has no `{marker}`"))
        .1;
    let body = after
        .split_once("```rust\n")
        .expect("a ```rust block after the marker")
        .1;
    body.split_once("```\n")
        .expect("the block's closing fence")
        .0
        .to_owned()
}

#[test]
fn the_readme_shows_the_readme_example_whole() {
    let shown = block_after(&read("README.md"), "<!-- examples/readme.rs -->");
    let file = read("examples/readme.rs");
    if shown != file {
        let first_difference = shown
            .lines()
            .zip(file.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || "at the end".to_owned(),
                |line| format!("at line {}", line + 1),
            );
        panic!(
            "README.md's example and examples/readme.rs differ ({first_difference}); copy the file \
             into the README block"
        );
    }
}

/// `name = "1"` or `name = { version = "1", .. }` in the README's `[dependencies]` block.
fn readme_version(readme: &str, name: &str) -> String {
    let line = readme
        .lines()
        .find(|line| line.starts_with(&format!("{name} = ")))
        .unwrap_or_else(|| panic!("README.md's dependency block has no `{name}`"));
    line.split('"').nth(1).expect("a quoted version").to_owned()
}

/// The version the workspace's Cargo.toml asks for `name`.
fn workspace_version(manifest: &str, name: &str) -> String {
    let line = manifest
        .lines()
        .find(|line| line.starts_with(&format!("{name} = ")))
        .unwrap_or_else(|| panic!("Cargo.toml has no workspace dependency `{name}`"));
    line.split('"').nth(1).expect("a quoted version").to_owned()
}

#[test]
fn the_readme_dependency_block_asks_for_the_majors_the_workspace_uses() {
    let readme = read("README.md");
    let manifest = read("Cargo.toml");
    for name in ["serde", "tokio", "tracing-subscriber"] {
        let shown = readme_version(&readme, name);
        let used = workspace_version(&manifest, name);
        assert!(
            used == shown || used.starts_with(&format!("{shown}.")),
            "README.md asks for {name} {shown:?}, the workspace builds with {used:?}"
        );
    }
}
