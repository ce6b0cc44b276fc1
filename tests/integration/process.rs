//! The process owner: the workers started on one client share one maintenance loop and one
//! listening connection, whatever queues they poll, with the client's event streams.

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

/// Starts a worker of each queue of `two_queues` on `client`. An hour between polls: only
/// notifications (or each other) wake them.
async fn two_workers(pool: &PgPool, client: &Client) -> Vec<WorkerHandle> {
    let hourly = Duration::from_secs(3600);
    vec![
        Worker::start_with(
            two_queues::deployment(),
            worker_config(two_queues::Queue::FirstQueue, pool)
                .connection(client)
                .poll_interval(hourly),
        )
        .await
        .unwrap(),
        Worker::start_with(
            two_queues::deployment(),
            worker_config(two_queues::Queue::SecondQueue, pool)
                .connection(client)
                .poll_interval(hourly),
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

/// The sessions of the pool named `one_listener` that listen: the only ones whose last
/// statement is a `LISTEN`, an `UNLISTEN` (the last stream of a flow ended) or a request for
/// wake-ups.
async fn listening_sessions(pool: &PgPool, terminate: bool) -> i64 {
    let action = if terminate {
        "pg_terminate_backend(pid)"
    } else {
        "pid"
    };
    sqlx::query_scalar(&format!(
        "select count({action})::bigint from pg_stat_activity
         where application_name = 'one_listener'
           and (query ilike 'listen%' or query ilike 'unlisten%' or query ilike '%_wakeups(%')"
    ))
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = false)]
async fn one_connection_listens_for_every_queue_and_event_stream_of_a_client(pool: PgPool) {
    install(&pool).await;
    let named = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(
            (*pool.connect_options())
                .clone()
                .application_name("one_listener"),
        )
        .await
        .unwrap();
    let client = Client::new(named.clone());
    let workers = two_workers(&named, &client).await;

    // Both steps' workers are woken by notifications alone; `wait` follows the run's events.
    let run = two_queues::start(&client, &serde_json::json!(1))
        .await
        .unwrap();
    let output = run.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(output.second, serde_json::json!(1));
    assert_eq!(
        listening_sessions(&pool, false).await,
        1,
        "one listening connection for the client's two queues and its event stream"
    );

    // Cut it: the client listens again, requests its wake-ups again, and its workers and
    // streams carry on.
    assert_eq!(listening_sessions(&pool, true).await, 1);
    let again = two_queues::start(&client, &serde_json::json!(2))
        .await
        .unwrap();
    let output = again.wait(&client, Duration::from_secs(15)).await.unwrap();
    assert_eq!(output.second, serde_json::json!(2));
    assert!(
        crate::support::eventually(5, async || listening_sessions(&pool, false).await == 1).await,
        "the client listens again, on one connection"
    );
    for worker in workers {
        worker.shutdown();
        worker.wait().await.unwrap();
    }
}
