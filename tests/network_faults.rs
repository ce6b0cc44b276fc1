//! The network-fault test: worker processes on hosts of their own. Two network namespaces are
//! joined to this host by veth pairs, with addresses of 10.231.0.0/16 that exist only inside
//! them; a private Postgres cluster listens on the host's end of each pair, and a third worker
//! process runs on the host itself. While runs flow, host A is cut off (its link down) for
//! longer than the tasks' timeout and grace, holding started tasks; host B gets latency and
//! packet loss (`tc netem` where the kernel has it; else a slow `tc tbf` link and random
//! `iptables` drops). Then A's link comes back.
//!
//! Asserted: A's tasks are recovered as stalled by the others while it is cut off; its late
//! results after healing change nothing (every step's output is from the attempt that
//! completed it, and no attempt ran twice); A rejoins and completes tasks again; every run
//! completes with the right output; nothing is left queued, started or in the queue.
//!
//! One binary, two parts (`harness = false`), as `tests/faults.rs`: run bare, it is the test
//! (as root: it makes namespaces and links, and removes them when it ends); run as
//! `network_faults worker <url> <log> <host>`, it is one worker process.

use std::io::Write;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use pgflow::{Client, Context, ProcessConfig, Worker, WorkerConfig};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// Runs started before the cut, and after the heal.
const RUNS_BEFORE: u32 = 80;
const RUNS_AFTER: u32 = 60;
/// How long host A stays cut off: past the tasks' 2 s timeout, the 1 s grace and a sweep.
const CUT_FOR: Duration = Duration::from_secs(7);
/// How long everything may take to settle once the network is whole again.
const SETTLE_WITHIN: Duration = Duration::from_secs(90);

/// work → tally, each recording the attempts it ran.
#[pgflow::flow(slug = "netfault_v1", input = u32)]
pub mod netfault_v1 {
    use super::*;

    /// What a step's attempt returned, with the attempt, so that an output can be traced to
    /// the attempt that stored it.
    #[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
    pub struct Worked {
        /// The step's result.
        pub value: u32,
        /// The attempt that returned it.
        pub attempt: i32,
    }

    /// Three times the input, in 300 ms.
    #[step(timeout = 2, max_attempts = 10, base_delay = 0)]
    pub async fn work(input: u32, ctx: Context) -> Result<Worked, String> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        record(&ctx);
        Ok(Worked {
            value: input * 3,
            attempt: ctx.attempt(),
        })
    }

    /// One more, in 100 ms.
    #[step(depends_on = [work], timeout = 2, max_attempts = 10, base_delay = 0)]
    pub async fn tally(work: Worked, ctx: Context) -> Result<Worked, String> {
        tokio::time::sleep(Duration::from_millis(100)).await;
        record(&ctx);
        Ok(Worked {
            value: work.value + 1,
            attempt: ctx.attempt(),
        })
    }
}

/// Appends "run step attempt host" to this process's log of finished handlers (a file, so
/// that a cut-off host still records what it ran).
fn record(ctx: &Context) {
    let (Ok(path), Ok(host)) = (
        std::env::var("NETFAULT_LOG"),
        std::env::var("NETFAULT_HOST"),
    ) else {
        return;
    };
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        // One write per line: appends of several processes do not interleave within one.
        let line = format!(
            "{} {} {} {host}\n",
            ctx.run_id(),
            ctx.step_slug(),
            ctx.attempt()
        );
        let _ = file.write_all(line.as_bytes());
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let runtime = pgflow_testkit::harness::runtime();
    if args.get(1).map(String::as_str) == Some("worker") {
        return runtime.block_on(worker(&args[2], &args[3]));
    }
    if pgflow_testkit::harness::filtered_out("network_faults") {
        return ExitCode::SUCCESS;
    }
    pgflow_testkit::harness::outcome("network_faults", runtime.block_on(scenario()))
}

