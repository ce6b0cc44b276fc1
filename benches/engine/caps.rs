//! Concurrency caps (issue 38): what a cap costs against the same concurrency uncapped, and
//! whether a small key is served beside a big one.
//!
//! - global: a step capped at 50, with 10 workers of 10 slots, against the step uncapped with
//!   10 workers of 5 slots (the same 50 at once);
//! - queue: the uncapped step's queue capped at 50 (`pgflow queue cap`), with 10 workers of 10
//!   slots, against the same uncapped run of 10 workers of 5 slots;
//! - keyed: 1,000 keys capped at 2 each, against the same runs uncapped (10 workers of 10);
//! - fairness: a key with a backlog of thousands and a key with 40 runs, both capped at 10:
//!   the small key's latency (its start's call to its handler's start) against the same runs
//!   alone.
//!
//! Each handler works `WORK` (a sleep), so that the figures are those of concurrency, not of
//! handler code; each measurement has a fresh database.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use pgflow::{Client, Start, Worker, WorkerConfig};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{Error, database};

/// How long each handler works.
const WORK: Duration = Duration::from_millis(20);
/// Workers of each measurement.
const WORKERS: usize = 10;

/// Handlers running now and the most at once (of the measurement running).
static RUNNING: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);
/// When each run's handler started.
static HANDLER_STARTS: LazyLock<Mutex<HashMap<Uuid, Instant>>> = LazyLock::new(Mutex::default);

/// A handler's work: counted while it runs, its start recorded.
async fn work(ctx: &pgflow::Context) {
    HANDLER_STARTS
        .lock()
        .expect("not poisoned")
        .insert(ctx.run_id(), Instant::now());
    let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
    MOST.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(WORK).await;
    RUNNING.fetch_sub(1, Ordering::SeqCst);
}

/// A run's input: the key of its cap.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Keyed {
    key: String,
}

#[pgflow::flow(slug = "bench_cap_global", input = super::Keyed)]
mod bench_cap_global {
    #[step(concurrency = 50)]
    async fn call(input: super::Keyed, ctx: pgflow::Context) -> Result<u8, String> {
        let _ = input.key;
        super::work(&ctx).await;
        Ok(1)
    }
}

#[pgflow::flow(slug = "bench_cap_keyed", input = super::Keyed)]
mod bench_cap_keyed {
    #[step(concurrency = 2, concurrency_key = input.key)]
    async fn call(input: super::Keyed, ctx: pgflow::Context) -> Result<u8, String> {
        let _ = input.key;
        super::work(&ctx).await;
        Ok(1)
    }
}

#[pgflow::flow(slug = "bench_cap_fair", input = super::Keyed)]
mod bench_cap_fair {
    #[step(concurrency = 10, concurrency_key = input.key)]
    async fn call(input: super::Keyed, ctx: pgflow::Context) -> Result<u8, String> {
        let _ = input.key;
        super::work(&ctx).await;
        Ok(1)
    }
}

/// The same step without a cap.
#[pgflow::flow(slug = "bench_uncapped", input = super::Keyed)]
mod bench_uncapped {
    #[step]
    async fn call(input: super::Keyed, ctx: pgflow::Context) -> Result<u8, String> {
        let _ = input.key;
        super::work(&ctx).await;
        Ok(1)
    }
}

/// What the caps scenario measured.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Caps {
    /// Runs of the global and keyed measurements.
    pub(crate) runs: usize,
    /// Keys of the keyed measurement (ten runs each).
    pub(crate) keys: usize,
    /// Runs per second through a global cap of 50 (10 workers of 10 slots).
    pub(crate) global_capped_per_s: f64,
    /// The most handlers at once under that cap.
    pub(crate) global_most_at_once: usize,
    /// Runs per second uncapped with 10 workers of 5 slots (50 at once).
    pub(crate) global_uncapped_per_s: f64,
    /// Runs per second of the uncapped step on its queue capped at 50 (10 workers of 10 slots).
    pub(crate) queue_capped_per_s: f64,
    /// The most handlers at once under that cap.
    pub(crate) queue_most_at_once: usize,
    /// Runs per second through 1,000 keys capped at 2 each (10 workers of 10 slots).
    pub(crate) keyed_capped_per_s: f64,
    /// The same runs uncapped.
    pub(crate) keyed_uncapped_per_s: f64,
    /// Runs of the big key in the fairness measurement.
    pub(crate) backlog: usize,
    /// The small key's latency beside the big key's backlog (p50, p95, ms).
    pub(crate) small_beside_backlog_p50_ms: f64,
    /// See `small_beside_backlog_p50_ms`.
    pub(crate) small_beside_backlog_p95_ms: f64,
    /// The small key's latency alone (p50, p95, ms).
    pub(crate) small_alone_p50_ms: f64,
    /// See `small_alone_p50_ms`.
    pub(crate) small_alone_p95_ms: f64,
    /// Runs of the backlog still open when the small key's last run had started (0: the
    /// backlog ended first, and the comparison says nothing).
    pub(crate) backlog_open: i64,
}

