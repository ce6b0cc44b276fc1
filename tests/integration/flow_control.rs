//! Pausing a queue: no worker claims from it (not by a poll, not by a claim at release), runs
//! keep starting on it, nothing is lost, and resuming picks everything up. Operators only.

use std::sync::LazyLock;
use std::time::Duration;

use pgflow::{Client, EngineError, Worker};
use sqlx::PgPool;
use tokio::sync::Semaphore;

use crate::support::{install, worker_config};

/// Held by the tests: `first` waits for a permit before it returns.
static GATE: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(0));

/// Two steps on one queue: `second` is released by `first`, which a worker running both would
/// claim at release.
#[pgflow::flow(slug = "paused_v1", alias = "paused", input = u32)]
pub mod paused_v1 {
    use super::*;

    #[step(queue = "flow_control_paused")]
    pub async fn first(input: u32) -> Result<u32, String> {
        if input == 0 {
            GATE.acquire().await.map_err(|e| e.to_string())?.forget();
        }
        Ok(input + 1)
    }

    #[step(depends_on = [first], queue = "flow_control_paused")]
    pub async fn second(first: u32) -> Result<u32, String> {
        Ok(first * 10)
    }
}

async fn task_statuses(pool: &PgPool) -> Vec<(String, String, i64)> {
    sqlx::query_as(
        "select step_slug, status, count(*) from pgflow.step_tasks
         group by step_slug, status order by step_slug, status",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn workers(pool: &PgPool, count: usize) -> Vec<pgflow::WorkerHandle> {
    let mut handles = Vec::new();
    for _ in 0..count {
        handles.push(
            Worker::start_with(
                paused_v1::deployment(),
                worker_config(paused_v1::Queue::FlowControlPaused, pool).max_concurrent(4),
            )
            .await
            .unwrap(),
        );
    }
    handles
}

#[sqlx::test(migrations = false)]
async fn a_paused_queue_is_claimed_from_by_no_one_and_resuming_loses_nothing(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&paused_v1::deployment()).await.unwrap();
    assert!(
        pgflow::engine::pause_queue(&pool, "flow_control_paused", Some("maintenance"))
            .await
            .unwrap()
    );
    assert!(
        !pgflow::engine::pause_queue(&pool, "flow_control_paused", None)
            .await
            .unwrap(),
        "a second pause changes nothing"
    );
    let workers = workers(&pool, 2).await;

    // Runs start and queue their tasks; no worker claims them, however long it polls.
    let mut runs = Vec::new();
    for n in 1..=6 {
        runs.push(paused_v1::start(&client, &n).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        task_statuses(&pool).await,
        vec![("first".to_owned(), "queued".to_owned(), 6)]
    );
    // Nor does a claim of one's own.
    let claimed: i64 = sqlx::query_scalar(
        "select count(*) from pgflow.read_and_start_tasks('flow_control_paused', gen_random_uuid(),
                array['paused_v1'], array['first'], 10)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(claimed, 0);
    let overview = pgflow_runtime::admin::inspect::queues(&pool).await.unwrap();
    let queue = overview
        .iter()
        .find(|q| q.queue_name == "flow_control_paused")
        .unwrap();
    assert!(queue.paused);
    assert_eq!(queue.depth, 6, "every message is still there");

    // Resumed: every run completes.
    assert!(
        pgflow::engine::resume_queue(&pool, "flow_control_paused")
            .await
            .unwrap()
    );
    for (n, run) in (1..).zip(&runs) {
        let output = run.wait(&client, Duration::from_secs(20)).await.unwrap();
        assert_eq!(output.second, (n + 1) * 10);
    }
    assert!(
        !pgflow::engine::resume_queue(&pool, "flow_control_paused")
            .await
            .unwrap()
    );
    for worker in workers {
        worker.shutdown();
        worker.wait().await.unwrap();
    }
}

#[sqlx::test(migrations = false)]
async fn a_completion_on_a_paused_queue_claims_nothing_at_release(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let workers = workers(&pool, 1).await;

    // `first` runs (held at the gate); the queue is paused meanwhile; then `first` completes.
    let run = paused_v1::start(&client, &0).await.unwrap();
    for _ in 0..400 {
        if task_statuses(&pool).await == vec![("first".to_owned(), "started".to_owned(), 1)] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    pgflow::engine::pause_queue(&pool, "flow_control_paused", None)
        .await
        .unwrap();
    GATE.add_permits(1);
    for _ in 0..400 {
        if task_statuses(&pool)
            .await
            .iter()
            .any(|(step, _, _)| step == "second")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        task_statuses(&pool).await,
        vec![
            ("first".to_owned(), "completed".to_owned(), 1),
            ("second".to_owned(), "queued".to_owned(), 1)
        ],
        "the released task waits in the queue, claimed by no one"
    );

    pgflow::engine::resume_queue(&pool, "flow_control_paused")
        .await
        .unwrap();
    let output = run.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.second, 10);
    for worker in workers {
        worker.shutdown();
        worker.wait().await.unwrap();
    }
}

#[sqlx::test(migrations = false)]
async fn pausing_a_queue_no_flow_routes_to_is_refused(pool: PgPool) {
    install(&pool).await;
    let error = pgflow::engine::pause_queue(&pool, "nowhere", None)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, EngineError::UnknownQueue { queue_name } if queue_name == "nowhere"),
        "{error:?}"
    );
}