/// One worker process of host `host`: two workers on one client, quick sweeps and heartbeats.
async fn worker(url: &str, host: &str) -> ExitCode {
    let process = ProcessConfig::new()
        .stalled_check_interval(Duration::from_millis(500))
        .stalled_grace(Duration::from_secs(1))
        .max_requeues(100);
    let Ok(client) = Client::connect_with(url, process).await else {
        return ExitCode::FAILURE;
    };
    let mut handles = Vec::new();
    for _ in 0..2 {
        let config = WorkerConfig::new(netfault_v1::Queue::NetfaultV1)
            .connection(&client)
            .max_concurrent(4)
            .poll_interval(Duration::from_millis(200))
            .heartbeat_interval(Duration::from_millis(300))
            .function_name(format!("netfault_{host}"));
        match Worker::start_with(netfault_v1::deployment(), config).await {
            Ok(handle) => handles.push(handle),
            Err(_) => return ExitCode::FAILURE,
        }
    }
    for handle in handles {
        if handle.wait().await.is_err() {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// Runs a command, failing with its stderr.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(())
}

/// A host of the test's own: a network namespace joined to this one by a veth pair, removed
/// (with its link) on drop.
struct Host {
    name: &'static str,
    namespace: String,
    /// The host side of the pair: taking it down cuts the namespace off.
    link: String,
    /// This host's address on the pair, where Postgres listens for the namespace.
    server_ip: String,
}

impl Host {
    fn make(name: &'static str, index: u8) -> Result<Self, String> {
        let tag = std::process::id() % 100_000;
        let subnet = format!("10.231.{}", u32::from(index) + (tag % 100) * 2);
        let host = Self {
            name,
            namespace: format!("pgfnet{tag}{name}"),
            link: format!("pfh{tag}{name}"),
            server_ip: format!("{subnet}.1"),
        };
        let inside = format!("pfn{tag}{name}");
        run("ip", &["netns", "add", &host.namespace])?;
        run(
            "ip",
            &[
                "link", "add", &host.link, "type", "veth", "peer", "name", &inside,
            ],
        )?;
        run("ip", &["link", "set", &inside, "netns", &host.namespace])?;
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", host.server_ip),
                "dev",
                &host.link,
            ],
        )?;
        run("ip", &["link", "set", &host.link, "up"])?;
        let ns = |args: &[&str]| {
            let mut all = vec!["netns", "exec", host.namespace.as_str(), "ip"];
            all.extend_from_slice(args);
            run("ip", &all)
        };
        ns(&["addr", "add", &format!("{subnet}.2/24"), "dev", &inside])?;
        ns(&["link", "set", &inside, "up"])?;
        ns(&["link", "set", "lo", "up"])?;
        Ok(host)
    }

    /// A worker process in the namespace, connecting to Postgres at this host's address.
    fn spawn_worker(&self, port: u16, log: &std::path::Path) -> Child {
        spawn(
            &["ip", "netns", "exec", &self.namespace],
            &format!("postgres://postgres@{}:{port}/postgres", self.server_ip),
            self.name,
            log,
        )
    }

    /// Adds latency and drops 5 % of the packets both ways on the link: with `tc netem` where
    /// the kernel has it, else (this project's machines have no `sch_netem`) with a slow token
    /// bucket (`tc tbf`, 512 kbit/s: packets queue behind each other) and random drops
    /// (`iptables -m statistic`). Returns how, for [`Host::restore`].
    fn degrade(&self) -> Result<Degraded, String> {
        let netem = run(
            "tc",
            &[
                "qdisc", "add", "dev", &self.link, "root", "netem", "delay", "30ms", "10ms",
                "loss", "5%",
            ],
        );
        if netem.is_ok() {
            return Ok(Degraded::Netem);
        }
        run(
            "tc",
            &[
                "qdisc", "add", "dev", &self.link, "root", "tbf", "rate", "512kbit", "burst",
                "16kbit", "latency", "200ms",
            ],
        )?;
        for rule in self.drop_rules() {
            let mut args = vec!["-A"];
            args.extend(rule.iter().copied());
            run("iptables", &args)?;
        }
        Ok(Degraded::TbfAndDrops)
    }

    fn restore(&self, degraded: Degraded) -> Result<(), String> {
        run("tc", &["qdisc", "del", "dev", &self.link, "root"])?;
        if degraded == Degraded::TbfAndDrops {
            for rule in self.drop_rules() {
                let mut args = vec!["-D"];
                args.extend(rule.iter().copied());
                run("iptables", &args)?;
            }
        }
        Ok(())
    }

    /// 5 % of the packets coming in from the namespace and going out to it, dropped.
    fn drop_rules(&self) -> [Vec<&str>; 2] {
        let random = [
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            "0.05",
            "-j",
            "DROP",
        ];
        let mut incoming = vec!["INPUT", "-i", self.link.as_str()];
        incoming.extend(random);
        let mut outgoing = vec!["OUTPUT", "-o", self.link.as_str()];
        outgoing.extend(random);
        [incoming, outgoing]
    }

    fn set_link(&self, up: bool) -> Result<(), String> {
        run(
            "ip",
            &["link", "set", &self.link, if up { "up" } else { "down" }],
        )
    }
}

