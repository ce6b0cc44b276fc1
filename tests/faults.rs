//! The fault test: a few hundred runs of a chain flow (at three priorities), a map flow, a flow
//! that waits for a signal, a flow that sleeps (a fixed time, and until a time its first step
//! chose), a flow that maps over child runs of the chain flow, a flow with concurrency caps (per
//! tenant, and for every task of a step), a flow with a rate limit per tenant, a flow whose runs
//! start in turn under a singleton key per tenant and a flow started by a burst of 100 debounced
//! starts of one key on a private cluster, run by 12 workers in 3 processes,
//! while worker processes are SIGKILLed on a timer and respawned, and the chain flow is paused for
//! a while and resumed and Postgres is restarted (`-m immediate`, a crash) in the middle. Half the
//! waiting runs get their signal by run id before they reach the wait (it must be kept for them),
//! the other half by event key while the chaos goes on (emitted again and again: only runs waiting
//! at that moment are reached). Every run must complete with the right output, no attempt of any
//! task may run its handler twice, the attempt that completed a task must be its last, no wait or
//! signal may be lost, no sleep may end early or be lost, every parent must get its children's
//! outputs in order with one child per element, no cap may ever be exceeded (a killed handler
//! counts as running until its task's next attempt starts), no rate limit may ever be exceeded
//! (every attempt's start counts), no more tasks of a capped queue may run at once than its cap
//! of 3 (set with `pgflow queue cap`; its 6 workers in the 3 processes offer 12 slots), no two runs of a singleton key may overlap or begin out of
//! start order, the burst must make one run with its last input, and nothing may be left queued, started, waiting, held,
//! parked, waiting for a rate token or in the queue. Meanwhile every run moves into the history
//! (`pgflow.archive_runs`) as soon as it ends, so the checks read the runs through the views
//! over both; most runs must have been archived, and no run may be in both places.
//!
//! One binary, two parts (`harness = false`): run bare, it is the test; run as
//! `faults worker <url>`, it is one worker process the test spawns and kills.

use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use pgflow::{Client, Context, ProcessConfig, Worker, WorkerConfig};
use pgflow::{Priority, Start, StartOptions};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// Runs of each flow.
const CHAIN_RUNS: u32 = 200;
const MAP_RUNS: u32 = 50;
const SIGNAL_RUNS: u32 = 60;
const SLEEP_RUNS: u32 = 40;
const PARENT_RUNS: u32 = 30;
const CAPPED_RUNS: u32 = 60;
const RATED_RUNS: u32 = 45;
/// Runs started in turn before the chaos, and during it (one every tenth debounced start).
const TURN_RUNS: u32 = 18;
const LATE_TURN_RUNS: u32 = 10;
/// Debounced starts of one key, one after another, each a little after the one before.
const DEBOUNCE_STARTS: u32 = 100;
/// Their window: longer than any pause between two of them, the restart's included.
const DEBOUNCE_WINDOW: Duration = Duration::from_secs(8);
/// Tenants of the capped runs (each capped at 2 tasks at once).
const TENANTS: u32 = 3;
/// Children of each parent run.
const CHILDREN: u32 = 3;
/// Elements of each map run.
const MAP_WIDTH: u32 = 8;
/// Worker processes alive at once, and the workers each runs (on one client): 12 workers in
/// 3 processes.
const WORKERS: usize = 3;
const WORKERS_PER_PROCESS: usize = 4;
/// How often one worker process is SIGKILLed (and a new one started).
const KILL_EVERY: Duration = Duration::from_millis(1500);
/// When, after the chaos begins, Postgres crashes and restarts.
const RESTART_AFTER: Duration = Duration::from_secs(4);
/// When, after the chaos begins, the chain flow is paused, and when it is resumed.
const PAUSE_AFTER: Duration = Duration::from_secs(2);
const RESUME_AFTER: Duration = Duration::from_secs(7);
/// Runs of the flow on the capped queue, its cap, and its workers in each process (of two
/// slots each: 6 workers and 12 slots in all).
const QUEUE_CAPPED_RUNS: u32 = 40;
const QUEUE_CAP: u32 = 3;
const CAPPED_QUEUE_WORKERS_PER_PROCESS: usize = 2;
/// How long the runs may take in all.
const DEADLINE: Duration = Duration::from_secs(100);