/// Held by the flow-pause test: `slow_first` waits for a permit before it returns.
static FLOW_GATE: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(0));

/// Two steps, the first held at a gate for input 0; shares its queue with `steady_v1`.
#[pgflow::flow(slug = "pausable_v1", alias = "pausable", input = u32)]
pub mod pausable_v1 {
    use super::*;

    #[step(queue = "flow_control_flows")]
    pub async fn slow_first(input: u32) -> Result<u32, String> {
        if input == 0 {
            FLOW_GATE
                .acquire()
                .await
                .map_err(|e| e.to_string())?
                .forget();
        }
        Ok(input + 1)
    }

    #[step(depends_on = [slow_first], queue = "flow_control_flows")]
    pub async fn then(slow_first: u32) -> Result<u32, String> {
        Ok(slow_first * 10)
    }
}

/// Another flow on the same queue, not paused.
#[pgflow::flow(slug = "steady_v1", input = u32)]
pub mod steady_v1 {
    #[step(queue = "flow_control_flows")]
    pub async fn only(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

async fn flow_task_statuses(pool: &PgPool, flow: &str) -> Vec<(String, String, i64)> {
    sqlx::query_as(
        "select step_slug, status, count(*) from pgflow.step_tasks where flow_slug = $1
         group by step_slug, status order by step_slug, status",
    )
    .bind(flow)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_paused_flow_is_claimed_by_no_one_while_its_queue_runs_on_and_resuming_loses_nothing(
    pool: PgPool,
) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&pausable_v1::deployment()).await.unwrap();
    client.deploy(&steady_v1::deployment()).await.unwrap();
    let mut workers = Vec::new();
    for _ in 0..2 {
        workers.push(
            Worker::start_with(
                (pausable_v1::deployment(), steady_v1::deployment()),
                worker_config(pausable_v1::Queue::FlowControlFlows, &pool).max_concurrent(4),
            )
            .await
            .unwrap(),
        );
    }

    // Run 0's first step is running (held at the gate) when the flow is paused by its alias.
    let held = pausable_v1::start(&client, &0).await.unwrap();
    let running = crate::support::eventually(20, async || {
        flow_task_statuses(&pool, "pausable_v1").await
            == vec![("slow_first".to_owned(), "started".to_owned(), 1)]
    })
    .await;
    assert!(running);
    assert!(
        pgflow::engine::pause_flow(&pool, "pausable", Some("supplier down"))
            .await
            .unwrap()
    );
    assert!(
        !pgflow::engine::pause_flow(&pool, "pausable_v1", None)
            .await
            .unwrap(),
        "a second pause changes nothing"
    );

    // New runs of it start, and none of their tasks is claimed; the other flow runs on.
    let mut runs = Vec::new();
    for n in 1..=5 {
        runs.push(pausable_v1::start(&client, &n).await.unwrap());
    }
    let steady = steady_v1::start(&client, &7).await.unwrap();
    assert_eq!(
        steady
            .wait(&client, Duration::from_secs(20))
            .await
            .unwrap()
            .only,
        7
    );
    // The running task completes; its next step is not claimed at release.
    FLOW_GATE.add_permits(1);
    let parked = crate::support::eventually(20, async || {
        let parked: i64 = sqlx::query_scalar("select count(*) from pgflow.parked_tasks")
            .fetch_one(&pool)
            .await
            .unwrap();
        parked == 6
    })
    .await;
    assert!(parked, "five first steps and one second step are parked");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        flow_task_statuses(&pool, "pausable_v1").await,
        vec![
            ("slow_first".to_owned(), "completed".to_owned(), 1),
            ("slow_first".to_owned(), "queued".to_owned(), 5),
            ("then".to_owned(), "queued".to_owned(), 1),
        ]
    );
    let shown = pgflow_runtime::admin::inspect::paused_flows(&pool)
        .await
        .unwrap();
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].flow_slug, "pausable_v1");
    assert_eq!(shown[0].reason.as_deref(), Some("supplier down"));
    assert_eq!(shown[0].parked_tasks, 6);

    // Resumed: every run completes, nothing lost or doubled.
    assert!(
        pgflow::engine::resume_flow(&pool, "pausable")
            .await
            .unwrap()
    );
    assert_eq!(
        held.wait(&client, Duration::from_secs(20))
            .await
            .unwrap()
            .then,
        10
    );
    for (n, run) in (1..).zip(&runs) {
        let output = run.wait(&client, Duration::from_secs(20)).await.unwrap();
        assert_eq!(output.then, (n + 1) * 10);
    }
    assert!(
        !pgflow::engine::resume_flow(&pool, "pausable")
            .await
            .unwrap()
    );
    let parked_left: i64 = sqlx::query_scalar("select count(*) from pgflow.parked_tasks")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(parked_left, 0);
    let error = pgflow::engine::pause_flow(&pool, "nothing_here", None)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, EngineError::UnknownFlow { .. }),
        "{error:?}"
    );
    for worker in workers {
        worker.shutdown();
        worker.wait().await.unwrap();
    }
}
