//! Helpers shared by the integration tests; those the CLI's tests share too (`install`,
//! `database_url`, `claim`) come from `pgflow_testkit::db`.

#![allow(dead_code)]

use std::time::Duration;

use pgflow::definition::{FlowDefinition, StepDefinition};
use pgflow::engine::{self, ClaimedTask, Run, SupportedPairs, TaskCompletion};
use pgflow::names::{FlowSlug, QueueName, StepSlug};
use pgflow::{FlowQueue, WorkerConfig};
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

pub use pgflow_testkit::db::{claim, database_url, install};

/// Test settings of a worker: this database, quick polls and heartbeats, function `tests`.
pub fn worker_config<Q: FlowQueue>(queue: Q, pool: &PgPool) -> WorkerConfig<Q> {
    WorkerConfig::new(queue)
        .pool(pool.clone())
        .poll_interval(Duration::from_millis(100))
        .heartbeat_interval(Duration::from_millis(100))
        .function_name("tests")
}

/// How many runs the database holds.
pub async fn run_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(pool)
        .await
        .expect("count runs")
}

pub fn flow(slug: &str) -> FlowSlug {
    FlowSlug::new(slug).expect("valid flow slug")
}

pub fn step(slug: &str) -> StepSlug {
    StepSlug::new(slug).expect("valid step slug")
}

pub fn queue(name: &str) -> QueueName {
    QueueName::new(name).expect("valid queue name")
}

pub fn single(slug: &str, deps: &[&str]) -> StepDefinition {
    deps.iter()
        .fold(StepDefinition::single(step(slug)), |s, d| {
            s.depends_on(step(d))
        })
}

pub fn map(slug: &str, deps: &[&str]) -> StepDefinition {
    deps.iter().fold(StepDefinition::map(step(slug)), |s, d| {
        s.depends_on(step(d))
    })
}

/// Compiles `definition` and returns it.
pub async fn compiled(pool: &PgPool, definition: FlowDefinition) -> FlowDefinition {
    engine::compile_flow(pool, &definition)
        .await
        .expect("compile flow");
    definition
}

/// The message of the `InvalidDefinition` a flow `bad` of the one step `step` is refused with;
/// panics when it is compiled, or refused otherwise.
pub async fn refusal_of(pool: &PgPool, step: StepDefinition) -> String {
    let definition = FlowDefinition::new(flow("bad")).step(step);
    match engine::compile_flow(pool, &definition).await {
        Err(pgflow::EngineError::InvalidDefinition { message }) => message,
        other => panic!("expected InvalidDefinition, got {other:?}"),
    }
}

/// The error `define_flow` refuses a flow `bad` with whose steps are the hand-written JSON
/// `steps` (what a definition that no Rust type checked could send).
pub async fn refusal_of_json(pool: &PgPool, steps: &str) -> String {
    sqlx::query("select pgflow.define_flow('bad', 'bad', 1, '{}'::jsonb, $1::jsonb)")
        .bind(steps)
        .execute(pool)
        .await
        .expect_err("the definition is refused")
        .to_string()
}

/// Every step of every given flow routed to `queue`.
pub fn pairs_for(flows: &[&FlowDefinition], queue: &QueueName) -> SupportedPairs {
    let mut pairs = SupportedPairs::new();
    for f in flows {
        pairs.extend_routed_to(f, queue);
    }
    pairs
}

/// Runs every visible task of `flow` until none is left, answering each with `handler`.
/// Returns the tasks in the order they were handled.
pub async fn drain(
    pool: &PgPool,
    flow: &FlowDefinition,
    handler: impl Fn(&ClaimedTask) -> Value,
) -> Vec<ClaimedTask> {
    let mut queues: Vec<QueueName> = flow.steps.iter().map(|s| flow.queue_of(s)).collect();
    queues.sort();
    queues.dedup();
    let mut handled = Vec::new();
    loop {
        let mut progressed = false;
        for q in &queues {
            let tasks = claim(pool, q, &pairs_for(&[flow], q)).await;
            if tasks.is_empty() {
                continue;
            }
            progressed = true;
            let completions: Vec<_> = tasks
                .iter()
                .map(|t| TaskCompletion::of(t, handler(t)))
                .collect();
            engine::complete_tasks(pool, &completions)
                .await
                .expect("complete tasks");
            handled.extend(tasks);
        }
        if !progressed {
            return handled;
        }
    }
}

