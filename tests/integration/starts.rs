//! The one way to start runs: `Client::start` (one run), `start_many` (one per input, with no,
//! one or per-input options) and `start_in` (inside the caller's transaction), for a concrete
//! flow, an alias by name and an alias typed.

use std::time::Duration;

use pgflow::{Client, Start, StartOptions, Worker};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{install, worker_config};

#[pgflow::flow(slug = "started_v1", alias = "started", input = u32, output = Doubled)]
pub mod started_v1 {
    use super::*;

    #[step]
    pub async fn double(input: u32) -> Result<u32, String> {
        Ok(input * 2)
    }
}

/// The output of every version of `started`.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Doubled {
    double: u32,
}

async fn runs(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_run_started_in_the_callers_transaction_exists_once_it_commits(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        started_v1::deployment(),
        worker_config(started_v1::Queue::StartedV1, &pool).connection(&client),
    )
    .await
    .unwrap();

    // Rolled back: no run, no task, nothing for the worker.
    let mut tx = pool.begin().await.unwrap();
    client
        .start_in(
            &mut *tx,
            Start::flow::<started_v1::Flow>(),
            &1,
            StartOptions::new(),
        )
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(runs(&pool).await, 0, "a rolled-back start leaves nothing");

    // Committed with the caller's own write: the run runs, typed through the alias.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("create table orders (id int)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let run = client
        .start_in(
            &mut *tx,
            Start::alias_of::<started_v1::Flow>(),
            &21,
            StartOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(runs(&pool).await, 0, "invisible until the caller commits");
    tx.commit().await.unwrap();
    let output = run.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(output, Doubled { double: 42 });

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn start_many_takes_no_options_one_for_every_run_or_one_each(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&started_v1::deployment()).await.unwrap();
    pgflow::engine::activate_flow(&pool, "started_v1")
        .await
        .unwrap();

    let plain = client
        .start_many(Start::named("started"), &[json!(1), json!(2)], &[])
        .await
        .unwrap();
    assert_eq!(plain.len(), 2);

    // One option for every run: both start in an hour.
    let later = StartOptions::new().start_after(Duration::from_secs(3600));
    let delayed = client
        .start_many(Start::flow::<started_v1::Flow>(), &[3, 4], &[later])
        .await
        .unwrap();
    for handle in &delayed {
        let run = handle.run(&client).await.unwrap();
        assert!(
            run.scheduled_for.is_some(),
            "every run of the call is delayed"
        );
    }

    // One each: keys per input; the second call gives back the first's runs.
    let keyed = [
        StartOptions::new().idempotency_key("x"),
        StartOptions::new().idempotency_key("y"),
    ];
    let first = client
        .start_many(Start::alias_of::<started_v1::Flow>(), &[5, 6], &keyed)
        .await
        .unwrap();
    let again = client
        .start_many(Start::alias_of::<started_v1::Flow>(), &[5, 6], &keyed)
        .await
        .unwrap();
    let ids = |handles: &[pgflow::RunHandle<Doubled>]| {
        handles.iter().map(|h| h.run_id()).collect::<Vec<_>>()
    };
    assert_eq!(ids(&first), ids(&again));
    assert_eq!(runs(&pool).await, 6);

    // Neither none, one nor one each: refused, nothing started.
    let error = client
        .start_many(Start::flow::<started_v1::Flow>(), &[7, 8, 9], &keyed)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("2 options for 3 inputs"),
        "{error}"
    );
    assert_eq!(runs(&pool).await, 6);
}
