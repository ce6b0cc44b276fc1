//! Connecting without naming sqlx (`Client::connect`, `Worker::start_on`), connection errors
//! that name the server, and what a worker handle's lifetime means: dropping it drains the
//! worker, `run_until` drains on the caller's signal, `detach` keeps it running.

use std::time::Duration;

use pgflow::{Client, ConnectError, EngineError, Worker, WorkerError};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{database_url, eventually, install, worker_stopped};

#[pgflow::flow(slug = "handled")]
pub mod handled {
    use super::*;

    /// Sleeps for the input's milliseconds, so a test can act while the task runs.
    #[step]
    pub async fn nap(input: serde_json::Value) -> Result<u64, String> {
        let millis = input.as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(millis)).await;
        Ok(millis)
    }
}

#[sqlx::test(migrations = false)]
async fn a_client_and_workers_connect_from_a_url_alone(pool: PgPool) {
    install(&pool).await;
    let url = database_url(&pool);
    let client = Client::connect(&url).await.unwrap();
    // One worker shares the client's pool, one opens its own from the URL.
    let shared = Worker::start_on(handled::deployment(), &client)
        .await
        .unwrap();
    let own = Worker::start_on(handled::deployment(), url.as_str())
        .await
        .unwrap();
    for millis in [0, 1, 2, 3] {
        let output = handled::start(&client, &json!(millis))
            .await
            .unwrap()
            .wait(&client, Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(output.nap, millis);
    }
    for worker in [shared, own] {
        worker.shutdown();
        worker.wait().await.unwrap();
    }
}

#[tokio::test]
async fn a_server_that_does_not_answer_is_named_and_a_bad_url_is_explained() {
    // Port 1 on the loopback: nothing listens there.
    let error = Client::connect("postgres://app:secret@127.0.0.1:1/orders")
        .await
        .unwrap_err();
    match &error {
        EngineError::Connect(ConnectError::Unreachable { target, .. }) => {
            assert_eq!(target, "127.0.0.1:1/orders");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.contains("cannot connect to Postgres at 127.0.0.1:1/orders"),
        "{text}"
    );
    assert!(!text.contains("secret"), "the password leaked: {text}");

    let error = Client::connect("postgres://app@127.0.0.1:not-a-port/db")
        .await
        .unwrap_err();
    assert!(
        matches!(error, EngineError::Connect(ConnectError::InvalidUrl { .. })),
        "{error:?}"
    );
    assert!(error.to_string().contains("postgres://user"), "{error}");

    let error = Worker::start_on(handled::deployment(), "postgres://app@127.0.0.1:1/orders")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, WorkerError::Connect(ConnectError::Unreachable { target, .. }) if target == "127.0.0.1:1/orders"),
        "{error:?}"
    );
}

#[sqlx::test(migrations = false)]
async fn dropping_a_handle_drains_its_worker(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_on(handled::deployment(), &pool)
        .await
        .unwrap();
    let worker_id = worker.worker_id();
    let run = handled::start(&client, &json!(600)).await.unwrap();
    assert!(
        eventually(5, async || {
            sqlx::query_scalar::<_, bool>(
                "select exists (select 1 from pgflow.step_tasks where status = 'started')",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
        })
        .await
    );
    drop(worker);
    // The in-flight task still finishes and is stored; then the worker marks itself stopped.
    assert_eq!(
        run.wait(&client, Duration::from_secs(10))
            .await
            .unwrap()
            .nap,
        600
    );
    assert!(eventually(10, async || worker_stopped(&pool, worker_id).await).await);
    // A stopped worker claims nothing more.
    let later = handled::start(&client, &json!(0)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        later.run(&client).await.unwrap().status,
        pgflow::RunStatus::Started
    );
}

#[sqlx::test(migrations = false)]
async fn run_until_drains_when_the_callers_signal_completes(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_on(handled::deployment(), &pool)
        .await
        .unwrap();
    let worker_id = worker.worker_id();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run_until(async {
        let _ = stopped.await;
    }));
    let run = handled::start(&client, &json!(0)).await.unwrap();
    run.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert!(!running.is_finished(), "the worker runs until the signal");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the worker stops after the signal")
        .unwrap()
        .unwrap();
    assert!(worker_stopped(&pool, worker_id).await);
}

#[sqlx::test(migrations = false)]
async fn a_detached_worker_keeps_working_without_its_handle(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_on(handled::deployment(), &pool)
        .await
        .unwrap();
    let worker_id = worker.worker_id();
    worker.detach();
    let output = handled::start(&client, &json!(1))
        .await
        .unwrap()
        .wait(&client, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(output.nap, 1);
    assert!(!worker_stopped(&pool, worker_id).await);
}
