//! Queue-centric workers against real Postgres: shared queues, per-queue concurrency,
//! unsupported-flow safety, coverage, timeouts, panics, drain, recovery and reconnects.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use pgflow::Start;
use pgflow::worker::{Connection, WorkerSettings};
use pgflow::{Client, EngineError, ProcessConfig, Worker, WorkerError};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{eventually, install, messages, worker_config, worker_stopped};

async fn completed_runs(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from pgflow.runs where status = 'completed'")
        .fetch_one(pool)
        .await
        .unwrap()
}

// ---------------------------------------------------------------- shared queue, two flows

#[pgflow::flow(slug = "shared_v1", alias = "shared", version = 1)]
pub mod shared_v1 {
    #[step(queue = "shared_work")]
    pub async fn work(input: serde_json::Value) -> Result<String, String> {
        Ok(format!("v1:{input}"))
    }
}

#[pgflow::flow(slug = "shared_v2", alias = "shared", version = 2)]
pub mod shared_v2 {
    #[step(queue = "shared_work")]
    pub async fn work(input: serde_json::Value) -> Result<String, String> {
        Ok(format!("v2:{input}"))
    }

    #[step(depends_on = [work], queue = "shared_after")]
    pub async fn after(work: String) -> Result<String, String> {
        Ok(work.to_uppercase())
    }
}

#[sqlx::test(migrations = false)]
async fn one_worker_serves_two_concrete_flows_on_a_shared_queue(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        (shared_v1::deployment(), shared_v2::deployment()),
        worker_config(shared_v2::Queue::SharedWork, &pool),
    )
    .await
    .unwrap();
    let after = Worker::start_with(
        shared_v2::deployment(),
        worker_config(shared_v2::Queue::SharedAfter, &pool),
    )
    .await
    .unwrap();

    let one = shared_v1::start(&client, &json!(1)).await.unwrap();
    let two = shared_v2::start(&client, &json!(2)).await.unwrap();
    let one = one.wait(&client, Duration::from_secs(10)).await.unwrap();
    let two = two.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(one.work, "v1:1");
    assert_eq!(two.after, "V2:2");

    let row: (String, Vec<String>) =
        sqlx::query_as("select queue_name, flow_slugs from pgflow.workers where worker_id = $1")
            .bind(worker.worker_id())
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        row,
        (
            "shared_work".into(),
            vec!["shared_v1".into(), "shared_v2".into()]
        )
    );

    worker.shutdown();
    after.shutdown();
    worker.wait().await.unwrap();
    after.wait().await.unwrap();
}

// ------------------------------------------------- steps on two queues, two concurrencies

static SLOW_RUNNING: AtomicUsize = AtomicUsize::new(0);
static SLOW_OVERLAP: AtomicBool = AtomicBool::new(false);
static FAST_RUNNING: AtomicUsize = AtomicUsize::new(0);
static FAST_PEAK: AtomicUsize = AtomicUsize::new(0);

#[pgflow::flow(slug = "two_queues", input = Vec<u32>)]
pub mod two_queues {
    use super::*;

