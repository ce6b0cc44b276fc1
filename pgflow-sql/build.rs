//! Rebuild when a migration or a function file is added or changed (both are embedded).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=functions");
}
