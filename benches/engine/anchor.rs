//! The anchor: pgflow 0.8.1's SQL core (npm `@pgflow/core`, installed from
//! `benches/anchor/` with `npm ci`), driven the way its Edge Worker drives it, under the same
//! per-call method as this project's `per_call` rows, so that the two print side by side.
//!
//! Install: PGMQ's SQL (the same embedded installer as pgflow's own), a no-op
//! `realtime.send(jsonb, text, text, boolean)` (on Supabase it broadcasts to the browser; the
//! anchor is thus slightly cheaper than a real deployment), then the package's migrations in
//! order, each in one transaction, without its `create extension pgmq` line (PGMQ is there as
//! plain SQL, not as an extension).
//!
//! Worker: what `@pgflow/edge-worker` 0.8.1 does per worker: register in `pgflow.workers`, then
//! loop: `pgmq.read_with_poll(queue, vt 2, qty = batch, 2 s, 100 ms)`, `pgflow.start_tasks`
//! with every message read, each task's handler concurrently, `pgflow.complete_task` per task,
//! and only when the whole batch is done the next read; a heartbeat at most every 5 s; a pool of
//! at most 4 connections; unnamed statements (its driver runs with `prepare: false`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Row as _};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::{
    CpuClock, Error, Row, commits, empty_database, wait_until_no_run_is_open, warm_up_size,
};

/// The flows of the comparison, as pgflow 0.8.1 defines them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AnchorFlow {
    /// One step.
    Single,
    /// `a → b → c`.
    Chain3,
    /// `root → map over 100 → reduce`.
    Fanout,
}

impl AnchorFlow {
    fn slug(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Chain3 => "chain3",
            Self::Fanout => "fanout",
        }
    }

    fn tasks_per_run(self) -> usize {
        match self {
            Self::Single => 1,
            Self::Chain3 => 3,
            Self::Fanout => 102,
        }
    }

    /// What a no-op handler of `step` returns.
    fn output(self, step: &str, input: &Value) -> Value {
        match (self, step) {
            (Self::Fanout, "root") => json!((0..100).collect::<Vec<u32>>()),
            (Self::Fanout, "fan") => input.clone(),
            (Self::Fanout, "reduce") => {
                let sum: u64 = input["fan"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_u64).sum())
                    .unwrap_or(0);
                json!(sum)
            }
            _ => json!(1),
        }
    }
}

/// The package's folder (`npm ci` in `benches/anchor/` when it is not there yet).
fn migrations_dir() -> Result<PathBuf, Error> {
    let anchor = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/anchor");
    let migrations = anchor.join("node_modules/@pgflow/core/dist/supabase/migrations");
    if !migrations.exists() {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&anchor)
            .status()
            .map_err(|e| format!("the anchor needs npm to install @pgflow/core 0.8.1: {e}"))?;
        if !status.success() {
            return Err(format!("`npm ci` in {} failed", anchor.display()).into());
        }
    }
    Ok(migrations)
}

/// A fresh database with pgflow 0.8.1's SQL core and the three flows.
async fn anchor_database() -> Result<PgPool, Error> {
    let pool = empty_database("pgflow_bench_anchor").await?;
    pgmq::install::install_sql_from_embedded(&pool).await?;
    sqlx::raw_sql(
        "create schema if not exists realtime;
         create or replace function realtime.send(payload jsonb, event text, topic text,
                                                  private boolean default true)
         returns void language sql as $$ select null::void $$;",
    )
    .execute(&pool)
    .await?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(migrations_dir()?)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.sort();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "sql"))
    {
        let sql: String = std::fs::read_to_string(file)?
            .lines()
            .filter(|line| {
                line.trim() != r#"CREATE EXTENSION IF NOT EXISTS "pgmq" WITH SCHEMA "pgmq";"#
            })
            .collect::<Vec<_>>()
            .join("\n");
        let mut tx = pool.begin().await?;
        sqlx::raw_sql(&sql)
            .execute(&mut *tx)
            .await
            .map_err(|e| format!("installing pgflow 0.8.1's {}: {e}", file.display()))?;
        tx.commit().await?;
    }
    sqlx::raw_sql(
        "select pgflow.create_flow('single');
         select pgflow.add_step('single', 'only');
         select pgflow.create_flow('chain3');
         select pgflow.add_step('chain3', 'a');
         select pgflow.add_step('chain3', 'b', array['a']);
         select pgflow.add_step('chain3', 'c', array['b']);
         select pgflow.create_flow('fanout');
         select pgflow.add_step('fanout', 'root');
         select pgflow.add_step('fanout', 'fan', array['root'], step_type => 'map');
         select pgflow.add_step('fanout', 'reduce', array['fan']);",
    )
    .execute(&pool)
    .await?;
    Ok(pool)
}

