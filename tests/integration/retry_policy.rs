//! Retry policy: failures a handler marks permanent use no further attempts, a user's own
//! error type keeps being retried, and `max_delay` and `jitter` shape the backoff.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use pgflow::definition::{FlowDefinition, FlowOptions, StepOptions};
use pgflow::engine::{self, TaskFailure};
use pgflow::{Client, RunError, StepError, Worker};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{
    claim, compiled, flow, install, make_visible, pairs_for, single, worker_config,
};

/// The attempt history of a run's tasks: (attempt, outcome, error).
async fn attempt_history(pool: &PgPool, run_id: Uuid) -> Vec<(i32, String, String)> {
    sqlx::query_as(
        "select attempt, outcome, error_message from pgflow.task_attempts
         where run_id = $1 order by attempt",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn attempts_count(pool: &PgPool, run_id: Uuid) -> i32 {
    sqlx::query_scalar("select attempts_count from pgflow.step_tasks where run_id = $1")
        .bind(run_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

static CHARGE_CALLS: AtomicU32 = AtomicU32::new(0);

#[pgflow::flow(slug = "charge_v1", alias = "charge", input = String, max_attempts = 6, base_delay = 0)]
pub mod charge_v1 {
    use super::*;

    #[step(queue = "retry_policy_charge")]
    pub async fn charge(input: String) -> Result<u32, StepError> {
        CHARGE_CALLS.fetch_add(1, Ordering::SeqCst);
        match input.as_str() {
            "declined" => Err(StepError::permanent("card declined")),
            _ => {
                // Any std::error::Error converts with `?` and is retried.
                let cents: u32 = Err(std::io::Error::other("gateway timeout"))?;
                Ok(cents)
            }
        }
    }
}

#[sqlx::test(migrations = false)]
async fn a_permanent_failure_uses_one_attempt_and_an_ordinary_error_uses_them_all(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        charge_v1::deployment(),
        worker_config(charge_v1::Queue::RetryPolicyCharge, &pool),
    )
    .await
    .unwrap();

    let declined = charge_v1::start(&client, &"declined".to_owned())
        .await
        .unwrap();
    let error = declined
        .wait(&client, Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, RunError::Failed { .. }),
        "the run failed: {error}"
    );
    assert_eq!(
        CHARGE_CALLS.load(Ordering::SeqCst),
        1,
        "5 attempts were left"
    );
    assert_eq!(attempts_count(&pool, declined.run_id()).await, 1);
    assert_eq!(
        attempt_history(&pool, declined.run_id()).await,
        vec![(1, "permanent".to_owned(), "card declined".to_owned())]
    );

    let flaky = charge_v1::start(&client, &"flaky".to_owned())
        .await
        .unwrap();
    assert!(flaky.wait(&client, Duration::from_secs(20)).await.is_err());
    assert_eq!(CHARGE_CALLS.load(Ordering::SeqCst), 1 + 6);
    assert_eq!(attempts_count(&pool, flaky.run_id()).await, 6);
    let history = attempt_history(&pool, flaky.run_id()).await;
    assert_eq!(history.len(), 6);
    assert!(
        history
            .iter()
            .all(|(_, outcome, error)| outcome == "failed" && error == "gateway timeout"),
        "{history:?}"
    );

    worker.shutdown();
    worker.wait().await.unwrap();
}

static LOOKUP_CALLS: AtomicU32 = AtomicU32::new(0);

/// A user's own error enum: displayable, retried like any error.
#[derive(Debug)]
pub enum LookupError {
    NotYet,
}

impl std::fmt::Display for LookupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotYet => f.write_str("record not replicated yet"),
        }
    }
}

#[pgflow::flow(slug = "lookup_v1", alias = "lookup", max_attempts = 3, base_delay = 0)]
pub mod lookup_v1 {
    use super::*;

    #[step(queue = "retry_policy_lookup")]
    pub async fn lookup(input: serde_json::Value) -> Result<String, LookupError> {
        if LOOKUP_CALLS.fetch_add(1, Ordering::SeqCst) < 2 {
            return Err(LookupError::NotYet);
        }
        Ok(format!("found {input}"))
    }
}

