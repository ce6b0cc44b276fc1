//! Integration tests of the SQL core against a real Postgres with real PGMQ.
//!
//! Every test gets a fresh database from `#[sqlx::test]` (server from `DATABASE_URL`, default
//! in `.env`) and installs pgflow into it.

#![allow(
    unreachable_pub,
    reason = "a test crate exports nothing; its flows and helpers are `pub`, as in a user's crate"
)]
#![allow(clippy::unwrap_used)]

mod app_state;
mod browse;
mod cancel;
mod caps;
mod claim;
mod claims_at_release;
mod concurrency;
mod conditions;
mod connections;
mod define;
mod delete_flow;
mod dsl;
mod error_bounds;
mod events;
mod failover;
mod flow_control;
mod flows;
mod handles;
mod history;
mod idempotency;
mod input_checks;
mod install;
mod integrity;
mod layout;
mod lost_workers;
mod metrics;
mod outputs;
mod pooler;
mod priorities;
mod process;
mod queue_caps;
mod rate_limits;
mod retention;
mod retry;
mod retry_policy;
mod retry_resume;
mod roles;
mod rollout;
mod schedules;
mod signals;
mod sleeps;
mod snooze;
mod stalled;
mod start_guards;
mod starts;
mod statistics;
mod step_states;
mod subflows;
mod support;
mod test_kit;
mod tls;
mod trends;
mod typed_alias;
mod upgrade;
mod wakeups;
mod worker;