    #[step(map, queue = "serial_queue")]
    pub async fn serial(item: u32) -> Result<u32, String> {
        if SLOW_RUNNING.fetch_add(1, Ordering::SeqCst) > 0 {
            SLOW_OVERLAP.store(true, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        SLOW_RUNNING.fetch_sub(1, Ordering::SeqCst);
        Ok(item)
    }

    #[step(map = serial, queue = "parallel_queue")]
    pub async fn parallel(item: u32) -> Result<u32, String> {
        let now = FAST_RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
        FAST_PEAK.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(50)).await;
        FAST_RUNNING.fetch_sub(1, Ordering::SeqCst);
        Ok(item * 2)
    }
}

#[sqlx::test(migrations = false)]
async fn steps_on_two_queues_run_with_each_queues_concurrency(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let serial = Worker::start_with(
        two_queues::deployment(),
        worker_config(two_queues::Queue::SerialQueue, &pool).max_concurrent(1),
    )
    .await
    .unwrap();
    let parallel = Worker::start_with(
        two_queues::deployment(),
        worker_config(two_queues::Queue::ParallelQueue, &pool).max_concurrent(5),
    )
    .await
    .unwrap();

    let handles = client
        .start_many(
            Start::flow::<two_queues::Flow>(),
            &[(0..10).collect(), (10..20).collect()],
            &[],
        )
        .await
        .unwrap();
    for (i, handle) in handles.iter().enumerate() {
        let output = handle.wait(&client, Duration::from_secs(20)).await.unwrap();
        let expected: Vec<u32> = (i as u32 * 10..i as u32 * 10 + 10).map(|n| n * 2).collect();
        assert_eq!(output.parallel, expected);
    }
    assert!(
        !SLOW_OVERLAP.load(Ordering::SeqCst),
        "max_concurrent = 1 was exceeded"
    );
    let peak = FAST_PEAK.load(Ordering::SeqCst);
    assert!(
        (2..=5).contains(&peak),
        "the parallel queue ran {peak} handlers at once"
    );

    serial.shutdown();
    parallel.shutdown();
    serial.wait().await.unwrap();
    parallel.wait().await.unwrap();
}

// ------------------------------------------------------------- unsupported-flow race

#[sqlx::test(migrations = false)]
async fn a_worker_meeting_an_unsupported_flow_stops_without_touching_it(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&shared_v2::deployment()).await.unwrap();
    // Only v1 on the shared queue: coverage passes (nothing of v2 is waiting yet).
    let wrong = Worker::start_with(
        shared_v1::deployment(),
        worker_config(shared_v1::Queue::SharedWork, &pool),
    )
    .await
    .unwrap();

    // Then a v2 run puts a task on the shared queue.
    let run = shared_v2::start(&client, &json!("late")).await.unwrap();
    let error = tokio::time::timeout(Duration::from_secs(10), wrong.wait())
        .await
        .expect("the worker stops")
        .unwrap_err();
    match &error {
        WorkerError::UnsupportedTasks(EngineError::UnsupportedTasks {
            queue_name,
            unsupported,
            ..
        }) => {
            assert_eq!(queue_name, "shared_work");
            assert_eq!(unsupported[0].flow_slug, "shared_v2");
            assert_eq!(unsupported[0].step_slug, "work");
        }
        other => panic!("expected UnsupportedTasks, got {other:?}"),
    }
    // Untouched: queued, no attempt, message visible and never counted as read.
    let task: (String, i32) =
        sqlx::query_as("select status, attempts_count from pgflow.step_tasks")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(task, ("queued".into(), 0));
    assert_eq!(messages(&pool, "shared_work").await, vec![(1, 0, true)]);
    let stopped: bool = sqlx::query_scalar("select stopped_at is not null from pgflow.workers")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(stopped);

    // A correctly configured worker completes the run; the attempt count was never touched.
    let right = Worker::start_with(
        (shared_v1::deployment(), shared_v2::deployment()),
        worker_config(shared_v2::Queue::SharedWork, &pool),
    )
    .await
    .unwrap();
    let after = Worker::start_with(
        shared_v2::deployment(),
        worker_config(shared_v2::Queue::SharedAfter, &pool),
    )
    .await
    .unwrap();
    let output = run.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(output.after, "V2:\"LATE\"");
    let attempts: i32 =
        sqlx::query_scalar("select attempts_count from pgflow.step_tasks where step_slug = 'work'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(attempts, 1);
    right.shutdown();
    after.shutdown();
    right.wait().await.unwrap();
    after.wait().await.unwrap();
}

// ------------------------------------------------------------------- startup coverage

#[sqlx::test(migrations = false)]
async fn startup_fails_when_the_registry_misses_pairs_with_work_waiting(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&shared_v1::deployment()).await.unwrap();
    client.deploy(&shared_v2::deployment()).await.unwrap();
    shared_v1::start(&client, &json!(1)).await.unwrap();
    shared_v1::start(&client, &json!(2)).await.unwrap();
    shared_v2::start(&client, &json!(3)).await.unwrap();

