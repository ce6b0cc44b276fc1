//! Cancelling runs: a cancelled run starts no step and spends no attempt; its queued tasks never
//! reach a handler, a running handler's cancellation fires within heartbeats and its result is
//! discarded; ended runs are a no-op answer; bulk cancel by filter with a dry run; retention
//! knows the status.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pgflow::engine::{self, RunFilter, TaskCompletion, TaskFailure};
use pgflow::{Client, EngineError, RunError, RunStatus, Worker};
use pgflow::{Start, StartOptions};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{claim, eventually, install, queue, worker_config};

/// Handler calls of `waiting`, and how many of them saw their cancellation fire.
static WAITING_CALLS: AtomicUsize = AtomicUsize::new(0);
static WAITING_CANCELLED: AtomicUsize = AtomicUsize::new(0);
/// Handler calls of `after` (never, in a cancelled run).
static AFTER_CALLS: AtomicUsize = AtomicUsize::new(0);

#[pgflow::flow(slug = "cancellable_v1", input = u32)]
pub mod cancellable_v1 {
    use super::*;

    /// Waits for its cancellation (or a minute).
    #[step(queue = "cancel_wait", timeout = 120)]
    pub async fn waiting(input: u32, ctx: pgflow::Context) -> Result<u32, String> {
        WAITING_CALLS.fetch_add(1, Ordering::SeqCst);
        tokio::select! {
            () = ctx.cancellation().cancelled() => {
                WAITING_CANCELLED.fetch_add(1, Ordering::SeqCst);
                Err("cancelled".to_owned())
            }
            () = tokio::time::sleep(Duration::from_secs(60)) => Ok(input),
        }
    }

    #[step(depends_on = [waiting], queue = "cancel_wait")]
    pub async fn after(waiting: u32) -> Result<u32, String> {
        AFTER_CALLS.fetch_add(1, Ordering::SeqCst);
        Ok(waiting)
    }
}

