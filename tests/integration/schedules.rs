//! Delayed starts and cron schedules fired by workers: a delayed run exists at once and its
//! tasks wait for their time; a schedule declared by a worker fires each tick once; pausing
//! starts nothing and resuming does not catch up; missed ticks are skipped or caught up to the
//! bound; trigger, list and delete; bad definitions are refused.

use std::time::Duration;

use pgflow::Start;
use pgflow::engine;
use pgflow::{
    Client, EngineError, ProcessConfig, Schedule, StartOptions, Worker, WorkerConfig, WorkerError,
};
use sqlx::PgPool;

use crate::support::{eventually, install, run_count, worker_config};

#[pgflow::flow(slug = "ticking_v1", input = serde_json::Value)]
pub mod ticking_v1 {
    #[step(queue = "ticking")]
    pub async fn tick(input: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(input)
    }
}

async fn deployed(pool: &PgPool) -> Client {
    install(pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&ticking_v1::deployment()).await.unwrap();
    client
}

#[sqlx::test(migrations = false)]
async fn a_delayed_run_exists_at_once_and_its_tasks_wait_for_their_time(pool: PgPool) {
    let client = deployed(&pool).await;
    let worker = Worker::start_with(
        ticking_v1::deployment(),
        worker_config(ticking_v1::Queue::Ticking, &pool),
    )
    .await
    .unwrap();
    let before = chrono::Utc::now();
    let run = client
        .start(
            Start::flow::<ticking_v1::Flow>(),
            &serde_json::json!("later"),
            &StartOptions::new().start_after(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    let stored = run.run(&client).await.unwrap();
    let at = stored.scheduled_for.expect("scheduled_for");
    assert!(at >= before + chrono::Duration::seconds(2), "{at}");

    // Nothing runs before its time, though a worker is idle...
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let attempts: i32 =
        sqlx::query_scalar("select attempts_count from pgflow.step_tasks where run_id = $1")
            .bind(run.run_id())
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(attempts, 0, "the task ran before its time");
    // ...and it runs once its time came.
    let output = run.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(output.tick, serde_json::json!("later"));
    assert!(chrono::Utc::now() >= at);
    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_paused_schedule_starts_nothing_and_resuming_does_not_catch_up(pool: PgPool) {
    deployed(&pool).await;
    let schedule = Schedule::new("every_second", "ticking_v1", "* * * * * *")
        .input(&serde_json::json!({"from": "schedule"}))
        .catch_up(100);
    let worker = Worker::start_with(
        ticking_v1::deployment(),
        scheduling(&pool, ProcessConfig::new().schedule(schedule)),
    )
    .await
    .unwrap();
    assert!(eventually(10, async || run_count(&pool).await >= 2).await);
    // Each run records its tick, and carries the schedule's input.
    let (ticks, distinct): (i64, i64) = sqlx::query_as(
        "select count(*), count(distinct scheduled_for) from pgflow.runs
         where input = '{\"from\": \"schedule\"}'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(ticks, distinct);

    engine::pause_schedule(&pool, "every_second", true)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let paused_at = run_count(&pool).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        run_count(&pool).await,
        paused_at,
        "a paused schedule started runs"
    );

    let resumed_at = chrono::Utc::now();
    engine::pause_schedule(&pool, "every_second", false)
        .await
        .unwrap();
    assert!(eventually(5, async || run_count(&pool).await > paused_at).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let caught_up: i64 = sqlx::query_scalar(
        "select count(*) from pgflow.runs where scheduled_for < $1 - interval '1 second'
           and started_at > $1",
    )
    .bind(resumed_at)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(caught_up, 0, "ticks missed while paused were caught up");
    worker.shutdown();
    worker.wait().await.unwrap();
}

/// Declares `name` with `missed`, then winds it back as if no worker had run for 6 s.
async fn missed_six_seconds(pool: &PgPool, schedule: &Schedule) {
    engine::define_schedule(pool, schedule).await.unwrap();
    sqlx::query(
        "update pgflow.schedules set ticks_after = now() - interval '6.5 seconds',
                next_fire_at = now() - interval '5.5 seconds' where schedule_name = $1",
    )
    .bind(schedule.name())
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrations = false)]
async fn missed_ticks_are_caught_up_to_the_bound_or_skipped(pool: PgPool) {
    deployed(&pool).await;
    let catching = Schedule::new("catching", "ticking_v1", "* * * * * *")
        .input(&"catching")
        .catch_up(3)
        .grace(Duration::from_secs(1));
    let skipping = Schedule::new("skipping", "ticking_v1", "* * * * * *")
        .input(&"skipping")
        .grace(Duration::from_secs(1));
    missed_six_seconds(&pool, &catching).await;
    missed_six_seconds(&pool, &skipping).await;

    let worker = Worker::start_with(
        ticking_v1::deployment(),
        scheduling(&pool, ProcessConfig::new().fire_schedules(true)),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    worker.shutdown();
    worker.wait().await.unwrap();

    // A tick is missed when it is older than the grace at the moment the schedule fires. The
    // first firing (one transaction: its runs share `started_at`) starts the missed ticks it
    // keeps and the one on-time tick, the newest; so its missed ticks are its runs but the
    // newest. (Counting against a time taken before the worker started fails when its startup
    // is slow: the newest missed ticks move along with the firing.)
    let late = |input: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "with mine as (select * from pgflow.runs where input = to_jsonb($1::text)),
                      first_firing as (select * from mine
                                       where started_at = (select min(started_at) from mine))
                 select count(*) from first_firing
                 where scheduled_for < (select max(scheduled_for) from first_firing)",
            )
            .bind(input)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(
        late("catching").await,
        3,
        "catch_up(3) starts the newest three missed ticks"
    );
    assert_eq!(late("skipping").await, 0, "skip starts none of them");
}

#[sqlx::test(migrations = false)]
async fn trigger_list_delete_and_what_is_refused(pool: PgPool) {
    let client = deployed(&pool).await;
    let schedule = Schedule::new("nightly", "ticking_v1", "0 0 3 * * *")
        .time_zone("Europe/Paris")
        .input(&7);
    assert!(engine::define_schedule(&pool, &schedule).await.unwrap());
    assert!(
        !engine::define_schedule(&pool, &schedule).await.unwrap(),
        "unchanged"
    );

    let run = engine::trigger_schedule(&pool, "nightly").await.unwrap();
    assert_eq!(run.input, serde_json::json!(7));
    let listed = engine::schedule_list(&pool).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].runs_started, 1);
    assert_eq!(listed[0].time_zone, "Europe/Paris");

    // A schedule whose flow does not exist starts nothing and says why.
    let orphan = Schedule::new("orphan", "no_such_flow", "* * * * * *");
    engine::define_schedule(&pool, &orphan).await.unwrap();
    let worker = Worker::start_with(
        ticking_v1::deployment(),
        worker_config(ticking_v1::Queue::Ticking, &pool),
    )
    .await
    .unwrap();
    assert!(
        eventually(5, async || {
            engine::schedule_list(&pool)
                .await
                .unwrap()
                .iter()
                .any(|s| s.schedule_name == "orphan" && s.last_error.is_some())
        })
        .await
    );
    worker.shutdown();
    worker.wait().await.unwrap();

    engine::delete_schedule(&pool, "nightly").await.unwrap();
    assert!(matches!(
        engine::delete_schedule(&pool, "nightly").await,
        Err(EngineError::UnknownSchedule { .. })
    ));
    assert!(matches!(
        engine::trigger_schedule(&pool, "nightly").await,
        Err(EngineError::UnknownSchedule { .. })
    ));
    // The triggered run ran like any other.
    let triggered = pgflow::RunHandle::<serde_json::Value>::new(run.run_id);
    assert_eq!(
        triggered
            .wait(&client, Duration::from_secs(10))
            .await
            .unwrap(),
        serde_json::json!({"tick": 7})
    );

    // A bad cron expression stops the worker's start and names the schedule.
    let error = Worker::start_with(
        ticking_v1::deployment(),
        scheduling(
            &pool,
            ProcessConfig::new().schedule(Schedule::new("broken", "ticking_v1", "every minute")),
        ),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, WorkerError::InvalidSchedule(_)),
        "{error:?}"
    );
    assert!(error.to_string().contains("schedule `broken`"), "{error}");
}

/// A worker of `ticking_v1` on a client of its own with the process settings `process`.
fn scheduling(pool: &PgPool, process: ProcessConfig) -> WorkerConfig<ticking_v1::Queue> {
    worker_config(ticking_v1::Queue::Ticking, pool)
        .connection(Client::with_config(pool.clone(), process))
}