    let error = Worker::start_with(
        shared_v2::deployment(),
        worker_config(shared_v2::Queue::SharedWork, &pool),
    )
    .await
    .unwrap_err();
    match &error {
        WorkerError::Coverage { queue_name, gaps } => {
            assert_eq!(queue_name, "shared_work");
            let pairs: Vec<(&str, &str, i64, i64)> = gaps
                .iter()
                .map(|g| {
                    (
                        g.flow_slug.as_str(),
                        g.step_slug.as_str(),
                        g.queued_tasks,
                        g.started_runs,
                    )
                })
                .collect();
            assert_eq!(pairs, vec![("shared_v1", "work", 2, 2)]);
        }
        other => panic!("expected a coverage error, got {other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.contains("shared_v1.work (2 queued tasks, 2 started runs)"),
        "{text}"
    );
    assert!(text.contains("pgflow drain-status"), "{text}");
    let workers: i64 = sqlx::query_scalar("select count(*) from pgflow.workers")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(workers, 0, "a worker that fails startup never registers");
}

#[sqlx::test(migrations = false)]
async fn a_coverage_gap_of_an_active_target_names_its_alias_and_the_repair(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&shared_v1::deployment()).await.unwrap();
    client.deploy(&shared_v2::deployment()).await.unwrap();
    pgflow::engine::set_alias(&pool, "shared", "shared_v2")
        .await
        .unwrap();

    // v2 is the alias's active target and routes `work` here; this worker carries only v1.
    let error = Worker::start_with(
        shared_v1::deployment(),
        worker_config(shared_v1::Queue::SharedWork, &pool),
    )
    .await
    .unwrap_err();
    let WorkerError::Coverage { gaps, .. } = &error else {
        panic!("expected a coverage error, got {error:?}");
    };
    assert_eq!(gaps.len(), 1);
    assert_eq!(gaps[0].active_alias.as_deref(), Some("shared"));
    let text = error.to_string();
    assert!(
        text.contains("shared_v2.work (active target of alias `shared`)"),
        "{text}"
    );
    assert!(text.contains("pgflow alias set shared <flow>"), "{text}");
    assert!(
        !text.contains("drain-status"),
        "an active target never drains: {text}"
    );
}

#[sqlx::test(migrations = false)]
async fn startup_rejects_duplicate_concrete_slugs(pool: PgPool) {
    install(&pool).await;
    // Both positions match the queue's flow, so the position is named explicitly.
    let error = Worker::start_with::<_, _, pgflow::worker::at::P0>(
        (shared_v1::deployment(), shared_v1::deployment()),
        worker_config(shared_v1::Queue::SharedWork, &pool),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error, WorkerError::DuplicateFlow { flow_slug } if flow_slug == "shared_v1"),
        "{error:?}"
    );
}

// ---------------------------------------------------------- the simple form, Worker::start

#[pgflow::flow(slug = "simple")]
pub mod simple {
    use super::*;

    #[step]
    pub async fn only(input: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(json!({ "echo": input }))
    }
}

