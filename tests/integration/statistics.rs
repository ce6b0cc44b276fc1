//! Servers without autovacuum: `pgflow.refresh_statistics`, vacuuming pgflow's busy tables, and
//! the worker's maintenance loop that does both; and plans made on small tables staying right
//! as the tables grow.

use std::collections::BTreeSet;
use std::time::Duration;

use pgflow::definition::FlowDefinition;
use pgflow::engine;
use pgflow::{Client, ProcessConfig, Worker, WorkerHandle};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{compiled, eventually, flow, install, single, worker_config};

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
    eventually(20, async || {
        analyzed.extend(engine::refresh_statistics(&pool, true).await.unwrap());
        analyzed == expected
    })
    .await;
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

/// A worker of `maintained` whose maintenance passes are `maintenance_every` apart.
async fn maintained_worker(pool: &PgPool, maintenance_every: Duration) -> WorkerHandle {
    Worker::start_with(
        maintained::deployment(),
        worker_config(maintained::Queue::Maintained, pool).connection(Client::with_config(
            pool.clone(),
            ProcessConfig::new().stalled_check_interval(maintenance_every),
        )),
    )
    .await
    .unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_worker_keeps_statistics_current_and_vacuums_when_autovacuum_is_off(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = maintained_worker(&pool, Duration::from_millis(100)).await;
    let last = maintained::start(&client, &json!("first")).await.unwrap();
    last.wait(&client, Duration::from_secs(10)).await.unwrap();
    start_runs(&pool, "maintained", 300).await;

    eventually(20, async || {
        estimated_rows(&pool, "pgflow.step_tasks").await >= 300.0
    })
    .await;
    let rows = estimated_rows(&pool, "pgflow.step_tasks").await;
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
        // Each message left dead row versions behind (read, then archived): the worker's
        // maintenance pass vacuums the queue table too.
        eventually(20, async || {
            vacuum_count(&pool, "pgmq.q_maintained").await > 0
        })
        .await;
        assert!(vacuum_count(&pool, "pgmq.q_maintained").await >= 1);
    }
    worker.shutdown();
    worker.wait().await.unwrap();
}

async fn vacuum_count(pool: &PgPool, table: &str) -> i64 {
    sqlx::query_scalar("select vacuum_count from pg_stat_user_tables where relid = $1::regclass")
        .bind(table)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn tables_with_many_dead_rows_are_vacuumed_one_caller_at_a_time(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    // Maintenance passes are an hour apart: this test makes the calls itself.
    let worker = maintained_worker(&pool, Duration::from_secs(3600)).await;
    start_runs(&pool, "maintained", 300).await;
    let last = maintained::start(&client, &json!("last")).await.unwrap();
    last.wait(&client, Duration::from_secs(20)).await.unwrap();
    worker.shutdown();
    worker.wait().await.unwrap();

    // Every message was read (a new row version) and archived (deleted): about 600 dead rows
    // in the queue table once the workers' statistics are published.
    let mut vacuumed = Vec::new();
    eventually(20, async || {
        vacuumed = engine::vacuum_tables(&pgflow::Db::from(&pool), true)
            .await
            .unwrap();
        vacuumed.contains(&"pgmq.q_maintained".to_owned())
    })
    .await;
    assert!(
        vacuumed.contains(&"pgmq.q_maintained".to_owned()),
        "the queue table was vacuumed: {vacuumed:?}"
    );
    assert!(vacuum_count(&pool, "pgmq.q_maintained").await >= 1);
    let left_in_queue: i64 = sqlx::query_scalar("select count(*) from pgmq.q_maintained")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left_in_queue, 0, "every message was archived");

    // While another caller holds the lock, a call does nothing.
    let mut holder = pool.acquire().await.unwrap();
    sqlx::query("select pg_advisory_lock(pgflow.lock_namespace(), 2)")
        .execute(&mut *holder)
        .await
        .unwrap();
    assert!(
        engine::vacuum_tables(&pgflow::Db::from(&pool), true)
            .await
            .unwrap()
            .is_empty()
    );
    sqlx::query("select pg_advisory_unlock(pgflow.lock_namespace(), 2)")
        .execute(&mut *holder)
        .await
        .unwrap();

    if autovacuum_is_on(&pool).await {
        assert!(
            engine::vacuum_tables(&pgflow::Db::from(&pool), false)
                .await
                .unwrap()
                .is_empty()
        );
    }
}

/// Sequential scans of the run-state tables so far in the connection's open transaction.
async fn scans_of_run_state(conn: &mut sqlx::PgConnection) -> Vec<(String, i64)> {
    sqlx::query_as(
        "select relname::text, seq_scan from pg_stat_xact_user_tables
         where schemaname = 'pgflow' and relname in ('runs', 'step_states', 'step_tasks')
           and seq_scan > 0
         order by relname",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap()
}

#[sqlx::test(migrations = false)]
async fn batches_planned_while_the_tables_were_small_reach_their_rows_by_key(pool: PgPool) {
    install(&pool).await;
    let definition = compiled(
        &pool,
        FlowDefinition::new(flow("keyed"))
            .step(single("first", &[]))
            .step(single("second", &["first"])),
    )
    .await;
    let queue = definition.queue_of(&definition.steps[0]);
    let pairs = crate::support::pairs_for(&[&definition], &queue);

    // A few hundred finished runs, analyzed: the statistics a quiet moment leaves behind, on
    // which a hash join over a scan of a whole table looks cheaper than a few key lookups.
    start_runs(&pool, "keyed", 300).await;
    crate::support::drain(&pool, &definition, |_| json!({})).await;
    sqlx::query("analyze pgflow.runs, pgflow.step_states, pgflow.step_tasks")
        .execute(&pool)
        .await
        .unwrap();

    // One connection plans every entry point on those statistics (the plans are cached for
    // the session), then starts, claims and completes one run's tasks in one transaction.
    let mut conn = pool.acquire().await.unwrap();
    let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
    engine::start_flows(&mut *tx, "keyed", &[json!(1)])
        .await
        .unwrap();
    for _ in 0..2 {
        let tasks =
            engine::read_and_start_tasks(&mut *tx, &queue, uuid::Uuid::new_v4(), &pairs, 10)
                .await
                .unwrap()
                .tasks;
        assert_eq!(
            tasks.len(),
            1,
            "one task of the new run is visible at a time"
        );
        let completions: Vec<_> = tasks
            .iter()
            .map(|t| engine::TaskCompletion::of(t, json!({})))
            .collect();
        assert_eq!(
            engine::complete_tasks(&mut *tx, &completions)
                .await
                .unwrap(),
            1
        );
    }
    assert_eq!(
        scans_of_run_state(&mut tx).await,
        Vec::<(String, i64)>::new(),
        "starting, claiming and completing found every row by key"
    );
    tx.commit().await.unwrap();
}