/// Records this attempt's execution (its start, and its end unless it is killed), working for
/// a while in between, so kills land mid-task.
async fn record(ctx: &Context) -> Result<(), String> {
    let execution: i64 = sqlx::query_scalar(
        "insert into fault_log (run_id, step_slug, task_index, attempt) values ($1, $2, $3, $4)
         returning id",
    )
    .bind(ctx.run_id())
    .bind(ctx.step_slug().as_str())
    .bind(ctx.task_index())
    .bind(ctx.attempt())
    .fetch_one(ctx.pool())
    .await
    .map_err(|e| e.to_string())?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    sqlx::query("update fault_log set ended_at = clock_timestamp() where id = $1")
        .bind(execution)
        .execute(ctx.pool())
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// a → b → c, each recording its executions.
#[pgflow::flow(slug = "fault_chain", input = u32, timeout = 2, base_delay = 0, max_attempts = 30)]
pub mod fault_chain {
    use super::*;

    #[step(queue = "faults")]
    /// Adds one.
    pub async fn a(input: u32, ctx: Context) -> Result<u32, String> {
        record(&ctx).await?;
        Ok(input + 1)
    }

    #[step(depends_on = [a], queue = "faults")]
    /// Doubles.
    pub async fn b(a: u32, ctx: Context) -> Result<u32, String> {
        record(&ctx).await?;
        Ok(a * 2)
    }

    #[step(depends_on = [b], queue = "faults")]
    /// Adds three.
    pub async fn c(b: u32, ctx: Context) -> Result<u32, String> {
        record(&ctx).await?;
        Ok(b + 3)
    }
}

/// spread → square (a map of 8) → total, each recording its executions.
#[pgflow::flow(slug = "fault_map", input = u32, timeout = 2, base_delay = 0, max_attempts = 30)]
pub mod fault_map {
    use super::*;

    #[step(queue = "faults")]
    /// The input and the next seven numbers.
    pub async fn spread(input: u32, ctx: Context) -> Result<Vec<u32>, String> {
        record(&ctx).await?;
        Ok((0..MAP_WIDTH).map(|i| input + i).collect())
    }

    #[step(map = spread, queue = "faults")]
    /// Squares one element.
    pub async fn square(element: u32, ctx: Context) -> Result<u64, String> {
        record(&ctx).await?;
        Ok(u64::from(element) * u64::from(element))
    }

    #[step(depends_on = [square], queue = "faults")]
    /// Sums the squares.
    pub async fn total(square: Vec<u64>, ctx: Context) -> Result<u64, String> {
        record(&ctx).await?;
        Ok(square.iter().sum())
    }
}

/// first → gate, which waits for the signal `go` (by run id, or by first's output as its key).
#[pgflow::flow(slug = "fault_signal", input = u32, timeout = 2, base_delay = 0, max_attempts = 30)]
pub mod fault_signal {
    use super::*;

    #[step(queue = "faults")]
    /// The key: the input plus 1000.
    pub async fn first(input: u32, ctx: Context) -> Result<u32, String> {
        record(&ctx).await?;
        Ok(input + 1000)
    }

    #[step(depends_on = [first], signal = go, key = first, queue = "faults")]
    /// Adds the signal's payload.
    pub async fn gate(first: u32, go: u32, ctx: Context) -> Result<u32, String> {
        record(&ctx).await?;
        Ok(first + go)
    }
}

/// Records when this attempt of a capped step runs (its start, and its end unless it is
/// killed), under the cap's key, around the work `record` does.
async fn record_span(ctx: &Context, cap_key: &str) -> Result<(), String> {
    let span: i64 = sqlx::query_scalar(
        "insert into cap_log (run_id, step_slug, task_index, cap_key, started_at)
         values ($1, $2, $3, $4, clock_timestamp()) returning id",
    )
    .bind(ctx.run_id())
    .bind(ctx.step_slug().as_str())
    .bind(ctx.task_index())
    .bind(cap_key)
    .fetch_one(ctx.pool())
    .await
    .map_err(|e| e.to_string())?;
    record(ctx).await?;
    sqlx::query("update cap_log set ended_at = clock_timestamp() where id = $1")
        .bind(span)
        .execute(ctx.pool())
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// A capped run's input: its tenant and number.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Job {
    /// The key of the per-tenant cap.
    pub tenant: String,
    /// The run's number.
    pub n: u32,
}

/// per_tenant (at most 2 at once per tenant) → shared (at most 3 at once in all).
#[pgflow::flow(slug = "fault_capped", input = Job, timeout = 2, base_delay = 0, max_attempts = 30)]
pub mod fault_capped {
    use super::*;

    #[step(concurrency = 2, concurrency_key = input.tenant, queue = "faults")]
    /// Adds one.
    pub async fn per_tenant(input: Job, ctx: Context) -> Result<u32, String> {
        record_span(&ctx, &input.tenant).await?;
        Ok(input.n + 1)
    }

    #[step(depends_on = [per_tenant], concurrency = 3, queue = "faults")]
    /// Doubles.
    pub async fn shared(per_tenant: u32, ctx: Context) -> Result<u32, String> {
        record_span(&ctx, "").await?;
        Ok(per_tenant * 2)
    }
}

/// call (at most 3 starts per 400 ms per tenant, every attempt counted).
#[pgflow::flow(slug = "fault_rated", input = Job, timeout = 2, base_delay = 0, max_attempts = 30)]
pub mod fault_rated {
    use super::*;

    #[step(rate_limit = "3/400ms", rate_key = input.tenant, queue = "faults")]
    /// Adds seven.
    pub async fn call(input: Job, ctx: Context) -> Result<u32, String> {
        record(&ctx).await?;
        Ok(input.n + 7)
    }
}

/// turn (its runs started in turn under their tenant's singleton key: one at a time).
#[pgflow::flow(slug = "fault_turns", input = Job, timeout = 2, base_delay = 0, max_attempts = 30)]
pub mod fault_turns {
    use super::*;

    #[step(queue = "faults")]
    /// Adds three.
    pub async fn turn(input: Job, ctx: Context) -> Result<u32, String> {
        record_span(&ctx, &input.tenant).await?;
        Ok(input.n + 3)
    }
}

/// echo (its one run made by a burst of debounced starts).
#[pgflow::flow(slug = "fault_debounced", input = u32, timeout = 2, base_delay = 0, max_attempts = 30)]
pub mod fault_debounced {
    use super::*;

    #[step(queue = "faults")]
    /// Its input.
    pub async fn echo(input: u32, ctx: Context) -> Result<u32, String> {
        record(&ctx).await?;
        Ok(input)
    }
}

/// a → b on a queue of their own, capped at QUEUE_CAP tasks at once.
#[pgflow::flow(slug = "fault_queue_capped", input = u32, timeout = 2, base_delay = 0, max_attempts = 30)]
pub mod fault_queue_capped {
    use super::*;

    #[step(queue = "faults_capped")]
    /// Adds one.
    pub async fn a(input: u32, ctx: Context) -> Result<u32, String> {
        record(&ctx).await?;
        Ok(input + 1)
    }

    #[step(depends_on = [a], queue = "faults_capped")]
    /// Doubles.
    pub async fn b(a: u32, ctx: Context) -> Result<u32, String> {
        record(&ctx).await?;
        Ok(a * 2)
    }
}

/// What `first` of a sleeping run chose: its number and when `until` wakes.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Wake {
    /// The run's input.
    pub n: u32,
    /// When `until` wakes.
    pub at: chrono::DateTime<chrono::Utc>,
}

