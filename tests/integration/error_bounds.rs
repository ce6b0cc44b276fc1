//! Error texts are bounded: a handler's megabyte-long error, or one an SQL caller reports, is
//! stored cut to 8,192 characters ending with a marker that gives its whole length, on the
//! task, its attempt history and its step.

use std::time::Duration;

use pgflow::definition::FlowDefinition;
use pgflow::engine::{self, TaskFailure};
use pgflow::{Client, StepError, Worker};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{claim, compiled, flow, install, pairs_for, single, worker_config};

/// A mebibyte of error text.
const MEBIBYTE: usize = 1024 * 1024;

/// The error texts stored for a run's task, its attempts and its step.
async fn stored_errors(pool: &PgPool, run_id: Uuid) -> Vec<String> {
    sqlx::query_scalar(
        "select error_message from pgflow.step_tasks where run_id = $1
         union all
         select error_message from pgflow.task_attempts where run_id = $1
         union all
         select error_message from pgflow.step_states where run_id = $1",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Asserts `errors` holds three texts (task, attempt, step), each cut to the bound with a
/// marker naming a whole length of at least a mebibyte.
fn assert_cut(errors: &[String], starts_with: &str) {
    assert_eq!(errors.len(), 3, "task, attempt and step: {}", errors.len());
    for error in errors {
        assert_eq!(error.chars().count(), 8192);
        assert!(error.starts_with(starts_with), "{}", &error[..80]);
        let marker = error.rsplit("… [truncated, ").next().unwrap();
        let bytes: usize = marker.trim_end_matches(" bytes]").parse().unwrap();
        assert!(
            bytes >= MEBIBYTE,
            "the marker gives the whole length: {marker}"
        );
    }
}

#[pgflow::flow(slug = "verbose_v1", max_attempts = 1)]
pub mod verbose_v1 {
    use super::*;

    #[step(queue = "error_bounds")]
    pub async fn dump(_input: serde_json::Value) -> Result<u32, StepError> {
        Err(StepError::retry(format!("stack: {}", "x".repeat(MEBIBYTE))))
    }
}

#[sqlx::test(migrations = false)]
async fn a_handlers_megabyte_error_is_stored_cut_with_a_marker(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        verbose_v1::deployment(),
        worker_config(verbose_v1::Queue::ErrorBounds, &pool),
    )
    .await
    .unwrap();

    let run = verbose_v1::start(&client, &json!(null)).await.unwrap();
    let error = run
        .wait(&client, Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(
        error.to_string().len() < 10_000,
        "the run's error is bounded too: {} bytes",
        error.to_string().len()
    );
    assert_cut(&stored_errors(&pool, run.run_id()).await, "stack: xxx");

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn an_sql_callers_megabyte_error_is_cut_by_the_core(pool: PgPool) {
    install(&pool).await;
    let f = compiled(
        &pool,
        FlowDefinition::new(flow("raw")).step(single("call", &[])),
    )
    .await;
    let q = f.slug.default_queue();
    let started = engine::start_flow(&pool, "raw", &json!(null))
        .await
        .unwrap();
    let tasks = claim(&pool, &q, &pairs_for(&[&f], &q)).await;
    // Built field by field, as a caller outside this crate's constructors reports it.
    let failure = TaskFailure {
        task: tasks[0].key(),
        error_message: format!("dump: {}", "ü".repeat(MEBIBYTE)),
        permanent: true,
        snooze_seconds: None,
    };
    engine::fail_tasks(&pool, &[failure]).await.unwrap();
    assert_cut(&stored_errors(&pool, started.run_id).await, "dump: üü");
}
