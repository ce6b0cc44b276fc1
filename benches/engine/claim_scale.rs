//! Claim latency against a deep backlog: the same claim (`read_and_start_tasks`, batch 100) on
//! a queue that holds only the batch, then on a queue with a backlog of queued runs, plus the
//! plan of every statement the claim runs on the deep queue.

use std::time::Instant;

use pgflow::FlowSpec;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::{Error, bench_single, database, server_url};

/// Claim latencies (client round trip of one claim) on a short and on a deep queue.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct ClaimScale {
    pub batch: usize,
    pub samples: usize,
    pub short_p50_ms: f64,
    pub short_p95_ms: f64,
    pub backlog: usize,
    pub fill_seconds: f64,
    pub deep_p50_ms: f64,
    pub deep_p95_ms: f64,
    /// Where the auto_explain output of one claim on the deep queue was written, if psql ran.
    pub explain_path: Option<String>,
}

const SAMPLES: usize = 50;

/// Measures claims of `batch` tasks with 0 and then `backlog` runs waiting behind them.
pub(crate) async fn claim_scale(backlog: usize, batch: usize) -> Result<ClaimScale, Error> {
    let pool = database("pgflow_bench").await?;
    pgflow::engine::compile_flow(&pool, &bench_single::Flow::definition()).await?;
    let worker = Uuid::new_v4();

    // Short queue: start the batch, claim it (timed), complete it; the queue is empty again.
    let mut short = Vec::new();
    for sample in 0..SAMPLES + 5 {
        start_runs(&pool, batch).await?;
        let ms = claim_and_complete(&pool, worker, batch).await?;
        if sample >= 5 {
            short.push(ms);
        }
    }

    // Deep queue: `backlog` runs queued, then the same claims from its head.
    let filling = Instant::now();
    let mut left = backlog;
    while left > 0 {
        let n = left.min(10_000);
        start_runs(&pool, n).await?;
        left -= n;
    }
    let fill_seconds = filling.elapsed().as_secs_f64();
    // Fresh statistics, as autovacuum takes them on a default server after such a burst (and
    // plans cached while the tables were small are made again). Without them the planner
    // estimates the backlog as a handful of rows.
    sqlx::query("analyze pgflow.runs, pgflow.step_states, pgflow.step_tasks, pgmq.q_bench_single")
        .execute(&pool)
        .await?;
    let mut deep = Vec::new();
    for _ in 0..SAMPLES {
        deep.push(claim_and_complete(&pool, worker, batch).await?);
    }
    let explain_path = explain_claim(worker, batch)?;

    let queued: i64 =
        sqlx::query_scalar("select count(*) from pgflow.step_tasks where status = 'queued'")
            .fetch_one(&pool)
            .await?;
    let expected = backlog.saturating_sub((SAMPLES + 1) * batch);
    if queued as usize != expected {
        return Err(
            format!("claim_scale: {queued} tasks still queued, expected {expected}").into(),
        );
    }
    Ok(ClaimScale {
        batch,
        samples: SAMPLES,
        short_p50_ms: percentile(&mut short, 0.5),
        short_p95_ms: percentile(&mut short, 0.95),
        backlog,
        fill_seconds,
        deep_p50_ms: percentile(&mut deep, 0.5),
        deep_p95_ms: percentile(&mut deep, 0.95),
        explain_path,
    })
}

async fn start_runs(pool: &PgPool, runs: usize) -> Result<(), Error> {
    pgflow::engine::start_concrete_flows(pool, "bench_single", &vec![json!(null); runs]).await?;
    Ok(())
}

