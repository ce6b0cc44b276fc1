//! Rebuild when a migration is added or changed (they are embedded with `sqlx::migrate!`).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
