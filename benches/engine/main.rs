//! The engine benchmark: raw PGMQ as the ceiling, then pgflow flows with no-op handlers,
//! side by side on the same server. See BENCHMARKS.md.
//!
//! ```sh
//! cargo bench --bench engine                 # the full matrix (release build)
//! cargo bench --bench engine -- --quick      # 10 workers, batch 100 only
//! cargo bench --bench engine -- --matrix=1x100,4x10 --only=single,chain3
//! cargo bench --bench engine -- --quick --repeat=5   # medians of 5 interleaved repeats
//! cargo test --bench engine                  # a tiny smoke run (debug build, no timing)
//! ```
//!
//! Every scenario runs in a fresh database and checks correctness: all runs completed, every
//! task completed exactly once. Results are printed as a table and written to
//! `target/bench-results.json`.

use std::future::Future;
use std::time::{Duration, Instant};

use pgflow::{Client, FlowQueue, Worker, WorkerConfig, WorkerHandle};
use pgflow::{Start, StartOptions};
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};

mod anchor;
mod caps;
mod claim_scale;
mod dashboard_pages;
mod history;
mod per_call_limit;
mod rate;
mod waits;

use caps::{caps, print_caps};
use claim_scale::{claim_scale, print_claims};
use dashboard_pages::{dashboard_pages, print_pages};
use history::{history, print_history};
use rate::{print_rate, rate};
use waits::{print_waits, waits};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[pgflow::flow(slug = "bench_single")]
mod bench_single {
    #[step]
    async fn only(input: serde_json::Value) -> Result<u8, String> {
        let _ = input;
        Ok(0)
    }
}

#[pgflow::flow(slug = "bench_chain3")]
mod bench_chain3 {
    #[step]
    async fn a(input: serde_json::Value) -> Result<u8, String> {
        let _ = input;
        Ok(1)
    }
    #[step(depends_on = [a])]
    async fn b(a: u8) -> Result<u8, String> {
        Ok(a + 1)
    }
    #[step(depends_on = [b])]
    async fn c(b: u8) -> Result<u8, String> {
        Ok(b + 1)
    }
}

#[pgflow::flow(slug = "bench_fanout", input = u32)]
mod bench_fanout {
    #[step]
    async fn root(input: u32) -> Result<Vec<u32>, String> {
        Ok((0..input).collect())
    }
    #[step(map = root)]
    async fn item(n: u32) -> Result<u32, String> {
        Ok(n)
    }
    #[step(depends_on = [item])]
    async fn reduce(item: Vec<u32>) -> Result<u64, String> {
        Ok(item.iter().map(|n| u64::from(*n)).sum())
    }
}

#[pgflow::flow(slug = "bench_shared_a")]
mod bench_shared_a {
    #[step(queue = "bench_shared")]
    async fn work(input: serde_json::Value) -> Result<u8, String> {
        let _ = input;
        Ok(0)
    }
}

#[pgflow::flow(slug = "bench_shared_b")]
mod bench_shared_b {
    #[step(queue = "bench_shared")]
    async fn work(input: serde_json::Value) -> Result<u8, String> {
        let _ = input;
        Ok(1)
    }
}

/// One measured scenario.
#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    scenario: String,
    workers: usize,
    batch: usize,
    runs: usize,
    tasks: usize,
    seconds: f64,
    tasks_per_s: f64,
    runs_per_s: f64,
    run_p50_ms: f64,
    run_p95_ms: f64,
    run_p99_ms: f64,
    pickup_p50_ms: f64,
    commits_per_task: f64,
    /// Busy CPU time of the whole machine (all processes, both cores; steal excluded) during
    /// the timed window, per task: steadier than throughput on a shared, noisy host.
    cpu_us_per_task: Option<f64>,
    /// Share of the window's CPU time the hypervisor gave to others (`steal`).
    steal_pct: Option<f64>,
    /// How many repeats the row is the median of.
    repeats: usize,
    vs_limit: Option<f64>,
}

impl Row {
    /// A row of raw PGMQ messages (no runs, no latencies): `messages` taken in `seconds`, with
    /// the commits counted and the CPU used over the timed window.
    fn of_messages(
        scenario: &str,
        (workers, batch): (usize, usize),
        messages: usize,
        seconds: f64,
        commits: i64,
        cpu: Option<CpuUse>,
    ) -> Self {
        Self {
            scenario: scenario.into(),
            workers,
            batch,
            runs: 0,
            tasks: messages,
            seconds,
            tasks_per_s: messages as f64 / seconds,
            runs_per_s: 0.0,
            run_p50_ms: 0.0,
            run_p95_ms: 0.0,
            run_p99_ms: 0.0,
            pickup_p50_ms: 0.0,
            // The two reads of the commit counter are not the scenario's.
            commits_per_task: (commits - 2).max(0) as f64 / messages as f64,
            cpu_us_per_task: cpu.map(|c| c.busy_us / messages as f64),
            steal_pct: cpu.map(|c| c.steal_pct),
            vs_limit: None,
            repeats: 1,
        }
    }
}

