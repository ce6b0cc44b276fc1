//! Wake-ups on request: transactions that make tasks visible notify a queue only while some
//! session requests it (a worker process with every worker of the queue idle), and a run whose
//! transaction missed a request that came just before its commit is still found.

use std::time::Duration;

use pgflow::definition::FlowDefinition;
use pgflow::engine::{self, RunStatus};
use pgflow::{Client, Worker, WorkerHandle};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use crate::support::{compiled, eventually, flow, install, queue, single, worker_config};

/// Starts a run of `quiet` and says whether its queue was notified within a second.
async fn start_notifies(pool: &PgPool, listener: &mut PgListener) -> bool {
    engine::start_flow(pool, "quiet", &json!(null))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(1), listener.recv())
        .await
        .is_ok()
}

/// Whether `count` sessions hold a request for wake-ups of `queue_name` within 5 seconds.
async fn requested_by(pool: &PgPool, queue_name: &str, count: i64) -> bool {
    eventually(5, async || requests(pool, queue_name).await == count).await
}

/// Sessions holding a request for wake-ups of `queue_name` (the shared advisory lock on the
/// queue's wake-up key).
async fn requests(pool: &PgPool, queue_name: &str) -> i64 {
    sqlx::query_scalar(
        "select count(*) from pg_locks
         where locktype = 'advisory' and mode = 'ShareLock' and granted
           and classid::integer = pgflow.lock_namespace()
           and objid::integer = pgflow.wakeup_key($1)
           and database = (select oid from pg_database where datname = current_database())",
    )
    .bind(queue_name)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = false)]
async fn starts_notify_a_queue_only_while_a_session_requests_wake_ups(pool: PgPool) {
    install(&pool).await;
    compiled(
        &pool,
        FlowDefinition::new(flow("quiet")).step(single("only", &[])),
    )
    .await;
    let mut listener = PgListener::connect_with(&pool).await.unwrap();
    listener.listen("pgflow.quiet").await.unwrap();
    let mut requester = pool.acquire().await.unwrap();
    let quiet = queue("quiet");

    assert!(
        !start_notifies(&pool, &mut listener).await,
        "nobody requested wake-ups: the start notifies nothing"
    );

    engine::request_wakeups(&mut *requester, &quiet)
        .await
        .unwrap();
    assert_eq!(requests(&pool, "quiet").await, 1);
    assert!(
        start_notifies(&pool, &mut listener).await,
        "a session requested wake-ups: the start notifies the queue"
    );

    let withdrawn = engine::withdraw_wakeups(&mut *requester, &quiet).await;
    assert!(withdrawn.unwrap());
    let again = engine::withdraw_wakeups(&mut *requester, &quiet).await;
    assert!(
        !again.unwrap(),
        "withdrawing twice finds nothing the second time"
    );
    assert!(
        !start_notifies(&pool, &mut listener).await,
        "the request was withdrawn"
    );

    // A request dies with its session.
    engine::request_wakeups(&mut *requester, &quiet)
        .await
        .unwrap();
    requester.close().await.unwrap();
    assert!(
        requested_by(&pool, "quiet", 0).await,
        "the closed session's request is gone"
    );
    assert!(
        !start_notifies(&pool, &mut listener).await,
        "the session that requested wake-ups is gone"
    );
}

#[pgflow::flow(slug = "dozing")]
pub mod dozing {
    #[step]
    pub async fn echo(input: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(input)
    }
}

/// A worker of `dozing` with an hour between polls (only a notification or a recheck wakes
/// it), once its process has requested wake-ups.
async fn idle_dozing_worker(pool: &PgPool) -> WorkerHandle {
    let worker = Worker::start_with(
        dozing::deployment(),
        worker_config(dozing::Queue::Dozing, pool).poll_interval(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    assert!(
        requested_by(pool, "dozing", 1).await,
        "the idle worker's process requests wake-ups"
    );
    worker
}

#[sqlx::test(migrations = false)]
async fn an_idle_worker_requests_wake_ups_and_a_stopped_one_leaves_none(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = idle_dozing_worker(&pool).await;

    let run = dozing::start(&client, &json!("ping")).await.unwrap();
    run.wait(&client, Duration::from_secs(5)).await.unwrap();
    assert!(
        requested_by(&pool, "dozing", 1).await,
        "idle again, the worker requests wake-ups again"
    );

    worker.shutdown();
    worker.wait().await.unwrap();
    assert!(
        requested_by(&pool, "dozing", 0).await,
        "a stopped worker leaves no request behind"
    );
}

#[sqlx::test(migrations = false)]
async fn a_run_committed_just_after_the_worker_went_idle_is_found_without_a_notification(
    pool: PgPool,
) {
    install(&pool).await;
    // Compiled before the worker starts, so the run can be started first.
    engine::compile_flow(&pool, dozing::deployment().definition())
        .await
        .unwrap();

    // The start looks for a request while there is none, and commits only after the worker's
    // process has made one (after its first, empty claim): it notifies nobody.
    let mut tx = pool.begin().await.unwrap();
    let run_id = engine::start_flow(&mut *tx, "dozing", &json!("late"))
        .await
        .unwrap()
        .run_id;
    let worker = idle_dozing_worker(&pool).await;
    tx.commit().await.unwrap();

    // An hour between polls: the run completes because a worker looked again after the request.
    assert!(
        eventually(5, async || {
            crate::support::run(&pool, run_id).await.status == RunStatus::Completed
        })
        .await,
        "the run was found by a look after the request, not by the hourly poll"
    );

    worker.shutdown();
    worker.wait().await.unwrap();
}
