//! Metrics: after runs, the Prometheus endpoint shows the task counters and histograms by
//! queue, flow and step, the runs started, failed attempts by outcome, and the gauges read
//! from Postgres.

use std::time::Duration;

use pgflow::{Client, Context, Worker};
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{install, worker_config};

#[pgflow::flow(slug = "metered_v1", input = u32, max_attempts = 3, base_delay = 0)]
pub mod metered_v1 {
    use super::*;

    #[step(queue = "metered")]
    pub async fn first(input: u32) -> Result<u32, String> {
        Ok(input + 1)
    }

    /// Fails its first attempt, then succeeds.
    #[step(depends_on = [first], queue = "metered")]
    pub async fn flaky(first: u32, ctx: Context) -> Result<u32, String> {
        if ctx.attempt() == 1 {
            return Err("first attempts fail".to_owned());
        }
        Ok(first * 2)
    }
}

/// A flow whose only step waits for a signal.
#[pgflow::flow(slug = "gated_v1", input = u32)]
pub mod gated_v1 {
    #[step(signal = open, queue = "gated")]
    pub async fn pass(input: u32, open: bool) -> Result<u32, String> {
        Ok(if open { input } else { 0 })
    }
}

/// One task at a time: a second run's task is held back (no worker runs this flow).
#[pgflow::flow(slug = "narrow_v1", input = u32)]
pub mod narrow_v1 {
    #[step(concurrency = 1, queue = "narrow")]
    pub async fn only(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

/// One start an hour: of two tasks a claim meets, one waits for a token (no worker runs it).
#[pgflow::flow(slug = "sparse_v1", input = u32)]
pub mod sparse_v1 {
    #[step(rate_limit = "1/h", queue = "sparse")]
    pub async fn only(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

/// `GET /metrics` over a plain TCP connection.
async fn scrape(addr: std::net::SocketAddr) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The value of the series `name` whose labels include every pair of `labels`.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .find(|line| {
            labels
                .iter()
                .all(|(k, v)| line.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[sqlx::test(migrations = false)]
async fn the_prometheus_endpoint_shows_what_the_runs_did(pool: PgPool) {
    install(&pool).await;
    let server = pgflow::metrics::serve_prometheus("127.0.0.1:0".parse().unwrap(), &pool)
        .await
        .unwrap();
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        metered_v1::deployment(),
        worker_config(metered_v1::Queue::Metered, &pool),
    )
    .await
    .unwrap();
    let mut runs = Vec::new();
    for input in 0..3 {
        runs.push(metered_v1::start(&client, &input).await.unwrap());
    }
    for run in runs {
        run.wait(&client, Duration::from_secs(20)).await.unwrap();
    }

    let text = scrape(server.local_addr()).await;
    let first = [
        ("queue", "metered"),
        ("flow", "metered_v1"),
        ("step", "first"),
    ];
    let flaky = [
        ("queue", "metered"),
        ("flow", "metered_v1"),
        ("step", "flaky"),
    ];
    assert_eq!(
        value(&text, "pgflow_tasks_claimed_total", &first),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "pgflow_tasks_claimed_total", &flaky),
        Some(6.0)
    );
    assert_eq!(
        value(&text, "pgflow_tasks_completed_total", &flaky),
        Some(3.0)
    );
    let retrying = [
        ("queue", "metered"),
        ("flow", "metered_v1"),
        ("step", "flaky"),
        ("outcome", "retrying"),
    ];
    assert_eq!(
        value(&text, "pgflow_tasks_failed_total", &retrying),
        Some(3.0)
    );
    assert_eq!(
        value(&text, "pgflow_handler_duration_seconds_count", &first),
        Some(3.0)
    );
    assert_eq!(
        value(
            &text,
            "pgflow_runs_started_total",
            &[("flow", "metered_v1")]
        ),
        Some(3.0)
    );
    assert!(
        value(
            &text,
            "pgflow_claim_duration_seconds_count",
            &[("queue", "metered")]
        )
        .is_some_and(|n| n >= 1.0)
    );
    assert!(
        value(
            &text,
            "pgflow_result_batch_size_count",
            &[("queue", "metered"), ("kind", "completions")]
        )
        .is_some_and(|n| n >= 1.0)
    );
    // Gauges read from Postgres at the scrape.
    assert_eq!(
        value(&text, "pgflow_queue_depth", &[("queue", "metered")]),
        Some(0.0)
    );
    assert_eq!(
        value(&text, "pgflow_live_workers", &[("queue", "metered")]),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "pgflow_tasks_in_flight", &[("queue", "metered")]),
        Some(0.0)
    );
    // Steps waiting, per flow and reason, also zero.
    client.deploy(&gated_v1::deployment()).await.unwrap();
    for input in [1, 2] {
        gated_v1::start(&client, &input).await.unwrap();
    }
    let text = scrape(server.local_addr()).await;
    let waiting = |flow, reason| {
        value(
            &text,
            "pgflow_waiting_steps",
            &[("flow", flow), ("reason", reason)],
        )
    };
    assert_eq!(waiting("gated_v1", "signal"), Some(2.0));
    assert_eq!(
        value(
            &text,
            "pgflow_waiting_runs",
            &[("flow", "gated_v1"), ("reason", "signal")]
        ),
        Some(2.0)
    );
    assert_eq!(waiting("gated_v1", "event"), Some(0.0));
    assert_eq!(
        value(&text, "pgflow_queue_concurrency", &[("queue", "metered")]),
        Some(0.0),
        "no cap"
    );
    assert_eq!(waiting("metered_v1", "signal"), Some(0.0));
    // Tasks held back by a concurrency cap, and those holding its slots.
    client.deploy(&narrow_v1::deployment()).await.unwrap();
    for input in [1, 2, 3] {
        narrow_v1::start(&client, &input).await.unwrap();
    }
    let text = scrape(server.local_addr()).await;
    let only = [("flow", "narrow_v1"), ("step", "only")];
    assert_eq!(
        value(
            &text,
            "pgflow_held_tasks",
            &[only[0], only[1], ("reason", "concurrency")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(&text, "pgflow_capped_tasks_running", &only),
        Some(1.0)
    );
    // Tasks waiting for a token of a rate limit.
    let sparse = sparse_v1::deployment();
    client.deploy(&sparse).await.unwrap();
    for input in [1, 2] {
        sparse_v1::start(&client, &input).await.unwrap();
    }
    let queue = pgflow::names::QueueName::new("sparse").unwrap();
    let pairs = pgflow::engine::SupportedPairs::routed_to(sparse.definition(), &queue);
    let claimed =
        pgflow::engine::read_and_start_tasks(&pool, &queue, uuid::Uuid::new_v4(), &pairs, 10)
            .await
            .unwrap();
    assert_eq!(claimed.tasks.len(), 1);
    let text = scrape(server.local_addr()).await;
    assert_eq!(
        value(
            &text,
            "pgflow_held_tasks",
            &[("flow", "sparse_v1"), ("step", "only"), ("reason", "rate")]
        ),
        Some(1.0)
    );
    // A queue's cap, and runs waiting their turn under a singleton key.
    pgflow::engine::set_queue_concurrency(&pool, "sparse", Some(4))
        .await
        .unwrap();
    for input in [3, 4] {
        client
            .start(
                pgflow::Start::flow::<sparse_v1::Flow>(),
                &input,
                pgflow::StartOptions::new().singleton_in_turn("nightly"),
            )
            .await
            .unwrap();
    }
    let text = scrape(server.local_addr()).await;
    assert_eq!(
        value(&text, "pgflow_queue_concurrency", &[("queue", "sparse")]),
        Some(4.0)
    );
    assert_eq!(
        value(
            &text,
            "pgflow_waiting_runs",
            &[("flow", "sparse_v1"), ("reason", "turn")]
        ),
        Some(1.0)
    );
    // No series is labelled by run.
    assert!(!text.contains("run_id"), "{text}");

    worker.shutdown();
    worker.wait().await.unwrap();
}
