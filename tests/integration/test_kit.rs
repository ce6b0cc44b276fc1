//! The test kit for users' flows (`pgflow::testing`): each test gets its own database from
//! the kit, and time that would take hours passes at once on the test clock, through the same
//! SQL as production. The retry an hour away, the delayed start, the cron schedule and the
//! stalled task each finish in well under a second of wall time (printed; bounded loosely
//! here, since any real wait would take an hour).

use std::time::{Duration, Instant};

use pgflow::testing::{Fault, NoOutput, TestEnv, TestError};
use pgflow::{ProcessConfig, RunStatus, Schedule, Start, StartOptions};
use sqlx::PgPool;

use crate::support::install;

/// Far below the hour each test's engine time spans, far above any wall time the kit needs.
const WALL_BOUND: Duration = Duration::from_secs(10);

#[pgflow::flow(slug = "charge_kit_v1", input = u32)]
pub mod charge_kit_v1 {
    #[step(max_attempts = 3, base_delay = "1h")]
    pub async fn charge(input: u32) -> Result<u32, String> {
        Ok(input * 100)
    }

    #[step(depends_on = [charge], timeout = 60)]
    pub async fn receipt(charge: u32) -> Result<String, String> {
        Ok(format!("charged {charge}"))
    }
}

#[pgflow::flow(slug = "waits_kit_v1", input = u32)]
pub mod waits_kit_v1 {
    #[step(signal = approved)]
    pub async fn approve(input: u32, approved: bool) -> Result<bool, String> {
        Ok(approved && input > 0)
    }
}

#[pgflow::flow(slug = "deadline_kit_v1", input = u32)]
pub mod deadline_kit_v1 {
    #[step(signal = approved, wait_timeout = "3d", when_timed_out = skip)]
    pub async fn approve(input: u32, approved: bool) -> Result<bool, String> {
        Ok(approved && input > 0)
    }

    #[step(depends_on = [approve])]
    pub async fn decide(approve: Option<bool>) -> Result<String, String> {
        Ok(match approve {
            Some(true) => "approved".to_owned(),
            Some(false) => "refused".to_owned(),
            None => "no answer in time".to_owned(),
        })
    }
}

/// The recorded attempts of a step of a run that did not complete: (attempt, outcome, when it
/// ended on the engine's clock).
async fn attempts(
    env: &TestEnv,
    run_id: uuid::Uuid,
    step: &str,
) -> Vec<(i32, String, chrono::DateTime<chrono::Utc>)> {
    sqlx::query_as(
        "select attempt, outcome, ended_at from pgflow.task_attempts
         where run_id = $1 and step_slug = $2 order by attempt",
    )
    .bind(run_id)
    .bind(step)
    .fetch_all(env.client().pool())
    .await
    .unwrap()
}

