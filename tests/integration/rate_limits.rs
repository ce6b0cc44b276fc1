//! Rate limits: `#[step(rate_limit = "N/period")]` lets at most N tasks of the step start in
//! any period across every worker, and `rate_key = input.field` at most N per key. Every
//! attempt counts; a task over the limit waits with no attempt spent and starts when its key
//! has a token again. The starts are read back from the database (`started_at` of each
//! attempt, the time the claim counted), so the check is exact: in any N + 1 starts of a key,
//! the first and the last are at least a period apart.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use pgflow::definition::{FlowDefinition, StepRateLimit};
use pgflow::{Client, Worker};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::support::{flow, install, refusal_of, refusal_of_json, single, worker_config};

/// A step limited to 4 starts in any 500 ms, after a step that is not limited.
#[pgflow::flow(slug = "rated_v1", alias = "rated", input = u32)]
pub mod rated_v1 {
    #[step(queue = "rate_global")]
    pub async fn prepare(input: u32) -> Result<u32, String> {
        Ok(input)
    }

    #[step(depends_on = [prepare], rate_limit = "4/500ms", queue = "rate_global")]
    pub async fn call(prepare: u32) -> Result<u32, String> {
        Ok(prepare * 2)
    }
}

/// The start times of every attempt of `step`'s tasks, by key when `key_field` names a field
/// of the run input, oldest first.
async fn starts(
    pool: &PgPool,
    step: &str,
    key_field: Option<&str>,
) -> Vec<(String, DateTime<Utc>)> {
    sqlx::query_as(
        "select coalesce(r.input ->> $2, ''), a.started_at
         from (select run_id, step_slug, started_at from pgflow.task_attempts
               where started_at is not null
               union all
               select run_id, step_slug, started_at from pgflow.step_tasks
               where started_at is not null) a
         join pgflow.runs r on r.run_id = a.run_id
         where a.step_slug = $1
         order by a.started_at",
    )
    .bind(step)
    .bind(key_field.unwrap_or("no key"))
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Panics when some `limit + 1` starts of one key fall within less than `period`.
fn assert_within_limit(starts: &[(String, DateTime<Utc>)], limit: usize, period: Duration) {
    let mut keys: Vec<&str> = starts.iter().map(|(key, _)| key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let times: Vec<DateTime<Utc>> = starts
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, at)| *at)
            .collect();
        for window in times.windows(limit + 1) {
            let span = (window[limit] - window[0]).to_std().unwrap_or_default();
            assert!(
                span >= period,
                "key `{key}`: {} starts within {span:?}, over the limit of {limit} per {period:?}",
                limit + 1
            );
        }
    }
}

#[sqlx::test(migrations = false)]
async fn a_rate_limit_holds_across_every_worker(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&rated_v1::deployment()).await.unwrap();
    // Three workers of eight slots each, for a step that may start 4 tasks per 500 ms.
    let mut workers = Vec::new();
    for _ in 0..3 {
        workers.push(
            Worker::start_with(
                rated_v1::deployment(),
                worker_config(rated_v1::Queue::RateGlobal, &pool)
                    .max_concurrent(8)
                    .poll_interval(Duration::from_millis(20)),
            )
            .await
            .unwrap(),
        );
    }
    let inputs: Vec<u32> = (0..40).collect();
    let runs = client
        .start_many(pgflow::Start::flow::<rated_v1::Flow>(), &inputs, &[])
        .await
        .unwrap();
    for (run, input) in runs.iter().zip(&inputs) {
        let output = run.wait(&client, Duration::from_secs(60)).await.unwrap();
        assert_eq!(output.call, input * 2);
    }
    let starts = starts(&pool, "call", None).await;
    assert_eq!(starts.len(), 40, "one attempt a task: waiting spends none");
    assert_within_limit(&starts, 4, Duration::from_millis(500));
    // The limit is used, not only kept: 40 starts at 4 per 500 ms take 4.5 s at the least,
    // and not much more.
    let span = (starts[39].1 - starts[0].1).to_std().unwrap();
    assert!(span >= Duration::from_millis(4500), "{span:?}");
    assert!(
        span < Duration::from_secs(9),
        "the limit was not used: {span:?}"
    );
    let attempts: Vec<i32> =
        sqlx::query_scalar("select distinct attempts_count from pgflow.step_tasks")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(attempts, vec![1]);
    let waits: i64 = sqlx::query_scalar("select count(*) from pgflow.rate_waits")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(waits, 0, "a task that started no longer waits");
    for worker in workers {
        worker.shutdown();
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Call {
    pub account: String,
    pub n: u32,
}

/// Fails the first attempt of every task, once.
static FAILED_ONCE: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
    std::sync::LazyLock::new(Default::default);
static CALLS: AtomicUsize = AtomicUsize::new(0);

/// 2 starts per 300 ms for each account; every task fails its first attempt, and its retry
/// waits for a token of its own.
#[pgflow::flow(slug = "rated_keys_v1", alias = "rated_keys", input = Call)]
pub mod rated_keys_v1 {
    use super::*;

    #[step(
        queue = "rate_keys",
        rate_limit = "2/300ms",
        rate_key = input.account,
        max_attempts = 2,
        base_delay = 0
    )]
    pub async fn call(input: Call) -> Result<u32, String> {
        CALLS.fetch_add(1, Ordering::SeqCst);
        let first = FAILED_ONCE
            .lock()
            .unwrap()
            .insert(format!("{}-{}", input.account, input.n));
        if first {
            return Err("the first attempt fails".to_owned());
        }
        Ok(input.n)
    }
}