struct Options {
    smoke: bool,
    quick: bool,
    /// `--repeat=N`: measure each matrix cell N times (limit first each time) and report
    /// medians.
    repeat: usize,
    /// `--only=a,b`: run just these scenarios (limit, single, chain3, fanout, shared, low_load,
    /// fanout_one, memory, claim_scale, per_call_limit, per_call, anchor, dashboard, history, waits,
    /// caps, rate).
    only: Option<Vec<String>>,
    /// `--matrix=1x100,10x10`: (workers, batch) pairs instead of the default matrix.
    matrix: Option<Vec<(usize, usize)>>,
}

impl Options {
    fn from_args() -> Result<Self, Error> {
        let args: Vec<String> = std::env::args().collect();
        let value = |name: &str| {
            args.iter()
                .find_map(|a| a.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
        };
        let matrix = value("--matrix")
            .map(|list| {
                list.split(',')
                    .map(|pair| {
                        let (workers, batch) = pair.split_once('x').ok_or_else(|| {
                            format!("--matrix: `{pair}` is not WORKERSxBATCH, e.g. 10x100")
                        })?;
                        Ok::<_, Error>((workers.parse()?, batch.parse()?))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        Ok(Self {
            // `cargo bench` passes --bench; `cargo test --bench` does not: a smoke run then.
            smoke: !args.iter().any(|a| a == "--bench"),
            quick: args.iter().any(|a| a == "--quick"),
            repeat: value("--repeat")
                .map(str::parse)
                .transpose()?
                .unwrap_or(1usize)
                .max(1),
            only: value("--only").map(|list| list.split(',').map(str::to_owned).collect()),
            matrix,
        })
    }

    /// Whether the scenario `name` runs.
    fn wants(&self, name: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|o| o == name))
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let options = Options::from_args()?;
    let scale = |n: usize| if options.smoke { (n / 100).max(2) } else { n };
    let matrix: Vec<(usize, usize)> = match &options.matrix {
        Some(matrix) => matrix.clone(),
        None if options.smoke || options.quick => vec![(10, 100)],
        None => vec![(1, 10), (4, 10), (10, 10), (1, 100), (4, 100), (10, 100)],
    };

    print_machine().await?;
    let mut rows = Vec::new();
    for &(workers, batch) in &matrix {
        // Each repeat measures the limit and then the scenarios, so that a ratio always pairs
        // figures taken minutes apart at most; the medians of the repeats are reported.
        let mut repeats = Vec::new();
        for _ in 0..options.repeat {
            repeats.push(matrix_cell(&options, workers, batch).await?);
        }
        rows.extend(medians(repeats));
    }
    if options.wants("low_load") {
        rows.push(low_load(if options.smoke { 10 } else { 100 }).await?);
    }
    if options.wants("fanout_one") {
        rows.push(fanout_one_at_a_time(if options.smoke { 1 } else { 10 }).await?);
    }
    let rss = if options.wants("memory") {
        Some(worker_rss(scale(20_000)).await?)
    } else {
        None
    };
    // The backlog scenario takes minutes at full size: the full run and `--only` ask for it.
    let claims = if options.wants("claim_scale") && (!options.quick || options.only.is_some()) {
        Some(claim_scale(if options.smoke { 6_000 } else { 1_000_000 }, 100).await?)
    } else {
        None
    };

    // A million ended runs take minutes to write: the full run and `--only` ask for it.
    let pages = if options.wants("dashboard") && (!options.quick || options.only.is_some()) {
        Some(dashboard_pages(if options.smoke { 3_000 } else { 1_000_000 }).await?)
    } else {
        None
    };

    // Ten million ended runs take many minutes to write: the full run and `--only` ask for it.
    let history = if options.wants("history") && (!options.quick || options.only.is_some()) {
        Some(if options.smoke {
            history(10_000, 3, 1, 0.01).await?
        } else {
            history(10_000_000, 10, options.repeat.max(3), 1.0).await?
        })
    } else {
        None
    };

    let waited = if options.wants("waits") {
        Some(if options.smoke {
            waits(2_000, 10).await?
        } else {
            waits(100_000, 100).await?
        })
    } else {
        None
    };

    let capped = if options.wants("caps") {
        Some(if options.smoke {
            caps(100, 300).await?
        } else {
            caps(10_000, 5_000).await?
        })
    } else {
        None
    };

    let rated = if options.wants("rate") {
        Some(rate(options.smoke).await?)
    } else {
        None
    };

    print_table(&rows);
    print_anchor_ratios(&rows);
    if options.repeat > 1 {
        println!(
            "\nmatrix rows: the median of {} repeats (each repeat measures its limit first; \
             ÷limit is the median of the repeats' own ratios)",
            options.repeat
        );
    }
    if let Some(rss) = rss {
        println!(
            "\nworker memory: {rss:.1} MiB peak RSS while one worker with max_concurrent = 100 \
             ran at full load (the whole process: harness, pools and worker)"
        );
    }
    if let Some(claims) = &claims {
        print_claims(claims);
    }
    if let Some(pages) = &pages {
        print_pages(pages);
    }
    if let Some(history) = &history {
        print_history(history);
    }
    if let Some(waited) = &waited {
        print_waits(waited);
    }
    if let Some(capped) = &capped {
        print_caps(capped);
    }
    if let Some(rated) = &rated {
        print_rate(rated);
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-results.json");
    let results = json!({
        "rows": rows, "worker_rss_mib": rss, "claim_scale": claims, "dashboard_pages": pages,
        "history": history, "waits": waited, "caps": capped, "rate": rated,
    });
    std::fs::write(&path, serde_json::to_string_pretty(&results)?)?;
    println!("\nwritten to {}", path.display());
    Ok(())
}

/// One cell of the matrix: the limit, then each engine scenario with its ratio to that limit.
async fn matrix_cell(options: &Options, workers: usize, batch: usize) -> Result<Vec<Row>, Error> {
    let scale = |n: usize| if options.smoke { (n / 100).max(2) } else { n };
    let mut rows = Vec::new();
    let ceiling = if options.wants("limit") {
        let limit = limit(scale(5_000), workers, batch).await?;
        rows.push(limit.clone());
        Some(limit.tasks_per_s)
    } else {
        None
    };
    let mut measured = Vec::new();
    if options.wants("single") {
        measured.push(
            engine::<bench_single::Flow, _>(
                database("pgflow_bench").await?,
                "single",
                bench_single::deployment(),
                bench_single::Queue::BenchSingle,
                scale(5_000),
                workers,
                batch,
                json!(null),
                1,
            )
            .await?,
        );
    }
    if options.wants("chain3") {
        measured.push(
            engine::<bench_chain3::Flow, _>(
                database("pgflow_bench").await?,
                "chain3",
                bench_chain3::deployment(),
                bench_chain3::Queue::BenchChain3,
                scale(2_000),
                workers,
                batch,
                json!(null),
                3,
            )
            .await?,
        );
    }
    if options.wants("fanout") {
        measured.push(
            engine::<bench_fanout::Flow, _>(
                database("pgflow_bench").await?,
                "fanout",
                bench_fanout::deployment(),
                bench_fanout::Queue::BenchFanout,
                if options.smoke { 2 } else { 50 },
                workers,
                batch,
                json!(100),
                102,
            )
            .await?,
        );
    }
    if options.wants("shared") {
        measured.push(shared(scale(5_000), workers, batch).await?);
    }
    // PGMQ alone under pgflow's per-call method: the ceiling of the per-call rows.
    if options.wants("per_call_limit") {
        measured.push(per_call_limit::per_call_limit(scale(4_000), workers, batch).await?);
    }
    // pgflow's own method: CLIENTS connections each start one run per call, back to back,
    // while the workers run (issue 21).
    if options.wants("per_call") {
        measured.push(
            engine_per_call::<bench_single::Flow, _>(
                database("pgflow_bench").await?,
                "single, 1 run/call",
                bench_single::deployment(),
                bench_single::Queue::BenchSingle,
                scale(2_000),
                (workers, batch),
                json!(null),
                1,
            )
            .await?,
        );
        measured.push(
            engine_per_call::<bench_chain3::Flow, _>(
                database("pgflow_bench").await?,
                "chain3, 1 run/call",
                bench_chain3::deployment(),
                bench_chain3::Queue::BenchChain3,
                scale(1_000),
                (workers, batch),
                json!(null),
                3,
            )
            .await?,
        );
        measured.push(
            engine_per_call::<bench_fanout::Flow, _>(
                database("pgflow_bench").await?,
                "fanout, 1 run/call",
                bench_fanout::deployment(),
                bench_fanout::Queue::BenchFanout,
                if options.smoke { 4 } else { 40 },
                (workers, batch),
                json!(100),
                102,
            )
            .await?,
        )
    }
    // The anchor: pgflow 0.8.1's SQL core under the same method (issue 21).
    if options.wants("anchor") {
        for (flow, runs) in [
            (anchor::AnchorFlow::Single, scale(2_000)),
            (anchor::AnchorFlow::Chain3, scale(1_000)),
            (
                anchor::AnchorFlow::Fanout,
                if options.smoke { 4 } else { 40 },
            ),
        ] {
            measured.push(anchor::anchor_per_call(flow, runs, CLIENTS, (workers, batch)).await?);
        }
    }
    for mut row in measured {
        row.vs_limit = ceiling.map(|ceiling| row.tasks_per_s / ceiling);
        rows.push(row);
    }
    Ok(rows)
}

/// Per scenario, the repeat with the median throughput, carrying the median of the repeats'
/// own ratios to their limit (each ratio pairs figures of one repeat).
fn medians(repeats: Vec<Vec<Row>>) -> Vec<Row> {
    let Some(first) = repeats.first() else {
        return Vec::new();
    };
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    first
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let mut of_scenario: Vec<Row> = repeats.iter().map(|r| r[i].clone()).collect();
            of_scenario.sort_by(|a, b| a.tasks_per_s.total_cmp(&b.tasks_per_s));
            let mut chosen = of_scenario[of_scenario.len() / 2].clone();
            if row.vs_limit.is_some() {
                chosen.vs_limit = Some(median(
                    of_scenario.iter().filter_map(|r| r.vs_limit).collect(),
                ));
            }
            chosen.repeats = of_scenario.len();
            chosen
        })
        .collect()
}

/// The server's URL: `DATABASE_URL`, else the local server.
fn server_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A fresh database for one scenario, with pgflow installed.
async fn database(name: &str) -> Result<PgPool, Error> {
    let pool = empty_database(name).await?;
    pgflow::install(&pool).await?;
    Ok(pool)
}

/// A fresh, empty database (dropped first if it exists).
async fn empty_database(name: &str) -> Result<PgPool, Error> {
    let server: PgConnectOptions = server_url().parse()?;
    let mut admin = server.connect().await?;
    sqlx::query(&format!("drop database if exists {name} with (force)"))
        .execute(&mut admin)
        .await?;
    sqlx::query(&format!("create database {name}"))
        .execute(&mut admin)
        .await?;
    let pool = PgPoolOptions::new()
        .max_connections(40)
        .connect_with(server.database(name))
        .await?;
    Ok(pool)
}

async fn commits(pool: &PgPool) -> Result<i64, Error> {
    // Statistics are flushed asynchronously; give them a moment, then read a fresh snapshot.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    sqlx::query("select pg_stat_clear_snapshot()")
        .execute(pool)
        .await?;
    Ok(sqlx::query_scalar(
        "select xact_commit from pg_stat_database where datname = current_database()",
    )
    .fetch_one(pool)
    .await?)
}

/// The ceiling: PGMQ send (in batches of 1000, as the engine starts runs), then `workers`
/// consumers reading `batch` messages and archiving them, until the queue is empty. A warm-up
/// cycle of a tenth of the messages runs first, untimed, as the engine scenarios do.
async fn limit(messages: usize, workers: usize, batch: usize) -> Result<Row, Error> {
    let pool = database("pgflow_bench").await?;
    sqlx::query("select pgmq.create('bench_limit')")
        .execute(&pool)
        .await?;
    pgmq_cycle(&pool, warm_up_size(messages), workers, batch).await?;
    // As the engine scenarios do after their warm-up.
    sqlx::raw_sql("vacuum analyze pgmq.q_bench_limit")
        .execute(&pool)
        .await?;
    let before = commits(&pool).await?;
    // The timed cycle includes sending, as the engine's figures include starting runs.
    let cpu = CpuClock::now();
    let started = Instant::now();
    pgmq_cycle(&pool, messages, workers, batch).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu.and_then(|c| c.elapsed());
    let after = commits(&pool).await?;
    let archived: i64 = sqlx::query_scalar("select count(*) from pgmq.a_bench_limit")
        .fetch_one(&pool)
        .await?;
    assert_eq!(
        archived as usize,
        messages + warm_up_size(messages),
        "limit: every message archived once"
    );
    Ok(Row::of_messages(
        "limit (pgmq)",
        (workers, batch),
        messages,
        seconds,
        after - before,
        cpu,
    ))
}

/// Sends `messages` and drains them with `workers` consumers of `batch` messages each.
async fn pgmq_cycle(
    pool: &PgPool,
    messages: usize,
    workers: usize,
    batch: usize,
) -> Result<(), Error> {
    for chunk in (0..messages).collect::<Vec<_>>().chunks(1000) {
        let msgs: Vec<Value> = chunk.iter().map(|i| json!({ "n": i })).collect();
        sqlx::query("select pgmq.send_batch('bench_limit', $1)")
            .bind(&msgs)
            .execute(pool)
            .await?;
    }
    let consumers: Vec<_> = (0..workers)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                loop {
                    let ids: Vec<i64> =
                        sqlx::query_scalar("select msg_id from pgmq.read('bench_limit', 30, $1)")
                            .bind(batch as i32)
                            .fetch_all(&pool)
                            .await?;
                    if ids.is_empty() {
                        return Ok::<_, sqlx::Error>(());
                    }
                    sqlx::query("select pgmq.archive('bench_limit', $1)")
                        .bind(&ids)
                        .execute(&pool)
                        .await?;
                }
            })
        })
        .collect();
    for consumer in consumers {
        consumer.await??;
    }
    Ok(())
}