#[pgflow::flow(slug = "quick_v1", alias = "quick", version = 1, input = u32)]
pub mod quick_v1 {
    #[step(queue = "cancel_quick", max_attempts = 3)]
    pub async fn only(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

async fn deployed(pool: &PgPool) -> Client {
    install(pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&cancellable_v1::deployment()).await.unwrap();
    client.deploy(&quick_v1::deployment()).await.unwrap();
    engine::activate_flow(pool, "quick_v1").await.unwrap();
    client
}

async fn statuses(pool: &PgPool, table: &str, run_id: Uuid) -> Vec<(String, String)> {
    sqlx::query_as(&format!(
        "select step_slug, status from pgflow.{table} where run_id = $1 order by step_slug"
    ))
    .bind(run_id)
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn queue_depth(pool: &PgPool, queue_name: &str) -> i64 {
    sqlx::query_scalar(&format!("select count(*) from pgmq.q_{queue_name}"))
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn cancelling_a_running_run_fires_the_handlers_cancellation_and_nothing_follows(
    pool: PgPool,
) {
    let client = deployed(&pool).await;
    let worker = Worker::start_with(
        cancellable_v1::deployment(),
        worker_config(cancellable_v1::Queue::CancelWait, &pool),
    )
    .await
    .unwrap();
    let calls_before = WAITING_CALLS.load(Ordering::SeqCst);
    let cancelled_before = WAITING_CANCELLED.load(Ordering::SeqCst);
    let run = cancellable_v1::start(&client, &7).await.unwrap();
    assert!(
        eventually(10, async || WAITING_CALLS.load(Ordering::SeqCst)
            > calls_before)
        .await,
        "the handler never started"
    );

    let outcome = run.cancel(&client, Some("customer asked")).await.unwrap();
    assert!(outcome.cancelled);
    assert_eq!(outcome.status, RunStatus::Cancelled);

    // The worker learns of it at a heartbeat (100 ms here) and fires the handler's token.
    assert!(
        eventually(5, async || WAITING_CANCELLED.load(Ordering::SeqCst)
            > cancelled_before)
        .await,
        "the handler's cancellation never fired"
    );
    match run.wait(&client, Duration::from_secs(5)).await {
        Err(RunError::Cancelled { run_id, reason }) => {
            assert_eq!(run_id, run.run_id());
            assert_eq!(reason.as_deref(), Some("customer asked"));
        }
        other => panic!("expected a cancelled run, got {other:?}"),
    }
    let stored = run.run(&client).await.unwrap();
    assert!(stored.cancelled_at.is_some());

    // Give the worker time to (wrongly) store a result or start `after`.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        statuses(&pool, "step_states", run.run_id()).await,
        vec![
            ("after".to_owned(), "cancelled".to_owned()),
            ("waiting".to_owned(), "cancelled".to_owned())
        ]
    );
    assert_eq!(
        statuses(&pool, "step_tasks", run.run_id()).await,
        vec![("waiting".to_owned(), "cancelled".to_owned())]
    );
    let attempts: i32 =
        sqlx::query_scalar("select attempts_count from pgflow.step_tasks where run_id = $1")
            .bind(run.run_id())
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(attempts, 1, "a cancelled run spends no further attempt");
    assert_eq!(AFTER_CALLS.load(Ordering::SeqCst), 0);

    // A second cancel answers that the run had already ended.
    let again = client.cancel(run.run_id(), None).await.unwrap();
    assert!(!again.cancelled);
    assert_eq!(again.status, RunStatus::Cancelled);

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn queued_tasks_of_a_cancelled_run_never_reach_a_handler(pool: PgPool) {
    let client = deployed(&pool).await;
    let runs = client
        .start_many(Start::flow::<quick_v1::Flow>(), &[1, 2, 3], &[])
        .await
        .unwrap();
    assert_eq!(queue_depth(&pool, "cancel_quick").await, 3);
    let ids: Vec<Uuid> = runs.iter().map(|r| r.run_id()).collect();
    let outcomes = engine::cancel_runs(&pool, &ids[..2], None).await.unwrap();
    assert!(outcomes.iter().all(|o| o.cancelled));
    // Their messages are archived: only the third run's is left.
    assert_eq!(queue_depth(&pool, "cancel_quick").await, 1);

    let worker = Worker::start_with(
        quick_v1::deployment(),
        worker_config(quick_v1::Queue::CancelQuick, &pool),
    )
    .await
    .unwrap();
    let third = runs[2]
        .wait(&client, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(third.only, 3);
    for run in &runs[..2] {
        assert_eq!(
            statuses(&pool, "step_tasks", run.run_id()).await,
            vec![("only".to_owned(), "cancelled".to_owned())]
        );
        let attempts: i32 =
            sqlx::query_scalar("select attempts_count from pgflow.step_tasks where run_id = $1")
                .bind(run.run_id())
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(attempts, 0, "no handler got a task of a cancelled run");
    }
    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_late_result_or_failure_of_a_cancelled_run_is_discarded(pool: PgPool) {
    let client = deployed(&pool).await;
    let definition = quick_v1::deployment();
    let pairs = engine::SupportedPairs::routed_to(definition.definition(), &queue("cancel_quick"));
    let runs = client
        .start_many(Start::flow::<quick_v1::Flow>(), &[1, 2], &[])
        .await
        .unwrap();
    let tasks = claim(&pool, &queue("cancel_quick"), &pairs).await;
    assert_eq!(tasks.len(), 2);
    let ids: Vec<Uuid> = runs.iter().map(|r| r.run_id()).collect();
    engine::cancel_runs(&pool, &ids, None).await.unwrap();

    let completed = engine::complete_tasks(&pool, &[TaskCompletion::of(&tasks[0], 1.into())])
        .await
        .unwrap();
    assert_eq!(completed, 0, "a result of a cancelled run is discarded");
    let outcomes = engine::fail_tasks(&pool, &[TaskFailure::of(&tasks[1], "boom")])
        .await
        .unwrap();
    assert!(outcomes.iter().all(|o| !o.will_retry), "{outcomes:?}");
    for run_id in ids {
        assert_eq!(
            statuses(&pool, "step_tasks", run_id).await,
            vec![("only".to_owned(), "cancelled".to_owned())]
        );
        assert_eq!(
            engine::run(&pool, run_id).await.unwrap().status,
            RunStatus::Cancelled
        );
    }
    assert_eq!(
        queue_depth(&pool, "cancel_quick").await,
        0,
        "no retry was queued"
    );
}

#[sqlx::test(migrations = false)]
async fn ended_runs_unknown_runs_and_bulk_cancels(pool: PgPool) {
    let client = deployed(&pool).await;
    let worker = Worker::start_with(
        quick_v1::deployment(),
        worker_config(quick_v1::Queue::CancelQuick, &pool),
    )
    .await
    .unwrap();
    let done = client
        .start(Start::named("quick"), &1, StartOptions::new())
        .await
        .unwrap();
    done.wait(&client, Duration::from_secs(20)).await.unwrap();
    worker.shutdown();
    worker.wait().await.unwrap();

    // An ended run is left as it is, and said so.
    let outcome = client.cancel(done.run_id(), None).await.unwrap();
    assert!(!outcome.cancelled);
    assert_eq!(outcome.status, RunStatus::Completed);
    // An unknown run is an error that names it.
    let unknown = Uuid::new_v4();
    match client.cancel(unknown, None).await {
        Err(EngineError::UnknownRun { run_id }) => assert_eq!(run_id, unknown),
        other => panic!("expected UnknownRun, got {other:?}"),
    }

    // Bulk: by alias, with a dry run first; another flow's runs are untouched.
    let bulk: Vec<Uuid> = client
        .start_many(Start::flow::<quick_v1::Flow>(), &[1, 2, 3], &[])
        .await
        .unwrap()
        .iter()
        .map(|h| h.run_id())
        .collect();
    let other = cancellable_v1::start(&client, &1).await.unwrap();
    let filter = RunFilter::all().flow("quick");
    // The dry run names the runs it would cancel, oldest first; the cancel names those it did.
    let mut would = engine::cancel_matching(&pool, &filter, None, true)
        .await
        .unwrap();
    would.sort();
    let mut expected = bulk.clone();
    expected.sort();
    assert_eq!(would, expected);
    let mut did = engine::cancel_matching(&pool, &filter, Some("bulk"), false)
        .await
        .unwrap();
    did.sort();
    assert_eq!(did, expected);
    assert_eq!(
        engine::cancel_matching(&pool, &filter, None, true)
            .await
            .unwrap(),
        Vec::<Uuid>::new()
    );
    assert_eq!(other.run(&client).await.unwrap().status, RunStatus::Started);
    // started_before leaves newer runs alone
    let old = RunFilter::all().started_before(chrono::Utc::now() - chrono::Duration::hours(1));
    assert!(
        engine::cancel_matching(&pool, &old, None, false)
            .await
            .unwrap()
            .is_empty()
    );

    // Retention prunes cancelled runs like other ended ones.
    let pruned = engine::prune(&pool, Duration::ZERO, 100).await.unwrap();
    assert_eq!(
        pruned.runs, 4,
        "the completed run and the three cancelled ones"
    );
}

#[sqlx::test(migrations = false)]
async fn a_cancel_waiting_on_a_run_a_worker_is_changing_still_cancels_it(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&cancellable_v1::deployment()).await.unwrap();
    let run = cancellable_v1::start(&client, &1).await.unwrap().run_id();

    // A transaction holds the run's row, as a worker's completion does while it counts a
    // step down, and commits a change to it while the cancel waits for it.
    let mut worker_tx = pool.begin().await.unwrap();
    sqlx::query("update pgflow.runs set remaining_steps = remaining_steps where run_id = $1")
        .bind(run)
        .execute(&mut *worker_tx)
        .await
        .unwrap();
    let cancel = tokio::spawn({
        let pool = pool.clone();
        async move { engine::cancel_runs(&pool, &[run], Some("late")).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!cancel.is_finished(), "the cancel waits for the run's lock");
    worker_tx.commit().await.unwrap();

    let answer = cancel.await.unwrap().unwrap();
    assert_eq!(answer.len(), 1);
    assert!(answer[0].cancelled, "the cancel did nothing: {answer:?}");
    assert_eq!(
        engine::run(&pool, run).await.unwrap().status,
        RunStatus::Cancelled
    );
}

/// Handlers of `draining_v1` started, and those whose cancellation fired.
static DRAINING_CALLS: AtomicUsize = AtomicUsize::new(0);
static DRAINING_CANCELLED: AtomicUsize = AtomicUsize::new(0);

#[pgflow::flow(slug = "draining_v1", input = u32)]
pub mod draining_v1 {
    use super::*;

    /// Waits for its cancellation (or a minute).
    #[step(timeout = 120)]
    pub async fn waiting(input: u32, ctx: pgflow::Context) -> Result<u32, String> {
        DRAINING_CALLS.fetch_add(1, Ordering::SeqCst);
        tokio::select! {
            () = ctx.cancellation().cancelled() => {
                DRAINING_CANCELLED.fetch_add(1, Ordering::SeqCst);
                Err("cancelled".to_owned())
            }
            () = tokio::time::sleep(Duration::from_secs(60)) => Ok(input),
        }
    }
}

#[sqlx::test(migrations = false)]
async fn a_run_cancelled_just_before_a_shutdown_does_not_hold_the_drain(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    // An hour between heartbeats: only the beat at the start of the drain can tell the worker.
    let worker = Worker::start_with(
        draining_v1::deployment(),
        worker_config(draining_v1::Queue::DrainingV1, &pool)
            .heartbeat_interval(Duration::from_secs(3600))
            .shutdown_grace(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    let run = draining_v1::start(&client, &1).await.unwrap();
    assert!(
        eventually(10, async || DRAINING_CALLS.load(Ordering::SeqCst) > 0).await,
        "the handler never started"
    );

    assert!(run.cancel(&client, None).await.unwrap().cancelled);
    let began = std::time::Instant::now();
    worker.shutdown();
    worker.wait().await.unwrap();
    let took = began.elapsed();

    assert_eq!(
        DRAINING_CANCELLED.load(Ordering::SeqCst),
        1,
        "the draining worker cancelled the handler of the cancelled run"
    );
    assert!(
        took < Duration::from_secs(10),
        "the drain waited {took:?} for a handler whose run was cancelled (grace 30 s)"
    );
    assert_eq!(
        statuses(&pool, "step_tasks", run.run_id()).await,
        vec![("waiting".to_owned(), "cancelled".to_owned())]
    );
}