/// How a link was degraded.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Degraded {
    Netem,
    TbfAndDrops,
}

impl Drop for Host {
    fn drop(&mut self) {
        // Drop rules left by a failed run (deleting a rule that is not there fails quietly).
        for rule in self.drop_rules() {
            let mut args = vec!["-D"];
            args.extend(rule.iter().copied());
            let _ = run("iptables", &args);
        }
        // Deleting the namespace deletes its end of the pair, and so the pair.
        let _ = run("ip", &["link", "del", &self.link]);
        let _ = run("ip", &["netns", "del", &self.namespace]);
    }
}

/// A worker process of host `name`, run through `prefix` (a namespace's `ip netns exec`).
fn spawn(prefix: &[&str], url: &str, name: &str, log: &std::path::Path) -> Child {
    let exe = std::env::current_exe().expect("this binary");
    let exe = exe.to_str().expect("a UTF-8 path");
    let mut command = match prefix.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log.with_extension("stderr"))
        .expect("the workers' stderr log");
    command
        .args(["worker", url, name])
        .env("NETFAULT_LOG", log)
        .env("NETFAULT_HOST", name)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn a worker process")
}

/// Kills the worker processes on drop, whatever happened.
struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn scalar(pool: &PgPool, sql: &str) -> Result<i64, String> {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .map_err(|e| format!("{sql}: {e}"))
}

