//! What the dashboard's tests share: a flow whose first step waits as long as its input says,
//! then maps over three elements, then fails when asked; and a worker for it.

#![allow(dead_code)]

use std::time::Duration;

use pgflow::{Client, Worker, WorkerConfig, WorkerHandle};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

/// The error the second step fails with when the order says so.
pub const DECLINED: &str = "the card was declined (test)";

/// A flow input.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Order {
    /// How long `prepare` takes.
    pub wait_ms: u64,
    /// Whether `settle` fails.
    pub fail: bool,
    /// Text carried along (payload previews).
    pub note: String,
}

impl Order {
    pub fn quick() -> Self {
        Self {
            wait_ms: 0,
            fail: false,
            note: "quick".into(),
        }
    }

    /// An order whose step fails (one attempt: the run fails with it).
    pub fn failing() -> Self {
        Self {
            fail: true,
            ..Self::quick()
        }
    }

    /// An order whose step takes `wait_ms` to finish.
    pub fn waiting(wait_ms: u64) -> Self {
        Self {
            wait_ms,
            ..Self::quick()
        }
    }
}

#[pgflow::flow(slug = "browsed_v1", alias = "browsed", input = Order, max_attempts = 1, base_delay = 0)]
pub mod browsed_v1 {
    use super::*;

    #[step(queue = "browsed")]
    pub async fn prepare(input: Order, ctx: pgflow::Context) -> Result<Vec<u64>, String> {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(input.wait_ms)) => Ok(vec![1, 2, 3]),
            _ = ctx.cancellation().cancelled() => Err("cancelled".into()),
        }
    }

    #[step(map = prepare, queue = "browsed")]
    pub async fn check(item: u64) -> Result<u64, String> {
        Ok(item * 2)
    }

    #[step(depends_on = [check], queue = "browsed")]
    pub async fn settle(input: Order, check: Vec<u64>) -> Result<String, String> {
        if input.fail {
            return Err(DECLINED.into());
        }
        Ok(format!("settled {} items: {}", check.len(), input.note))
    }
}

/// Installs pgflow and starts a worker of the flow (quick polls and heartbeats).
pub async fn installed_with_worker(pool: &PgPool) -> WorkerHandle {
    pgflow::install(pool).await.expect("install pgflow");
    let config = WorkerConfig::new(browsed_v1::Queue::Browsed)
        .pool(pool.clone())
        .poll_interval(Duration::from_millis(100))
        .heartbeat_interval(Duration::from_millis(200))
        .function_name("dashboard_tests");
    Worker::start_with(browsed_v1::deployment(), config)
        .await
        .expect("start the worker")
}

/// Starts a run of the flow.
pub async fn start(client: &Client, order: Order) -> Uuid {
    browsed_v1::start(client, &order)
        .await
        .expect("start a run")
        .run_id()
}

/// Waits until the run has ended (20 s at most) and returns its status.
pub async fn ended(client: &Client, run_id: Uuid) -> pgflow::engine::RunStatus {
    for _ in 0..200 {
        let run = pgflow::engine::run(client.db(), run_id)
            .await
            .expect("read the run");
        if run.status.is_ended() {
            return run.status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("run {run_id} did not end within 20 s");
}

/// A flow whose only step waits for the signal `approval`, and returns who approved.
#[pgflow::flow(slug = "approved_v1", alias = "approved")]
pub mod approved_v1 {
    use serde_json::Value;

    #[step(signal = approval, queue = "approved")]
    pub async fn approve(input: Value, approval: Value) -> Result<String, String> {
        let _ = input;
        Ok(approval["by"].as_str().unwrap_or("nobody").to_owned())
    }
}

/// A worker of the approval flow, and a run of it, waiting for its signal.
pub async fn waiting_for_approval(pool: &PgPool) -> (WorkerHandle, Uuid) {
    let config = WorkerConfig::new(approved_v1::Queue::Approved)
        .pool(pool.clone())
        .poll_interval(Duration::from_millis(100))
        .heartbeat_interval(Duration::from_millis(200))
        .function_name("dashboard_tests");
    let worker = Worker::start_with(approved_v1::deployment(), config)
        .await
        .expect("start the approval worker");
    let client = Client::new(pool.clone());
    let run = approved_v1::start(&client, &serde_json::json!({}))
        .await
        .expect("start an approval run")
        .run_id();
    (worker, run)
}

/// A flow whose only step runs the approval flow as its child.
#[pgflow::flow(slug = "delegating_v1", alias = "delegating")]
pub mod delegating_v1 {
    use serde_json::Value;

    #[step(subflow = super::approved_v1, queue = "approved")]
    pub async fn ask(input: Value) -> Result<Value, String> {
        Ok(input)
    }
}

/// A worker of both flows, and a run of the delegating one whose child waits for its signal:
/// (worker, parent, child).
pub async fn waiting_child(pool: &PgPool) -> (WorkerHandle, Uuid, Uuid) {
    let config = WorkerConfig::new(delegating_v1::Queue::Approved)
        .pool(pool.clone())
        .poll_interval(Duration::from_millis(100))
        .heartbeat_interval(Duration::from_millis(200))
        .function_name("dashboard_tests");
    let worker = Worker::start_with(
        (approved_v1::deployment(), delegating_v1::deployment()),
        config,
    )
    .await
    .expect("start the worker");
    let client = Client::new(pool.clone());
    let parent = delegating_v1::start(&client, &serde_json::json!({}))
        .await
        .expect("start a delegating run")
        .run_id();
    for _ in 0..200 {
        let child: Option<Uuid> =
            sqlx::query_scalar("select run_id from pgflow.runs where parent_run_id = $1")
                .bind(parent)
                .fetch_optional(pool)
                .await
                .expect("read the child");
        if let Some(child) = child {
            return (worker, parent, child);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("run {parent} started no child within 20 s");
}