#[sqlx::test(migrations = false)]
async fn a_keyed_rate_limit_holds_per_key_and_every_attempt_counts(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&rated_keys_v1::deployment()).await.unwrap();
    let mut workers = Vec::new();
    for _ in 0..2 {
        workers.push(
            Worker::start_with(
                rated_keys_v1::deployment(),
                worker_config(rated_keys_v1::Queue::RateKeys, &pool)
                    .max_concurrent(6)
                    .poll_interval(Duration::from_millis(20)),
            )
            .await
            .unwrap(),
        );
    }
    // Ten calls of a big account, then three of a small one.
    let inputs: Vec<Call> = (0..10)
        .map(|n| Call {
            account: "big".to_owned(),
            n,
        })
        .chain((0..3).map(|n| Call {
            account: "small".to_owned(),
            n,
        }))
        .collect();
    let runs = client
        .start_many(pgflow::Start::flow::<rated_keys_v1::Flow>(), &inputs, &[])
        .await
        .unwrap();
    for (run, input) in runs.iter().zip(&inputs) {
        let output = run.wait(&client, Duration::from_secs(60)).await.unwrap();
        assert_eq!(output.call, input.n);
    }
    assert_eq!(CALLS.load(Ordering::SeqCst), 26, "two attempts a task");
    let starts = starts(&pool, "call", Some("account")).await;
    assert_eq!(starts.len(), 26);
    assert_within_limit(&starts, 2, Duration::from_millis(300));
    // Each key has its own tokens: the small account's six attempts are done long before the
    // big one's twenty.
    let last = |key: &str| starts.iter().rev().find(|(k, _)| k == key).unwrap().1;
    let first = starts[0].1;
    let small = (last("small") - first).to_std().unwrap();
    let big = (last("big") - first).to_std().unwrap();
    assert!(big >= Duration::from_millis(2700), "{big:?}");
    assert!(small * 2 < big, "small {small:?}, big {big:?}");
    for worker in workers {
        worker.shutdown();
    }
}

#[sqlx::test(migrations = false)]
async fn bad_rate_limits_are_refused(pool: PgPool) {
    install(&pool).await;
    let cases = [
        (
            single("a", &[]).rate_limit(StepRateLimit::per(0, Duration::from_secs(1))),
            "option `rate_limit` must be a whole number of at least 1",
        ),
        (
            single("a", &[]).rate_limit(StepRateLimit::per(10_001, Duration::from_secs(1))),
            "option `rate_limit` must be at most 10000 starts per period",
        ),
        (
            single("a", &[]).rate_limit(StepRateLimit::per(5, Duration::from_micros(10))),
            "option `rate_period_ms` must be a whole number of at least 1",
        ),
        (
            single("a", &[])
                .rate_limit(StepRateLimit::per(5, Duration::from_secs(1)).per_key(["account"])),
            "rate_key must be a path of field names whose first element is `input`",
        ),
    ];
    for (step, expected) in cases {
        let message = refusal_of(&pool, step).await;
        assert!(message.contains(expected), "{message}");
    }
    let refused = refusal_of_json(
        &pool,
        r#"[{"slug": "a", "rate_key": ["input", "account"]}]"#,
    )
    .await;
    assert!(
        refused.contains("sets `rate_key` without `rate_limit`"),
        "{refused}"
    );
}

