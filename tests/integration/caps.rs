//! Concurrency caps: `#[step(concurrency = N)]` runs at most N tasks of the step at once across
//! every worker, and `concurrency_key = input.field` at most N per key; the tasks wait, held in
//! Postgres without a message, and each key is served as its slots free, so a key with a few
//! tasks is not queued behind one with many. A slot comes back when its task ends, however it
//! ends (completed, failed, cancelled), and a retried run's tasks wait for slots again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use pgflow::definition::{FlowDefinition, StepConcurrency};
use pgflow::{Client, Worker};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tokio::sync::Semaphore;

use crate::support::{
    eventually, flow, install, overlap, refusal_of, refusal_of_json, single, step_status,
    worker_config,
};

/// Tasks of `capped_v1::call` running now, and the most ever seen at once.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);

/// A step capped at 3 tasks at once, after a step that is not capped.
#[pgflow::flow(slug = "capped_v1", alias = "capped", input = u32)]
pub mod capped_v1 {
    use super::*;

    #[step(queue = "caps_global")]
    pub async fn prepare(input: u32) -> Result<u32, String> {
        Ok(input)
    }

    #[step(depends_on = [prepare], concurrency = 3, queue = "caps_global")]
    pub async fn call(prepare: u32) -> Result<u32, String> {
        overlap(&RUNNING, &MOST, Duration::from_millis(40)).await;
        Ok(prepare * 2)
    }
}

#[sqlx::test(migrations = false)]
async fn a_cap_holds_across_every_worker(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&capped_v1::deployment()).await.unwrap();
    // Four workers of eight slots each: 32 slots for a step capped at 3.
    let mut workers = Vec::new();
    for _ in 0..4 {
        workers.push(
            Worker::start_with(
                capped_v1::deployment(),
                worker_config(capped_v1::Queue::CapsGlobal, &pool).max_concurrent(8),
            )
            .await
            .unwrap(),
        );
    }
    let inputs: Vec<u32> = (0..60).collect();
    let runs = client
        .start_many(pgflow::Start::flow::<capped_v1::Flow>(), &inputs, &[])
        .await
        .unwrap();
    for (run, input) in runs.iter().zip(&inputs) {
        let output = run.wait(&client, Duration::from_secs(60)).await.unwrap();
        assert_eq!(output.call, input * 2);
    }
    let most = MOST.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} tasks of a step capped at 3 ran at once");
    assert_eq!(most, 3, "the cap is used, not only kept");
    let left: i64 = sqlx::query_scalar("select count(*) from pgflow.held_tasks")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "nothing is left held");
    for worker in workers {
        worker.shutdown();
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    pub tenant: String,
    pub n: u32,
}

/// Tasks running now, and the most at once, per tenant; the order in which calls finished.
static TENANTS: LazyLock<Mutex<HashMap<String, (usize, usize)>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
static FINISHED: LazyLock<Mutex<Vec<String>>> = LazyLock::new(|| Mutex::new(Vec::new()));

/// At most 2 calls at once per tenant.
#[pgflow::flow(slug = "per_tenant_v1", alias = "per_tenant", input = Call)]
pub mod per_tenant_v1 {
    use super::*;

    #[step(concurrency = 2, concurrency_key = input.tenant, queue = "caps_keyed")]
    pub async fn call(input: Call) -> Result<u32, String> {
        {
            let mut tenants = TENANTS.lock().unwrap();
            let entry = tenants.entry(input.tenant.clone()).or_default();
            entry.0 += 1;
            entry.1 = entry.1.max(entry.0);
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        TENANTS.lock().unwrap().get_mut(&input.tenant).unwrap().0 -= 1;
        FINISHED.lock().unwrap().push(input.tenant.clone());
        Ok(input.n)
    }
}

#[sqlx::test(migrations = false)]
async fn a_keyed_cap_holds_per_key_and_a_small_key_is_not_served_last(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&per_tenant_v1::deployment()).await.unwrap();

