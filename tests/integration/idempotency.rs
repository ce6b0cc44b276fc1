//! Idempotent starts: a caller's key on every start form gives one run per (key, flow or alias);
//! a repeated start returns it, another input under the key is refused naming key and run, 20
//! concurrent starts with one key make one run, and retention frees the key with its run.

use std::time::Duration;

use pgflow::Start;
use pgflow::{Client, EngineError, StartOptions, Worker};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::support::{install, worker_config};

/// What `keyed` produces.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Doubled {
    pub double: u32,
}

#[pgflow::flow(slug = "keyed_v1", alias = "keyed", version = 1, input = u32,
               output = super::Doubled)]
pub mod keyed_v1 {
    #[step(queue = "idempotency")]
    pub async fn double(input: u32) -> Result<u32, String> {
        Ok(input * 2)
    }
}

async fn run_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn deployed(pool: &PgPool) -> Client {
    install(pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&keyed_v1::deployment()).await.unwrap();
    pgflow::engine::activate_flow(pool, "keyed_v1")
        .await
        .unwrap();
    client
}

fn key(k: &str) -> StartOptions {
    StartOptions::new().idempotency_key(k)
}

#[sqlx::test(migrations = false)]
async fn every_start_form_returns_the_keys_run_the_second_time(pool: PgPool) {
    let client = deployed(&pool).await;

    // concrete flow
    let first = client
        .start(Start::flow::<keyed_v1::Flow>(), &1, &key("a"))
        .await
        .unwrap();
    let again = client
        .start(Start::flow::<keyed_v1::Flow>(), &1, &key("a"))
        .await
        .unwrap();
    assert_eq!(first.run_id(), again.run_id());
    // alias, untyped and typed: the alias is another scope than the concrete flow
    let by_alias = client
        .start(Start::named("keyed"), &1, &key("a"))
        .await
        .unwrap();
    assert_ne!(by_alias.run_id(), first.run_id());
    let typed = client
        .start(Start::alias_of::<keyed_v1::Flow>(), &1, &key("a"))
        .await
        .unwrap();
    assert_eq!(typed.run_id(), by_alias.run_id());
    assert_eq!(run_count(&pool).await, 2);

    // many: a key seen before, a new key given twice in one call, and a new key
    let many = client
        .start_many(
            Start::flow::<keyed_v1::Flow>(),
            &[1, 2, 2, 3],
            &[key("a"), key("b"), key("b"), key("c")],
        )
        .await
        .unwrap();
    let ids: Vec<_> = many.iter().map(|h| h.run_id()).collect();
    assert_eq!(ids[0], first.run_id());
    assert_eq!(ids[1], ids[2]);
    assert_ne!(ids[1], ids[3]);
    assert_eq!(run_count(&pool).await, 4);
    let alias_many = client
        .start_many(Start::named("keyed"), &[1, 4], &[key("a"), key("d")])
        .await
        .unwrap();
    assert_eq!(alias_many[0].run_id(), by_alias.run_id());
    let typed_many = client
        .start_many(
            Start::alias_of::<keyed_v1::Flow>(),
            &[4, 5],
            &[key("d"), key("e")],
        )
        .await
        .unwrap();
    assert_eq!(typed_many[0].run_id(), alias_many[1].run_id());
    assert_eq!(run_count(&pool).await, 6);

    // SQL, by name
    let by_sql: uuid::Uuid = sqlx::query_scalar(
        "select run_id from pgflow.start_flow('keyed', '1'::jsonb, p_idempotency_key => 'a')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(by_sql, by_alias.run_id());
    assert_eq!(run_count(&pool).await, 6);

    // The run records its key and scope; a run without a key has neither.
    let run = pgflow::engine::run(&pool, first.run_id()).await.unwrap();
    assert_eq!(run.idempotency_key.as_deref(), Some("a"));
    assert_eq!(run.idempotency_scope.as_deref(), Some("keyed_v1"));
    let plain = client
        .start(Start::flow::<keyed_v1::Flow>(), &1, StartOptions::new())
        .await
        .unwrap();
    let plain = pgflow::engine::run(&pool, plain.run_id()).await.unwrap();
    assert_eq!(plain.idempotency_key, None);
}

#[sqlx::test(migrations = false)]
async fn a_key_with_another_input_is_refused_naming_key_and_run_and_starts_nothing(pool: PgPool) {
    let client = deployed(&pool).await;
    let first = client
        .start(Start::named("keyed"), &1, &key("order-42"))
        .await
        .unwrap();

    let error = client
        .start(Start::named("keyed"), &2, &key("order-42"))
        .await
        .unwrap_err();
    match &error {
        EngineError::IdempotencyConflict { key, scope, run_id } => {
            assert_eq!(key, "order-42");
            assert_eq!(scope, "keyed");
            assert_eq!(*run_id, first.run_id());
        }
        other => panic!("expected IdempotencyConflict, got {other:?}"),
    }
    assert!(error.to_string().contains("order-42"), "{error}");
    assert!(
        error.to_string().contains(&first.run_id().to_string()),
        "{error}"
    );

    // In a batch the conflict stops every start of it, the new keys' too.
    let error = client
        .start_many(
            Start::named("keyed"),
            &[7, 3],
            &[key("fresh"), key("order-42")],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, EngineError::IdempotencyConflict { .. }),
        "{error:?}"
    );
    assert_eq!(run_count(&pool).await, 1);

    // Keys are 1 to 255 characters.
    for bad in [String::new(), "k".repeat(256)] {
        let error = client
            .start(Start::named("keyed"), &1, &key(&bad))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("1 to 255 characters"), "{error}");
    }
    assert_eq!(run_count(&pool).await, 1);
}

