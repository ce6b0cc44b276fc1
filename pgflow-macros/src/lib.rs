//! Attribute macros for pgflow flows (`#[flow]`, `#[step]`).
//!
//! The flow DSL is built on top of the runtime's flow definitions; until it lands, flows are
//! described with `pgflow_runtime::definition` values directly.
