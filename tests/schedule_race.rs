//! The schedule race: an every-second schedule fired for 10 s by 10 workers in 3 processes, on
//! a private cluster. Every tick of the window must start exactly one run: 10 ± 1 runs (the
//! window's edges), no tick twice, no tick between the first and the last missing.
//!
//! One binary, two parts (`harness = false`): run bare, it is the test; run as
//! `schedule_race workers <url> <n>`, it is one process of `n` workers the test spawns.

use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

use chrono::{DateTime, Utc};
use pgflow::{Client, ProcessConfig, Schedule, Worker, WorkerConfig};
use sqlx::postgres::PgPoolOptions;

/// Workers in each process: 10 in all.
const PROCESSES: [usize; 3] = [4, 3, 3];
/// How long the schedule is watched.
const WINDOW: Duration = Duration::from_secs(10);

/// The flow the schedule starts.
#[pgflow::flow(slug = "race_v1", input = u32)]
pub mod race_v1 {
    #[step(queue = "schedule_race")]
    /// Echoes the input.
    pub async fn echo(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let runtime = pgflow_testkit::harness::runtime();
    if args.get(1).map(String::as_str) == Some("workers") {
        let n = args[3].parse().expect("a worker count");
        return runtime.block_on(workers(&args[2], n));
    }
    if pgflow_testkit::harness::filtered_out("schedule_race") {
        return ExitCode::SUCCESS;
    }
    pgflow_testkit::harness::outcome("schedule_race", runtime.block_on(scenario()))
}

/// One process of `n` workers, each on a client (and pool) of its own, so each declares and
/// fires the schedule; prints `ready` once all have started, then runs until killed.
async fn workers(url: &str, n: usize) -> ExitCode {
    let mut handles = Vec::new();
    for _ in 0..n {
        let pool = match PgPoolOptions::new().max_connections(2).connect(url).await {
            Ok(pool) => pool,
            Err(error) => {
                eprintln!("connecting failed: {error}");
                return ExitCode::FAILURE;
            }
        };
        let process = ProcessConfig::new()
            .without_notifications()
            .schedule(Schedule::new("race_every_second", "race_v1", "* * * * * *").input(&1));
        let client = Client::with_config(pool, process);
        let config = WorkerConfig::new(race_v1::Queue::ScheduleRace)
            .connection(&client)
            .poll_interval(Duration::from_millis(500))
            .function_name("schedule_race");
        match Worker::start_with(race_v1::deployment(), config).await {
            Ok(handle) => handles.push(handle),
            Err(error) => {
                eprintln!("worker start failed: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!("ready");
    for handle in handles {
        let _ = handle.wait().await;
    }
    ExitCode::SUCCESS
}

fn spawn(url: &str, n: usize) -> Child {
    Command::new(std::env::current_exe().expect("this binary"))
        .args(["workers", url, &n.to_string()])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn a worker process")
}

/// Waits for a child's `ready` line.
fn wait_ready(child: &mut Child) -> Result<(), String> {
    use std::io::BufRead;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    if line.trim() == "ready" {
        Ok(())
    } else {
        Err(format!("a worker process did not start (said {line:?})"))
    }
}

async fn scenario() -> Result<String, String> {
    let cluster = pgflow_testkit::Cluster::start().map_err(|e| e.to_string())?;
    let url = cluster.url();
    let admin = PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .map_err(|e| e.to_string())?;
    pgflow::install(&admin).await.map_err(|e| e.to_string())?;
    Client::new(admin.clone())
        .deploy(&race_v1::deployment())
        .await
        .map_err(|e| e.to_string())?;

    let mut children: Vec<Child> = PROCESSES.iter().map(|&n| spawn(&url, n)).collect();
    let ready: Result<(), String> = children.iter_mut().try_for_each(wait_ready);
    let outcome = match ready {
        Ok(()) => watch(&admin).await,
        Err(error) => Err(error),
    };
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    outcome
}

/// Watches the schedule for [`WINDOW`] and checks its runs.
async fn watch(admin: &sqlx::PgPool) -> Result<String, String> {
    let now = || async {
        sqlx::query_scalar::<_, DateTime<Utc>>("select now()")
            .fetch_one(admin)
            .await
            .map_err(|e| e.to_string())
    };
    let from = now().await?;
    tokio::time::sleep(WINDOW).await;
    let to = now().await?;
    let ticks: Vec<DateTime<Utc>> = sqlx::query_scalar(
        "select scheduled_for from pgflow.runs
         where scheduled_for > $1 and scheduled_for <= $2 order by scheduled_for",
    )
    .bind(from)
    .bind(to)
    .fetch_all(admin)
    .await
    .map_err(|e| e.to_string())?;
    let mut distinct = ticks.clone();
    distinct.dedup();
    if distinct.len() != ticks.len() {
        return Err(format!("a tick started more than one run: {ticks:?}"));
    }
    if !(9..=11).contains(&ticks.len()) {
        return Err(format!(
            "{} runs in 10 s, not 10 ± 1: {ticks:?}",
            ticks.len()
        ));
    }
    if let Some(gap) = ticks
        .windows(2)
        .find(|pair| pair[1] - pair[0] != chrono::Duration::seconds(1))
    {
        return Err(format!(
            "a tick is missing between {} and {}",
            gap[0], gap[1]
        ));
    }
    Ok(format!(
        "{} runs for {} ticks, 10 workers in 3 processes",
        ticks.len(),
        distinct.len()
    ))
}