#[sqlx::test(migrations = false)]
async fn a_user_error_enum_is_retried_until_it_succeeds(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        lookup_v1::deployment(),
        worker_config(lookup_v1::Queue::RetryPolicyLookup, &pool),
    )
    .await
    .unwrap();

    let run = lookup_v1::start(&client, &json!(7)).await.unwrap();
    let output = run.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(output.lookup, "found 7");
    assert_eq!(attempts_count(&pool, run.run_id()).await, 3);
    assert_eq!(
        attempt_history(&pool, run.run_id())
            .await
            .into_iter()
            .map(|(attempt, outcome, _)| (attempt, outcome))
            .collect::<Vec<_>>(),
        vec![(1, "failed".to_owned()), (2, "failed".to_owned())]
    );

    worker.shutdown();
    worker.wait().await.unwrap();
}

/// The retry delays of a one-step flow failed `attempts - 1` times, as `fail_tasks` reports
/// them.
async fn retry_delays(pool: &PgPool, definition: FlowDefinition, attempts: u32) -> Vec<i32> {
    let f = compiled(pool, definition).await;
    let q = f.slug.default_queue();
    engine::start_flow(pool, f.slug.as_str(), &json!(null))
        .await
        .unwrap();
    let mut delays = Vec::new();
    for _ in 1..attempts {
        let tasks = claim(pool, &q, &pairs_for(&[&f], &q)).await;
        assert_eq!(tasks.len(), 1);
        let outcome = engine::fail_tasks(pool, &[TaskFailure::of(&tasks[0], "503")])
            .await
            .unwrap();
        assert!(outcome[0].will_retry);
        delays.push(outcome[0].retry_delay_seconds.unwrap());
        make_visible(pool, q.as_str()).await;
    }
    delays
}

fn backing_off(slug: &str, options: FlowOptions, step: StepOptions) -> FlowDefinition {
    FlowDefinition::new(flow(slug))
        .options(FlowOptions {
            max_attempts: 30,
            base_delay: Duration::from_secs(10),
            ..options
        })
        .step(single("call", &[]).options(step))
}

#[sqlx::test(migrations = false)]
async fn max_delay_caps_the_backoff_and_jitter_shortens_it_by_a_random_part(pool: PgPool) {
    install(&pool).await;
    let uncapped = backing_off("uncapped", FlowOptions::DEFAULT, StepOptions::default());
    assert_eq!(retry_delays(&pool, uncapped, 5).await, vec![10, 20, 40, 80]);

    let capped = backing_off(
        "capped",
        FlowOptions {
            max_delay: Some(Duration::from_secs(30)),
            ..FlowOptions::DEFAULT
        },
        StepOptions::default(),
    );
    assert_eq!(retry_delays(&pool, capped, 5).await, vec![10, 20, 30, 30]);

    // The step's cap and jitter override the flow's: delays of at most 16 s, each shortened
    // by up to half.
    let jittered = backing_off(
        "jittered",
        FlowOptions {
            max_delay: Some(Duration::from_secs(3600)),
            ..FlowOptions::DEFAULT
        },
        StepOptions {
            base_delay: Some(Duration::from_secs(16)),
            max_delay: Some(Duration::from_secs(16)),
            jitter_percent: Some(50),
            ..StepOptions::default()
        },
    );
    let delays = retry_delays(&pool, jittered, 21).await;
    assert!(delays.iter().all(|d| (8..=16).contains(d)), "{delays:?}");
    assert!(
        delays.iter().any(|d| *d != delays[0]),
        "20 jittered delays are not all equal: {delays:?}"
    );
}

#[sqlx::test(migrations = false)]
async fn a_permanent_failure_reported_through_sql_fails_the_run_with_attempts_left(pool: PgPool) {
    install(&pool).await;
    let f = compiled(
        &pool,
        FlowDefinition::new(flow("once"))
            .options(FlowOptions {
                max_attempts: 5,
                ..FlowOptions::DEFAULT
            })
            .step(single("call", &[])),
    )
    .await;
    let q = f.slug.default_queue();
    let started = engine::start_flow(&pool, "once", &json!(null))
        .await
        .unwrap();
    let tasks = claim(&pool, &q, &pairs_for(&[&f], &q)).await;
    let outcome = engine::fail_tasks(&pool, &[TaskFailure::permanent(&tasks[0], "bad document")])
        .await
        .unwrap();
    assert!(!outcome[0].will_retry);
    assert_eq!(outcome[0].retry_delay_seconds, None);
    assert!(
        !outcome[0].step_skipped,
        "when_exhausted = fail fails the run"
    );
    let status: String = sqlx::query_scalar("select status from pgflow.runs where run_id = $1")
        .bind(started.run_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status, "failed");
    assert!(claim(&pool, &q, &pairs_for(&[&f], &q)).await.is_empty());
}
