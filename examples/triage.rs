//! The main job: a thread-triage flow written with the macros, three queue-centric workers in
//! one process (each with its own concurrency), a few hundred runs started through the alias in
//! one call, live progress and a summary. Exits non-zero unless every run completed.
//!
//! Database: `DATABASE_URL` if set; else the server on 127.0.0.1:5432 if it answers; else a
//! throwaway cluster from this machine's Postgres binaries (see `examples/common/database.rs`).
//! The example works in a database of its own, `pgflow_triage_<user>` (or `PGFLOW_EXAMPLE_DB`),
//! created afresh on every run. It counts only the runs it started: a run someone else starts
//! there meanwhile changes nothing.
//!
//! ```sh
//! cargo run --release --example triage          # RUNS=1000 for a bigger batch
//! ```

#[path = "common/database.rs"]
mod database;

use std::time::{Duration, Instant};

use pgflow::Start;
use pgflow::{Client, Worker, WorkerConfig};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// What callers start a triage with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TriageInput {
    /// The thread to triage.
    pub thread_id: u64,
}

/// A support thread.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Thread {
    /// Its id.
    pub id: u64,
    /// Its messages, oldest first.
    pub messages: Vec<String>,
}

/// How urgent one message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Label {
    /// Needs a human now.
    Urgent,
    /// Can wait.
    Normal,
}

/// What the alerting step reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Alert {
    /// The thread.
    pub thread_id: u64,
    /// How many of its messages are urgent.
    pub urgent: usize,
    /// Whether an alert went out.
    pub sent: bool,
}

/// Version 1 of the `triage` flow.
#[pgflow::flow(slug = "triage_v1", alias = "triage", version = 1, input = TriageInput, max_attempts = 3)]
pub mod triage_v1 {
    use super::*;

    /// Loads the thread (default queue `triage_v1`).
    #[step]
    pub async fn fetch(input: TriageInput) -> Result<Thread, String> {
        let count = input.thread_id % 4 + 1;
        Ok(Thread {
            id: input.thread_id,
            messages: (0..count)
                .map(|m| {
                    if (input.thread_id + m).is_multiple_of(5) {
                        format!("message {m}: production is down!")
                    } else {
                        format!("message {m}: a question")
                    }
                })
                .collect(),
        })
    }

    /// Splits it into messages.
    #[step(depends_on = [fetch])]
    pub async fn split(fetch: Thread) -> Result<Vec<String>, String> {
        Ok(fetch.messages)
    }

    /// Scores each message, one at a time (a rate-limited model behind `classify_threads`).
    #[step(map = split, queue = "classify_threads", timeout = "10s")]
    pub async fn classify(message: String) -> Result<Label, String> {
        tokio::time::sleep(Duration::from_micros(200)).await;
        Ok(if message.ends_with('!') {
            Label::Urgent
        } else {
            Label::Normal
        })
    }

    /// Alerts on urgent threads (on `deliver_slack_alerts`, five at a time).
    #[step(depends_on = [fetch, classify], queue = "deliver_slack_alerts")]
    pub async fn alert(fetch: Thread, classify: Vec<Label>) -> Result<Alert, String> {
        let urgent = classify.iter().filter(|l| **l == Label::Urgent).count();
        if urgent > 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(Alert {
            thread_id: fetch.id,
            urgent,
            sent: urgent > 0,
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // RUST_LOG=info (or debug, for a line per task) shows what the workers do.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(300);

    let database = database::fresh("pgflow_triage", 16).await?;
    println!("database: {}", database.description);
    let url = database.url.clone();
    let pool = database.pool.clone();
    pgflow::install(&pool).await?;

    // Three workers, one per queue, each with the queue's own concurrency, on one client: they
    // share its notification listener and its maintenance, as the workers of one process do.
    let client = Client::new(pool.clone());
    let config = |queue| {
        WorkerConfig::new(queue)
            .connection(&client)
            .function_name("triage_example")
    };
    let workers = [
        Worker::start_with(
            triage_v1::deployment(),
            config(triage_v1::Queue::TriageV1).max_concurrent(10),
        )
        .await?,
        Worker::start_with(
            triage_v1::deployment(),
            config(triage_v1::Queue::ClassifyThreads).max_concurrent(1),
        )
        .await?,
        Worker::start_with(
            triage_v1::deployment(),
            config(triage_v1::Queue::DeliverSlackAlerts).max_concurrent(5),
        )
        .await?,
    ];
    for (worker, concurrency) in workers.iter().zip([10, 1, 5]) {
        println!(
            "worker {} polls `{}`, {concurrency} {} at a time",
            &worker.worker_id().simple().to_string()[..8],
            worker.queue(),
            if concurrency == 1 { "task" } else { "tasks" }
        );
    }

    let inputs: Vec<TriageInput> = (0..runs as u64)
        .map(|thread_id| TriageInput { thread_id })
        .collect();
    let started = Instant::now();
    let handles = client
        .start_many(Start::named("triage"), &inputs, &[])
        .await?;
    let own: Vec<uuid::Uuid> = handles.iter().map(|h| h.run_id()).collect();
    println!("started {runs} runs of the alias `triage` (active: `triage_v1`) in one call");

    // A minute, and more for a big batch: a slow machine still finishes 20 runs a second.
    let deadline = started + Duration::from_secs(60) + Duration::from_millis(50) * runs as u32;
    let progress = Progress::new(runs as u64);
    let (completed, failed) = loop {
        let (completed, failed): (i64, i64) = sqlx::query_as(
            "select count(*) filter (where status = 'completed'), count(*) filter (where status = 'failed')
             from pgflow.runs where run_id = any($1)",
        )
        .bind(&own)
        .fetch_one(&pool)
        .await?;
        let done = (completed + failed) as usize;
        progress.update(done as u64, failed);
        if done >= runs || Instant::now() > deadline {
            progress.finish(done as u64, failed);
            break (completed, failed);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let elapsed = started.elapsed();

    for worker in workers {
        worker.shutdown();
        worker.wait().await?;
    }
    summary(&pool, &own, completed, failed, elapsed).await?;
    if database.is_throwaway() {
        println!("\n(the throwaway cluster is removed now; set DATABASE_URL to keep the runs)");
    } else {
        next_steps(&pool, &own, &url).await?;
    }
    if (completed as usize) < runs {
        return Err(format!(
            "{} of {runs} runs did not complete",
            runs - completed as usize
        )
        .into());
    }
    Ok(())
}

/// The progress of the runs: a bar with rate and ETA on a terminal, else a plain line every
/// few seconds (a log or CI keeps a readable record).
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: u64,
    started: Instant,
    last_line: std::cell::Cell<Instant>,
}

/// How often the plain progress line is printed when stdout is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(3);

impl Progress {
    fn new(total: u64) -> Self {
        use std::io::IsTerminal;
        let bar = std::io::stdout().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:30} {pos:>5}/{len} runs done  {rate:>8}  ETA {eta}  {msg}",
                )
                .expect("a valid progress template")
                .with_key(
                    "rate",
                    |state: &indicatif::ProgressState, out: &mut dyn std::fmt::Write| {
                        let _ = write!(out, "{:.0}/s", state.per_sec());
                    },
                ),
            );
            bar
        });
        Self {
            bar,
            total,
            started: Instant::now(),
            last_line: std::cell::Cell::new(Instant::now()),
        }
    }

    fn update(&self, done: u64, failed: i64) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(done);
                if failed > 0 {
                    bar.set_message(format!("{failed} failed"));
                }
            }
            None if self.last_line.get().elapsed() >= PLAIN_EVERY => {
                self.last_line.set(Instant::now());
                self.line(done, failed);
            }
            None => {}
        }
    }

    fn finish(&self, done: u64, failed: i64) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(done);
                bar.finish();
            }
            None => self.line(done, failed),
        }
    }

    fn line(&self, done: u64, failed: i64) {
        let rate = done as f64 / self.started.elapsed().as_secs_f64().max(0.001);
        println!(
            "{done:>5}/{} runs done ({failed} failed), {rate:.0} runs/s",
            self.total
        );
    }
}

