//! Helpers for tests against the database `#[sqlx::test]` gives each test: install pgflow into
//! it, name it by URL for a process of its own (the `pgflow` binary, a worker), and claim tasks
//! as a worker would. Shared by the root package's integration tests and the CLI's tests.
//!
//! They panic on failure, as a test's assertions do: a test that cannot install or claim has
//! nothing left to check.

use pgflow::engine::{self, ClaimedTask, SupportedPairs};
use pgflow::names::QueueName;
use sqlx::PgPool;
use uuid::Uuid;

/// Installs pgflow into the test database behind `pool`; panics when that fails.
pub async fn install(pool: &PgPool) {
    pgflow::install(pool).await.expect("install pgflow");
}

/// A connection URL to the test database behind `pool` (`postgres://user@host:port/database`,
/// no password: the test server trusts its logins), for a process of its own.
pub fn database_url(pool: &PgPool) -> String {
    let options = pool.connect_options();
    format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().expect("test database name")
    )
}

/// Reads and claims up to 100 visible tasks of `queue` for the flows and steps of `pairs`, as
/// a new worker id; panics when the claim fails.
pub async fn claim(pool: &PgPool, queue: &QueueName, pairs: &SupportedPairs) -> Vec<ClaimedTask> {
    engine::read_and_start_tasks(pool, queue, Uuid::new_v4(), pairs, 100)
        .await
        .expect("claim tasks")
        .tasks
}