#[sqlx::test(migrations = false)]
async fn the_simple_form_polls_the_flows_default_queue(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let settings = WorkerSettings {
        connection: Connection::Pool(pool.clone().into()),
        poll_interval: Duration::from_millis(100),
        ..WorkerSettings::default()
    };
    let worker = Worker::start_with_settings(simple::deployment(), settings)
        .await
        .unwrap();
    assert_eq!(worker.queue().as_str(), "simple");
    let output = simple::start(&client, &json!(5))
        .await
        .unwrap()
        .wait(&client, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(output.only, json!({"echo": 5}));
    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn the_simple_form_refuses_a_flow_with_nothing_on_its_default_queue(pool: PgPool) {
    install(&pool).await;
    let settings = WorkerSettings {
        connection: Connection::Pool(pool.clone().into()),
        ..WorkerSettings::default()
    };
    let error = Worker::start_with_settings(shared_v1::deployment(), settings)
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("routes no step to its default queue `shared_v1`")
            && text.contains("shared_work")
            && text.contains("explicit queue"),
        "{text}"
    );
}

// ------------------------------------------------------------------ timeout and panic

static TIMEOUT_CANCELLED: AtomicBool = AtomicBool::new(false);

#[pgflow::flow(slug = "misbehaving", max_attempts = 2, base_delay = 0)]
pub mod misbehaving {
    use super::*;

    #[step(timeout = 1)]
    pub async fn sleepy(ctx: pgflow::Context) -> Result<u32, String> {
        if ctx.attempt() == 1 {
            tokio::select! {
                () = ctx.cancellation().cancelled() => TIMEOUT_CANCELLED.store(true, Ordering::SeqCst),
                () = tokio::time::sleep(Duration::from_secs(30)) => {}
            }
            return Ok(0);
        }
        Ok(1)
    }

    #[step]
    pub async fn panicky(ctx: pgflow::Context) -> Result<u32, String> {
        if ctx.attempt() == 1 {
            panic!("boom on the first attempt");
        }
        Ok(2)
    }
}

#[sqlx::test(migrations = false)]
async fn timeouts_and_panics_fail_the_attempt_and_the_worker_lives_on(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        misbehaving::deployment(),
        worker_config(misbehaving::Queue::Misbehaving, &pool),
    )
    .await
    .unwrap();
    let output = misbehaving::start(&client, &json!(null))
        .await
        .unwrap()
        .wait(&client, Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!((output.sleepy, output.panicky), (1, 2));
    assert!(
        TIMEOUT_CANCELLED.load(Ordering::SeqCst),
        "the cancellation token fired"
    );
    let errors: Vec<(String, i32, String)> = sqlx::query_as(
        "select step_slug, attempts_count, error_message from pgflow.step_tasks order by step_slug",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(errors[0].0, "panicky");
    assert_eq!(errors[0].1, 2);
    assert_eq!(
        errors[0].2,
        "step `panicky` panicked: boom on the first attempt"
    );
    assert_eq!(errors[1].0, "sleepy");
    assert_eq!(errors[1].1, 2);
    assert_eq!(errors[1].2, "step `sleepy` timed out after 1 s");
    assert!(!worker.is_finished(), "the worker survived");
    worker.shutdown();
    worker.wait().await.unwrap();
}

// ---------------------------------------------------------- drain on deprecation

static DRAIN_STARTED: AtomicBool = AtomicBool::new(false);

#[pgflow::flow(slug = "draining")]
pub mod draining {
    use super::*;

    #[step]
    pub async fn long() -> Result<String, String> {
        DRAIN_STARTED.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(700)).await;
        Ok("finished".to_owned())
    }
}

#[sqlx::test(migrations = false)]
async fn a_deprecated_worker_finishes_in_flight_tasks_then_stops(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        draining::deployment(),
        worker_config(draining::Queue::Draining, &pool).function_name("drain_fn"),
    )
    .await
    .unwrap();
    let run = draining::start(&client, &json!(null)).await.unwrap();
    assert!(eventually(5, async || DRAIN_STARTED.load(Ordering::SeqCst)).await);

    let asked = pgflow::engine::deprecate_workers(&pool, "drain_fn")
        .await
        .unwrap();
    assert_eq!(asked, 1);
    tokio::time::timeout(Duration::from_secs(10), worker.wait())
        .await
        .expect("the worker stops")
        .unwrap();
    // The in-flight task was finished and stored before the worker stopped.
    let run = run.run(&client).await.unwrap();
    assert_eq!(run.status, pgflow::RunStatus::Completed);
    let stopped: bool = sqlx::query_scalar("select stopped_at is not null from pgflow.workers")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(stopped);
    // A second run is not picked up by the stopped worker.
    draining::start(&client, &json!(null)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(completed_runs(&pool).await, 1);
}

// ------------------------------------------------ a killed worker's task is recovered

static KILL_CALLS: AtomicUsize = AtomicUsize::new(0);
static KILL_FINISHED: AtomicUsize = AtomicUsize::new(0);

#[pgflow::flow(slug = "killed")]
pub mod killed {
    use super::*;

    #[step(timeout = 1)]
    pub async fn work(ctx: pgflow::Context) -> Result<u32, String> {
        KILL_CALLS.fetch_add(1, Ordering::SeqCst);
        if ctx.attempt() == 1 {
            // Killed mid-task: never finishes.
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        KILL_FINISHED.fetch_add(1, Ordering::SeqCst);
        Ok(7)
    }
}

#[sqlx::test(migrations = false)]
async fn a_task_of_a_killed_worker_is_recovered_and_completed_once(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let first = Worker::start_with(
        killed::deployment(),
        worker_config(killed::Queue::Killed, &pool),
    )
    .await
    .unwrap();
    let run = killed::start(&client, &json!(null)).await.unwrap();
    assert!(eventually(5, async || KILL_CALLS.load(Ordering::SeqCst) == 1).await);
    first.stop_now();
    let _ = first.wait().await;
    let status: String = sqlx::query_scalar("select status from pgflow.step_tasks")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status, "started", "the killed worker stored nothing");

    let second = Worker::start_with(
        killed::deployment(),
        worker_config(killed::Queue::Killed, &pool).connection(Client::with_config(
            pool.clone(),
            ProcessConfig::new()
                .stalled_grace(Duration::ZERO)
                .stalled_check_interval(Duration::from_millis(100)),
        )),
    )
    .await
    .unwrap();
    let output = run.wait(&client, Duration::from_secs(15)).await.unwrap();
    assert_eq!(output.work, 7);
    assert_eq!(
        KILL_FINISHED.load(Ordering::SeqCst),
        1,
        "completed exactly once"
    );
    let (attempts, requeues): (i32, i32) =
        sqlx::query_as("select attempts_count, requeue_count from pgflow.step_tasks")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((attempts, requeues), (2, 1));
    second.shutdown();
    second.wait().await.unwrap();
}

// ------------------------------------------------------------------- reconnect

#[pgflow::flow(slug = "reconnecting", input = u32)]
pub mod reconnecting {
    #[step]
    pub async fn echo(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

#[sqlx::test(migrations = false)]
async fn a_worker_carries_on_after_its_connections_are_cut(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker_pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(3)
        .connect_with((*pool.connect_options()).clone().application_name("cut_me"))
        .await
        .unwrap();
    let worker = Worker::start_with(
        reconnecting::deployment(),
        worker_config(reconnecting::Queue::Reconnecting, &worker_pool),
    )
    .await
    .unwrap();
    let first = reconnecting::start(&client, &1).await.unwrap();
    assert_eq!(
        first
            .wait(&client, Duration::from_secs(10))
            .await
            .unwrap()
            .echo,
        1
    );

    let cut: i64 = sqlx::query_scalar(
        "select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity
         where application_name = 'cut_me') t",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(cut >= 1, "the worker's connections were cut");

    let second = reconnecting::start(&client, &2).await.unwrap();
    assert_eq!(
        second
            .wait(&client, Duration::from_secs(15))
            .await
            .unwrap()
            .echo,
        2
    );
    worker.shutdown();
    worker.wait().await.unwrap();
}

// ------------------------------------------------- wake-ups: one idle worker per notification

#[pgflow::flow(slug = "woken")]
pub mod woken {
    use super::*;

    #[step]
    pub async fn nap(input: serde_json::Value) -> Result<serde_json::Value, String> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(input)
    }
}

#[sqlx::test(migrations = false)]
async fn notifications_alone_wake_idle_workers_and_a_burst_reaches_each_of_them(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker_pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(10)
        .connect_with(
            (*pool.connect_options())
                .clone()
                .application_name("woken_workers"),
        )
        .await
        .unwrap();
    // An hour between polls: only notifications (and each other) can wake these workers. They
    // share one client, and so one listener.
    let process = Client::new(worker_pool.clone());
    let mut workers = Vec::new();
    for _ in 0..3 {
        let settings = worker_config(woken::Queue::Woken, &worker_pool)
            .connection(&process)
            .poll_interval(Duration::from_secs(3600))
            .batch_size(2)
            .max_concurrent(2);
        workers.push(
            Worker::start_with(woken::deployment(), settings)
                .await
                .unwrap(),
        );
    }
    // Each worker makes its first, empty claim and goes idle.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Six runs in one call send one notification. It wakes one worker, whose claim comes back
    // full (two tasks, all its slots), so it wakes the next, and so on: all three take part.
    let inputs: Vec<serde_json::Value> = (0..6).map(|i| json!(i)).collect();
    pgflow::engine::start_concrete_flows(&pool, "woken", &inputs)
        .await
        .unwrap();
    assert!(
        eventually(5, async || completed_runs(&pool).await == 6).await,
        "a notification woke the idle workers"
    );
    let claimers: i64 =
        sqlx::query_scalar("select count(distinct last_worker_id) from pgflow.step_tasks")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        claimers, 3,
        "the burst reached every worker, one full claim at a time"
    );

    // The shared listener comes back after its connection is cut, and wakes the workers again.
    let cut: i64 = sqlx::query_scalar(
        "select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity
         where application_name = 'woken_workers'
           and (query ilike 'listen%' or query ilike '%_wakeups(%')) t",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(cut, 1, "one listener serves the three workers of the queue");
    let late = woken::start(&client, &json!(7)).await.unwrap();
    late.wait(&client, Duration::from_secs(15)).await.unwrap();

    for worker in workers {
        worker.shutdown();
        worker.wait().await.unwrap();
    }
}

// ------------------------------------------------------------------- SIGTERM drains

static SIGNAL_STARTED: AtomicBool = AtomicBool::new(false);

#[pgflow::flow(slug = "signalled")]
pub mod signalled {
    use super::*;

    #[step]
    pub async fn slow() -> Result<String, String> {
        SIGNAL_STARTED.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok("done".to_owned())
    }
}

#[sqlx::test(migrations = false)]
async fn sigterm_drains_the_worker(pool: PgPool) {
    install(&pool).await;
    // Install a SIGTERM handler for this process before anything sends one, so the signal can
    // never take the default action (ending the test binary).
    let mut own =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        signalled::deployment(),
        worker_config(signalled::Queue::Signalled, &pool),
    )
    .await
    .unwrap();
    let worker_id = worker.worker_id();
    let running = tokio::spawn(worker.run_until_signal());
    let run = signalled::start(&client, &json!(null)).await.unwrap();
    assert!(eventually(5, async || SIGNAL_STARTED.load(Ordering::SeqCst)).await);

    let status = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    own.recv().await;
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the worker stops after SIGTERM")
        .unwrap()
        .unwrap();
    // The in-flight task finished and was stored; the worker marked itself stopped.
    assert_eq!(
        run.run(&client).await.unwrap().status,
        pgflow::RunStatus::Completed
    );
    assert!(worker_stopped(&pool, worker_id).await);
}

// ------------------------------------------------------------------ stale messages

#[sqlx::test(migrations = false)]
async fn a_worker_removes_and_counts_messages_with_no_task(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        simple::deployment(),
        worker_config(simple::Queue::Simple, &pool),
    )
    .await
    .unwrap();
    for _ in 0..3 {
        sqlx::query("select pgmq.send('simple', '{\"forged\": true}')")
            .execute(&pool)
            .await
            .unwrap();
    }
    let output = simple::start(&client, &json!(1))
        .await
        .unwrap()
        .wait(&client, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(output.only, json!({"echo": 1}));
    assert!(
        eventually(5, async || worker.stale_messages_removed() == 3).await,
        "counted: {}",
        worker.stale_messages_removed()
    );
    assert!(messages(&pool, "simple").await.is_empty());
    worker.shutdown();
    worker.wait().await.unwrap();
}
