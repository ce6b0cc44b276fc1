//! The SQL core end to end: install pgflow, compile a thread-triage flow, start runs, and let
//! three small in-process loops (one per queue) claim, run and complete the tasks through the
//! SQL calls until every run is done.
//!
//! Database: as for the `triage` example (`examples/common/database.rs`); the example works in
//! a database of its own, `pgflow_quickstart`, created afresh on every run.
//!
//! These loops show the engine's contract (queue-scoped claims, batched completions); the
//! worker runtime (`pgflow::Worker`) builds the production version of them.

#[path = "common/database.rs"]
mod database;

use std::time::{Duration, Instant};

use pgflow::RunStatus;
use pgflow::definition::{FlowDefinition, StepDefinition};
use pgflow::engine::{self, ClaimedTask, SupportedPairs, TaskCompletion};
use pgflow::names::{FlowSlug, QueueName, StepSlug};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

const RUNS: usize = 50;
const DATABASE: &str = "pgflow_quickstart";

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let database = database::fresh(DATABASE, 8).await?;
    println!("database: {}", database.description);
    let pool = database.pool.clone();
    let report = pgflow::install(&pool).await?;
    println!(
        "installed pgflow schema {} into `{}`",
        report.schema_version, database.name
    );

    let flow = triage_flow()?;
    let status = engine::compile_flow(&pool, &flow).await?;
    println!("flow `{}`: {status:?}", flow.slug);

    let inputs: Vec<Value> = (0..RUNS)
        .map(|i| json!({ "thread_id": i, "messages": i % 4 + 1 }))
        .collect();
    let started_at = Instant::now();
    let runs = engine::start_flows(&pool, flow.slug.as_str(), &inputs).await?;
    println!("started {} runs", runs.len());

    let mut queues: Vec<QueueName> = flow.steps.iter().map(|s| flow.queue_of(s)).collect();
    queues.sort();
    queues.dedup();
    let loops: Vec<_> = queues
        .into_iter()
        .map(|queue| {
            let pairs = SupportedPairs::routed_to(&flow, &queue);
            tokio::spawn(queue_loop(pool.clone(), queue, pairs))
        })
        .collect();

    let run_ids: Vec<Uuid> = runs.iter().map(|r| r.run_id).collect();
    let (completed, failed) = wait_for_runs(&pool, &run_ids).await?;
    for handle in &loops {
        handle.abort();
    }

    let per_queue: Vec<(String, i64)> = sqlx::query_as(
        "select queue_name, count(*) from pgflow.step_tasks where run_id = any($1)
         group by queue_name order by queue_name",
    )
    .bind(&run_ids)
    .fetch_all(&pool)
    .await?;
    let sample: Value = sqlx::query_scalar("select output from pgflow.runs where run_id = $1")
        .bind(run_ids[0])
        .fetch_one(&pool)
        .await?;

    println!(
        "{completed} runs completed, {failed} failed in {:.2?}",
        started_at.elapsed()
    );
    for (queue, tasks) in per_queue {
        println!("  queue {queue:<22} {tasks:>4} tasks");
    }
    println!("output of the first run: {sample}");
    if completed != RUNS {
        return Err(format!("only {completed} of {RUNS} runs completed").into());
    }
    Ok(())
}

/// fetch -> split -> classify (map, on `classify_threads`) -> alert (on `deliver_slack_alerts`).
fn triage_flow() -> Result<FlowDefinition, Error> {
    let step = |s: &str| StepSlug::new(s);
    Ok(FlowDefinition::new(FlowSlug::new("quickstart_triage")?)
        .step(StepDefinition::single(step("fetch")?))
        .step(StepDefinition::single(step("split")?).depends_on(step("fetch")?))
        .step(
            StepDefinition::map(step("classify")?)
                .depends_on(step("split")?)
                .queue(QueueName::new("classify_threads")?),
        )
        .step(
            StepDefinition::single(step("alert")?)
                .depends_on(step("fetch")?)
                .depends_on(step("classify")?)
                .queue(QueueName::new("deliver_slack_alerts")?),
        ))
}

/// The handlers, keyed by step slug.
fn handle(task: &ClaimedTask) -> Value {
    match task.step_slug.as_str() {
        "fetch" => json!({
            "thread_id": task.input["thread_id"],
            "messages": (0..task.input["messages"].as_u64().unwrap_or(0))
                .map(|m| format!("message {m}"))
                .collect::<Vec<_>>(),
        }),
        "split" => task.input["fetch"]["messages"].clone(),
        "classify" => {
            let text = task.input.as_str().unwrap_or_default();
            json!(if text.ends_with('0') {
                "urgent"
            } else {
                "normal"
            })
        }
        _ => {
            let urgent = task.input["classify"]
                .as_array()
                .map_or(0, |labels| labels.iter().filter(|l| *l == "urgent").count());
            json!({ "thread_id": task.input["fetch"]["thread_id"], "urgent": urgent })
        }
    }
}

/// Claims batches from one queue and completes them in one call per batch.
async fn queue_loop(pool: PgPool, queue: QueueName, pairs: SupportedPairs) -> Result<(), Error> {
    let worker_id = Uuid::new_v4();
    loop {
        let tasks = engine::read_and_start_tasks(&pool, &queue, worker_id, &pairs, 20)
            .await?
            .tasks;
        if tasks.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let completions: Vec<_> = tasks
            .iter()
            .map(|t| TaskCompletion::of(t, handle(t)))
            .collect();
        engine::complete_tasks(&pool, &completions).await?;
    }
}

/// Waits until every run has ended (at most 60 s); returns (completed, failed).
async fn wait_for_runs(pool: &PgPool, run_ids: &[Uuid]) -> Result<(usize, usize), Error> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let statuses: Vec<RunStatus> =
            sqlx::query_scalar("select status from pgflow.runs where run_id = any($1)")
                .bind(run_ids)
                .fetch_all(pool)
                .await?;
        let completed = statuses
            .iter()
            .filter(|s| **s == RunStatus::Completed)
            .count();
        let failed = statuses.iter().filter(|s| **s == RunStatus::Failed).count();
        if completed + failed == run_ids.len() || Instant::now() > deadline {
            return Ok((completed, failed));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
