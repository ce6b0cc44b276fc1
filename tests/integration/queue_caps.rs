//! Queue caps: `pgflow queue cap <queue> N` (`engine::set_queue_concurrency`) runs at most N
//! tasks of the queue at once, across every worker and whatever their flow and step; the tasks
//! running when a cap is set count against it, and a claim takes no more messages than the cap
//! leaves room for, by either claim path.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pgflow::engine::{self, SupportedPairs, TaskCompletion};
use pgflow::names::QueueName;
use pgflow::{Client, EngineError, Start, Worker};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{install, worker_config};

/// Tasks of the queue running now, and the most ever seen at once.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);

async fn overlap() {
    crate::support::overlap(&RUNNING, &MOST, Duration::from_millis(40)).await;
}

/// Two steps in a chain on the capped queue.
#[pgflow::flow(slug = "queue_capped_chain_v1", input = u32)]
pub mod queue_capped_chain_v1 {
    use super::*;

    #[step(queue = "queue_capped")]
    pub async fn first(input: u32) -> Result<u32, String> {
        overlap().await;
        Ok(input + 1)
    }

    #[step(depends_on = [first], queue = "queue_capped")]
    pub async fn second(first: u32) -> Result<u32, String> {
        overlap().await;
        Ok(first * 2)
    }
}

/// A map on the same queue: a fan-out a completion would otherwise claim at release.
#[pgflow::flow(slug = "queue_capped_map_v1", input = u32)]
pub mod queue_capped_map_v1 {
    use super::*;

    #[step(queue = "queue_capped")]
    pub async fn spread(input: u32) -> Result<Vec<u32>, String> {
        Ok(vec![input; 4])
    }

    #[step(map = spread, queue = "queue_capped")]
    pub async fn each(element: u32) -> Result<u32, String> {
        overlap().await;
        Ok(element)
    }
}

#[sqlx::test(migrations = false)]
async fn a_queue_cap_holds_across_every_worker_flow_and_step(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client
        .deploy(&queue_capped_chain_v1::deployment())
        .await
        .unwrap();
    client
        .deploy(&queue_capped_map_v1::deployment())
        .await
        .unwrap();
    let before = engine::set_queue_concurrency(&pool, "queue_capped", Some(3))
        .await
        .unwrap();
    assert_eq!(before, None);
    // Four workers of eight slots each, each with a pool of its own: 32 slots for a cap of 3.
    let mut workers = Vec::new();
    for _ in 0..4 {
        let own = sqlx::postgres::PgPoolOptions::new()
            .max_connections(3)
            .connect_with(pool.connect_options().as_ref().clone())
            .await
            .unwrap();
        workers.push(
            Worker::start_with(
                (
                    queue_capped_chain_v1::deployment(),
                    queue_capped_map_v1::deployment(),
                ),
                worker_config(queue_capped_chain_v1::Queue::QueueCapped, &own).max_concurrent(8),
            )
            .await
            .unwrap(),
        );
    }
    let inputs: Vec<u32> = (0..20).collect();
    let chains = client
        .start_many(Start::flow::<queue_capped_chain_v1::Flow>(), &inputs, &[])
        .await
        .unwrap();
    let maps = client
        .start_many(
            Start::flow::<queue_capped_map_v1::Flow>(),
            &inputs[..10],
            &[],
        )
        .await
        .unwrap();
    for (run, input) in chains.iter().zip(&inputs) {
        let output = run.wait(&client, Duration::from_secs(60)).await.unwrap();
        assert_eq!(output.second, (input + 1) * 2);
    }
    for (run, input) in maps.iter().zip(&inputs) {
        let output = run.wait(&client, Duration::from_secs(60)).await.unwrap();
        assert_eq!(output.each, vec![*input; 4]);
    }
    let most = MOST.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} tasks of a queue capped at 3 ran at once");
    assert_eq!(most, 3, "the cap is used, not only kept");
    for worker in workers {
        worker.shutdown();
    }
}