/// Runs the scenario: `runs` runs for the throughput measurements, a backlog of `backlog` for
/// the fairness one.
pub(crate) async fn caps(runs: usize, backlog: usize) -> Result<Caps, Error> {
    let keys = (runs / 10).max(1);
    let one_key: Vec<Keyed> = (0..runs).map(|_| Keyed { key: "k".into() }).collect();
    let many_keys: Vec<Keyed> = (0..runs)
        .map(|n| Keyed {
            key: format!("k{}", n % keys),
        })
        .collect();

    let (global_capped_per_s, global_most_at_once) = throughput(
        bench_cap_global::deployment(),
        bench_cap_global::Queue::BenchCapGlobal,
        10,
        &one_key,
        None,
    )
    .await?;
    if global_most_at_once > 50 {
        return Err(format!("{global_most_at_once} handlers at once under a cap of 50").into());
    }
    let (global_uncapped_per_s, _) = throughput(
        bench_uncapped::deployment(),
        bench_uncapped::Queue::BenchUncapped,
        5,
        &one_key,
        None,
    )
    .await?;
    let (queue_capped_per_s, queue_most_at_once) = throughput(
        bench_uncapped::deployment(),
        bench_uncapped::Queue::BenchUncapped,
        10,
        &one_key,
        Some(50),
    )
    .await?;
    if queue_most_at_once > 50 {
        return Err(
            format!("{queue_most_at_once} handlers at once on a queue capped at 50").into(),
        );
    }
    let (keyed_capped_per_s, _) = throughput(
        bench_cap_keyed::deployment(),
        bench_cap_keyed::Queue::BenchCapKeyed,
        10,
        &many_keys,
        None,
    )
    .await?;
    let (keyed_uncapped_per_s, _) = throughput(
        bench_uncapped::deployment(),
        bench_uncapped::Queue::BenchUncapped,
        10,
        &many_keys,
        None,
    )
    .await?;

    let (small_alone_p50_ms, small_alone_p95_ms, _) = small_key_latency(0).await?;
    let (small_beside_backlog_p50_ms, small_beside_backlog_p95_ms, backlog_open) =
        small_key_latency(backlog).await?;
    Ok(Caps {
        runs,
        keys,
        global_capped_per_s,
        global_most_at_once,
        global_uncapped_per_s,
        queue_capped_per_s,
        queue_most_at_once,
        keyed_capped_per_s,
        keyed_uncapped_per_s,
        backlog,
        small_beside_backlog_p50_ms,
        small_beside_backlog_p95_ms,
        small_alone_p50_ms,
        small_alone_p95_ms,
        backlog_open,
    })
}

/// Starts `inputs` as runs of the deployment's flow, then starts [`WORKERS`] workers of `slots`
/// each and times them to the end, with the queue capped at `queue_cap` if given. Returns runs
/// per second and the most handlers at once.
async fn throughput<F: pgflow::FlowSpec<Input = Keyed>, Q: pgflow::FlowQueue<Flow = F>>(
    deployment: pgflow::Deployment<F>,
    queue: Q,
    slots: usize,
    inputs: &[Keyed],
    queue_cap: Option<u32>,
) -> Result<(f64, usize), Error> {
    let pool = database("pgflow_bench").await?;
    let client = Client::new(pool.clone());
    client.deploy(&deployment).await?;
    if let Some(cap) = queue_cap {
        pgflow::engine::set_queue_concurrency(&pool, queue.name(), Some(cap)).await?;
    }
    for chunk in inputs.chunks(1000) {
        client.start_many(Start::flow::<F>(), chunk, &[]).await?;
    }
    MOST.store(0, Ordering::SeqCst);
    let began = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        workers.push(worker(deployment.clone(), queue, &client, slots).await?);
    }
    until_no_run_is_open(&pool).await?;
    let took = began.elapsed().as_secs_f64();
    for worker in &workers {
        worker.shutdown();
    }
    for worker in workers {
        worker.wait().await?;
    }
    Ok((inputs.len() as f64 / took, MOST.load(Ordering::SeqCst)))
}

/// Runs of the small key, one at a time.
const SMALL_RUNS: usize = 40;