/// first → nap (sleeps 2 s) and first → until (sleeps until the time first chose, 1 to 4 s on).
#[pgflow::flow(slug = "fault_sleep", input = u32, timeout = 2, base_delay = 0, max_attempts = 30)]
pub mod fault_sleep {
    use super::*;

    #[step(queue = "faults")]
    /// Chooses when `until` wakes.
    pub async fn first(input: u32, ctx: Context) -> Result<Wake, String> {
        record(&ctx).await?;
        let at = chrono::Utc::now() + chrono::Duration::seconds(1 + i64::from(input % 4));
        Ok(Wake { n: input, at })
    }

    #[step(depends_on = [first], sleep = 2, queue = "faults")]
    /// Wakes two seconds after `first`.
    pub async fn nap(first: Wake, ctx: Context) -> Result<u32, String> {
        record(&ctx).await?;
        Ok(first.n + 1)
    }

    #[step(depends_on = [first], sleep_until = first.at, queue = "faults")]
    /// Wakes at the time `first` chose.
    pub async fn until(first: Wake, ctx: Context) -> Result<u32, String> {
        record(&ctx).await?;
        Ok(first.n + 2)
    }
}

/// A map over child runs of the chain flow: each element n runs `fault_chain` with n.
#[pgflow::flow(slug = "fault_parent", input = Vec<u32>, timeout = 2, base_delay = 0, max_attempts = 30)]
pub mod fault_parent {
    use super::*;