/// When the latest attempt of a single step's task started, on the engine's clock.
async fn task_started_at(
    env: &TestEnv,
    run_id: uuid::Uuid,
    step: &str,
) -> chrono::DateTime<chrono::Utc> {
    sqlx::query_scalar(
        "select started_at from pgflow.step_tasks where run_id = $1 and step_slug = $2",
    )
    .bind(run_id)
    .bind(step)
    .fetch_one(env.client().pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn a_retry_an_hour_away_runs_at_once_on_the_test_clock_and_an_hour_later_on_the_engines() {
    let wall = Instant::now();
    let env = TestEnv::new().await.unwrap();
    env.start_workers(charge_kit_v1::deployment())
        .await
        .unwrap();
    env.faults()
        .fail::<charge_kit_v1::Flow>("charge", "card declined", 1)
        .unwrap();

    let run = charge_kit_v1::start(env.client(), &7).await.unwrap();
    let finished = env.run_to_end(&run).await.unwrap();

    assert_eq!(finished.status(), RunStatus::Completed);
    let output = finished.output().unwrap();
    assert_eq!((output.receipt.as_str(),), ("charged 700",));
    let charge = finished.step("charge").unwrap();
    assert_eq!(
        charge.max_attempt,
        Some(2),
        "one failed attempt, then the retry"
    );
    // (less the real time between the failure and the skip)
    assert!(
        finished.time_skipped() >= Duration::from_secs(3590),
        "the kit skipped the hour: {:?}",
        finished.time_skipped()
    );
    // On the engine's clock the retry came an hour after the failure, as in production.
    let failed = attempts(&env, run.run_id(), "charge").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!((failed[0].0, failed[0].1.as_str()), (1, "failed"));
    let retried_at = task_started_at(&env, run.run_id(), "charge").await;
    assert!(
        retried_at - failed[0].2 >= chrono::Duration::seconds(3600),
        "the retry at {retried_at} came an hour after the failure at {}",
        failed[0].2
    );
    assert!(env.now().await.unwrap() >= retried_at);
    assert_eq!(env.faults().pending(), 0);
    env.close().await.unwrap();
    let took = wall.elapsed();
    println!("an hour's retry delay, wall time with setup: {took:?}");
    assert!(took < WALL_BOUND, "{took:?}");
}

#[tokio::test]
async fn a_start_two_hours_ahead_waits_on_the_test_clock_and_begins_when_it_passes() {
    let env = TestEnv::new().await.unwrap();
    env.start_workers(charge_kit_v1::deployment())
        .await
        .unwrap();
    // The clock has already moved: the delay counts from the engine's time, not the machine's.
    env.advance(Duration::from_secs(86_400)).await.unwrap();
    let before = env.now().await.unwrap();
    let wall = Instant::now();
    let run = env
        .client()
        .start(
            Start::flow::<charge_kit_v1::Flow>(),
            &3,
            &StartOptions::new().start_after(Duration::from_secs(7200)),
        )
        .await
        .unwrap();
    let scheduled_for = run.run(env.client()).await.unwrap().scheduled_for.unwrap();
    assert!(
        scheduled_for >= before + chrono::Duration::seconds(7200),
        "{scheduled_for} is two hours after {before}"
    );

    // An hour on, nothing has run.
    env.advance(Duration::from_secs(3600)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let steps = run.steps(env.client()).await.unwrap();
    assert_eq!(steps[0].max_attempt.unwrap_or(0), 0, "{steps:?}");

    let finished = env.run_to_end(&run).await.unwrap();
    assert_eq!(finished.output().unwrap().receipt, "charged 300");
    let began = task_started_at(&env, run.run_id(), "charge").await;
    assert!(began >= scheduled_for, "began {began}, due {scheduled_for}");
    println!("a start two hours ahead, wall time: {:?}", wall.elapsed());
    assert!(wall.elapsed() < WALL_BOUND);
    env.close().await.unwrap();
}

#[tokio::test]
async fn a_cron_schedule_fires_once_for_each_hour_the_test_clock_passes() {
    let schedule = Schedule::new("hourly_charge", "charge_kit_v1", "0 0 * * * *").input(&1);
    let env = TestEnv::with_config(ProcessConfig::new().schedule(schedule))
        .await
        .unwrap();
    env.start_workers(charge_kit_v1::deployment())
        .await
        .unwrap();
    let wall = Instant::now();
    let runs = || async {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from pgflow.runs where flow_slug = 'charge_kit_v1'",
        )
        .fetch_one(env.client().pool())
        .await
        .unwrap()
    };
    assert_eq!(runs().await, 0);
    for hour in 1..=3 {
        env.advance(Duration::from_secs(3600)).await.unwrap();
        assert_eq!(runs().await, hour, "one run per hour passed");
    }
    println!("three hourly ticks, wall time: {:?}", wall.elapsed());
    assert!(wall.elapsed() < WALL_BOUND);
    env.close().await.unwrap();
}

#[tokio::test]
async fn a_stalled_task_is_recovered_once_the_clock_passes_its_timeout() {
    let env = TestEnv::new().await.unwrap();
    env.start_workers(charge_kit_v1::deployment())
        .await
        .unwrap();
    // The receipt's first attempt hangs, as on a worker that died holding it.
    env.faults()
        .hang::<charge_kit_v1::Flow>("receipt", 1)
        .unwrap();
    let wall = Instant::now();
    let run = charge_kit_v1::start(env.client(), &5).await.unwrap();
    let started = crate::support::eventually(10, async || {
        let steps = run.steps(env.client()).await.unwrap();
        steps[1].max_attempt == Some(1)
    })
    .await;
    assert!(started, "the receipt's first attempt started");
    // Not yet past its timeout (60 s) and the sweep's grace (30 s): nothing moves.
    env.advance(Duration::from_secs(60)).await.unwrap();
    assert_eq!(
        run.steps(env.client()).await.unwrap()[1].max_attempt,
        Some(1)
    );
    env.advance(Duration::from_secs(31)).await.unwrap();
    let finished = env.run_to_end(&run).await.unwrap();
    assert_eq!(finished.output().unwrap().receipt, "charged 500");
    assert_eq!(finished.step("receipt").unwrap().max_attempt, Some(2));
    let stalled = attempts(&env, run.run_id(), "receipt").await;
    assert_eq!(stalled.len(), 1, "{stalled:?}");
    assert_eq!((stalled[0].0, stalled[0].1.as_str()), (1, "stalled"));
    println!("a stalled task's recovery, wall time: {:?}", wall.elapsed());
    assert!(wall.elapsed() < WALL_BOUND);
    env.close().await.unwrap();
}

#[tokio::test]
async fn planned_panics_and_permanent_failures_fail_the_run_with_their_message() {
    let env = TestEnv::new().await.unwrap();
    env.start_workers(charge_kit_v1::deployment())
        .await
        .unwrap();
    env.faults()
        .panic::<charge_kit_v1::Flow>("charge", "gateway exploded", 3)
        .unwrap();
    let run = charge_kit_v1::start(env.client(), &1).await.unwrap();
    let finished = env.run_to_end(&run).await.unwrap();
    assert_eq!(finished.status(), RunStatus::Failed);
    assert_eq!(finished.step("charge").unwrap().max_attempt, Some(3));
    let message = finished.output().unwrap_err().to_string();
    assert!(message.contains("gateway exploded"), "{message}");
    assert!(
        finished.time_skipped() >= Duration::from_secs(3 * 3600 - 20),
        "1 h and 2 h of backoff: {:?}",
        finished.time_skipped()
    );

    env.faults()
        .plan::<charge_kit_v1::Flow>("charge", Fault::FailPermanently("no such card".into()), 1)
        .unwrap();
    let run = charge_kit_v1::start(env.client(), &2).await.unwrap();
    let finished = env.run_to_end(&run).await.unwrap();
    assert_eq!(finished.status(), RunStatus::Failed);
    assert_eq!(finished.step("charge").unwrap().max_attempt, Some(1));
    match finished.into_output() {
        Err(NoOutput::NotCompleted {
            failure: Some((step, error)),
            ..
        }) => {
            assert_eq!(step, "charge");
            assert!(error.contains("no such card"), "{error}");
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
    env.close().await.unwrap();
}

#[tokio::test]
async fn a_run_waiting_for_a_signal_is_stuck_until_the_test_sends_it() {
    let env = TestEnv::new().await.unwrap();
    env.start_workers(waits_kit_v1::deployment()).await.unwrap();
    let run = waits_kit_v1::start(env.client(), &4).await.unwrap();
    match env.run_to_end(&run).await {
        Err(TestError::Stuck { run_id, waiting }) => {
            assert_eq!(run_id, run.run_id());
            assert!(waiting.contains("approve"), "{waiting}");
        }
        other => panic!("expected Stuck, got {other:?}"),
    }
    env.client()
        .signal(run.run_id(), "approved", &true)
        .await
        .unwrap();
    let finished = env.run_to_end(&run).await.unwrap();
    assert!(finished.output().unwrap().approve);
    env.close().await.unwrap();
}

#[tokio::test]
async fn a_signal_not_sent_within_three_days_times_out_at_once_on_the_test_clock() {
    let env = TestEnv::new().await.unwrap();
    env.start_workers(deadline_kit_v1::deployment())
        .await
        .unwrap();
    let wall = Instant::now();
    let before = env.now().await.unwrap();
    let run = deadline_kit_v1::start(env.client(), &1).await.unwrap();
    let finished = env.run_to_end(&run).await.unwrap();
    assert_eq!(finished.output().unwrap().decide, "no answer in time");
    let approve = finished.step("approve").unwrap();
    assert_eq!(approve.skip_reason.as_deref(), Some("timed_out"));
    let ended = approve.ended_at.unwrap();
    assert!(
        ended - before >= chrono::Duration::days(3),
        "the wait ended three days on: {before} .. {ended}"
    );
    println!(
        "a three-day signal deadline, wall time: {:?}",
        wall.elapsed()
    );
    assert!(wall.elapsed() < WALL_BOUND);
    env.close().await.unwrap();
}

#[tokio::test]
async fn a_fault_for_a_step_the_flow_lacks_is_refused_naming_its_steps() {
    let env = TestEnv::new().await.unwrap();
    let refused = env
        .faults()
        .fail::<charge_kit_v1::Flow>("refund", "x", 1)
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "flow `charge_kit_v1` has no step `refund` (its steps: charge, receipt)"
    );
    assert_eq!(env.faults().pending(), 0);
    let name = env.database_name().to_owned();
    let server_url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let server = PgPool::connect(&server_url).await.unwrap();
    env.close().await.unwrap();
    let left: bool =
        sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
            .bind(&name)
            .fetch_one(&server)
            .await
            .unwrap();
    assert!(!left, "close drops the test database");
}

/// A test that fails before `close` (its `TestEnv` dropped in the unwinding) leaves no database
/// behind; a server that does not answer is named in the error.
#[tokio::test]
async fn a_dropped_env_drops_its_database_and_an_unreachable_server_is_named() {
    let server_url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let server = PgPool::connect(&server_url).await.unwrap();
    let env = TestEnv::new().await.unwrap();
    env.start_workers(charge_kit_v1::deployment())
        .await
        .unwrap();
    let name = env.database_name().to_owned();
    let exists = || async {
        sqlx::query_scalar::<_, bool>(
            "select exists (select 1 from pg_database where datname = $1)",
        )
        .bind(&name)
        .fetch_one(&server)
        .await
        .unwrap()
    };
    assert!(exists().await);
    drop(env);
    assert!(!exists().await, "dropping the env dropped {name}");

    let refused = TestEnv::on_server(
        "postgres://postgres@127.0.0.1:1/postgres",
        ProcessConfig::new(),
    )
    .await
    .unwrap_err();
    let message = refused.to_string();
    assert!(
        message.starts_with("could not create a test database on 127.0.0.1:1/postgres"),
        "{message}"
    );
}

/// The test clock lives only in the kit's databases: an install anywhere else has the plain
/// clock, `now()`, and no test schema.
#[sqlx::test(migrations = false)]
async fn outside_the_kit_the_engines_clock_is_the_servers(pool: PgPool) {
    install(&pool).await;
    let (body, test_schema): (String, bool) = sqlx::query_as(
        "select pg_get_functiondef('pgflow.clock()'::regprocedure),
                exists (select 1 from pg_namespace where nspname = 'pgflow_testing')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(body.contains("select now()"), "{body}");
    assert!(!body.contains("pgflow_testing"), "{body}");
    assert!(!test_schema);
    let (clock, now): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as("select pgflow.clock(), now()")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(clock, now);
}
