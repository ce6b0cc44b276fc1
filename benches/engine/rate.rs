//! Rate limits (issue 38): how close a step limited to 500 starts a second comes to that rate
//! over a minute, with 10 workers and a backlog that never runs dry, and that it never goes
//! over it.
//!
//! The starts are the ones the claims recorded (`started_at`, the time a limit counts by). The
//! rate is the number of starts in a window of `SECONDS` that begins after a warm-up (the first
//! period lets a burst of the limit through at once), divided by its length; the most starts in
//! any one period is read from the same rows.

use std::time::Duration;

use pgflow::{Client, Start, Worker, WorkerConfig};

use crate::{Error, database};

/// Workers of the measurement, and slots each.
const WORKERS: usize = 10;
const SLOTS: usize = 10;
/// How often an idle worker looks for tasks that came due (a rate-limited task that waited has
/// a message that becomes visible later, with no notification).
const POLL: Duration = Duration::from_millis(100);

#[pgflow::flow(slug = "bench_rated", input = u32)]
mod bench_rated {
    #[step(rate_limit = "500/s")]
    async fn call(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

#[pgflow::flow(slug = "bench_rated_smoke", input = u32)]
mod bench_rated_smoke {
    #[step(rate_limit = "50/s")]
    async fn call(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

/// What the rate scenario measured.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Rate {
    /// The limit, in starts per second.
    pub(crate) limit_per_s: u32,
    /// The length of the measured window, after the warm-up.
    pub(crate) seconds: u64,
    /// Starts per second within the window.
    pub(crate) starts_per_s: f64,
    /// The most starts in any one second, over the whole run.
    pub(crate) most_in_a_second: i64,
    /// How many times a task found no token at its claim, per start.
    pub(crate) waits_per_start: f64,
}

/// Runs the scenario (`smoke`: 50/s for 3 s in a debug build, as a check that it runs).
pub(crate) async fn rate(smoke: bool) -> Result<Rate, Error> {
    let (limit, seconds, warm_up): (u32, u64, u64) = if smoke { (50, 3, 1) } else { (500, 60, 5) };
    let runs = limit * u32::try_from(seconds + warm_up + 5)?;
    let pool = database("pgflow_bench").await?;
    let client = Client::new(pool.clone());
    let inputs: Vec<u32> = (0..runs).collect();
    let mut workers = Vec::new();
    if smoke {
        client.deploy(&bench_rated_smoke::deployment()).await?;
        for chunk in inputs.chunks(1000) {
            client
                .start_many(Start::flow::<bench_rated_smoke::Flow>(), chunk, &[])
                .await?;
        }
        for _ in 0..WORKERS {
            let config = config(bench_rated_smoke::Queue::BenchRatedSmoke, &client);
            workers.push(Worker::start_with(bench_rated_smoke::deployment(), config).await?);
        }
    } else {
        client.deploy(&bench_rated::deployment()).await?;
        for chunk in inputs.chunks(1000) {
            client
                .start_many(Start::flow::<bench_rated::Flow>(), chunk, &[])
                .await?;
        }
        for _ in 0..WORKERS {
            let config = config(bench_rated::Queue::BenchRated, &client);
            workers.push(Worker::start_with(bench_rated::deployment(), config).await?);
        }
    }
    tokio::time::sleep(Duration::from_secs(warm_up + seconds + 1)).await;
    for worker in &workers {
        worker.shutdown();
    }
    for worker in workers {
        worker.wait().await?;
    }

    let window = seconds as f64;
    let (in_window, most_in_a_second, started): (i64, Option<i64>, i64) = sqlx::query_as(
        "with starts as (
           select started_at from pgflow.step_tasks where started_at is not null
         ),
         first as (select min(started_at) as at from starts)
         select
           (select count(*) from starts, first
            where started_at >= first.at + make_interval(secs => $1)
              and started_at < first.at + make_interval(secs => $1 + $2)),
           (select max(n) from (
              select count(*) over (order by started_at
                                    range between interval '999999 microseconds' preceding
                                              and current row) as n
              from starts) s),
           (select count(*) from starts)",
    )
    .bind(warm_up as f64)
    .bind(window)
    .fetch_one(&pool)
    .await?;
    // A task that found no token got a new message: the queue's message ids beyond one a run
    // count those waits.
    let messages: i64 = sqlx::query_scalar(&format!(
        "select coalesce(max(msg_id), 0) from pgmq.{}",
        if smoke {
            "q_bench_rated_smoke"
        } else {
            "q_bench_rated"
        }
    ))
    .fetch_one(&pool)
    .await?;
    Ok(Rate {
        limit_per_s: limit,
        seconds,
        starts_per_s: in_window as f64 / window,
        most_in_a_second: most_in_a_second.unwrap_or(0),
        waits_per_start: (messages - i64::from(runs)).max(0) as f64 / started.max(1) as f64,
    })
}

fn config<Q: pgflow::FlowQueue>(queue: Q, client: &Client) -> WorkerConfig<Q> {
    WorkerConfig::new(queue)
        .connection(client)
        .batch_size(SLOTS)
        .max_concurrent(SLOTS)
        .poll_interval(POLL)
        .function_name("bench")
}

/// Prints the scenario's figures.
pub(crate) fn print_rate(rate: &Rate) {
    println!(
        "\nrate limit ({} starts/s, {WORKERS} workers of {SLOTS} slots polling every {} ms when \
         idle, a backlog that never runs dry): {:.1} starts/s over {} s after a warm-up \
         ({:+.1} % of the limit); at most {} starts in any one second; {:.2} waits per start",
        rate.limit_per_s,
        POLL.as_millis(),
        rate.starts_per_s,
        rate.seconds,
        (rate.starts_per_s / f64::from(rate.limit_per_s) - 1.0) * 100.0,
        rate.most_in_a_second,
        rate.waits_per_start
    );
}