/// The untimed warm-up before a measurement: a tenth of its size. A long-running worker's
/// connections have compiled the engine's functions and planned their statements; a fresh
/// pool's have not, and that one-off cost per connection is not a cost per task.
fn warm_up_size(measured: usize) -> usize {
    (measured / 10).max(1)
}

/// A worker of `queue` on `client`: the workers of one scenario share one client, as the
/// workers of one process do.
fn config<Q: FlowQueue>(queue: Q, client: &Client, batch: usize) -> WorkerConfig<Q> {
    WorkerConfig::new(queue)
        .connection(client)
        .batch_size(batch)
        .max_concurrent(batch)
        .function_name("bench")
}

#[allow(clippy::too_many_arguments)]
async fn engine<F: pgflow::FlowSpec, Q: FlowQueue<Flow = F>>(
    pool: PgPool,
    name: &str,
    deployment: pgflow::Deployment<F>,
    queue: Q,
    runs: usize,
    workers: usize,
    batch: usize,
    input: Value,
    tasks_per_run: usize,
) -> Result<Row, Error> {
    let process = Client::new(pool.clone());
    let mut handles = Vec::new();
    for _ in 0..workers {
        handles.push(Worker::start_with(deployment.clone(), config(queue, &process, batch)).await?);
    }
    measure(
        name,
        &pool,
        handles,
        (runs, tasks_per_run),
        workers,
        batch,
        |pool, runs| {
            let inputs = vec![input.clone(); runs];
            async move {
                for chunk in inputs.chunks(1000) {
                    pgflow::engine::start_concrete_flows(&pool, F::SLUG, chunk).await?;
                }
                Ok(())
            }
        },
    )
    .await
}