    #[step(map, subflow = fault_chain, queue = "faults")]
    /// The child's input: the element.
    pub async fn each(n: u32, ctx: Context) -> Result<u32, String> {
        record(&ctx).await?;
        Ok(n)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let runtime = pgflow_testkit::harness::runtime();
    if args.get(1).map(String::as_str) == Some("worker") {
        return runtime.block_on(worker(&args[2]));
    }
    if pgflow_testkit::harness::filtered_out("faults") {
        return ExitCode::SUCCESS;
    }
    pgflow_testkit::harness::outcome("faults", runtime.block_on(scenario()))
}

/// One worker process: every flow on queue `faults`, in `WORKERS_PER_PROCESS` workers sharing
/// the process's client, quick sweeps, until it is killed.
async fn worker(url: &str) -> ExitCode {
    let process = ProcessConfig::new()
        .stalled_check_interval(Duration::from_millis(500))
        .stalled_grace(Duration::from_secs(1))
        .max_requeues(100);
    // The database may be down (restarting): the test starts another.
    let Ok(client) = Client::connect_with(url, process).await else {
        return ExitCode::FAILURE;
    };
    let mut handles = Vec::new();
    for _ in 0..WORKERS_PER_PROCESS {
        let config = WorkerConfig::new(fault_chain::Queue::Faults)
            .connection(&client)
            .max_concurrent(2)
            .poll_interval(Duration::from_millis(200))
            .heartbeat_interval(Duration::from_millis(200))
            .function_name("faults");
        let started = Worker::start_with::<_, _, pgflow::worker::at::P0>(
            (
                fault_chain::deployment(),
                fault_map::deployment(),
                fault_signal::deployment(),
                fault_sleep::deployment(),
                fault_parent::deployment(),
                // A registry tuple holds six; a tuple in it counts as one.
                (
                    fault_capped::deployment(),
                    fault_rated::deployment(),
                    fault_turns::deployment(),
                    fault_debounced::deployment(),
                ),
            ),
            config,
        )
        .await;
        match started {
            Ok(handle) => handles.push(handle),
            // The database may be down (restarting): the test starts another process.
            Err(_) => return ExitCode::FAILURE,
        }
    }
    for _ in 0..CAPPED_QUEUE_WORKERS_PER_PROCESS {
        let config = WorkerConfig::new(fault_queue_capped::Queue::FaultsCapped)
            .connection(&client)
            .max_concurrent(2)
            .poll_interval(Duration::from_millis(200))
            .heartbeat_interval(Duration::from_millis(200))
            .function_name("faults_capped");
        match Worker::start_with(fault_queue_capped::deployment(), config).await {
            Ok(handle) => handles.push(handle),
            Err(_) => return ExitCode::FAILURE,
        }
    }
    // Runs until the test kills it; a fatal error of a worker ends the process early (the
    // test starts another).
    for handle in handles {
        if handle.wait().await.is_err() {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// A worker process.
fn spawn_worker(url: &str, log: &std::path::Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("the worker log");
    Command::new(std::env::current_exe().expect("this binary"))
        .args(["worker", url])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn a worker process")
}

async fn scenario() -> Result<String, String> {
    let cluster = pgflow_testkit::Cluster::start().map_err(|e| e.to_string())?;
    let url = cluster.url();
    let worker_log = cluster.dir.join("workers.log");
    let admin = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&url)
        .await
        .map_err(|e| e.to_string())?;
    pgflow::install(&admin).await.map_err(|e| e.to_string())?;
    sqlx::raw_sql(
        "create table fault_log (id bigint generated always as identity, run_id uuid,
                                 step_slug text, task_index int, attempt int,
                                 started_at timestamptz default clock_timestamp(),
                                 ended_at timestamptz);
         create table cap_log (id bigint generated always as identity, run_id uuid,
                               step_slug text, task_index int, cap_key text,
                               started_at timestamptz, ended_at timestamptz);
         grant all on fault_log, cap_log to public",
    )
    .execute(&admin)
    .await
    .map_err(|e| e.to_string())?;

    let client = Client::new(admin.clone());
    client
        .deploy(&fault_chain::deployment())
        .await
        .map_err(|e| e.to_string())?;
    client
        .deploy(&fault_map::deployment())
        .await
        .map_err(|e| e.to_string())?;
    let chain_inputs: Vec<u32> = (0..CHAIN_RUNS).collect();
    let map_inputs: Vec<u32> = (0..MAP_RUNS).collect();
    // A third at each of three priorities: the chain's tasks go through three lanes of its
    // queue, and the map's share its default one.
    for (inputs, priority) in chain_inputs.chunks(chain_inputs.len().div_ceil(3)).zip([
        Priority::Normal,
        Priority::High,
        Priority::Low,
    ]) {
        client
            .start_many(
                Start::flow::<fault_chain::Flow>(),
                inputs,
                &[StartOptions::new().priority(priority)],
            )
            .await
            .map_err(|e| e.to_string())?;
    }
    client
        .start_many(Start::flow::<fault_map::Flow>(), &map_inputs, &[])
        .await
        .map_err(|e| e.to_string())?;
    client
        .deploy(&fault_signal::deployment())
        .await
        .map_err(|e| e.to_string())?;
    let signal_inputs: Vec<u32> = (0..SIGNAL_RUNS).collect();
    let signal_runs = client
        .start_many(Start::flow::<fault_signal::Flow>(), &signal_inputs, &[])
        .await
        .map_err(|e| e.to_string())?;
    let sleep_inputs: Vec<u32> = (0..SLEEP_RUNS).collect();
    client
        .deploy(&fault_sleep::deployment())
        .await
        .map_err(|e| e.to_string())?;
    client
        .start_many(Start::flow::<fault_sleep::Flow>(), &sleep_inputs, &[])
        .await
        .map_err(|e| e.to_string())?;
    let parent_inputs: Vec<Vec<u32>> = (0..PARENT_RUNS)
        .map(|p| (0..CHILDREN).map(|c| 10_000 + p * CHILDREN + c).collect())
        .collect();
    client
        .deploy(&fault_parent::deployment())
        .await
        .map_err(|e| e.to_string())?;
    // At high priority, which their children take.
    client
        .start_many(
            Start::flow::<fault_parent::Flow>(),
            &parent_inputs,
            &[StartOptions::new().priority(Priority::Highest)],
        )
        .await
        .map_err(|e| e.to_string())?;
    let capped_inputs: Vec<Job> = (0..CAPPED_RUNS)
        .map(|n| Job {
            tenant: format!("tenant{}", n % TENANTS),
            n,
        })
        .collect();
    client
        .deploy(&fault_capped::deployment())
        .await
        .map_err(|e| e.to_string())?;
    client
        .start_many(Start::flow::<fault_capped::Flow>(), &capped_inputs, &[])
        .await
        .map_err(|e| e.to_string())?;
    let rated_inputs: Vec<Job> = (0..RATED_RUNS)
        .map(|n| Job {
            tenant: format!("tenant{}", n % TENANTS),
            n,
        })
        .collect();
    client
        .deploy(&fault_rated::deployment())
        .await
        .map_err(|e| e.to_string())?;
    client
        .start_many(Start::flow::<fault_rated::Flow>(), &rated_inputs, &[])
        .await
        .map_err(|e| e.to_string())?;
    client
        .deploy(&fault_queue_capped::deployment())
        .await
        .map_err(|e| e.to_string())?;
    pgflow::engine::set_queue_concurrency(&admin, "faults_capped", Some(QUEUE_CAP))
        .await
        .map_err(|e| e.to_string())?;
    let queue_capped_inputs: Vec<u32> = (0..QUEUE_CAPPED_RUNS).collect();
    client
        .start_many(
            Start::flow::<fault_queue_capped::Flow>(),
            &queue_capped_inputs,
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    // In turn: the first of each tenant begins, the others wait in its line, in input order.
    let turn_inputs: Vec<Job> = (0..TURN_RUNS)
        .map(|n| Job {
            tenant: format!("tenant{}", n % TENANTS),
            n,
        })
        .collect();
    let turn_options: Vec<StartOptions> = turn_inputs
        .iter()
        .map(|job| StartOptions::new().singleton_in_turn(job.tenant.clone()))
        .collect();
    client
        .deploy(&fault_turns::deployment())
        .await
        .map_err(|e| e.to_string())?;
    client
        .deploy(&fault_debounced::deployment())
        .await
        .map_err(|e| e.to_string())?;
    client
        .start_many(
            Start::flow::<fault_turns::Flow>(),
            &turn_inputs,
            &turn_options,
        )
        .await
        .map_err(|e| e.to_string())?;
    // The even ones by run id now, before any worker runs: kept until they wait.
    for (n, run) in signal_runs.iter().enumerate().filter(|(n, _)| n % 2 == 0) {
        fault_signal::signal_go(&client, run.run_id(), &(n as u32))
            .await
            .map_err(|e| e.to_string())?;
    }
    // The odd ones by key, again and again while the chaos goes on (errors while Postgres is
    // down are expected: the next round tries again).
    let odd_keys: Vec<(String, serde_json::Value)> = (0..SIGNAL_RUNS)
        .filter(|n| n % 2 == 1)
        .map(|n| ((n + 1000).to_string(), serde_json::json!(n)))
        .collect();
    let emitter_pool = admin.clone();
    let emitter = tokio::spawn(async move {
        loop {
            let _ = pgflow::engine::emit_events(&emitter_pool, "go", &odd_keys).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    let total_runs = i64::from(
        CHAIN_RUNS
            + MAP_RUNS
            + SIGNAL_RUNS
            + SLEEP_RUNS
            + PARENT_RUNS * (1 + CHILDREN)
            + CAPPED_RUNS
            + RATED_RUNS
            + TURN_RUNS
            + LATE_TURN_RUNS
            + QUEUE_CAPPED_RUNS
            + 1, // the debounced one
    );

    // Every run moves into the history as soon as it ends, while the chaos goes on: late
    // results, retries of killed attempts, children settling their parents and starts in turn
    // meet archived runs (errors while Postgres is down are expected: the next round goes on).
    let archiver_pool = admin.clone();
    let archiver = tokio::spawn(async move {
        loop {
            let _ = pgflow::engine::archive_runs(&archiver_pool, Duration::ZERO, 50).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut workers: Vec<Child> = (0..WORKERS)
        .map(|_| spawn_worker(&url, &worker_log))
        .collect();
    let began = Instant::now();
    // The burst of debounced starts, while the chaos goes on, with a start in turn after every
    // tenth: each tried again until it goes through (the database may be restarting; a start
    // whose answer was lost may make a second run in turn of the same input).
    let burst_pool = admin.clone();
    let burst = tokio::spawn(async move {
        let client = Client::new(burst_pool);
        let debounced = StartOptions::new().debounce("storm", DEBOUNCE_WINDOW);
        for n in 0..DEBOUNCE_STARTS {
            while client
                .start(Start::flow::<fault_debounced::Flow>(), &n, &debounced)
                .await
                .is_err()
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if n % 10 == 9 {
                let job = Job {
                    tenant: format!("tenant{}", n % TENANTS),
                    n: TURN_RUNS + n / 10,
                };
                let in_turn = StartOptions::new().singleton_in_turn(job.tenant.clone());
                while client
                    .start(Start::flow::<fault_turns::Flow>(), &job, &in_turn)
                    .await
                    .is_err()
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let mut last_kill = Instant::now();
    let mut kills = 0;
    let mut restarted = false;
    // The chain flow's pause and resume, each tried again until it goes through (the database
    // may be down at that moment).
    let mut paused = false;
    let mut resumed = false;
    let mut parked_at_resume = 0;
    let outcome = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if began.elapsed() > DEADLINE {
            break Err(format!(
                "not done after {DEADLINE:?}; still going: {}",
                still_going(&admin).await
            ));
        }
        if !restarted && began.elapsed() >= RESTART_AFTER {
            cluster.restart("immediate").map_err(|e| e.to_string())?;
            restarted = true;
        }
        if !paused && began.elapsed() >= PAUSE_AFTER {
            paused = pgflow::engine::pause_flow(&admin, "fault_chain", Some("chaos"))
                .await
                .is_ok();
        }
        if paused && !resumed && began.elapsed() >= RESUME_AFTER {
            // Counted first (a connection the restart broke fails here, not in the resume).
            let parked: Result<i64, _> =
                sqlx::query_scalar("select count(*) from pgflow.parked_tasks")
                    .fetch_one(&admin)
                    .await;
            let Ok(parked) = parked else { continue };
            parked_at_resume = parked;
            resumed = pgflow::engine::resume_flow(&admin, "fault_chain")
                .await
                .is_ok();
        }
        // A worker that ended by itself (a start while the server was down) is replaced.
        for child in &mut workers {
            if child.try_wait().ok().flatten().is_some() {
                *child = spawn_worker(&url, &worker_log);
            }
        }
        // Done when every run has ended, and all of them exist (a start whose answer was lost
        // may have made one more).
        let counts: Result<(i64, i64), _> = sqlx::query_as(
            "select count(*) filter (where status = 'started'), count(*) from pgflow.all_runs",
        )
        .fetch_one(&admin)
        .await;
        if counts.is_ok_and(|(going, all)| going == 0 && all >= total_runs) {
            break Ok(());
        }
        if last_kill.elapsed() >= KILL_EVERY {
            let victim = kills % WORKERS;
            let _ = workers[victim].kill(); // SIGKILL
            let _ = workers[victim].wait();
            workers[victim] = spawn_worker(&url, &worker_log);
            kills += 1;
            last_kill = Instant::now();
        }
    };
    emitter.abort();
    archiver.abort();
    let burst_ended = burst.is_finished();
    burst.abort();
    for child in &mut workers {
        let _ = child.kill();
        let _ = child.wait();
    }
    let log = || std::fs::read_to_string(&worker_log).unwrap_or_default();
    outcome.map_err(|e| format!("{e}; worker log tail:\n{}", tail(&log(), 40)))?;
    if !burst_ended {
        return Err("every run ended before the burst of debounced starts did".into());
    }
    // Most runs ended well before the last: the archiving must have moved most of them.
    let archived: i64 = sqlx::query_scalar("select count(*) from pgflow.runs_history")
        .fetch_one(&admin)
        .await
        .map_err(|e| e.to_string())?;
    if archived * 2 < total_runs {
        return Err(format!(
            "only {archived} of {total_runs} runs were archived while the chaos went on"
        ));
    }
    if parked_at_resume == 0 {
        return Err(
            "the pause parked no task: the chain flow had no work left at the pause".into(),
        );
    }
    check(&admin).await?;
    let executions: i64 = sqlx::query_scalar("select count(*) from fault_log")
        .fetch_one(&admin)
        .await
        .map_err(|e| e.to_string())?;
    Ok(format!(
        "{total_runs} runs ({archived} archived as they ended), {executions} handler \
         executions, {kills} workers killed, Postgres restarted once, the chain flow paused \
         with {parked_at_resume} tasks parked and resumed, {:.1} s",
        began.elapsed().as_secs_f64()
    ))
}

/// The runs still going, by flow and by the states of their steps, for a failure's message.
async fn still_going(pool: &PgPool) -> String {
    let rows: Result<Vec<(String, String, i64)>, _> = sqlx::query_as(
        "select r.flow_slug,
                coalesce((select string_agg(s.step_slug || ' ' || s.status, ', '
                                            order by s.step_slug)
                          from pgflow.step_states s where s.run_id = r.run_id), 'no steps'),
                count(*)
         from pgflow.runs r where r.status = 'started'
         group by 1, 2 order by 1, 2",
    )
    .fetch_all(pool)
    .await;
    match rows {
        Ok(rows) => rows
            .iter()
            .map(|(flow, steps, n)| format!("{n} of {flow} ({steps})"))
            .collect::<Vec<_>>()
            .join("; "),
        Err(error) => error.to_string(),
    }
}

/// The guarantees, read back from the database.
async fn check(pool: &PgPool) -> Result<(), String> {
    let query = |sql: &'static str| async move {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(pool)
            .await
            .map_err(|e| format!("{sql}: {e}"))
    };
    let expect_zero = [
        (
            "runs not completed",
            "select count(*) from pgflow.all_runs where status <> 'completed'",
        ),
        (
            "tasks left queued or started",
            "select count(*) from pgflow.all_step_tasks where status in ('queued', 'started')",
        ),
        ("waits left", "select count(*) from pgflow.waits"),
        (
            "signal runs with a wrong output (a signal lost, doubled or mixed up)",
            "select count(*) from pgflow.all_runs
             where flow_slug = 'fault_signal'
               and output -> 'gate' <> to_jsonb(input::int + 1000 + input::int)",
        ),
        (
            // Archiving deletes a run's signals: the runs still live are counted.
            "signal runs not archived yet without exactly one signal kept",
            "select count(*) from pgflow.runs r
             where r.flow_slug = 'fault_signal'
               and (select count(*) from pgflow.signals s where s.run_id = r.run_id) <> 1",
        ),
        (
            "runs both live and archived, or twice in the history",
            "select (select count(*) from pgflow.runs r
                     where exists (select 1 from pgflow.runs_history h
                                   where h.run_id = r.run_id))
                    + (select count(*) - count(distinct run_id) from pgflow.all_runs)",
        ),
        (
            "parent runs whose children are not one per element, in order, of the chain flow",
            "select count(*) from pgflow.all_runs p
             where p.flow_slug = 'fault_parent'
               and (select array_agg(c.input::int order by c.parent_task_index)
                    from pgflow.all_runs c
                    where c.parent_run_id = p.run_id and c.flow_slug = 'fault_chain')
                   is distinct from (select array_agg(e::int order by n)
                                     from jsonb_array_elements(p.input) with ordinality x(e, n))",
        ),
        (
            "parent runs whose output is not their children's outputs in order",
            "select count(*) from pgflow.all_runs p
             where p.flow_slug = 'fault_parent'
               and p.output -> 'each' is distinct from
                   (select jsonb_agg(c.output order by c.parent_task_index)
                    from pgflow.all_runs c where c.parent_run_id = p.run_id)",
        ),
        (
            "child runs whose priority is not their parent's",
            "select count(*) from pgflow.all_runs c
             join pgflow.all_runs p on p.run_id = c.parent_run_id
             where c.priority is distinct from p.priority or p.priority is distinct from 1",
        ),
        (
            "chain runs not spread over three priorities",
            "select 3 - count(distinct coalesce(priority, 3)) from pgflow.all_runs
             where flow_slug = 'fault_chain' and parent_run_id is null",
        ),
        (
            "sleep runs with a wrong output",
            "select count(*) from pgflow.all_runs
             where flow_slug = 'fault_sleep'
               and output is distinct from jsonb_build_object('nap', input::int + 1,
                                                              'until', input::int + 2)",
        ),
        (
            "sleeps that ended early",
            "select count(*) from pgflow.all_runs r
             join pgflow.all_step_states first
               on first.run_id = r.run_id and first.step_slug = 'first'
             join pgflow.all_step_states nap on nap.run_id = r.run_id and nap.step_slug = 'nap'
             join pgflow.all_step_states until
               on until.run_id = r.run_id and until.step_slug = 'until'
             where r.flow_slug = 'fault_sleep'
               and (nap.started_at < first.completed_at + interval '2 seconds'
                    or until.started_at < (first.output ->> 'at')::timestamptz)",
        ),
        (
            "capped runs with a wrong output",
            "select count(*) from pgflow.all_runs
             where flow_slug = 'fault_capped'
               and output -> 'shared' is distinct from to_jsonb(((input ->> 'n')::int + 1) * 2)",
        ),
        (
            "rated runs with a wrong output",
            "select count(*) from pgflow.all_runs
             where flow_slug = 'fault_rated'
               and output -> 'call' is distinct from to_jsonb((input ->> 'n')::int + 7)",
        ),
        (
            // Every attempt's start as its claim recorded it: the current one's on the task,
            // the earlier ones' (failed, or stalled when their worker was killed) on attempts.
            "starts of the rated step within 400 ms of the third start before them (its tenant's)",
            "with starts as (
               select r.input ->> 'tenant' as tenant, a.started_at
               from (select run_id, started_at from pgflow.all_task_attempts
                     where step_slug = 'call' and started_at is not null
                     union all
                     select run_id, started_at from pgflow.all_step_tasks
                     where step_slug = 'call' and started_at is not null) a
               join pgflow.all_runs r on r.run_id = a.run_id and r.flow_slug = 'fault_rated'
             )
             select count(*) from (
               select started_at - lag(started_at, 3) over (partition by tenant
                                                             order by started_at) as span
               from starts) s
             where s.span < interval '400 milliseconds'",
        ),
        (
            "turn runs with a wrong output",
            "select count(*) from pgflow.all_runs
             where flow_slug = 'fault_turns'
               and output -> 'turn' is distinct from to_jsonb((input ->> 'n')::int + 3)",
        ),
        (
            "turn runs that began before the run of their key before them had completed",
            "select count(*) from (
               select s.started_at,
                      lag(r.completed_at) over (partition by r.input ->> 'tenant'
                                                order by s.started_at) as before_completed
               from pgflow.all_runs r
               join pgflow.all_step_states s on s.run_id = r.run_id
               where r.flow_slug = 'fault_turns') t
             where t.started_at < t.before_completed",
        ),
        (
            "turn runs that began before a run of their key started earlier",
            "select count(*) from (
               select (r.input ->> 'n')::int as n,
                      lag((r.input ->> 'n')::int) over (partition by r.input ->> 'tenant'
                                                        order by s.started_at) as before
               from pgflow.all_runs r
               join pgflow.all_step_states s on s.run_id = r.run_id
               where r.flow_slug = 'fault_turns') t
             where t.before > t.n",
        ),
        (
            "runs left in a singleton key's line",
            "select count(*) from pgflow.singleton_waits",
        ),
        (
            // The burst's last input is DEBOUNCE_STARTS - 1.
            "debounced runs beyond one, or one without the burst's last input as its output",
            "select abs(count(*) - 1)
                    + count(*) filter (where output -> 'echo' is distinct from '99'::jsonb)
             from pgflow.all_runs where flow_slug = 'fault_debounced'",
        ),
        (
            "tasks left waiting for a rate token",
            "select count(*) from pgflow.rate_waits",
        ),
        ("tasks left held", "select count(*) from pgflow.held_tasks"),
        (
            "tasks left parked, or flows left paused",
            "select (select count(*) from pgflow.parked_tasks)
                    + (select count(*) from pgflow.paused_flows)",
        ),
        (
            // A killed attempt counts as running until the next attempt of its task starts
            // (its handler died before that: the task was requeued only after its timeout).
            "moments when a cap was exceeded (per_tenant: 2 per tenant; shared: 3 in all; \
             turn: one run of a singleton key)",
            "with spans as (
               select l.step_slug, l.cap_key, l.started_at,
                      coalesce(l.ended_at,
                               (select min(n.started_at) from cap_log n
                                where n.run_id = l.run_id and n.step_slug = l.step_slug
                                  and n.task_index = l.task_index
                                  and n.started_at > l.started_at),
                               'infinity') as ended_at
               from cap_log l
             ),
             moments as (
               select step_slug, cap_key, started_at as at, 1 as delta from spans
               union all
               select step_slug, cap_key, ended_at, -1 from spans
             ),
             running as (
               select step_slug, sum(delta) over (partition by step_slug, cap_key
                                                  order by at, delta
                                                  rows unbounded preceding) as n
               from moments
             )
             select count(*) from running
             where n > case step_slug when 'per_tenant' then 2 when 'turn' then 1 else 3 end",
        ),
        (
            // Each execution from its start to its end; one whose end was not recorded (its
            // worker was killed, or its database restarted) until its attempt was recorded
            // as over (requeued as stalled, or failed), which is no later than its claim's
            // slot came free. QUEUE_CAP is 3.
            "moments when more tasks of the capped queue ran at once than its cap of 3",
            "with spans as (
               select l.started_at,
                      coalesce(l.ended_at,
                               (select a.ended_at from pgflow.all_task_attempts a
                                where a.run_id = l.run_id and a.step_slug = l.step_slug
                                  and a.task_index = l.task_index and a.attempt = l.attempt),
                               'infinity') as ended_at
               from fault_log l
               join pgflow.all_runs r on r.run_id = l.run_id and r.flow_slug = 'fault_queue_capped'
             ),
             moments as (
               select started_at as at, 1 as delta from spans
               union all
               select ended_at, -1 from spans
             )
             select count(*) from (
               select sum(delta) over (order by at, delta rows unbounded preceding) as n
               from moments) running
             where n > 3",
        ),
        (
            "runs of the capped queue with a wrong output",
            "select count(*) from pgflow.all_runs
             where flow_slug = 'fault_queue_capped'
               and output -> 'b' is distinct from to_jsonb((input::int + 1) * 2)",
        ),
        (
            "capped queue never at its cap (the test would prove nothing)",
            "with spans as (
               select l.started_at, l.ended_at from fault_log l
               join pgflow.all_runs r on r.run_id = l.run_id and r.flow_slug = 'fault_queue_capped'
               where l.ended_at is not null
             ),
             moments as (
               select started_at as at, 1 as delta from spans
               union all
               select ended_at, -1 from spans
             )
             select case when max(n) >= 3 then 0 else 1 end::bigint from (
               select sum(delta) over (order by at, delta rows unbounded preceding) as n
               from moments) running",
        ),
        (
            "messages left in the queue",
            "select (select count(*) from pgmq.q_faults)
                    + (select count(*) from pgmq.q_faults_capped)",
        ),
        (
            "attempts whose handler ran twice",
            "select count(*) from (select 1 from fault_log
               group by run_id, step_slug, task_index, attempt having count(*) > 1) d",
        ),
        (
            "tasks completed by an attempt that never ran, or not by their last one",
            "select count(*) from pgflow.all_step_tasks t
             where t.status = 'completed' and t.attempts_count is distinct from
               (select max(l.attempt) from fault_log l where l.run_id = t.run_id
                  and l.step_slug = t.step_slug and l.task_index = t.task_index)",
        ),
        (
            "chain runs with a wrong output",
            "select count(*) from pgflow.all_runs
             where flow_slug = 'fault_chain'
               and output -> 'c' <> to_jsonb(((input::int + 1) * 2) + 3)",
        ),
        (
            "map runs with a wrong output",
            "select count(*) from pgflow.all_runs
             where flow_slug = 'fault_map'
               and output -> 'total' <> (select to_jsonb(sum((input::int + i) * (input::int + i)))
                                         from generate_series(0, 7) i)",
        ),
    ];
    let mut failures = Vec::new();
    for (what, sql) in expect_zero {
        let n = query(sql).await?;
        if n != 0 {
            failures.push(format!("{n} {what}"));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
