//! The `pgflow` binary against a real database: output and exit codes. Every test gets a
//! fresh database from `#[sqlx::test]` (server from `DATABASE_URL`, default in
//! `.env`).
//!
//! One module per command or group of commands, each test in the module of the command it is
//! about: `errors` (what fails before a command runs: no pgflow, no server, no permission, bad
//! arguments), `install` (and `grant`), `status` (`status`, `runs`, `workers`), `run` (one run
//! in detail), `start`, `run_control` (`cancel`, `retry`, `resume`, `delete-flow`), `prune`,
//! `alias`, `rollout` (and `drain-status`), `schedules`, `dashboard`, `pooler` (every command
//! through PgBouncer), and `tables` (tables on a terminal of unknown or narrow width).
//! `support` holds what they share: the `triage` flows, the binary run against a database, and
//! the database helpers of `pgflow_testkit::db`.

#![allow(
    unreachable_pub,
    reason = "a test crate exports nothing; its flows and helpers are `pub`, as in a user's crate"
)]
#![allow(clippy::unwrap_used)]

mod alias;
mod dashboard;
mod errors;
mod install;
mod pooler;
mod prune;
mod replica;
mod rollout;
mod run;
mod run_control;
mod schedules;
mod signal;
mod start;
mod status;
mod support;
mod tables;
mod truth;