/// One Edge Worker of `flow`, until `stop`.
async fn edge_worker(
    server: PgConnectOptions,
    flow: AnchorFlow,
    batch: usize,
    stop: CancellationToken,
) -> Result<(), Error> {
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(server)
        .await?;
    let worker_id = Uuid::new_v4();
    sqlx::query(
        "insert into pgflow.workers (queue_name, worker_id, function_name) values ($1, $2, $3)",
    )
    .persistent(false)
    .bind(flow.slug())
    .bind(worker_id)
    .bind("bench")
    .execute(&pool)
    .await?;
    let mut last_beat = Instant::now();
    while !stop.is_cancelled() {
        if last_beat.elapsed() >= Duration::from_secs(5) {
            sqlx::query(
                "update pgflow.workers as w set last_heartbeat_at = clock_timestamp()
                 where w.worker_id = $1 returning (w.deprecated_at is not null) as is_deprecated",
            )
            .persistent(false)
            .bind(worker_id)
            .fetch_all(&pool)
            .await?;
            last_beat = Instant::now();
        }
        let read = sqlx::query(
            "select * from pgmq.read_with_poll(queue_name => $1, vt => $2, qty => $3,
                                                max_poll_seconds => $4, poll_interval_ms => $5)",
        )
        .persistent(false)
        .bind(flow.slug())
        .bind(2_i32)
        .bind(batch as i32)
        .bind(2_i32)
        .bind(100_i32)
        .fetch_all(&pool);
        let messages = tokio::select! {
            _ = stop.cancelled() => break,
            read = read => read?,
        };
        if messages.is_empty() {
            continue;
        }
        let ids: Vec<i64> = messages.iter().map(|m| m.get("msg_id")).collect();
        let tasks = sqlx::query(
            "select * from pgflow.start_tasks(flow_slug => $1, msg_ids => $2::bigint[],
                                              worker_id => $3::uuid)",
        )
        .persistent(false)
        .bind(flow.slug())
        .bind(&ids)
        .bind(worker_id)
        .fetch_all(&pool)
        .await?;
        let completions = tasks.into_iter().map(|task| {
            let pool = pool.clone();
            async move {
                let run_id: Uuid = task.get("run_id");
                let step: String = task.get("step_slug");
                let index: i32 = task.get("task_index");
                let input: Value = task.get("input");
                let output = flow.output(&step, &input);
                sqlx::query(
                    "select pgflow.complete_task(run_id => $1::uuid, step_slug => $2::text,
                                                 task_index => $3::int, output => $4::jsonb)",
                )
                .persistent(false)
                .bind(run_id)
                .bind(step)
                .bind(index)
                .bind(output)
                .execute(&pool)
                .await
            }
        });
        for completed in futures_util::future::join_all(completions).await {
            completed?;
        }
    }
    pool.close().await;
    Ok(())
}