/// A flow of one step (on the queue of the flow's name) with the given limit.
fn limited(name: &str, limit: u32, period: Duration) -> FlowDefinition {
    FlowDefinition::new(flow(name))
        .step(single("a", &[]).rate_limit(StepRateLimit::per(limit, period)))
}

/// Claims what is visible on the flow's queue: (tasks started, tasks sent back to wait).
async fn claim_all(pool: &PgPool, definition: &FlowDefinition) -> (usize, usize) {
    let queue = pgflow::names::QueueName::new(definition.slug.as_str()).unwrap();
    let pairs = crate::support::pairs_for(&[definition], &queue);
    let claim =
        pgflow::engine::read_and_start_tasks(pool, &queue, uuid::Uuid::new_v4(), &pairs, 100)
            .await
            .unwrap();
    (claim.tasks.len(), claim.deferred)
}

async fn start_runs(pool: &PgPool, name: &str, n: u32) -> Vec<uuid::Uuid> {
    let mut runs = Vec::new();
    for i in 0..n {
        runs.push(
            pgflow::engine::start_flow(pool, name, &serde_json::json!({"n": i}))
                .await
                .unwrap()
                .run_id,
        );
    }
    runs
}

async fn sweep(pool: &PgPool) {
    pgflow::engine::release_capped_tasks(pool, 1000)
        .await
        .unwrap();
}

#[sqlx::test(migrations = false)]
async fn tasks_that_leave_the_line_leave_no_gap_before_new_ones(pool: PgPool) {
    install(&pool).await;
    let definition = limited("line", 1, Duration::from_secs(2));
    pgflow::engine::compile_flow(&pool, &definition)
        .await
        .unwrap();
    let runs = start_runs(&pool, "line", 5).await;
    // One starts; four line up, due 2, 4, 6 and 8 s from now.
    assert_eq!(claim_all(&pool, &definition).await, (1, 4));
    pgflow::engine::cancel_runs(&pool, &runs[1..], Some("not needed"))
        .await
        .unwrap();
    sweep(&pool).await;
    // Once the token is free again, a new task starts at its first claim: the cancelled tasks
    // hold no place in the line.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    start_runs(&pool, "line", 1).await;
    assert_eq!(claim_all(&pool, &definition).await, (1, 0));
}

#[sqlx::test(migrations = false)]
async fn a_dropped_limit_lets_its_waiting_tasks_start(pool: PgPool) {
    install(&pool).await;
    let definition = limited("dropped", 1, Duration::from_secs(3600));
    pgflow::engine::compile_flow(&pool, &definition)
        .await
        .unwrap();
    start_runs(&pool, "dropped", 3).await;
    assert_eq!(claim_all(&pool, &definition).await, (1, 2));
    // The same flow without the limit (a setting: verified, not changed in shape).
    let unlimited = FlowDefinition::new(flow("dropped")).step(single("a", &[]));
    pgflow::engine::compile_flow(&pool, &unlimited)
        .await
        .unwrap();
    sweep(&pool).await;
    assert_eq!(claim_all(&pool, &unlimited).await, (2, 0));
}

