//! Waiting at scale (issue 37): `runs` runs parked at a wait, against the same runs without
//! one; resolving them by event key, 1,000 keys a call; what the database does while they wait;
//! and a signal's latency from its commit to its handler's start under low load.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use pgflow::{Client, Start, Worker, WorkerConfig};
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::{Error, database};

/// When each run's handler started.
static HANDLER_STARTS: LazyLock<Mutex<HashMap<Uuid, Instant>>> = LazyLock::new(Mutex::default);

/// The event key of a waiting run: its input.
#[pgflow::flow(slug = "bench_waits", input = u64)]
mod bench_waits {
    #[step(signal = go, key = input)]
    async fn proceed(input: u64, go: u8, ctx: pgflow::Context) -> Result<u64, String> {
        super::HANDLER_STARTS
            .lock()
            .expect("not poisoned")
            .insert(ctx.run_id(), std::time::Instant::now());
        Ok(input + u64::from(go))
    }
}

/// The same run without a wait.
#[pgflow::flow(slug = "bench_nowait", input = u64)]
mod bench_nowait {
    #[step]
    async fn proceed(input: u64, ctx: pgflow::Context) -> Result<u64, String> {
        super::HANDLER_STARTS
            .lock()
            .expect("not poisoned")
            .insert(ctx.run_id(), std::time::Instant::now());
        Ok(input)
    }
}

/// What the waits scenario measured.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Waits {
    /// Runs parked (and started without a wait, for the comparison).
    pub(crate) runs: usize,
    /// Runs started and parked at their wait per second (batches of 1,000).
    pub(crate) parked_per_s: f64,
    /// The same runs without a wait started (their first task queued) per second.
    pub(crate) started_without_wait_per_s: f64,
    /// Runs resolved by event key per second, 1,000 keys a call (their tasks queued).
    pub(crate) resolved_per_s: f64,
    /// Transactions per second on the database while the runs waited, with one idle worker
    /// of their queue (its heartbeats and the process's timer and schedule loops).
    pub(crate) idle_commits_per_s: f64,
    /// A signal's latency, from `send_signal`'s commit to its handler's start, one at a time
    /// (p50, p95, ms).
    pub(crate) signal_latency_p50_ms: f64,
    /// See `signal_latency_p50_ms`.
    pub(crate) signal_latency_p95_ms: f64,
    /// The send call itself, to its commit (p50, ms).
    pub(crate) send_p50_ms: f64,
    /// For comparison, a start's latency from its call to its first handler's start, without
    /// a wait, with the same worker setup (p50, p95, ms).
    pub(crate) start_latency_p50_ms: f64,
    /// See `start_latency_p50_ms`.
    pub(crate) start_latency_p95_ms: f64,
}