    // A big tenant's backlog first, then a small tenant's few calls.
    let big: Vec<Call> = (0..40)
        .map(|n| Call {
            tenant: "big".to_owned(),
            n,
        })
        .collect();
    let small: Vec<Call> = (0..4)
        .map(|n| Call {
            tenant: "small".to_owned(),
            n,
        })
        .collect();
    let big_runs = client
        .start_many(pgflow::Start::flow::<per_tenant_v1::Flow>(), &big, &[])
        .await
        .unwrap();
    let small_runs = client
        .start_many(pgflow::Start::flow::<per_tenant_v1::Flow>(), &small, &[])
        .await
        .unwrap();
    let held: Vec<(String, i64)> = sqlx::query_as(
        "select cap_key, count(*) from pgflow.held_tasks group by cap_key order by cap_key",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(held, vec![("big".to_owned(), 38), ("small".to_owned(), 2)]);

    let mut workers = Vec::new();
    for _ in 0..3 {
        workers.push(
            Worker::start_with(
                per_tenant_v1::deployment(),
                worker_config(per_tenant_v1::Queue::CapsKeyed, &pool).max_concurrent(6),
            )
            .await
            .unwrap(),
        );
    }
    for run in big_runs.iter().chain(&small_runs) {
        run.wait(&client, Duration::from_secs(60)).await.unwrap();
    }
    let tenants = TENANTS.lock().unwrap().clone();
    assert_eq!(
        tenants["big"].1, 2,
        "the big tenant ran at most 2 at once, and used both"
    );
    assert_eq!(tenants["small"].1, 2);
    // The small tenant's calls ran beside the big one's, not after its backlog.
    let finished = FINISHED.lock().unwrap().clone();
    let last_small = finished.iter().rposition(|t| t == "small").unwrap();
    assert!(
        last_small < finished.len() / 2,
        "the small tenant's last call finished at {last_small} of {}",
        finished.len()
    );
    for worker in workers {
        worker.shutdown();
    }
}

/// Held by the test: `slow` waits for a permit before it ends (input 0 fails instead).
static GATE: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(0));

/// One task at a time.
#[pgflow::flow(slug = "one_at_a_time_v1", alias = "one_at_a_time", input = u32, max_attempts = 1)]
pub mod one_at_a_time_v1 {
    use super::*;

    #[step(concurrency = 1, queue = "caps_single")]
    pub async fn slow(input: u32) -> Result<u32, String> {
        if input == 0 {
            return Err("input 0 fails".to_owned());
        }
        GATE.acquire().await.map_err(|e| e.to_string())?.forget();
        Ok(input)
    }
}

async fn held_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from pgflow.held_tasks")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_slot_comes_back_when_its_task_fails_or_is_cancelled_and_a_retry_waits_again(
    pool: PgPool,
) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client
        .deploy(&one_at_a_time_v1::deployment())
        .await
        .unwrap();
    let worker = Worker::start_with(
        one_at_a_time_v1::deployment(),
        worker_config(one_at_a_time_v1::Queue::CapsSingle, &pool).max_concurrent(4),
    )
    .await
    .unwrap();

    // The first run fails at once: its slot goes to the second, which then holds it.
    let failing = one_at_a_time_v1::start(&client, &0).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let blocking = one_at_a_time_v1::start(&client, &1).await.unwrap();
    let waiting = one_at_a_time_v1::start(&client, &2).await.unwrap();
    let moved_on = eventually(10, async || {
        step_status(&pool, failing.run_id(), "slow").await == "failed"
            && running(&pool, blocking.run_id()).await
    })
    .await;
    assert!(moved_on, "the failed task's slot went to the next");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !running(&pool, waiting.run_id()).await,
        "one task at a time"
    );
    assert_eq!(held_count(&pool).await, 1);

    // Cancelling the run that holds the slot gives it to the next, once the cancelled handler
    // cannot be running: after its worker's next beat (a beat tells the worker, which stops the
    // handler), not at the cancel.
    client
        .cancel(blocking.run_id(), Some("not needed"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !running(&pool, waiting.run_id()).await,
        "the slot was given on while the cancelled handler could still run"
    );
    let handed_on = eventually(10, async || running(&pool, waiting.run_id()).await).await;
    assert!(handed_on, "the cancelled task's slot went to the next");
    assert_eq!(held_count(&pool).await, 0);

    // A retried run waits for a slot again, and gets it when the holder ends.
    assert!(client.retry(failing.run_id()).await.unwrap().retried);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        held_count(&pool).await,
        1,
        "the retried task waits for the slot"
    );
    GATE.add_permits(1);
    waiting
        .wait(&client, Duration::from_secs(10))
        .await
        .unwrap();
    // Input 0 fails again: the retried run fails, and nothing is left held or holding a slot.
    let failed_again = eventually(10, async || {
        step_status(&pool, failing.run_id(), "slow").await == "failed"
    })
    .await;
    assert!(failed_again);
    assert_eq!(held_count(&pool).await, 0);
    worker.shutdown();
}