#[sqlx::test(migrations = false)]
async fn a_lowered_limit_holds_from_its_first_period(pool: PgPool) {
    install(&pool).await;
    let period = Duration::from_secs(2);
    let definition = limited("lowered", 2, period);
    pgflow::engine::compile_flow(&pool, &definition)
        .await
        .unwrap();
    // Two starts a second apart, on the two tokens.
    start_runs(&pool, "lowered", 1).await;
    assert_eq!(claim_all(&pool, &definition).await, (1, 0));
    tokio::time::sleep(Duration::from_secs(1)).await;
    start_runs(&pool, "lowered", 1).await;
    assert_eq!(claim_all(&pool, &definition).await, (1, 0));
    // Lowered to 1 per 2 s: once the first start is 2 s old, the second is not, so nothing may
    // start yet (the token of the first start must not let one through).
    let lowered = limited("lowered", 1, period);
    pgflow::engine::compile_flow(&pool, &lowered).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    start_runs(&pool, "lowered", 1).await;
    assert_eq!(claim_all(&pool, &lowered).await, (0, 1));
    let tokens: i64 = sqlx::query_scalar("select count(*) from pgflow.rate_tokens")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(tokens, 1, "the tokens above the new limit are gone");
}

#[sqlx::test(migrations = false)]
async fn a_long_key_is_kept_short_and_apart_from_its_neighbours(pool: PgPool) {
    install(&pool).await;
    let definition = FlowDefinition::new(flow("long_keys")).step(
        single("a", &[])
            .rate_limit(StepRateLimit::per(1, Duration::from_secs(3600)).per_key(["input", "k"])),
    );
    pgflow::engine::compile_flow(&pool, &definition)
        .await
        .unwrap();
    // Two keys of 10,000 characters that differ only at the end: two keys, one start each.
    for end in ["x", "y"] {
        let key = format!("{}{end}", "k".repeat(9_999));
        pgflow::engine::start_flow(&pool, "long_keys", &serde_json::json!({"k": key}))
            .await
            .unwrap();
    }
    assert_eq!(claim_all(&pool, &definition).await, (2, 0));
    let longest: i32 = sqlx::query_scalar("select max(length(rate_key)) from pgflow.rate_keys")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(longest <= 200, "{longest}");
}

#[sqlx::test(migrations = false)]
async fn a_task_sent_for_a_token_and_parked_by_a_pause_gives_the_token_back(pool: PgPool) {
    install(&pool).await;
    let definition = limited("paused_line", 1, Duration::from_secs(1));
    pgflow::engine::compile_flow(&pool, &definition)
        .await
        .unwrap();
    start_runs(&pool, "paused_line", 2).await;
    // One starts; the other is sent for the token, due when it is free.
    assert_eq!(claim_all(&pool, &definition).await, (1, 1));
    let reserved = || async {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from pgflow.rate_tokens where reserved_due is not null",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    assert_eq!(reserved().await, 1);
    pgflow::engine::pause_flow(&pool, "paused_line", None)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // The claim parks it; the sweep gives its token back.
    assert_eq!(claim_all(&pool, &definition).await, (0, 0));
    sweep(&pool).await;
    assert_eq!(reserved().await, 0, "a parked task holds no token");
    // Resumed, it lines up again, is sent for the free token and starts.
    pgflow::engine::resume_flow(&pool, "paused_line")
        .await
        .unwrap();
    assert_eq!(claim_all(&pool, &definition).await, (0, 1));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(claim_all(&pool, &definition).await, (1, 0));
}

#[sqlx::test(migrations = false)]
async fn a_worker_learns_when_the_next_message_of_its_queue_is_due(pool: PgPool) {
    install(&pool).await;
    let definition = limited("due", 1, Duration::from_secs(3));
    pgflow::engine::compile_flow(&pool, &definition)
        .await
        .unwrap();
    let queue = pgflow::names::QueueName::new("due").unwrap();
    let next = || pgflow::engine::next_message_in(&pool, &queue);
    assert_eq!(
        next().await.unwrap(),
        None,
        "an empty queue has nothing due"
    );
    start_runs(&pool, "due", 2).await;
    assert_eq!(
        next().await.unwrap(),
        Some(Duration::ZERO),
        "a visible message is due now"
    );
    // One starts; the other is sent for the token, due in about 3 s.
    assert_eq!(claim_all(&pool, &definition).await, (1, 1));
    let due = next().await.unwrap().expect("the sent task's message");
    assert!(
        due > Duration::from_millis(2500) && due <= Duration::from_millis(3100),
        "{due:?}"
    );
    pgflow::engine::pause_queue(&pool, "due", None)
        .await
        .unwrap();
    assert_eq!(next().await.unwrap(), None, "a paused queue wakes nobody");
}