/// Starts `runs` runs of `flow` from `clients` connections, one per call, back to back.
async fn start_per_call(clients: &[PgPool], flow: AnchorFlow, runs: usize) -> Result<(), Error> {
    let input = match flow {
        AnchorFlow::Fanout => json!(100),
        _ => json!(null),
    };
    let mut starters = Vec::new();
    for client in clients {
        let client = client.clone();
        let input = input.clone();
        let per_client = runs / clients.len();
        starters.push(tokio::spawn(async move {
            for _ in 0..per_client {
                sqlx::query(
                    "select * from pgflow.start_flow(flow_slug => $1::text, input => $2::jsonb)",
                )
                .persistent(false)
                .bind(flow.slug())
                .bind(&input)
                .fetch_all(&client)
                .await?;
            }
            Ok::<_, sqlx::Error>(())
        }));
    }
    for starter in starters {
        starter.await??;
    }
    Ok(())
}

/// pgflow 0.8.1 under the per-call method: `clients` connections start `runs` runs of `flow`
/// one per call while `workers` Edge Workers (batch `batch`) run them; a tenth as many runs
/// first, untimed, as this project's rows do.
pub(crate) async fn anchor_per_call(
    flow: AnchorFlow,
    runs: usize,
    clients: usize,
    (workers, batch): (usize, usize),
) -> Result<Row, Error> {
    let pool = anchor_database().await?;
    let options = (*pool.connect_options()).clone();
    let client_pools = crate::client_pools(&pool, clients).await?;
    let stop = CancellationToken::new();
    let mut handles = Vec::new();
    for _ in 0..workers {
        handles.push(tokio::spawn(edge_worker(
            options.clone(),
            flow,
            batch,
            stop.clone(),
        )));
    }
    let runs = runs - runs % clients;
    start_per_call(&client_pools, flow, warm_up_size(runs).max(clients)).await?;
    wait_until_no_run_is_open(&pool).await?;
    sqlx::raw_sql("vacuum analyze").execute(&pool).await?;

    let window_start = crate::database_clock(&pool).await?;
    let before = commits(&pool).await?;
    let cpu = CpuClock::now();
    let started = Instant::now();
    start_per_call(&client_pools, flow, runs).await?;
    let polls = wait_until_no_run_is_open(&pool).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu.and_then(|c| c.elapsed());
    stop.cancel();
    for handle in handles {
        handle.await??;
    }
    let after = commits(&pool).await?;
    let (measured, p50, p95, p99, failed): (i64, Option<f64>, Option<f64>, Option<f64>, i64) =
        sqlx::query_as(
            "select count(*) filter (where status = 'completed' and started_at >= to_timestamp($1)),
                    percentile_cont(0.5) within group (order by ms),
                    percentile_cont(0.95) within group (order by ms),
                    percentile_cont(0.99) within group (order by ms),
                    count(*) filter (where status <> 'completed')
             from (select status, started_at,
                          extract(epoch from completed_at - started_at) * 1000 as ms
                   from pgflow.runs) r
             where started_at >= to_timestamp($1) or status <> 'completed'",
        )
        .bind(window_start)
        .fetch_one(&pool)
        .await?;
    if failed != 0 || measured as usize != runs {
        return Err(format!(
            "anchor {}: {measured} of {runs} measured runs completed, {failed} not completed",
            flow.slug()
        )
        .into());
    }
    for client in client_pools {
        client.close().await;
    }
    let tasks = runs * flow.tasks_per_run();
    Ok(Row {
        scenario: format!("{}, pgflow 0.8.1", flow.slug()),
        workers,
        batch,
        runs,
        tasks,
        seconds,
        tasks_per_s: tasks as f64 / seconds,
        runs_per_s: runs as f64 / seconds,
        run_p50_ms: p50.unwrap_or(0.0),
        run_p95_ms: p95.unwrap_or(0.0),
        run_p99_ms: p99.unwrap_or(0.0),
        pickup_p50_ms: 0.0,
        commits_per_task: (after - before - polls).max(0) as f64 / tasks as f64,
        cpu_us_per_task: cpu.map(|c| c.busy_us / tasks as f64),
        steal_pct: cpu.map(|c| c.steal_pct),
        vs_limit: None,
        repeats: 1,
    })
}
