//! Snoozes: a handler that returns `StepError::snooze(delay, reason)` runs again after the
//! delay without spending an attempt (a step with one attempt may snooze as often as it
//! likes); the wait is a delayed message, holding no worker slot; the attempt history records
//! each snooze with its reason; and cancelling the run ends the wait.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use pgflow::{Client, Context, RunStatus, StepError, Worker};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{install, worker_config};

/// How often each run's handler was called.
static CALLS: LazyLock<Mutex<HashMap<Uuid, usize>>> = LazyLock::new(Mutex::default);

fn calls(run_id: Uuid) -> usize {
    CALLS.lock().unwrap().get(&run_id).copied().unwrap_or(0)
}

/// The input lists the snoozes the handler asks for, in seconds, before it succeeds.
#[pgflow::flow(slug = "polling_v1", alias = "polling", input = Vec<u64>, max_attempts = 1,
               base_delay = 0)]
pub mod polling_v1 {
    use super::*;

    #[step(queue = "snooze_polling")]
    pub async fn poll(input: Vec<u64>, ctx: Context) -> Result<usize, StepError> {
        let call = {
            let mut calls = CALLS.lock().unwrap();
            let count = calls.entry(ctx.run_id()).or_default();
            *count += 1;
            *count - 1
        };
        match input.get(call) {
            Some(seconds) => Err(StepError::snooze(
                Duration::from_secs(*seconds),
                format!("not ready at call {call}"),
            )),
            None => Ok(call),
        }
    }
}

async fn task_row(pool: &PgPool, run_id: Uuid) -> (String, i32, i32) {
    sqlx::query_as(
        "select status, attempts_count, attempts_base from pgflow.step_tasks where run_id = $1",
    )
    .bind(run_id)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Waits until the run's handler has been called `n` times and its task is queued again.
async fn snoozed_after_call(pool: &PgPool, run_id: Uuid, n: usize) {
    for _ in 0..400 {
        if calls(run_id) >= n && task_row(pool, run_id).await.0 == "queued" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the handler of run {run_id} was not called {n} times and snoozed");
}

async fn polling_worker(pool: &PgPool) -> pgflow::WorkerHandle {
    Worker::start_with(
        polling_v1::deployment(),
        worker_config(polling_v1::Queue::SnoozePolling, pool),
    )
    .await
    .unwrap()
}

/// Seconds until the queue's only message becomes visible.
async fn message_visible_in(pool: &PgPool) -> f64 {
    sqlx::query_scalar(
        "select extract(epoch from vt - clock_timestamp())::float8 from pgmq.q_snooze_polling",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_snoozed_task_runs_again_later_without_spending_an_attempt(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = polling_worker(&pool).await;

    // One attempt allowed, two snoozes asked for: the run still completes.
    let run = polling_v1::start(&client, &vec![4, 1]).await.unwrap();
    snoozed_after_call(&pool, run.run_id(), 1).await;
    // While it snoozes, no worker holds it: shown as queued.
    let steps = pgflow_runtime::admin::inspect::run_steps(&pool, run.run_id())
        .await
        .unwrap();
    assert_eq!(steps[0].shown_status(), "queued", "{steps:?}");
    let wait = message_visible_in(&pool).await;
    // Without the snooze's delay the retry would be visible at once (base_delay = 0); the
    // margin leaves room for a slow host between the snooze and this look.
    assert!(
        wait > 0.5 && wait <= 4.0,
        "the task's message waits out the snooze: {wait} s"
    );

    run.wait(&client, Duration::from_secs(30)).await.unwrap();
    assert_eq!(calls(run.run_id()), 3);
    let (status, attempts, base) = task_row(&pool, run.run_id()).await;
    assert_eq!(status, "completed");
    assert_eq!(
        (attempts, base),
        (3, 2),
        "three attempts ran, two were snoozes given back"
    );
    let history: Vec<(i32, String, String)> = sqlx::query_as(
        "select attempt, outcome, error_message from pgflow.task_attempts
         where run_id = $1 order by attempt",
    )
    .bind(run.run_id())
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        history,
        vec![
            (1, "snoozed".to_owned(), "not ready at call 0".to_owned()),
            (2, "snoozed".to_owned(), "not ready at call 1".to_owned()),
        ]
    );

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_run_cancelled_while_its_task_snoozes_ends_and_its_handler_is_not_called_again(
    pool: PgPool,
) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = polling_worker(&pool).await;
    let run = polling_v1::start(&client, &vec![3600]).await.unwrap();
    snoozed_after_call(&pool, run.run_id(), 1).await;

    let cancelled = client
        .cancel(run.run_id(), Some("no longer needed"))
        .await
        .unwrap();
    assert!(cancelled.cancelled);
    assert_eq!(run.run(&client).await.unwrap().status, RunStatus::Cancelled);
    assert_eq!(task_row(&pool, run.run_id()).await.0, "cancelled");
    let queued: i64 = sqlx::query_scalar("select count(*) from pgmq.q_snooze_polling")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        queued, 0,
        "the snoozed message was archived with the cancel"
    );
    assert_eq!(calls(run.run_id()), 1);

    worker.shutdown();
    worker.wait().await.unwrap();
}
