//! A version rollout end to end: `triage_v1` serves traffic through the alias `triage`; the
//! fence stops its workers, `(v1, v2)` registries are deployed while disabled, the fence is
//! lifted and the first new worker activates `triage_v2`. Old runs finish on v1, new ones run
//! on v2, and `drain-status` confirms when v1 can leave the registries.
//!
//! ```sh
//! cargo run --example rollout
//! ```
//!
//! Database: as for the `triage` example (`examples/common/database.rs`); the example works in
//! a database of its own, `pgflow_rollout`, created afresh on every run.

#[path = "common/database.rs"]
mod database;

use std::time::Duration;

use pgflow::{Client, Worker, WorkerConfig, WorkerHandle};
use pgflow::{Start, StartOptions};
use serde_json::{Value, json};
use sqlx::PgPool;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Version 1: classify, then alert.
#[pgflow::flow(slug = "triage_v1", alias = "triage", version = 1)]
pub mod triage_v1 {
    use super::*;

    /// Classifies a thread (slowly, so that runs are in flight during the rollout).
    #[step(queue = "classify_threads")]
    pub async fn classify(input: Value) -> Result<String, String> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(format!("v1 label for {input}"))
    }

    /// Alerts.
    #[step(depends_on = [classify], queue = "deliver_slack_alerts")]
    pub async fn alert(classify: String) -> Result<String, String> {
        Ok(format!("{classify}, alerted"))
    }
}

/// Version 2: a better classifier on the same queues.
#[pgflow::flow(slug = "triage_v2", alias = "triage", version = 2)]
pub mod triage_v2 {
    use super::*;