/// Client connections of the per-call scenarios, as in pgflow's published method.
const CLIENTS: usize = 4;

/// `count` pools of one connection each to `pool`'s database: the per-call scenarios'
/// clients, each as one of an application's request handlers would hold.
async fn client_pools(pool: &PgPool, count: usize) -> Result<Vec<PgPool>, Error> {
    let mut clients = Vec::new();
    for _ in 0..count {
        clients.push(
            PgPoolOptions::new()
                .max_connections(1)
                .connect_with((*pool.connect_options()).clone())
                .await?,
        );
    }
    Ok(clients)
}

/// Like [`engine`], but the runs are started one per call by [`CLIENTS`] connections at once,
/// back to back, each through its own pool of one (as an application's request handlers
/// would), while the workers run.
#[allow(clippy::too_many_arguments)]
async fn engine_per_call<F: pgflow::FlowSpec, Q: FlowQueue<Flow = F>>(
    pool: PgPool,
    name: &str,
    deployment: pgflow::Deployment<F>,
    queue: Q,
    runs: usize,
    (workers, batch): (usize, usize),
    input: Value,
    tasks_per_run: usize,
) -> Result<Row, Error> {
    let process = Client::new(pool.clone());
    let clients = client_pools(&pool, CLIENTS).await?;
    let mut handles = Vec::new();
    for _ in 0..workers {
        handles.push(Worker::start_with(deployment.clone(), config(queue, &process, batch)).await?);
    }
    let row = measure(
        name,
        &pool,
        handles,
        (runs - runs % CLIENTS, tasks_per_run),
        workers,
        batch,
        |_, runs| {
            let clients = clients.clone();
            let input = input.clone();
            async move {
                let mut starters = Vec::new();
                for client in clients {
                    let input = input.clone();
                    starters.push(tokio::spawn(async move {
                        for _ in 0..runs / CLIENTS {
                            pgflow::engine::start_flow(&client, F::SLUG, &input).await?;
                        }
                        Ok::<_, pgflow::EngineError>(())
                    }));
                }
                for starter in starters {
                    starter.await.expect("a starter task")?;
                }
                Ok(())
            }
        },
    )
    .await?;
    for client in clients {
        client.close().await;
    }
    Ok(row)
}