/// Whether the run's task is running (claimed by a worker).
async fn running(pool: &PgPool, run_id: uuid::Uuid) -> bool {
    sqlx::query_scalar(
        "select exists (select 1 from pgflow.step_tasks where run_id = $1 and status = 'started')",
    )
    .bind(run_id)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_key_without_a_cap_or_a_cap_of_zero_is_refused(pool: PgPool) {
    install(&pool).await;
    let cases = [
        (
            single("a", &[]).concurrency(StepConcurrency::at_most(0)),
            "option `concurrency` must be a whole number of at least 1",
        ),
        (
            single("a", &[]).concurrency(StepConcurrency::at_most(2).per_key(["tenant"])),
            "concurrency_key must be a path of field names whose first element is `input`",
        ),
    ];
    for (step, expected) in cases {
        let message = refusal_of(&pool, step).await;
        assert!(message.contains(expected), "{message}");
    }
    let refused = refusal_of_json(
        &pool,
        r#"[{"slug": "a", "concurrency_key": ["input", "tenant"]}]"#,
    )
    .await;
    assert!(
        refused.contains("sets `concurrency_key` without `concurrency`"),
        "{refused}"
    );
}

#[sqlx::test(migrations = false)]
async fn dropping_a_cap_releases_what_it_held(pool: PgPool) {
    install(&pool).await;
    let capped = FlowDefinition::new(flow("recap"))
        .step(single("a", &[]).concurrency(StepConcurrency::at_most(1)));
    pgflow::engine::compile_flow(&pool, &capped).await.unwrap();
    for n in 0..3 {
        pgflow::engine::start_flow(&pool, "recap", &serde_json::json!(n))
            .await
            .unwrap();
    }
    assert_eq!(held_count(&pool).await, 2);

    // The same flow without the cap (a setting: the flow is verified, not changed in shape).
    let uncapped = FlowDefinition::new(flow("recap")).step(single("a", &[]));
    pgflow::engine::compile_flow(&pool, &uncapped)
        .await
        .unwrap();
    let released = pgflow::engine::release_capped_tasks(&pool, 1000)
        .await
        .unwrap();
    assert_eq!(released, 2);
    assert_eq!(held_count(&pool).await, 0);
    let with_messages: i64 = sqlx::query_scalar(
        "select count(*) from pgflow.step_tasks where status = 'queued' and message_id is not null",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(with_messages, 3, "every task is on the queue");
}

#[sqlx::test(migrations = false)]
async fn a_task_parked_by_a_pause_and_held_again_by_a_retry_waits_for_its_slot(pool: PgPool) {
    install(&pool).await;
    // `call` runs one task at a time; `other` is a second root step of the same run.
    let definition = FlowDefinition::new(flow("parked_cap"))
        .step(single("call", &[]).concurrency(StepConcurrency::at_most(1)))
        .step(single("other", &[]));
    pgflow::engine::compile_flow(&pool, &definition)
        .await
        .unwrap();
    let first = pgflow::engine::start_flow(&pool, "parked_cap", &serde_json::json!(1))
        .await
        .unwrap()
        .run_id;

    // Paused: a worker's claim parks both tasks of the first run (its `call` holds the slot).
    pgflow::engine::pause_flow(&pool, "parked_cap", None)
        .await
        .unwrap();
    let claimed: i64 = sqlx::query_scalar(
        "select count(*) from pgflow.read_and_start_tasks('parked_cap', gen_random_uuid(),
                array['parked_cap', 'parked_cap'], array['call', 'other'], 10)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(claimed, 0);

    // The first run fails; a second run's `call` takes the freed slot.
    sqlx::query("select pgflow.fail_runs(array[$1]::uuid[], 'a test failed it')")
        .bind(first)
        .execute(&pool)
        .await
        .unwrap();
    let second = pgflow::engine::start_flow(&pool, "parked_cap", &serde_json::json!(2))
        .await
        .unwrap()
        .run_id;
    // The first run is retried: its `call` waits for the slot the second run's holds.
    let retried: bool =
        sqlx::query_scalar("select retried from pgflow.retry_runs(array[$1]::uuid[])")
            .bind(first)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(retried);
    assert_eq!(held_count(&pool).await, 1);

    // Resuming the flow queues its parked tasks, but not one that waits for a slot.
    pgflow::engine::resume_flow(&pool, "parked_cap")
        .await
        .unwrap();
    let calls_on_the_queue: Vec<uuid::Uuid> = sqlx::query_scalar(
        "select run_id from pgflow.step_tasks
         where step_slug = 'call' and status = 'queued' and message_id is not null",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        calls_on_the_queue,
        vec![second],
        "one `call` may be claimable at a time"
    );
    assert_eq!(held_count(&pool).await, 1);
}
