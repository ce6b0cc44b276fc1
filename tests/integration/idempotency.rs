//! Idempotent starts: a caller's key on every start form gives one run per (key, alias): an
//! alias and its versions share their keys. A repeated start returns the run and says it
//! already existed; another input under the key, or a version named for another version's run,
//! is refused naming key and run; 20 concurrent starts with one key make one run, and retention
//! frees the key with its run.

use std::time::Duration;

use pgflow::Start;
use pgflow::{Client, EngineError, StartOptions, StartOutcome, Worker};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::support::{install, run_count, worker_config};

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
    assert!(!first.already_existed());
    let again = client
        .start(Start::flow::<keyed_v1::Flow>(), &1, &key("a"))
        .await
        .unwrap();
    assert_eq!(first.run_id(), again.run_id());
    assert_eq!(again.start_outcome(), Some(StartOutcome::AlreadyExisted));
    // alias, untyped and typed: the alias and its versions share their keys
    let by_alias = client
        .start(Start::named("keyed"), &1, &key("a"))
        .await
        .unwrap();
    assert_eq!(by_alias.run_id(), first.run_id());
    assert!(by_alias.already_existed());
    let typed = client
        .start(Start::alias_of::<keyed_v1::Flow>(), &1, &key("a"))
        .await
        .unwrap();
    assert_eq!(typed.run_id(), first.run_id());
    assert!(typed.already_existed());
    let by_alias = client
        .start(Start::named("keyed"), &1, &key("z"))
        .await
        .unwrap();
    assert_eq!(by_alias.start_outcome(), Some(StartOutcome::Started));
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
    let outcomes: Vec<_> = many.iter().map(|h| h.already_existed()).collect();
    assert_eq!(
        outcomes,
        [true, false, true, false],
        "an earlier input of the same call holds `b` for the third"
    );
    assert_eq!(run_count(&pool).await, 4);
    let alias_many = client
        .start_many(Start::named("keyed"), &[1, 4], &[key("a"), key("d")])
        .await
        .unwrap();
    assert_eq!(alias_many[0].run_id(), first.run_id());
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

    // SQL, by alias and by concrete slug
    for name in ["keyed", "keyed_v1"] {
        let by_sql: uuid::Uuid = sqlx::query_scalar(
            "select run_id from pgflow.start_flow($1, '1'::jsonb, p_idempotency_key => 'a')",
        )
        .bind(name)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(by_sql, first.run_id());
    }
    assert_eq!(run_count(&pool).await, 6);

    // The run records its key and its scope, the alias; a run without a key has neither.
    let run = pgflow::engine::run(&pool, first.run_id()).await.unwrap();
    assert_eq!(run.idempotency_key.as_deref(), Some("a"));
    assert_eq!(run.idempotency_scope.as_deref(), Some("keyed"));
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
        EngineError::IdempotencyConflict {
            key, scope, run_id, ..
        } => {
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

#[pgflow::flow(slug = "keyed_v2", alias = "keyed", version = 2, input = u32,
               output = super::Doubled)]
pub mod keyed_v2 {
    #[step(queue = "idempotency")]
    pub async fn double(input: u32) -> Result<u32, String> {
        Ok(input * 2)
    }
}

#[sqlx::test(migrations = false)]
async fn an_alias_and_its_versions_share_keys_and_a_version_named_for_anothers_run_is_refused(
    pool: PgPool,
) {
    let client = deployed(&pool).await;
    let on_v1 = client
        .start(Start::named("keyed"), &1, &key("k"))
        .await
        .unwrap();
    client.deploy(&keyed_v2::deployment()).await.unwrap();
    pgflow::engine::activate_flow(&pool, "keyed_v2")
        .await
        .unwrap();

    // Through the alias, now at v2, the key still finds its run on v1; so does naming v1.
    for what in [Start::named("keyed"), Start::named("keyed_v1")] {
        let again = client.start(what, &1, &key("k")).await.unwrap();
        assert_eq!(again.run_id(), on_v1.run_id());
        assert!(again.already_existed());
    }
    let typed = client
        .start(Start::alias_of::<keyed_v2::Flow>(), &1, &key("k"))
        .await
        .unwrap();
    assert_eq!(typed.run_id(), on_v1.run_id());

    // Naming v2 with that key would either start a second run for it or hand back a run of
    // another version than the one named: refused, naming the run and the alias to use.
    let error = client
        .start(Start::flow::<keyed_v2::Flow>(), &1, &key("k"))
        .await
        .unwrap_err();
    match &error {
        EngineError::IdempotencyConflict { run_id, scope, .. } => {
            assert_eq!(*run_id, on_v1.run_id());
            assert_eq!(scope, "keyed");
        }
        other => panic!("expected IdempotencyConflict, got {other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.contains("keyed_v1") && text.contains("keyed_v2"),
        "{text}"
    );
    assert!(text.contains("through the alias `keyed`"), "{text}");
    assert_eq!(run_count(&pool).await, 1);

    // A new key on v2 by name starts there.
    let fresh = client
        .start(Start::named("keyed_v2"), &1, &key("k2"))
        .await
        .unwrap();
    assert!(!fresh.already_existed());
    assert_eq!(
        pgflow::engine::run(&pool, fresh.run_id())
            .await
            .unwrap()
            .idempotency_scope
            .as_deref(),
        Some("keyed")
    );
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