pub async fn run(pool: &PgPool, run_id: Uuid) -> Run {
    sqlx::query_as("select * from pgflow.runs where run_id = $1")
        .bind(run_id)
        .fetch_one(pool)
        .await
        .expect("run exists")
}

/// `(step_slug, status)` of every step of a run, by step slug.
pub async fn step_statuses(pool: &PgPool, run_id: Uuid) -> Vec<(String, String)> {
    sqlx::query_as(
        "select step_slug, status from pgflow.step_states where run_id = $1 order by step_slug",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await
    .expect("step states")
}

/// The status of one step of a run.
pub async fn step_status(pool: &PgPool, run_id: Uuid, step: &str) -> String {
    sqlx::query_scalar("select status from pgflow.step_states where run_id = $1 and step_slug = $2")
        .bind(run_id)
        .bind(step)
        .fetch_one(pool)
        .await
        .expect("a step state")
}

/// The error message of one step of a run (a failed one's).
pub async fn step_error(pool: &PgPool, run_id: Uuid, step: &str) -> String {
    sqlx::query_scalar(
        "select error_message from pgflow.step_states where run_id = $1 and step_slug = $2",
    )
    .bind(run_id)
    .bind(step)
    .fetch_one(pool)
    .await
    .expect("a step's error")
}

/// `(step_slug, task_index, status, attempts_count)` of every task of a run.
pub async fn task_rows(pool: &PgPool, run_id: Uuid) -> Vec<(String, i32, String, i32)> {
    sqlx::query_as(
        "select step_slug, task_index, status, attempts_count from pgflow.step_tasks
         where run_id = $1 order by step_slug, task_index",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await
    .expect("task rows")
}

/// A message as PGMQ holds it: (msg_id, read_ct, visible now).
pub async fn messages(pool: &PgPool, queue: &str) -> Vec<(i64, i32, bool)> {
    sqlx::query_as(&format!(
        "select msg_id, read_ct, vt <= clock_timestamp() from pgmq.q_{queue} order by msg_id"
    ))
    .fetch_all(pool)
    .await
    .expect("queue table")
}

/// Number of archived messages of a queue.
pub async fn archived(pool: &PgPool, queue: &str) -> i64 {
    sqlx::query_scalar(&format!("select count(*) from pgmq.a_{queue}"))
        .fetch_one(pool)
        .await
        .expect("archive table")
}

/// Makes every message of the queue visible now (instead of waiting out a delay).
pub async fn make_visible(pool: &PgPool, queue: &str) {
    sqlx::query(&format!("update pgmq.q_{queue} set vt = clock_timestamp()"))
        .execute(pool)
        .await
        .expect("make messages visible");
}

/// Polls `check` until it returns true, at most `seconds`.
pub async fn eventually(seconds: u64, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Whether the worker `worker_id` has marked itself stopped.
pub async fn worker_stopped(pool: &PgPool, worker_id: Uuid) -> bool {
    sqlx::query_scalar("select stopped_at is not null from pgflow.workers where worker_id = $1")
        .bind(worker_id)
        .fetch_one(pool)
        .await
        .expect("read the worker's row")
}

/// How many sessions on the test database listen for new tasks: their last statement was the
/// `LISTEN` of a queue channel (`pgflow.<queue>`; clients listen for run events on
/// `pgflow_events.<flow>`) or a request or withdrawal of wake-ups, which only listeners make.
pub async fn listening_sessions(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "select count(*) from pg_stat_activity
         where datname = current_database()
           and (query ilike 'listen \"pgflow.%' or query ilike 'select pgflow.request_wakeups(%'
                or query ilike 'select pgflow.withdraw_wakeups(%')",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Counts one handler in `running` while `work` runs, recording the most at once in `most`.
pub async fn overlap(
    running: &std::sync::atomic::AtomicUsize,
    most: &std::sync::atomic::AtomicUsize,
    work: Duration,
) {
    use std::sync::atomic::Ordering;
    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(work).await;
    running.fetch_sub(1, Ordering::SeqCst);
}
