//! The process owner: the workers started on one client share one maintenance loop, whatever
//! queues they poll.

use std::time::{Duration, Instant};

use pgflow::{Client, ProcessConfig, Worker, WorkerHandle};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::support::{install, worker_config};

#[pgflow::flow(slug = "two_queues")]
pub mod two_queues {
    #[step(queue = "first_queue")]
    pub async fn first(input: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(input)
    }

    #[step(depends_on = [first], queue = "second_queue")]
    pub async fn second(first: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(first)
    }
}

/// The maintenance interval of these tests.
const EVERY: Duration = Duration::from_millis(200);

/// A pool whose sessions count calls of pgflow's functions (`pg_stat_user_functions`).
async fn counting_pool(pool: &PgPool) -> PgPool {
    let options = (*pool.connect_options())
        .clone()
        .options([("track_functions", "all")]);
    PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .unwrap()
}

/// Starts a worker of each queue of `two_queues` on `client`.
async fn two_workers(pool: &PgPool, client: &Client) -> Vec<WorkerHandle> {
    vec![
        Worker::start_with(
            two_queues::deployment(),
            worker_config(two_queues::Queue::FirstQueue, pool).connection(client),
        )
        .await
        .unwrap(),
        Worker::start_with(
            two_queues::deployment(),
            worker_config(two_queues::Queue::SecondQueue, pool).connection(client),
        )
        .await
        .unwrap(),
    ]
}

/// Lets the workers run their maintenance for two seconds, stops them, closes `counting` (its
/// sessions flush their function statistics as they end) and returns how many maintenance
/// passes ran (calls of `mark_lost_workers`, the first call of each pass), with how many
/// intervals fit in the time they ran.
async fn passes_while_running(
    pool: &PgPool,
    counting: PgPool,
    workers: Vec<WorkerHandle>,
) -> (i64, u32) {
    let began = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    for worker in workers {
        worker.shutdown();
        worker.wait().await.unwrap();
    }
    let intervals = (began.elapsed().as_millis() / EVERY.as_millis()) as u32;
    counting.close().await;
    let mut calls = 0;
    for _ in 0..50 {
        calls = sqlx::query_scalar(
            "select coalesce(sum(calls), 0)::bigint from pg_stat_user_functions
             where schemaname = 'pgflow' and funcname = 'mark_lost_workers'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if calls > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (calls, intervals)
}

#[sqlx::test(migrations = false)]
async fn the_workers_of_one_client_share_one_maintenance_loop(pool: PgPool) {
    install(&pool).await;
    let counting = counting_pool(&pool).await;
    let client = Client::with_config(
        counting.clone(),
        ProcessConfig::new().stalled_check_interval(EVERY),
    );
    let workers = two_workers(&counting, &client).await;
    let (passes, intervals) = passes_while_running(&pool, counting, workers).await;
    assert!(passes > 0, "the client's maintenance ran");
    assert!(
        passes <= i64::from(intervals),
        "{passes} maintenance passes in {intervals} intervals: one loop for the client's two \
         workers, not one per worker"
    );
}