async fn shared(runs: usize, workers: usize, batch: usize) -> Result<Row, Error> {
    let pool = database("pgflow_bench").await?;
    let process = Client::new(pool.clone());
    let mut handles = Vec::new();
    for _ in 0..workers {
        handles.push(
            Worker::start_with(
                (bench_shared_a::deployment(), bench_shared_b::deployment()),
                config(bench_shared_b::Queue::BenchShared, &process, batch),
            )
            .await?,
        );
    }
    measure(
        "shared (2 flows)",
        &pool,
        handles,
        (runs - runs % 2, 1),
        workers,
        batch,
        |pool, runs| async move {
            // Half the runs for each flow (an odd count rounds up).
            let inputs = vec![json!(null); runs.div_ceil(2)];
            for chunk in inputs.chunks(1000) {
                pgflow::engine::start_concrete_flows(&pool, "bench_shared_a", chunk).await?;
                pgflow::engine::start_concrete_flows(&pool, "bench_shared_b", chunk).await?;
            }
            Ok(())
        },
    )
    .await
}

/// Runs a warm-up of a tenth of the runs (untimed), then the measured runs: from the moment
/// `start` is called until no run is open. Figures cover the measured runs only; the
/// correctness check covers all of them.
#[allow(clippy::too_many_arguments)]
async fn measure<S, Fut>(
    name: &str,
    pool: &PgPool,
    workers: Vec<WorkerHandle>,
    (runs, tasks_per_run): (usize, usize),
    worker_count: usize,
    batch: usize,
    start: S,
) -> Result<Row, Error>
where
    S: Fn(PgPool, usize) -> Fut,
    Fut: Future<Output = Result<(), pgflow::EngineError>>,
{
    let warm_up = warm_up_size(runs);
    start(pool.clone(), warm_up).await?;
    wait_until_no_run_is_open(pool).await?;
    let warmed_runs: i64 = sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(pool)
        .await?;
    // What a running worker's maintenance keeps up: statistics of the grown tables, and the
    // warm-up's dead rows vacuumed. It reads the server's activity counters, which backends
    // publish within a second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    pgflow::engine::vacuum_tables(&pool.into(), true).await?;
    pgflow::engine::refresh_statistics(pool, true).await?;

    let window_start = database_clock(pool).await?;
    let before = commits(pool).await?;
    let cpu = CpuClock::now();
    let started = Instant::now();
    start(pool.clone(), runs).await?;
    let polls = wait_until_no_run_is_open(pool).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu.and_then(|c| c.elapsed());
    for worker in workers {
        worker.shutdown();
        worker.wait().await?;
    }
    let after = commits(pool).await?;
    let row = stats(pool, window_start).await?;
    let tasks = row.runs * tasks_per_run;
    check(
        pool,
        warmed_runs as usize + row.runs,
        (warmed_runs as usize + row.runs) * tasks_per_run,
    )
    .await?;
    // Not the engine's: the harness's own polls, and each worker's stop.
    let worker_bookkeeping = worker_count as i64;
    Ok(Row {
        scenario: name.into(),
        workers: worker_count,
        batch,
        runs: row.runs,
        tasks,
        seconds,
        tasks_per_s: tasks as f64 / seconds,
        runs_per_s: row.runs as f64 / seconds,
        run_p50_ms: row.p50,
        run_p95_ms: row.p95,
        run_p99_ms: row.p99,
        pickup_p50_ms: row.pickup_p50,
        commits_per_task: (after - before - polls - worker_bookkeeping).max(0) as f64
            / tasks as f64,
        cpu_us_per_task: cpu.map(|c| c.busy_us / tasks as f64),
        steal_pct: cpu.map(|c| c.steal_pct),
        vs_limit: None,
        repeats: 1,
    })
}