/// Runs the scenario with `runs` waiting runs and `latency_samples` signals one at a time.
pub(crate) async fn waits(runs: usize, latency_samples: usize) -> Result<Waits, Error> {
    let pool = database("pgflow_bench").await?;
    let client = Client::new(pool.clone());
    client.deploy(&bench_waits::deployment()).await?;
    client.deploy(&bench_nowait::deployment()).await?;

    // Park: start the runs in batches of 1,000; each root step waits.
    let inputs: Vec<u64> = (0..runs as u64).collect();
    let started = Instant::now();
    for chunk in inputs.chunks(1000) {
        client
            .start_many(Start::flow::<bench_waits::Flow>(), chunk, &[])
            .await?;
    }
    let parked_per_s = runs as f64 / started.elapsed().as_secs_f64();
    let waiting: i64 = sqlx::query_scalar("select count(*) from pgflow.waits")
        .fetch_one(&pool)
        .await?;
    if waiting as usize != runs {
        return Err(format!("{waiting} runs wait, expected {runs}").into());
    }

    // The same runs without a wait.
    let started = Instant::now();
    for chunk in inputs.chunks(1000) {
        client
            .start_many(Start::flow::<bench_nowait::Flow>(), chunk, &[])
            .await?;
    }
    let started_without_wait_per_s = runs as f64 / started.elapsed().as_secs_f64();

    // Idle: one worker of the waiting flow's queue, nothing to do but wait.
    let worker = worker(
        bench_waits::deployment(),
        bench_waits::Queue::BenchWaits,
        &client,
        100,
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = crate::commits(&pool).await?;
    let idle = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = crate::commits(&pool).await?;
    // The two reads of the counter are not the idle database's.
    let idle_commits_per_s = (after - before - 2) as f64 / idle.elapsed().as_secs_f64();
    worker.shutdown();
    worker.wait().await?;

    // Resolve by key, 1,000 keys a call, no worker running: the SQL cost of delivering.
    let started = Instant::now();
    let mut resolved = 0;
    for chunk in inputs.chunks(1000) {
        let events: Vec<(String, Value)> = chunk
            .iter()
            .map(|n| (n.to_string(), Value::from(1)))
            .collect();
        resolved += pgflow::engine::emit_events(&pool, "go", &events)
            .await?
            .len();
    }
    let resolved_per_s = resolved as f64 / started.elapsed().as_secs_f64();
    if resolved != runs {
        return Err(format!("{resolved} runs resolved, expected {runs}").into());
    }

    // Drain both flows (untimed) and check every run completed once.
    drain(&pool, &client).await?;
    let (not_completed, tasks, once): (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from pgflow.runs where status <> 'completed'),
                count(*), count(*) filter (where status = 'completed' and attempts_count = 1)
         from pgflow.step_tasks",
    )
    .fetch_one(&pool)
    .await?;
    if not_completed != 0 || tasks as usize != 2 * runs || once != tasks {
        return Err(format!(
            "correctness check failed: {not_completed} runs not completed, {tasks} tasks \
             (expected {}), {once} completed once",
            2 * runs
        )
        .into());
    }

    // The sender: one connection, warmed by the first samples (an application's connections
    // are long-lived; a fresh one plans the engine's statements on its first calls).
    let sender = Client::new(
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect_with((*pool.connect_options()).clone())
            .await?,
    );
    let (p50, p95, send_p50) = signal_latency(&pool, &sender, latency_samples).await?;
    let (start_p50, start_p95) = start_latency(&pool, &sender, latency_samples).await?;
    Ok(Waits {
        runs,
        parked_per_s,
        started_without_wait_per_s,
        resolved_per_s,
        idle_commits_per_s,
        signal_latency_p50_ms: p50,
        signal_latency_p95_ms: p95,
        send_p50_ms: send_p50,
        start_latency_p50_ms: start_p50,
        start_latency_p95_ms: start_p95,
    })
}

/// A bench worker of `queue` on `client`, claiming `batch` at a time.
async fn worker<F: pgflow::FlowSpec, Q: pgflow::FlowQueue<Flow = F>>(
    deployment: pgflow::Deployment<F>,
    queue: Q,
    client: &Client,
    batch: usize,
) -> Result<pgflow::WorkerHandle, Error> {
    let config = WorkerConfig::new(queue)
        .connection(client)
        .batch_size(batch)
        .max_concurrent(batch)
        .function_name("bench");
    Ok(Worker::start_with(deployment, config).await?)
}

