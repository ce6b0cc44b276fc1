//! The read models of the `pgflow` command and the dashboard: typed queries for what they show
//! ([`inspect`]: queues, workers, runs, graphs; [`browse`]: the dashboard's paged lists and
//! payloads; [`trends`]: the sampled series the dashboard charts) and how people read numbers
//! ([`human`]: ages, durations, sizes).
//!
//! **Not semver-stable.** These follow what the command and the dashboard show and change with
//! them in any release; the `pgflow` facade does not re-export them. Build on [`crate::engine`]
//! and [`crate::Client`] instead.

pub mod browse;
pub mod human;
pub mod inspect;
pub mod trends;