/// The small key's [`SMALL_RUNS`] runs, started one at a time 20 ms apart while [`WORKERS`]
/// workers of 10 slots run, after `backlog` runs of a big key: each run's latency from its
/// start's call to its handler's start (p50, p95, ms), and how many runs of the backlog were
/// still open when the last one had started.
async fn small_key_latency(backlog: usize) -> Result<(f64, f64, i64), Error> {
    let pool = database("pgflow_bench").await?;
    let client = Client::new(pool.clone());
    client.deploy(&bench_cap_fair::deployment()).await?;
    let big: Vec<Keyed> = (0..backlog).map(|_| Keyed { key: "big".into() }).collect();
    for chunk in big.chunks(1000) {
        client
            .start_many(Start::flow::<bench_cap_fair::Flow>(), chunk, &[])
            .await?;
    }
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        workers.push(
            worker(
                bench_cap_fair::deployment(),
                bench_cap_fair::Queue::BenchCapFair,
                &client,
                10,
            )
            .await?,
        );
    }
    // The big key's backlog under way.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut latencies = Vec::new();
    for _ in 0..SMALL_RUNS {
        let called = Instant::now();
        let run = bench_cap_fair::start(
            &client,
            &Keyed {
                key: "small".into(),
            },
        )
        .await?;
        run.wait(&client, Duration::from_secs(30)).await?;
        let started = HANDLER_STARTS
            .lock()
            .expect("not poisoned")
            .remove(&run.run_id())
            .ok_or("the handler did not record its start")?;
        latencies.push(started.duration_since(called).as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let open: i64 = sqlx::query_scalar("select count(*) from pgflow.runs where status = 'started'")
        .fetch_one(&pool)
        .await?;
    for worker in &workers {
        worker.shutdown();
    }
    for worker in workers {
        worker.wait().await?;
    }
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    Ok((at(0.5), at(0.95), open))
}

async fn worker<F: pgflow::FlowSpec, Q: pgflow::FlowQueue<Flow = F>>(
    deployment: pgflow::Deployment<F>,
    queue: Q,
    client: &Client,
    slots: usize,
) -> Result<pgflow::WorkerHandle, Error> {
    let config = WorkerConfig::new(queue)
        .connection(client)
        .batch_size(slots)
        .max_concurrent(slots)
        .function_name("bench");
    Ok(Worker::start_with(deployment, config).await?)
}

/// Waits until every run has ended; fails when one did not complete.
async fn until_no_run_is_open(pool: &PgPool) -> Result<(), Error> {
    loop {
        let open: i64 =
            sqlx::query_scalar("select count(*) from pgflow.runs where status = 'started'")
                .fetch_one(pool)
                .await?;
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bad: i64 =
        sqlx::query_scalar("select count(*) from pgflow.runs where status <> 'completed'")
            .fetch_one(pool)
            .await?;
    if bad > 0 {
        return Err(format!("{bad} runs did not complete").into());
    }
    Ok(())
}

/// Prints the scenario's figures.
pub(crate) fn print_caps(caps: &Caps) {
    println!(
        "\ncaps ({} runs, handlers of {} ms, {WORKERS} workers): a global cap of 50 (10 slots a \
         worker) {:.0} runs/s, most at once {}; uncapped with 5 slots a worker {:.0} runs/s \
         (ratio {:.2}); its queue capped at 50 (10 slots a worker) {:.0} runs/s, most at once \
         {} (ratio {:.2}); {} keys capped at 2 {:.0} runs/s, uncapped {:.0} runs/s (ratio \
         {:.2}); a small key's start to its handler's start beside a backlog of {} runs of a \
         big key ({} still open after the small key's {SMALL_RUNS}) p50 {:.1} ms, p95 {:.1} ms, \
         alone p50 {:.1} ms, p95 {:.1} ms (p95 ratio {:.2}); both keys capped at 10",
        caps.runs,
        WORK.as_millis(),
        caps.global_capped_per_s,
        caps.global_most_at_once,
        caps.global_uncapped_per_s,
        caps.global_capped_per_s / caps.global_uncapped_per_s,
        caps.queue_capped_per_s,
        caps.queue_most_at_once,
        caps.queue_capped_per_s / caps.global_uncapped_per_s,
        caps.keys,
        caps.keyed_capped_per_s,
        caps.keyed_uncapped_per_s,
        caps.keyed_capped_per_s / caps.keyed_uncapped_per_s,
        caps.backlog,
        caps.backlog_open,
        caps.small_beside_backlog_p50_ms,
        caps.small_beside_backlog_p95_ms,
        caps.small_alone_p50_ms,
        caps.small_alone_p95_ms,
        caps.small_beside_backlog_p95_ms / caps.small_alone_p95_ms,
    );
}
