//! Connections a worker uses: its pool of `max_pg_connections` does all its work, the
//! notification listener has a connection of its own (or none, with notifications off).

use std::time::Duration;

use pgflow::{Client, ProcessConfig, Worker, WorkerConfig};
use sqlx::PgPool;

use crate::support::{database_url, install, listening_sessions};

#[pgflow::flow(slug = "frugal_v1", input = u32)]
pub mod frugal_v1 {
    #[step(queue = "frugal")]
    pub async fn double(input: u32) -> Result<u32, String> {
        Ok(input * 2)
    }

    #[step(depends_on = [double], queue = "frugal")]
    pub async fn add_one(double: u32) -> Result<u32, String> {
        Ok(double + 1)
    }
}

/// Starts `runs` runs of `frugal_v1` and waits for each: (input, output.add_one).
async fn run_all(client: &Client, runs: u32) -> Vec<(u32, u32)> {
    let mut handles = Vec::new();
    for input in 0..runs {
        handles.push((input, frugal_v1::start(client, &input).await.unwrap()));
    }
    let mut outputs = Vec::new();
    for (input, handle) in handles {
        let output = handle.wait(client, Duration::from_secs(20)).await.unwrap();
        outputs.push((input, output.add_one));
    }
    outputs
}

fn expected(runs: u32) -> Vec<(u32, u32)> {
    (0..runs).map(|i| (i, i * 2 + 1)).collect()
}

#[sqlx::test(migrations = false)]
async fn a_worker_with_one_pool_connection_gets_work_done_and_listens_beside_it(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let config = WorkerConfig::new(frugal_v1::Queue::Frugal)
        .connection(database_url(&pool))
        .max_pg_connections(1)
        .poll_interval(Duration::from_secs(30))
        .heartbeat_interval(Duration::from_millis(200))
        .function_name("tests");
    let worker = Worker::start_with(frugal_v1::deployment(), config)
        .await
        .unwrap();

    // A 30 s poll interval: runs finishing in time were woken by notifications.
    assert_eq!(run_all(&client, 10).await, expected(10));
    assert_eq!(listening_sessions(&pool).await, 1);

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn without_notifications_idle_workers_poll_and_nothing_listens(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker_db = pgflow::connect::db(&database_url(&pool), 2).await.unwrap();
    let polling = Client::with_config(worker_db, ProcessConfig::new().without_notifications());
    let config = WorkerConfig::new(frugal_v1::Queue::Frugal)
        .connection(&polling)
        .poll_interval(Duration::from_millis(100))
        .function_name("tests");
    let worker = Worker::start_with(frugal_v1::deployment(), config)
        .await
        .unwrap();

    assert_eq!(run_all(&client, 5).await, expected(5));
    assert_eq!(listening_sessions(&pool).await, 0);

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn an_unparsable_listen_url_stops_the_start_with_a_clear_error(pool: PgPool) {
    install(&pool).await;
    let client = Client::with_config(
        pool.clone(),
        ProcessConfig::new().listen_url("mysql://nope"),
    );
    let config = WorkerConfig::new(frugal_v1::Queue::Frugal)
        .connection(&client)
        .function_name("tests");
    let error = Worker::start_with(frugal_v1::deployment(), config)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("listen URL is not a valid Postgres URL"),
        "{error}"
    );
}
