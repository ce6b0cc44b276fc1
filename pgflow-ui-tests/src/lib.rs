//! Nothing to use: this crate holds the trybuild cases of `#[flow]` and `#[step]`
//! (`tests/ui/`), apart from the `pgflow` crate so that trybuild's own build of them compiles
//! only what the cases need. Run them with `cargo test -p pgflow-ui-tests`.
