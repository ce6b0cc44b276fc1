//! Planner statistics when autovacuum is off: `pgflow.refresh_statistics` and the worker's
//! maintenance loop that calls it.

use std::collections::BTreeSet;
use std::time::Duration;

use pgflow::engine;
use pgflow::{Client, FlowDefinition, Worker, WorkerConfig};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{compiled, flow, install, single};

async fn autovacuum_is_on(pool: &PgPool) -> bool {
    sqlx::query_scalar("select current_setting('autovacuum')::boolean")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Starts `runs` runs of `flow_slug` on one connection and asks it to publish its table
/// statistics at once (they are otherwise flushed within seconds).
async fn start_runs(pool: &PgPool, flow_slug: &str, runs: usize) {
    let mut conn = pool.acquire().await.unwrap();
    let inputs: Vec<Value> = (0..runs).map(|i| json!(i)).collect();
    engine::start_flows(&mut *conn, flow_slug, &inputs)
        .await
        .unwrap();
    sqlx::query("select pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await
        .unwrap();
}

async fn estimated_rows(pool: &PgPool, table: &str) -> f32 {
    sqlx::query_scalar("select reltuples from pg_class where oid = $1::regclass")
        .bind(table)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn changed_tables_are_analyzed_once_and_only_on_request_under_autovacuum(pool: PgPool) {
    install(&pool).await;
    compiled(
        &pool,
        FlowDefinition::new(flow("counted")).step(single("only", &[])),
    )
    .await;
    start_runs(&pool, "counted", 300).await;

    if autovacuum_is_on(&pool).await {
        // Autovacuum keeps statistics itself: without the flag, the call does nothing.
        assert!(
            engine::refresh_statistics(&pool, false)
                .await
                .unwrap()
                .is_empty()
        );
    }

    // The four busy tables are analyzed (statistics of the inserting session may take a
    // moment to be published, so the calls are repeated until all four were seen).
    let expected: BTreeSet<String> = [
        "pgflow.runs",
        "pgflow.step_states",
        "pgflow.step_tasks",
        "pgmq.q_counted",
    ]
    .map(str::to_owned)
    .into();
    let mut analyzed = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while analyzed != expected && tokio::time::Instant::now() < deadline {
        analyzed.extend(engine::refresh_statistics(&pool, true).await.unwrap());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(analyzed, expected);
    assert_eq!(estimated_rows(&pool, "pgflow.step_tasks").await, 300.0);
    assert_eq!(estimated_rows(&pool, "pgmq.q_counted").await, 300.0);

    // Nothing changed since: nothing to do.
    assert!(
        engine::refresh_statistics(&pool, true)
            .await
            .unwrap()
            .is_empty()
    );
}

#[pgflow::flow(slug = "maintained")]
pub mod maintained {
    #[step]
    pub async fn only(input: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(input)
    }
}

#[sqlx::test(migrations = false)]
async fn a_worker_keeps_statistics_current_when_autovacuum_is_off(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        maintained::deployment(),
        WorkerConfig::new(maintained::Queue::Maintained)
            .pool(pool.clone())
            .poll_interval(Duration::from_millis(100))
            .heartbeat_interval(Duration::from_millis(100))
            .stalled_check_interval(Duration::from_millis(100))
            .function_name("tests"),
    )
    .await
    .unwrap();
    let last = maintained::start(&client, &json!("first")).await.unwrap();
    last.wait(&client, Duration::from_secs(10)).await.unwrap();
    start_runs(&pool, "maintained", 300).await;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut rows = estimated_rows(&pool, "pgflow.step_tasks").await;
    while rows < 300.0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        rows = estimated_rows(&pool, "pgflow.step_tasks").await;
    }
    if autovacuum_is_on(&pool).await {
        // The worker leaves it to autovacuum (which may or may not have run by now); what it
        // calls returns at once.
        assert!(
            engine::refresh_statistics(&pool, false)
                .await
                .unwrap()
                .is_empty()
        );
    } else {
        assert!(
            rows >= 300.0,
            "the worker analyzed pgflow.step_tasks ({rows} rows estimated)"
        );
    }
    worker.shutdown();
    worker.wait().await.unwrap();
}
