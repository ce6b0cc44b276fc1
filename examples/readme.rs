//! README.md's example, whole: one flow over three queues, a worker for each, one run.
//! `cargo run --example readme`: in the database at DATABASE_URL, or else in a database of its
//! own, `pgflow_readme`, on the local server (created when missing).

use std::time::Duration;

use pgflow::{Client, Worker, WorkerConfig};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct TriageInput {
    thread_id: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Thread {
    id: u64,
    messages: Vec<String>,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Label {
    Urgent,
    Normal,
}

#[derive(Debug, Serialize, Deserialize)]
struct Alert {
    thread_id: u64,
    urgent: usize,
}

#[pgflow::flow(slug = "triage_v1", alias = "triage", input = TriageInput)]
mod triage_v1 {
    use super::*;

    #[step] // queue `triage_v1` (the default)
    async fn fetch(input: TriageInput) -> Result<Thread, String> {
        let messages = vec!["Where is my invoice?".into(), "Checkout is down!".into()];
        Ok(Thread {
            id: input.thread_id,
            messages,
        })
    }

    #[step(depends_on = [fetch])] // parameters are dependencies, by name
    async fn split(fetch: Thread) -> Result<Vec<String>, String> {
        Ok(fetch.messages)
    }

    #[step(map = split, queue = "classify_threads", timeout = "10s")] // a task per element
    async fn classify(message: String, ctx: pgflow::Context) -> Result<Label, String> {
        if ctx.is_cancelled() {
            return Err("the worker is stopping".into());
        }
        Ok(if message.ends_with('!') {
            Label::Urgent
        } else {
            Label::Normal
        })
    }

    #[step(depends_on = [fetch, classify], queue = "deliver_slack_alerts")]
    async fn alert(fetch: Thread, classify: Vec<Label>) -> Result<Alert, String> {
        let urgent = classify
            .iter()
            .filter(|label| **label == Label::Urgent)
            .count();
        Ok(Alert {
            thread_id: fetch.id,
            urgent,
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env()) // RUST_LOG=info
        .init();
    let url = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => own_database("postgres://postgres@127.0.0.1:5432", "pgflow_readme").await?,
    };
    let client = Client::connect(&url).await?;
    pgflow::install(client.pool()).await?; // PGMQ and the pgflow schema; a no-op when current

    // A worker for each queue the flow routes to, each with its own concurrency.
    let on = |queue| WorkerConfig::new(queue).connection(&client);
    let workers = [
        Worker::start_on(triage_v1::deployment(), &client).await?, // the default queue
        Worker::start_with(
            triage_v1::deployment(),
            on(triage_v1::Queue::ClassifyThreads).max_concurrent(1),
        )
        .await?,
        Worker::start_with(
            triage_v1::deployment(),
            on(triage_v1::Queue::DeliverSlackAlerts),
        )
        .await?,
    ];

    let run = triage_v1::start(&client, &TriageInput { thread_id: 7 }).await?;
    let output = run.wait(&client, Duration::from_secs(30)).await?;
    println!("run {}: {:?}", run.run_id(), output.alert);

    for worker in workers {
        worker.shutdown(); // drain: finish in-flight tasks, then stop
        worker.wait().await?;
    }
    Ok(())
}

/// The URL of database `name` on `server`, created when missing.
async fn own_database(server: &str, name: &str) -> Result<String, Box<dyn std::error::Error>> {
    use pgflow::sqlx::{self, Connection};
    let mut admin = sqlx::PgConnection::connect(&format!("{server}/postgres")).await?;
    let exists: bool =
        sqlx::query_scalar("select exists (select from pg_database where datname = $1)")
            .bind(name)
            .fetch_one(&mut admin)
            .await?;
    if !exists {
        sqlx::query(&format!(r#"create database "{name}""#))
            .execute(&mut admin)
            .await?;
    }
    Ok(format!("{server}/{name}"))
}