/// One timed claim of `batch` tasks, then (untimed) their completion, as a worker would.
async fn claim_and_complete(pool: &PgPool, worker: Uuid, batch: usize) -> Result<f64, Error> {
    let started = Instant::now();
    let claimed: Vec<(Uuid, i32)> = sqlx::query_as(
        "select run_id, attempt from pgflow.read_and_start_tasks(
           'bench_single', $1, array['bench_single'], array['only'], $2)",
    )
    .bind(worker)
    .bind(batch as i32)
    .fetch_all(pool)
    .await?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if claimed.len() != batch {
        return Err(format!(
            "claim_scale: claimed {} tasks, expected {batch}",
            claimed.len()
        )
        .into());
    }
    let (runs, attempts): (Vec<Uuid>, Vec<i32>) = claimed.into_iter().unzip();
    let completed: i32 = sqlx::query_scalar(
        "select pgflow.complete_tasks($1, array_fill('only'::text, array[$3]),
                                      array_fill(0, array[$3]), $2,
                                      array_fill('0'::jsonb, array[$3]))",
    )
    .bind(&runs)
    .bind(&attempts)
    .bind(batch as i32)
    .fetch_one(pool)
    .await?;
    if completed as usize != batch {
        return Err(format!("claim_scale: completed {completed} tasks, expected {batch}").into());
    }
    Ok(ms)
}

/// Runs one claim under `auto_explain` (every nested statement, with actual rows and buffers)
/// through `psql`, and writes the plans to `target/bench-claim-explain.txt`.
fn explain_claim(worker: Uuid, batch: usize) -> Result<Option<String>, Error> {
    let url = database_url("pgflow_bench");
    let script = format!(
        "load 'auto_explain';
         set auto_explain.log_min_duration = 0;
         set auto_explain.log_nested_statements = on;
         set auto_explain.log_analyze = on;
         set auto_explain.log_buffers = on;
         set auto_explain.log_level = notice;
         select count(*) as claimed from pgflow.read_and_start_tasks(
           'bench_single', '{worker}', array['bench_single'], array['only'], {batch});"
    );
    // A blocking call is fine here: nothing else runs while the harness waits for it.
    let output = match std::process::Command::new("psql")
        .args(["-X", "-q", "-d", &url, "-c", &script])
        .output()
    {
        Ok(output) if output.status.success() => output,
        Ok(output) => {
            println!(
                "claim plan: psql failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
            return Ok(None);
        }
        Err(error) => {
            println!(
                "claim plan: psql could not run ({error}); install the Postgres client to get it"
            );
            return Ok(None);
        }
    };
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-claim-explain.txt");
    let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stdout));
    std::fs::write(&path, text)?;
    Ok(Some(path.display().to_string()))
}

/// The server URL with its database replaced by `name`.
fn database_url(name: &str) -> String {
    let url = server_url();
    let (base, query) = url
        .split_once('?')
        .map_or((url.as_str(), None), |(b, q)| (b, Some(q)));
    let base = match base.rfind('/') {
        Some(slash) if slash > "postgres://".len() => &base[..slash],
        _ => base,
    };
    match query {
        Some(query) => format!("{base}/{name}?{query}"),
        None => format!("{base}/{name}"),
    }
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values
        .get(((values.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(0.0)
}

/// Prints the claim figures.
pub(crate) fn print_claims(claims: &ClaimScale) {
    println!(
        "\nclaim latency (read_and_start_tasks, batch {}, {} claims each, client round trip):\n  \
         short queue (just the batch): p50 {:.2} ms, p95 {:.2} ms\n  \
         {} runs queued behind it:    p50 {:.2} ms, p95 {:.2} ms  ({:.2}× the short queue)\n  \
         the backlog was started in {:.1} s ({:.0} runs/s)",
        claims.batch,
        claims.samples,
        claims.short_p50_ms,
        claims.short_p95_ms,
        claims.backlog,
        claims.deep_p50_ms,
        claims.deep_p95_ms,
        claims.deep_p50_ms / claims.short_p50_ms,
        claims.fill_seconds,
        claims.backlog as f64 / claims.fill_seconds,
    );
    if let Some(path) = &claims.explain_path {
        println!("  plans of one claim on the deep queue: {path}");
    }
}
