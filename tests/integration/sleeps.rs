//! Durable sleep: a step declared with `sleep = "3d"` sleeps that long once its dependencies are
//! done, and one declared with `sleep_until = dep.field` until the time it reads there. A
//! sleeping step is `waiting` with a wait of kind `sleep` whose deadline is its wake time; it
//! holds no task, message or worker slot, wakes on the database's clock whichever process
//! looks (late, at the next look, when none does), and ends with its run. A wake time that has
//! passed, or a missing one, starts the step at once; one that is no time fails the run, naming
//! the field.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use pgflow::definition::{FlowDefinition, StepSleep};
use pgflow::engine;
use pgflow::{Client, EngineError, Worker};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{
    eventually, flow, install, run, single, step_error, step_status, task_rows, worker_config,
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub user: String,
    /// When to follow up (none: at once).
    pub follow_up_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub user: String,
    pub follow_up_at: Option<DateTime<Utc>>,
}

/// A trial: a welcome a second after sign-up, and a follow-up at the time sign-up chose.
#[pgflow::flow(slug = "trial_v1", alias = "trial", input = Trial)]
pub mod trial_v1 {
    use super::*;

    #[step(queue = "sleeps_trial")]
    pub async fn signup(input: Trial) -> Result<Plan, String> {
        Ok(Plan {
            user: input.user,
            follow_up_at: input.follow_up_at,
        })
    }

    #[step(depends_on = [signup], sleep = 1, queue = "sleeps_trial")]
    pub async fn welcome(signup: Plan) -> Result<String, String> {
        Ok(format!("welcome, {}", signup.user))
    }

    #[step(depends_on = [signup], sleep_until = signup.follow_up_at, queue = "sleeps_trial")]
    pub async fn follow_up(signup: Plan) -> Result<String, String> {
        Ok(format!("how is it going, {}?", signup.user))
    }
}

/// A root step that sleeps: the run begins with a nap.
#[pgflow::flow(slug = "nap_v1", alias = "nap", input = u32)]
pub mod nap_v1 {
    #[step(sleep = 1, queue = "sleeps_nap")]
    pub async fn nap(input: u32) -> Result<u32, String> {
        Ok(input + 1)
    }
}

/// A wake time read from untyped JSON, which nothing checks before the run reads it.
#[pgflow::flow(slug = "loose_v1", alias = "loose", input = Value)]
pub mod loose_v1 {
    use super::*;

    #[step(queue = "sleeps_loose")]
    pub async fn plan(input: Value) -> Result<Value, String> {
        Ok(input)
    }

    #[step(depends_on = [plan], sleep_until = plan.at, queue = "sleeps_loose")]
    pub async fn act(plan: Value) -> Result<Value, String> {
        Ok(plan)
    }
}

async fn trial_worker(pool: &PgPool) -> pgflow::WorkerHandle {
    Worker::start_with(
        trial_v1::deployment(),
        worker_config(trial_v1::Queue::SleepsTrial, pool),
    )
    .await
    .unwrap()
}