    /// Classifies a thread with confidence.
    #[step(queue = "classify_threads")]
    pub async fn classify(input: Value) -> Result<(String, f64), String> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok((format!("v2 label for {input}"), 0.9))
    }

    /// Alerts.
    #[step(depends_on = [classify], queue = "deliver_slack_alerts")]
    pub async fn alert(classify: (String, f64)) -> Result<String, String> {
        Ok(format!(
            "{} ({:.0}%), alerted",
            classify.0,
            classify.1 * 100.0
        ))
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let database = database::fresh("pgflow_rollout", 12).await?;
    println!("database: {}", database.description);
    let pool = database.pool.clone();
    pgflow::install(&pool).await?;
    let client = Client::new(pool.clone());

    println!("1. v1 serves `triage` on two worker functions");
    let old = v1_workers(&pool).await?;
    let mut v1_runs = Vec::new();
    for i in 0..40 {
        v1_runs.push(
            client
                .start(Start::named("triage"), &json!(i), StartOptions::new())
                .await?
                .run_id(),
        );
    }
    println!("   started {} runs through the alias", v1_runs.len());

    println!("2. pgflow rollout begin classify_threads deliver_slack_alerts");
    let functions = vec![
        "classify_threads".to_owned(),
        "deliver_slack_alerts".to_owned(),
    ];
    let rollout = pgflow::rollout::begin(&pool, &functions).await?;
    pgflow::rollout::wait_for_workers(&pool, rollout, Duration::from_secs(30), |left| {
        println!("   waiting for {} worker(s) to drain and stop", left.len());
    })
    .await?;
    for worker in old {
        worker.wait().await?;
    }

    println!("3. deploy (v1, v2) registries while disabled: they wait");
    let new_classify = tokio::spawn(both(
        pool.clone(),
        triage_v2::Queue::ClassifyThreads,
        "classify_threads",
        1,
    ));
    let new_alerts = tokio::spawn(both(
        pool.clone(),
        triage_v2::Queue::DeliverSlackAlerts,
        "deliver_slack_alerts",
        5,
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    print_drain(&pool).await?;

    println!("4. pgflow rollout finish {rollout}");
    let enabled = pgflow::rollout::finish(&pool, rollout).await?;
    println!("   enabled again: {}", enabled.join(", "));
    let new = [new_classify.await??, new_alerts.await??];
    for worker in &new {
        let states: Vec<String> = worker
            .flows()
            .iter()
            .map(|f| format!("{} {:?}/{}", f.flow_slug, f.compile, f.activation.as_str()))
            .collect();
        println!("   worker on `{}`: {}", worker.queue(), states.join(", "));
    }
    let mut v2_runs = Vec::new();
    for i in 100..120 {
        v2_runs.push(
            client
                .start(Start::named("triage"), &json!(i), StartOptions::new())
                .await?
                .run_id(),
        );
    }
    println!("   started {} more runs through the alias", v2_runs.len());

    println!("5. v1 drains");
    loop {
        let status = pgflow::engine::drain_status(&pool, "triage_v1", None).await?;
        println!(
            "   triage_v1: {} started runs, {} queued and {} started tasks -> {}",
            status.started_runs,
            status.queued_tasks,
            status.started_tasks,
            if status.safe_to_remove {
                "safe to remove"
            } else {
                "not yet"
            }
        );
        if status.safe_to_remove {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let v1 = finished(&pool, &v1_runs, "triage_v1").await?;
    let v2 = finished(&pool, &v2_runs, "triage_v2").await?;
    println!(
        "\nsummary: {v1} of {} old runs completed on v1, {v2} of {} new runs on v2",
        v1_runs.len(),
        v2_runs.len()
    );
    for worker in new {
        worker.shutdown();
        worker.wait().await?;
    }
    if v1 != v1_runs.len() || v2 != v2_runs.len() {
        return Err("some runs did not complete on their version".into());
    }
    Ok(())
}

async fn v1_workers(pool: &PgPool) -> Result<Vec<WorkerHandle>, Error> {
    Ok(vec![
        Worker::start_with(
            triage_v1::deployment(),
            config(pool, triage_v1::Queue::ClassifyThreads, "classify_threads").max_concurrent(1),
        )
        .await?,
        Worker::start_with(
            triage_v1::deployment(),
            config(
                pool,
                triage_v1::Queue::DeliverSlackAlerts,
                "deliver_slack_alerts",
            )
            .max_concurrent(5),
        )
        .await?,
    ])
}

async fn both(
    pool: PgPool,
    queue: triage_v2::Queue,
    function: &'static str,
    concurrency: usize,
) -> Result<WorkerHandle, pgflow::WorkerError> {
    Worker::start_with(
        (triage_v1::deployment(), triage_v2::deployment()),
        config(&pool, queue, function).max_concurrent(concurrency),
    )
    .await
}

fn config<Q: pgflow::FlowQueue>(pool: &PgPool, queue: Q, function: &str) -> WorkerConfig<Q> {
    WorkerConfig::new(queue)
        .pool(pool.clone())
        .function_name(function)
        .heartbeat_interval(Duration::from_millis(200))
        .poll_interval(Duration::from_millis(200))
}

async fn print_drain(pool: &PgPool) -> Result<(), Error> {
    let status = pgflow::engine::drain_status(pool, "triage_v1", Some("classify_threads")).await?;
    println!(
        "   pgflow drain-status triage_v1 --queue classify_threads: {} started runs, {} queued tasks, safe to remove: {}",
        status.started_runs, status.queued_tasks, status.safe_to_remove
    );
    Ok(())
}

/// How many of `runs` completed on `flow`, waiting up to 30 s for them.
async fn finished(pool: &PgPool, runs: &[uuid::Uuid], flow: &str) -> Result<usize, Error> {
    for _ in 0..150 {
        let (done, on_flow): (i64, i64) = sqlx::query_as(
            "select count(*) filter (where status <> 'started'),
                    count(*) filter (where status = 'completed' and flow_slug = $2)
             from pgflow.runs where run_id = any($1)",
        )
        .bind(runs)
        .bind(flow)
        .fetch_one(pool)
        .await?;
        if done as usize == runs.len() {
            return Ok(on_flow as usize);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err("runs did not finish within 30 s".into())
}