/// The p50 and p95 of `samples` (sorted here).
fn p50_p95(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

/// Runs both flows' queued tasks to the end.
async fn drain(pool: &PgPool, client: &Client) -> Result<(), Error> {
    let waits_worker = worker(
        bench_waits::deployment(),
        bench_waits::Queue::BenchWaits,
        client,
        100,
    )
    .await?;
    let nowait_worker = worker(
        bench_nowait::deployment(),
        bench_nowait::Queue::BenchNowait,
        client,
        100,
    )
    .await?;
    loop {
        let open: i64 =
            sqlx::query_scalar("select count(*) from pgflow.runs where status = 'started'")
                .fetch_one(pool)
                .await?;
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for worker in [waits_worker, nowait_worker] {
        worker.shutdown();
        worker.wait().await?;
    }
    Ok(())
}

/// One run at a time: start it (its step waits), signal it, and time from the signal's commit
/// (its call returned) to its handler's start, with one idle worker. Also the p50 of the send
/// call itself.
async fn signal_latency(
    pool: &PgPool,
    client: &Client,
    samples: usize,
) -> Result<(f64, f64, f64), Error> {
    // The worker in a process of its own (a client of its own), as a low load has it.
    let process = Client::new(pool.clone());
    let worker = worker(
        bench_waits::deployment(),
        bench_waits::Queue::BenchWaits,
        &process,
        10,
    )
    .await?;
    let mut latencies = Vec::with_capacity(samples);
    let mut sends = Vec::with_capacity(samples);
    for n in 0..samples {
        let run = bench_waits::start(client, &(1_000_000_000 + n as u64)).await?;
        // Idle between samples, as a low load is.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let sending = Instant::now();
        bench_waits::signal_go(client, run.run_id(), &1).await?;
        // Committed: the latency counts from here.
        let sent_at = Instant::now();
        sends.push(sent_at.duration_since(sending).as_secs_f64() * 1000.0);
        run.wait(client, Duration::from_secs(10)).await?;
        let started_at = HANDLER_STARTS
            .lock()
            .expect("not poisoned")
            .remove(&run.run_id())
            .ok_or("the handler did not record its start")?;
        latencies.push(started_at.duration_since(sent_at).as_secs_f64() * 1000.0);
    }
    worker.shutdown();
    worker.wait().await?;
    // The first tenth warmed the connections up.
    latencies.drain(..samples / 10);
    sends.drain(..samples / 10);
    let (p50, p95) = p50_p95(&mut latencies);
    Ok((p50, p95, p50_p95(&mut sends).0))
}

/// One run at a time of the flow without a wait: from its start's commit to its handler's
/// start, with one idle worker (the same path, for comparison).
async fn start_latency(
    pool: &PgPool,
    client: &Client,
    samples: usize,
) -> Result<(f64, f64), Error> {
    let process = Client::new(pool.clone());
    let worker = worker(
        bench_nowait::deployment(),
        bench_nowait::Queue::BenchNowait,
        &process,
        10,
    )
    .await?;
    let mut latencies = Vec::with_capacity(samples);
    for n in 0..samples {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let sent_at = Instant::now();
        let run = bench_nowait::start(client, &(2_000_000_000 + n as u64)).await?;
        run.wait(client, Duration::from_secs(10)).await?;
        let started_at = HANDLER_STARTS
            .lock()
            .expect("not poisoned")
            .remove(&run.run_id())
            .ok_or("the handler did not record its start")?;
        latencies.push(started_at.duration_since(sent_at).as_secs_f64() * 1000.0);
    }
    worker.shutdown();
    worker.wait().await?;
    latencies.drain(..samples / 10);
    Ok(p50_p95(&mut latencies))
}

/// Prints the scenario's figures.
pub(crate) fn print_waits(waits: &Waits) {
    println!(
        "\nwaits ({} runs): parked {:.0} runs/s (without a wait: {:.0} runs/s, ratio {:.2}); \
         resolved by key {:.0} runs/s (1,000 keys a call); {:.1} transactions/s while they \
         waited (one idle worker); a signal's commit to its handler's start p50 {:.1} ms, p95 \
         {:.1} ms (the send itself p50 {:.1} ms; a start without a wait, from its call to its \
         handler's start: p50 {:.1} ms, p95 {:.1} ms)",
        waits.runs,
        waits.parked_per_s,
        waits.started_without_wait_per_s,
        waits.parked_per_s / waits.started_without_wait_per_s,
        waits.resolved_per_s,
        waits.idle_commits_per_s,
        waits.signal_latency_p50_ms,
        waits.signal_latency_p95_ms,
        waits.send_p50_ms,
        waits.start_latency_p50_ms,
        waits.start_latency_p95_ms,
    );
}