async fn start_runs(client: &Client, inputs: std::ops::Range<u32>) -> Result<(), String> {
    for input in inputs {
        netfault_v1::start(client, &input)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Waits up to `within` for `sql` to return at least `at_least`.
async fn until(pool: &PgPool, sql: &str, at_least: i64, within: Duration) -> Result<i64, String> {
    let deadline = Instant::now() + within;
    loop {
        let value = scalar(pool, sql).await?;
        if value >= at_least {
            return Ok(value);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "after {within:?}, {value} (wanted {at_least}) from: {sql}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn scenario() -> Result<String, String> {
    if !Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
    {
        return Err("the network-fault test makes network namespaces: run it as root".into());
    }
    let a = Host::make("a", 1)?;
    let b = Host::make("b", 2)?;
    let cluster = pgflow_testkit::Cluster::init().map_err(|e| e.to_string())?;
    let hba = cluster.dir.join("data/pg_hba.conf");
    let mut rules = std::fs::read_to_string(&hba).map_err(|e| e.to_string())?;
    rules.push_str("host all all 10.231.0.0/16 trust\n");
    std::fs::write(&hba, rules).map_err(|e| e.to_string())?;
    let cluster = cluster
        .start_with(&[format!(
            "listen_addresses='127.0.0.1,{},{}'",
            a.server_ip, b.server_ip
        )])
        .map_err(|e| e.to_string())?;
    let admin = PgPoolOptions::new()
        .max_connections(3)
        .connect(&cluster.url())
        .await
        .map_err(|e| e.to_string())?;
    pgflow::install(&admin).await.map_err(|e| e.to_string())?;
    let client = Client::new(admin.clone());
    client
        .deploy(&netfault_v1::deployment())
        .await
        .map_err(|e| e.to_string())?;

    let log = cluster.dir.join("handlers.log");
    let _processes = Processes(vec![
        a.spawn_worker(cluster.port, &log),
        b.spawn_worker(cluster.port, &log),
        spawn(&[], &cluster.url(), "local", &log),
    ]);
    // Every host's workers are up before the runs start.
    until(
        &admin,
        "select count(distinct function_name) from pgflow.workers where stopped_at is null",
        3,
        Duration::from_secs(30),
    )
    .await?;
    start_runs(&client, 0..RUNS_BEFORE).await?;

    // Cut A off while it holds started tasks; slow B down and drop some of its packets.
    const A_STARTED: &str = "select count(*) from pgflow.step_tasks t
         join pgflow.workers w on w.worker_id = t.last_worker_id
         where t.status = 'started' and w.function_name = 'netfault_a'";
    until(&admin, A_STARTED, 1, Duration::from_secs(30)).await?;
    a.set_link(false)?;
    let cut_at = Instant::now();
    let held_by_a = scalar(&admin, A_STARTED).await?;
    let degraded = b.degrade()?;

    // While A is cut off, the others recover its tasks as stalled.
    let stalled = until(
        &admin,
        "select count(*) from pgflow.task_attempts ta
         join pgflow.workers w on w.worker_id = ta.worker_id
         where ta.outcome = 'stalled' and w.function_name = 'netfault_a'",
        1,
        CUT_FOR,
    )
    .await?;
    tokio::time::sleep(CUT_FOR.saturating_sub(cut_at.elapsed())).await;
    a.set_link(true)?;
    let healed_at: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("select now()")
        .fetch_one(&admin)
        .await
        .map_err(|e| e.to_string())?;
    b.restore(degraded)?;

    // More work after the heal; A must take part in it again.
    start_runs(&client, RUNS_BEFORE..RUNS_BEFORE + RUNS_AFTER).await?;
    let total = i64::from(RUNS_BEFORE + RUNS_AFTER);
    until(
        &admin,
        "select count(*) from pgflow.runs where status = 'completed'",
        total,
        SETTLE_WITHIN,
    )
    .await?;
    let rejoined: i64 = sqlx::query_scalar(
        "select count(*) from pgflow.step_tasks t
         join pgflow.workers w on w.worker_id = t.last_worker_id
         where t.status = 'completed' and w.function_name = 'netfault_a'
           and t.completed_at > $1",
    )
    .bind(healed_at)
    .fetch_one(&admin)
    .await
    .map_err(|e| e.to_string())?;
    if rejoined == 0 {
        return Err("host A completed no task after its link came back".into());
    }

    // Every run's output is right, and every step's output is from the attempt that completed
    // it: a late result from A changed nothing.
    let runs: Vec<(i32, serde_json::Value)> =
        sqlx::query_as("select (input)::int, output from pgflow.runs order by (input)::int")
            .fetch_all(&admin)
            .await
            .map_err(|e| e.to_string())?;
    for (input, output) in &runs {
        let value = output["tally"]["value"].as_i64();
        if value != Some(i64::from(*input) * 3 + 1) {
            return Err(format!("run of input {input} ended with {output}"));
        }
    }
    let mismatched = scalar(
        &admin,
        "select count(*) from pgflow.step_tasks
         where status <> 'completed' or (output ->> 'attempt')::int <> attempts_count",
    )
    .await?;
    if mismatched > 0 {
        return Err(format!(
            "{mismatched} tasks are not completed, or hold an output from another attempt than \
             their last"
        ));
    }
    // No attempt ran its handler twice; some of A's ran and lost to a later attempt.
    let text = std::fs::read_to_string(&log).map_err(|e| e.to_string())?;
    let mut seen = std::collections::HashSet::new();
    for line in text.lines() {
        let mut parts = line.split(' ');
        let key = (parts.next(), parts.next(), parts.next());
        if !seen.insert(key) {
            return Err(format!("an attempt ran twice: {line}"));
        }
    }
    // A's handlers ran on while it was cut off: their results came late, for attempts the
    // engine had moved past.
    let attempts: Vec<(uuid::Uuid, String, i32)> =
        sqlx::query_as("select run_id, step_slug, attempts_count from pgflow.step_tasks")
            .fetch_all(&admin)
            .await
            .map_err(|e| e.to_string())?;
    let last: std::collections::HashMap<(String, String), i32> = attempts
        .into_iter()
        .map(|(run, step, attempt)| ((run.to_string(), step), attempt))
        .collect();
    let superseded = text
        .lines()
        .filter(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            let [run, step, attempt, "a"] = parts[..] else {
                return false;
            };
            let attempt: i32 = attempt.parse().unwrap_or(0);
            last.get(&(run.to_owned(), step.to_owned()))
                .is_some_and(|last| attempt < *last)
        })
        .count();
    if superseded == 0 {
        return Err(
            "no handler of A finished an attempt the engine had moved past: the cut \
                    came too late to test late results"
                .into(),
        );
    }
    let left = scalar(
        &admin,
        "select (select count(*) from pgflow.step_tasks where status in ('queued', 'started'))
              + (select count(*) from pgmq.q_netfault_v1)",
    )
    .await?;
    if left > 0 {
        return Err(format!("{left} tasks or messages left behind"));
    }
    Ok(format!(
        "{total} runs; A held {held_by_a} started tasks when cut off, {stalled} recovered \
         within the cut; {superseded} of A's attempts finished after the engine had moved \
         past them, and changed nothing; A completed {rejoined} tasks after the heal"
    ))
}