/// One step, run by hand in the test.
#[pgflow::flow(slug = "queue_capped_by_hand_v1", input = u32)]
pub mod queue_capped_by_hand_v1 {
    #[step(queue = "queue_capped_by_hand")]
    pub async fn only(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

#[sqlx::test(migrations = false)]
async fn a_cap_counts_what_runs_when_it_is_set_and_each_claim_path_keeps_it(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let deployment = queue_capped_by_hand_v1::deployment();
    client.deploy(&deployment).await.unwrap();
    let inputs: Vec<u32> = (0..8).collect();
    client
        .start_many(Start::flow::<queue_capped_by_hand_v1::Flow>(), &inputs, &[])
        .await
        .unwrap();
    let queue = QueueName::new("queue_capped_by_hand").unwrap();
    let pairs = SupportedPairs::routed_to(deployment.definition(), &queue);
    let worker = Uuid::new_v4();
    let claim = |n: i32| {
        let (pool, queue, pairs) = (pool.clone(), queue.clone(), pairs.clone());
        async move {
            engine::read_and_start_tasks(&pool, &queue, worker, &pairs, n)
                .await
                .unwrap()
                .tasks
        }
    };

    let running = claim(2).await;
    assert_eq!(running.len(), 2);
    // The two running count against a cap set now.
    engine::set_queue_concurrency(&pool, "queue_capped_by_hand", Some(3))
        .await
        .unwrap();
    // (A claim of one finds that room: the two running are given slots first.)
    let third = claim(1).await;
    assert_eq!(third.len(), 1, "room for one more");
    assert!(claim(10).await.is_empty(), "the cap is full");
    // A worker that reads messages itself claims only what fits, and the rest stay queued.
    let read: Vec<i64> =
        sqlx::query_scalar("select msg_id from pgmq.read('queue_capped_by_hand', 0, 10)")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(read.len(), 5);
    let own = engine::start_tasks(&pool, &queue, &read, worker, &pairs)
        .await
        .unwrap();
    assert!(own.tasks.is_empty(), "start_tasks keeps the cap too");
    // A completion frees its slot.
    engine::complete_tasks(
        &pool,
        &[TaskCompletion::of(&running[0], serde_json::json!(0))],
    )
    .await
    .unwrap();
    let own = engine::start_tasks(&pool, &queue, &read, worker, &pairs)
        .await
        .unwrap();
    assert_eq!(own.tasks.len(), 1, "one of the read messages fits now");
    assert!(claim(10).await.is_empty());
    // A raised cap makes room at once.
    let before = engine::set_queue_concurrency(&pool, "queue_capped_by_hand", Some(5))
        .await
        .unwrap();
    assert_eq!(before, Some(3));
    let raised = claim(10).await;
    assert_eq!(raised.len(), 2);
    // Lowered to 2 with 5 running: nothing more until only one runs.
    engine::set_queue_concurrency(&pool, "queue_capped_by_hand", Some(2))
        .await
        .unwrap();
    assert!(claim(10).await.is_empty(), "5 run, over the lowered cap");
    let still: Vec<_> = [&running[1], &third[0], &own.tasks[0], &raised[0]]
        .into_iter()
        .map(|task| TaskCompletion::of(task, serde_json::json!(0)))
        .collect();
    engine::complete_tasks(&pool, &still).await.unwrap();
    let last = claim(10).await;
    assert_eq!(last.len(), 1, "one runs: room for one more");
    // A task whose run is cancelled while it runs keeps its slot until its handler has been
    // told (its worker beats) or its timeout passed.
    client
        .cancel(last[0].run_id, Some("by hand"))
        .await
        .unwrap();
    assert!(
        claim(10).await.is_empty(),
        "the cancelled task's handler may still run"
    );
    // A lifted cap lets the rest through.
    engine::set_queue_concurrency(&pool, "queue_capped_by_hand", None)
        .await
        .unwrap();
    assert_eq!(claim(10).await.len(), 1, "the last one, without a cap");

    // A queue no flow routes to, and a cap out of range, are refused.
    assert!(matches!(
        engine::set_queue_concurrency(&pool, "no_such_queue", Some(2)).await,
        Err(EngineError::UnknownQueue { .. })
    ));
    assert!(matches!(
        engine::set_queue_concurrency(&pool, "queue_capped_by_hand", Some(0)).await,
        Err(EngineError::InvalidArguments(_))
    ));
}