#[sqlx::test(migrations = false)]
async fn twenty_concurrent_starts_with_one_key_make_one_run(pool: PgPool) {
    deployed(&pool).await;
    let wide = PgPoolOptions::new()
        .max_connections(20)
        .connect_with((*pool.connect_options()).clone())
        .await
        .unwrap();
    let client = Client::new(wide);
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(20));
    let mut starts = Vec::new();
    for _ in 0..20 {
        let client = client.clone();
        let barrier = barrier.clone();
        starts.push(tokio::spawn(async move {
            barrier.wait().await;
            client
                .start(Start::named("keyed"), &5, &key("once"))
                .await
                .map(|handle| handle.run_id())
        }));
    }
    let mut ids = Vec::new();
    for start in starts {
        ids.push(start.await.unwrap().unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(run_count(&pool).await, 1);
    let tasks: i64 = sqlx::query_scalar("select count(*) from pgflow.step_tasks")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(tasks, 1);
}

#[sqlx::test(migrations = false)]
async fn a_repeated_start_returns_the_run_as_it_stands_and_retention_frees_the_key(pool: PgPool) {
    let client = deployed(&pool).await;
    let worker = Worker::start_with(
        keyed_v1::deployment(),
        worker_config(keyed_v1::Queue::Idempotency, &pool),
    )
    .await
    .unwrap();
    let first = client
        .start(Start::flow::<keyed_v1::Flow>(), &21, &key("k"))
        .await
        .unwrap();
    let output = first.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.double, 42);

    let again = client
        .start(Start::flow::<keyed_v1::Flow>(), &21, &key("k"))
        .await
        .unwrap();
    assert_eq!(again.run_id(), first.run_id());
    let stored = pgflow::engine::run(&pool, again.run_id()).await.unwrap();
    assert_eq!(stored.status, pgflow::RunStatus::Completed);
    assert_eq!(stored.output, Some(json!({"double": 42})));
    worker.shutdown();
    worker.wait().await.unwrap();

    // Retention removes the run, and with it the key.
    let pruned = pgflow::engine::prune(&pool, Duration::ZERO, 100)
        .await
        .unwrap();
    assert_eq!(pruned.runs, 1);
    let fresh = client
        .start(Start::flow::<keyed_v1::Flow>(), &21, &key("k"))
        .await
        .unwrap();
    assert_ne!(fresh.run_id(), first.run_id());
}