/// Polls (every 5 ms, so that a window ends close to the last completion) until no run is
/// open; returns how many polls it made.
async fn wait_until_no_run_is_open(pool: &PgPool) -> Result<i64, Error> {
    let mut polls = 0;
    loop {
        polls += 1;
        // `exists` stops at the first open run: a count would visit every open run on each
        // poll, CPU taken from the engine under test (about 5 % of it at one worker).
        let open: bool = sqlx::query_scalar(
            "select exists (select 1 from pgflow.runs where status = 'started')",
        )
        .fetch_one(pool)
        .await?;
        if !open {
            return Ok(polls);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The database's clock, as seconds since the epoch.
async fn database_clock(pool: &PgPool) -> Result<f64, Error> {
    Ok(
        sqlx::query_scalar("select extract(epoch from clock_timestamp())::float8")
            .fetch_one(pool)
            .await?,
    )
}

struct Stats {
    runs: usize,
    p50: f64,
    p95: f64,
    p99: f64,
    pickup_p50: f64,
}

/// Latency figures of the completed runs started at or after `since` (seconds since the epoch,
/// by the database's clock) and of their tasks.
async fn stats(pool: &PgPool, since: f64) -> Result<Stats, Error> {
    let (runs, p50, p95, p99): (i64, Option<f64>, Option<f64>, Option<f64>) = sqlx::query_as(
        "select count(*),
                percentile_cont(0.5) within group (order by ms),
                percentile_cont(0.95) within group (order by ms),
                percentile_cont(0.99) within group (order by ms)
         from (select extract(epoch from completed_at - started_at) * 1000 as ms
               from pgflow.runs
               where status = 'completed' and started_at >= to_timestamp($1)) l",
    )
    .bind(since)
    .fetch_one(pool)
    .await?;
    // A task's message is sent in the transaction that queues the task, so the message's
    // enqueue time is the task's `queued_at`.
    let mut pickups: Vec<f64> = sqlx::query_scalar(
        "select (extract(epoch from t.started_at - t.queued_at) * 1000)::float8
         from pgflow.step_tasks t
         join pgflow.runs r on r.run_id = t.run_id
         where t.started_at is not null and r.started_at >= to_timestamp($1)",
    )
    .bind(since)
    .fetch_all(pool)
    .await?;
    pickups.sort_by(f64::total_cmp);
    Ok(Stats {
        runs: runs as usize,
        p50: p50.unwrap_or(0.0),
        p95: p95.unwrap_or(0.0),
        p99: p99.unwrap_or(0.0),
        pickup_p50: pickups.get(pickups.len() / 2).copied().unwrap_or(0.0),
    })
}

/// All runs completed and every task completed exactly once.
async fn check(pool: &PgPool, runs: usize, tasks: usize) -> Result<(), Error> {
    let (not_completed, total_tasks, once): (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from pgflow.runs where status <> 'completed'),
                count(*), count(*) filter (where status = 'completed' and attempts_count = 1)
         from pgflow.step_tasks",
    )
    .fetch_one(pool)
    .await?;
    if not_completed != 0 || total_tasks as usize != tasks || once != total_tasks || runs == 0 {
        return Err(format!(
            "correctness check failed: {not_completed} runs not completed, {total_tasks} tasks (expected {tasks}), {once} completed once"
        )
        .into());
    }
    Ok(())
}

/// Low load: 20 runs/s of a 1-step flow against one idle worker.
async fn low_load(runs: usize) -> Result<Row, Error> {
    let pool = database("pgflow_bench").await?;
    let process = Client::new(pool.clone());
    let worker = Worker::start_with(
        bench_single::deployment(),
        config(bench_single::Queue::BenchSingle, &process, 10),
    )
    .await?;
    let client = Client::new(pool.clone());
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    for _ in 0..runs {
        tick.tick().await;
        client
            .start(
                Start::flow::<bench_single::Flow>(),
                &json!(null),
                StartOptions::new(),
            )
            .await?;
    }
    loop {
        let open: i64 =
            sqlx::query_scalar("select count(*) from pgflow.runs where status = 'started'")
                .fetch_one(&pool)
                .await?;
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    worker.shutdown();
    worker.wait().await?;
    let stats = stats(&pool, 0.0).await?;
    check(&pool, stats.runs, runs).await?;
    Ok(Row {
        scenario: "low load (20 runs/s)".into(),
        workers: 1,
        batch: 10,
        runs,
        tasks: runs,
        seconds,
        tasks_per_s: runs as f64 / seconds,
        runs_per_s: runs as f64 / seconds,
        run_p50_ms: stats.p50,
        run_p95_ms: stats.p95,
        run_p99_ms: stats.p99,
        pickup_p50_ms: stats.pickup_p50,
        commits_per_task: 0.0,
        cpu_us_per_task: None,
        steal_pct: None,
        vs_limit: None,
        repeats: 1,
    })
}

/// Fanout runs one at a time (4 workers, batch 100): the time one run of root → map over 100
/// → reduce takes when it has the workers to itself.
async fn fanout_one_at_a_time(runs: usize) -> Result<Row, Error> {
    let pool = database("pgflow_bench").await?;
    let process = Client::new(pool.clone());
    let mut workers = Vec::new();
    for _ in 0..4 {
        workers.push(
            Worker::start_with(
                bench_fanout::deployment(),
                config(bench_fanout::Queue::BenchFanout, &process, 100),
            )
            .await?,
        );
    }
    let client = Client::new(pool.clone());
    let started = Instant::now();
    for _ in 0..runs {
        client
            .start(
                Start::flow::<bench_fanout::Flow>(),
                &100,
                StartOptions::new(),
            )
            .await?
            .wait(&client, Duration::from_secs(30))
            .await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    for worker in workers {
        worker.shutdown();
        worker.wait().await?;
    }
    let stats = stats(&pool, 0.0).await?;
    check(&pool, stats.runs, runs * 102).await?;
    Ok(Row {
        scenario: "fanout, one run at once".into(),
        workers: 4,
        batch: 100,
        runs,
        tasks: runs * 102,
        seconds,
        tasks_per_s: (runs * 102) as f64 / seconds,
        runs_per_s: runs as f64 / seconds,
        run_p50_ms: stats.p50,
        run_p95_ms: stats.p95,
        run_p99_ms: stats.p99,
        pickup_p50_ms: stats.pickup_p50,
        commits_per_task: 0.0,
        cpu_us_per_task: None,
        steal_pct: None,
        vs_limit: None,
        repeats: 1,
    })
}

/// Resident memory of this process (MiB) right after one worker with `max_concurrent = 100`
/// has run `runs` single-step runs at full load.
async fn worker_rss(runs: usize) -> Result<f64, Error> {
    let pool = database("pgflow_bench").await?;
    let process = Client::new(pool.clone());
    let worker = Worker::start_with(
        bench_single::deployment(),
        config(bench_single::Queue::BenchSingle, &process, 100),
    )
    .await?;
    let inputs = vec![json!(null); runs];
    for chunk in inputs.chunks(1000) {
        pgflow::engine::start_concrete_flows(&pool, "bench_single", chunk).await?;
    }
    let mut peak_kib: f64 = 0.0;
    loop {
        peak_kib = peak_kib.max(rss_kib());
        let open: i64 =
            sqlx::query_scalar("select count(*) from pgflow.runs where status = 'started'")
                .fetch_one(&pool)
                .await?;
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.shutdown();
    worker.wait().await?;
    Ok(peak_kib / 1024.0)
}

/// The process's resident memory now, in KiB (Linux).
fn rss_kib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0)
}

async fn print_machine() -> Result<(), Error> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&server_url())
        .await?;
    let settings: Vec<(String, String)> = sqlx::query_as(
        "select name, setting from pg_settings where name in
         ('server_version', 'synchronous_commit', 'shared_buffers', 'max_connections', 'fsync', 'wal_level', 'autovacuum', 'jit')
         order by name",
    )
    .fetch_all(&pool)
    .await?;
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "machine: {cpus} cores; postgres: {}",
        settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// Each per-call row next to pgflow 0.8.1's row of the same flow and workers, with the ratio.
fn print_anchor_ratios(rows: &[Row]) {
    let pairs: Vec<(&Row, &Row)> = rows
        .iter()
        .filter_map(|ours| {
            let flow = ours.scenario.strip_suffix(", 1 run/call")?;
            let anchor = rows.iter().find(|r| {
                r.scenario == format!("{flow}, pgflow 0.8.1")
                    && (r.workers, r.batch) == (ours.workers, ours.batch)
            })?;
            Some((ours, anchor))
        })
        .collect();
    let ceilings: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scenario == "limit per call (pgmq)")
        .collect();
    if pairs.is_empty() && ceilings.is_empty() {
        return;
    }
    println!(
        "\nper-call method ({CLIENTS} clients, one run per call), against pgflow 0.8.1's SQL core:"
    );
    println!(
        "{:<8} {:>3} {:>5} {:>12} {:>12} {:>7} {:>10} {:>10}",
        "flow", "wrk", "batch", "0.8.1 t/s", "ours t/s", "ratio", "0.8.1 p50", "ours p50"
    );
    for (ours, anchor) in pairs {
        println!(
            "{:<8} {:>3} {:>5} {:>12.0} {:>12.0} {:>6.1}× {:>8.1}ms {:>8.1}ms",
            ours.scenario.split(',').next().unwrap_or_default(),
            ours.workers,
            ours.batch,
            anchor.tasks_per_s,
            ours.tasks_per_s,
            ours.tasks_per_s / anchor.tasks_per_s,
            anchor.run_p50_ms,
            ours.run_p50_ms
        );
    }
    // What PGMQ alone does under the same method: the yardstick of the per-call rows.
    for ceiling in ceilings {
        let anchor = rows.iter().find(|r| {
            r.scenario == "single, pgflow 0.8.1"
                && (r.workers, r.batch) == (ceiling.workers, ceiling.batch)
        });
        println!(
            "PGMQ alone at {} workers: {:.0} messages/s (one send per call, read and archive per \
             batch){}",
            ceiling.workers,
            ceiling.tasks_per_s,
            anchor.map_or_else(String::new, |a| format!(
                "; {:.1}× pgflow 0.8.1's single",
                ceiling.tasks_per_s / a.tasks_per_s
            ))
        );
    }
}

fn print_table(rows: &[Row]) {
    println!(
        "\n{:<22} {:>3} {:>5} {:>6} {:>7} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>9} {:>7}",
        "scenario",
        "wrk",
        "batch",
        "runs",
        "tasks",
        "tasks/s",
        "runs/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "pickup ms",
        "tx/task",
        "cpu µs/t",
        "÷limit"
    );
    for r in rows {
        println!(
            "{:<22} {:>3} {:>5} {:>6} {:>7} {:>9.0} {:>8.0} {:>8.1} {:>8.1} {:>8.1} {:>9.1} {:>8.2} {:>9} {:>7}",
            r.scenario,
            r.workers,
            r.batch,
            r.runs,
            r.tasks,
            r.tasks_per_s,
            r.runs_per_s,
            r.run_p50_ms,
            r.run_p95_ms,
            r.run_p99_ms,
            r.pickup_p50_ms,
            r.commits_per_task,
            r.cpu_us_per_task
                .map_or_else(|| "-".to_owned(), |v| format!("{v:.0}")),
            r.vs_limit
                .map_or_else(|| "-".to_owned(), |v| format!("{:.0}%", v * 100.0))
        );
    }
}

/// Machine-wide CPU counters from `/proc/stat` (Linux; `None` elsewhere).
#[derive(Clone, Copy)]
struct CpuClock {
    busy: u64,
    steal: u64,
}

/// CPU used during a window.
#[derive(Clone, Copy)]
struct CpuUse {
    busy_us: f64,
    steal_pct: f64,
}

impl CpuClock {
    fn now() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        // user nice system idle iowait irq softirq steal
        let at = |i: usize| ticks.get(i).copied().unwrap_or(0);
        Some(Self {
            busy: at(0) + at(1) + at(2) + at(5) + at(6),
            steal: at(7),
        })
    }

    /// The CPU used since `self` (clock ticks are 10 ms: USER_HZ is 100 on Linux).
    fn elapsed(self) -> Option<CpuUse> {
        let now = Self::now()?;
        let busy = now.busy.saturating_sub(self.busy);
        let steal = now.steal.saturating_sub(self.steal);
        Some(CpuUse {
            busy_us: busy as f64 * 10_000.0,
            steal_pct: if busy + steal == 0 {
                0.0
            } else {
                steal as f64 * 100.0 / (busy + steal) as f64
            },
        })
    }
}