/// Where to look next, with the commands spelled out for this database.
async fn next_steps(pool: &PgPool, own: &[uuid::Uuid], url: &str) -> Result<(), Error> {
    let sample: Option<uuid::Uuid> = sqlx::query_scalar(
        "select run_id from pgflow.runs
         where run_id = any($1) and (output -> 'alert' ->> 'sent')::boolean limit 1",
    )
    .bind(own)
    .fetch_optional(pool)
    .await?;
    println!("\nnext: look at what ran with the `pgflow` command");
    println!("  (install it from this checkout: cargo install --locked --path pgflow-cli)");
    println!("  pgflow status --database-url {url}");
    println!("  pgflow runs --flow triage --database-url {url}");
    if let Some(run_id) = sample {
        println!("  pgflow run {run_id} --database-url {url}");
        println!("  pgflow graph triage --run {run_id} --database-url {url}");
    }
    Ok(())
}

/// What the example's own runs did.
async fn summary(
    pool: &PgPool,
    own: &[uuid::Uuid],
    completed: i64,
    failed: i64,
    elapsed: Duration,
) -> Result<(), Error> {
    let runs = own.len();
    let per_queue: Vec<(String, i64)> = sqlx::query_as(
        "select queue_name, count(*) from pgflow.step_tasks where run_id = any($1)
         group by queue_name order by queue_name",
    )
    .bind(own)
    .fetch_all(pool)
    .await?;
    let (p50, p95): (Option<f64>, Option<f64>) = sqlx::query_as(
        "select percentile_cont(0.5) within group (order by ms), percentile_cont(0.95) within group (order by ms)
         from (select extract(epoch from completed_at - started_at) * 1000 as ms
               from pgflow.runs where run_id = any($1) and status = 'completed') latencies",
    )
    .bind(own)
    .fetch_one(pool)
    .await?;
    let alerts: i64 = sqlx::query_scalar(
        "select count(*) from pgflow.runs
         where run_id = any($1) and (output -> 'alert' ->> 'sent')::boolean",
    )
    .bind(own)
    .fetch_one(pool)
    .await?;
    let tasks: i64 = per_queue.iter().map(|(_, n)| n).sum();
    println!("\nsummary");
    println!("  runs       {completed} completed, {failed} failed, of {runs}");
    for (queue, count) in &per_queue {
        println!("  queue      {queue:<22} {count:>6} tasks");
    }
    println!(
        "  latency    p50 {:.1} ms, p95 {:.1} ms (start to completion)",
        p50.unwrap_or(0.0),
        p95.unwrap_or(0.0)
    );
    println!(
        "  throughput {:.0} runs/s, {:.0} tasks/s over {:.2?}",
        completed as f64 / elapsed.as_secs_f64(),
        tasks as f64 / elapsed.as_secs_f64(),
        elapsed
    );
    println!("  alerts     {alerts} urgent threads alerted");
    Ok(())
}