/// The sleeps of a run: (step, wake time), in step order.
async fn sleeps(pool: &PgPool, run_id: Uuid) -> Vec<(String, DateTime<Utc>)> {
    sqlx::query_as(
        "select w.step_slug, w.deadline from pgflow.waits w
         where w.run_id = $1 and w.kind = 'sleep' and w.signal_name is null
         order by w.step_slug",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// When a step of a run started, and when a step of it completed.
async fn step_time(pool: &PgPool, run_id: Uuid, step: &str, column: &str) -> DateTime<Utc> {
    sqlx::query_scalar(&format!(
        "select {column} from pgflow.step_states where run_id = $1 and step_slug = $2"
    ))
    .bind(run_id)
    .bind(step)
    .fetch_one(pool)
    .await
    .unwrap()
}

fn trial(follow_up_at: Option<DateTime<Utc>>) -> Trial {
    Trial {
        user: "ana".to_owned(),
        follow_up_at,
    }
}

#[sqlx::test(migrations = false)]
async fn a_sleeping_step_holds_nothing_and_wakes_at_its_time(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = trial_worker(&pool).await;
    // In whole milliseconds: Postgres keeps microseconds, and chrono writes nanoseconds.
    let follow_up_at = (Utc::now() + chrono::Duration::seconds(3)).trunc_subsecs(3);
    let handle = trial_v1::start(&client, &trial(Some(follow_up_at)))
        .await
        .unwrap();
    let run_id = handle.run_id();

    let both_sleep = eventually(20, async || sleeps(&pool, run_id).await.len() == 2).await;
    assert!(
        both_sleep,
        "welcome and follow_up sleep once signup is done"
    );
    let signed_up = step_time(&pool, run_id, "signup", "completed_at").await;
    let sleeping = sleeps(&pool, run_id).await;
    // A fixed sleep counts from the moment the dependencies were done; a sleep until a time
    // wakes at that very time.
    assert_eq!(sleeping[0].0, "follow_up");
    assert_eq!(sleeping[0].1, follow_up_at);
    assert_eq!(sleeping[1].0, "welcome");
    assert_eq!(sleeping[1].1, signed_up + chrono::Duration::seconds(1));
    assert_eq!(step_status(&pool, run_id, "welcome").await, "waiting");
    assert_eq!(step_status(&pool, run_id, "follow_up").await, "waiting");
    // Sleeping holds no task and no message.
    let tasks = task_rows(&pool, run_id).await;
    assert_eq!(tasks.len(), 1, "only signup has a task: {tasks:?}");
    let queued: i64 = sqlx::query_scalar("select count(*) from pgmq.q_sleeps_trial")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(queued, 0, "no message waits on the queue");

    let output = handle.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.welcome, "welcome, ana");
    assert_eq!(output.follow_up, "how is it going, ana?");
    // Neither woke early, on the database's clock.
    let welcomed = step_time(&pool, run_id, "welcome", "started_at").await;
    assert!(
        welcomed >= signed_up + chrono::Duration::seconds(1),
        "{welcomed} {signed_up}"
    );
    let followed_up = step_time(&pool, run_id, "follow_up", "started_at").await;
    assert!(followed_up >= follow_up_at, "{followed_up} {follow_up_at}");
    assert!(
        sleeps(&pool, run_id).await.is_empty(),
        "woken sleeps leave no wait"
    );

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_wake_time_that_passed_or_is_missing_starts_the_step_at_once(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = trial_worker(&pool).await;
    for follow_up_at in [None, Some(Utc::now() - chrono::Duration::hours(1))] {
        let handle = trial_v1::start(&client, &trial(follow_up_at))
            .await
            .unwrap();
        let run_id = handle.run_id();
        handle.wait(&client, Duration::from_secs(20)).await.unwrap();
        // Started in the very write that completed its dependency: it never slept.
        assert_eq!(
            step_time(&pool, run_id, "follow_up", "started_at").await,
            step_time(&pool, run_id, "signup", "completed_at").await,
            "follow_up at {follow_up_at:?}"
        );
    }
    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_wake_time_that_is_no_time_fails_the_run_naming_the_field(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        loose_v1::deployment(),
        worker_config(loose_v1::Queue::SleepsLoose, &pool),
    )
    .await
    .unwrap();
    for (at, got) in [
        (json!("next tuesday"), "string"),
        (json!("2026-12-09T09:00:00"), "string"),
        (json!("2026-02-30T09:00:00Z"), "string"),
        (json!(1_765_000_000), "number"),
    ] {
        let handle = loose_v1::start(&client, &json!({ "at": at }))
            .await
            .unwrap();
        let run_id = handle.run_id();
        let failed = eventually(20, async || {
            run(&pool, run_id).await.status == pgflow::RunStatus::Failed
        })
        .await;
        assert!(failed, "a run whose wake time is {at} fails");
        let error = step_error(&pool, run_id, "act").await;
        assert!(
            error.contains("`plan.at`") && error.contains(&format!("got a {got} that is no time")),
            "{error}"
        );
    }
    // A well-formed time with its offset is one.
    let handle = loose_v1::start(&client, &json!({ "at": "2020-01-01T10:00:00.25+01:00" }))
        .await
        .unwrap();
    handle.wait(&client, Duration::from_secs(20)).await.unwrap();
    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn cancelling_a_sleeping_run_ends_its_sleep(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = trial_worker(&pool).await;
    let far = Utc::now() + chrono::Duration::days(3);
    let handle = trial_v1::start(&client, &trial(Some(far))).await.unwrap();
    let run_id = handle.run_id();
    let asleep = eventually(20, async || {
        step_status(&pool, run_id, "follow_up").await == "waiting"
    })
    .await;
    assert!(asleep);

    client.cancel(run_id, Some("trial ended")).await.unwrap();
    assert_eq!(step_status(&pool, run_id, "follow_up").await, "cancelled");
    assert!(
        sleeps(&pool, run_id).await.is_empty(),
        "the sleep ends with its run"
    );
    // Nothing wakes it later.
    let (expired, _): (i32, Option<DateTime<Utc>>) =
        sqlx::query_as("select * from pgflow.expire_waits()")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(expired, 0);
    assert_eq!(
        task_rows(&pool, run_id).await.len(),
        1,
        "follow_up never ran"
    );
    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_sleep_outlives_its_workers_and_wakes_when_a_process_looks(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    // A root step sleeps from the start, with no worker at all.
    client.deploy(&nap_v1::deployment()).await.unwrap();
    let handle = nap_v1::start(&client, &41).await.unwrap();
    let run_id = handle.run_id();
    assert_eq!(step_status(&pool, run_id, "nap").await, "waiting");
    let naps = sleeps(&pool, run_id).await;
    assert_eq!(naps.len(), 1);
    assert_eq!(
        naps[0].1,
        run(&pool, run_id).await.started_at + chrono::Duration::seconds(1)
    );

    // Past its wake time with no process looking: it still sleeps.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(step_status(&pool, run_id, "nap").await, "waiting");

    // The next process to run wakes it.
    let worker = Worker::start_with(
        nap_v1::deployment(),
        worker_config(nap_v1::Queue::SleepsNap, &pool),
    )
    .await
    .unwrap();
    let output = handle.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.nap, 42);
    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_step_sleeps_one_way_and_does_not_also_wait_for_a_signal(pool: PgPool) {
    install(&pool).await;
    let cases = [
        (
            single("a", &[])
                .sleeps(StepSleep::For(Duration::from_secs(5)))
                .waits_for(pgflow::definition::StepSignal::named("go")),
            "step `a` both sleeps and waits for signal `go`",
        ),
        (
            single("a", &[]).sleeps(StepSleep::Until(vec![
                "nowhere".to_owned(),
                "at".to_owned(),
            ])),
            "step `a`: sleep_until must be a path of field names whose first element is `input`",
        ),
        (
            single("a", &[]).sleeps(StepSleep::For(Duration::ZERO)),
            "step `a` option `sleep` must be a whole number of at least 1, got 0",
        ),
    ];
    for (step, expected) in cases {
        let definition = FlowDefinition::new(flow("bad")).step(step);
        match engine::compile_flow(&pool, &definition).await {
            Err(EngineError::InvalidDefinition { message }) => {
                assert!(
                    message.contains(expected),
                    "{message:?} should mention {expected:?}"
                )
            }
            other => panic!("expected InvalidDefinition ({expected}), got {other:?}"),
        }
    }
}

#[sqlx::test(migrations = false)]
async fn a_run_that_only_waits_is_shown_and_listed_as_waiting(pool: PgPool) {
    use pgflow_runtime::admin::browse::{self, RunListing};
    use pgflow_runtime::admin::inspect::{self, ShownState};

    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&nap_v1::deployment()).await.unwrap();
    client.deploy(&trial_v1::deployment()).await.unwrap();
    // No worker: the nap sleeps, and the trial's first step stays queued.
    let napping = nap_v1::start(&client, &1).await.unwrap().run_id();
    let queued = trial_v1::start(&client, &trial(None))
        .await
        .unwrap()
        .run_id();

    let shown = |run_id| {
        let pool = pool.clone();
        async move { engine::run(&pool, run_id).await.unwrap().shown_status() }
    };
    assert_eq!(shown(napping).await, "waiting");
    assert_eq!(shown(queued).await, "started");

    let listed = async |state| -> Vec<Uuid> {
        inspect::recent_runs(&pool, None, Some(state), 10)
            .await
            .unwrap()
            .into_iter()
            .map(|run| run.run_id)
            .collect()
    };
    assert_eq!(listed(ShownState::Waiting).await, vec![napping]);
    assert_eq!(listed(ShownState::Started).await, vec![queued]);

    let page = browse::list_runs(
        &pool,
        &RunListing {
            waiting: true,
            ..RunListing::default()
        },
    )
    .await
    .unwrap();
    let ids: Vec<(Uuid, &str)> = page
        .runs
        .iter()
        .map(|r| (r.run_id, r.shown_status()))
        .collect();
    assert_eq!(ids, vec![(napping, "waiting")]);

    // Once it ends, it is shown as it ended.
    client.cancel(napping, None).await.unwrap();
    assert_eq!(shown(napping).await, "cancelled");
    assert!(listed(ShownState::Waiting).await.is_empty());
}
