//! Failures: retries with exponential backoff, exhaustion, late and duplicate reports.

use std::time::Duration;

use pgflow::definition::{FlowDefinition, FlowOptions};
use pgflow::engine::{self, RunStatus, SupportedPairs, TaskCompletion, TaskFailure};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{
    archived, claim, compiled, flow, install, make_visible, messages, pairs_for, run, single,
    step_statuses, task_rows,
};

/// Seconds until the message becomes visible.
async fn visible_in(pool: &PgPool, queue: &str) -> f64 {
    sqlx::query_scalar(&format!(
        "select extract(epoch from vt - clock_timestamp())::float8 from pgmq.q_{queue}"
    ))
    .fetch_one(pool)
    .await
    .unwrap()
}

fn retrying(slug: &str, max_attempts: u32, base_delay: u64) -> FlowDefinition {
    FlowDefinition::new(flow(slug))
        .options(FlowOptions {
            max_attempts,
            base_delay: Duration::from_secs(base_delay),
            ..FlowOptions::DEFAULT
        })
        .step(single("flaky", &[]))
}

#[sqlx::test(migrations = false)]
async fn a_failed_attempt_is_retried_with_exponential_backoff_then_succeeds(pool: PgPool) {
    install(&pool).await;
    let f = compiled(&pool, retrying("flaky", 3, 10)).await;
    let q = f.slug.default_queue();
    let started = engine::start_flow(&pool, "flaky", &json!("in"))
        .await
        .unwrap();

    for (attempt, backoff) in [(1, 10.0), (2, 20.0)] {
        let tasks = claim(&pool, &q, &pairs_for(&[&f], &q)).await;
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0].attempt, attempt);
        let outcome = engine::fail_tasks(&pool, &[TaskFailure::of(&tasks[0], "upstream 503")])
            .await
            .unwrap();
        assert!(outcome[0].will_retry);
        assert_eq!(outcome[0].retry_delay_seconds, Some(backoff as i32));

        // A new message (the claim took the old one off the queue), hidden for base_delay *
        // 2^(attempt-1).
        let wait = visible_in(&pool, "flaky").await;
        assert!(
            (backoff - 1.0..=backoff).contains(&wait),
            "visible in {wait}s"
        );
        let waiting = messages(&pool, "flaky").await;
        assert_eq!(waiting.len(), 1);
        assert_eq!(
            waiting[0].0,
            i64::from(attempt) + 1,
            "a new message per retry"
        );
        assert_eq!(archived(&pool, "flaky").await, 0, "claims archive nothing");
        assert!(claim(&pool, &q, &pairs_for(&[&f], &q)).await.is_empty());
        assert_eq!(
            task_rows(&pool, started.run_id).await,
            vec![("flaky".into(), 0, "queued".into(), attempt)]
        );
        make_visible(&pool, "flaky").await;
    }

    let tasks = claim(&pool, &q, &pairs_for(&[&f], &q)).await;
    assert_eq!(tasks[0].attempt, 3);
    assert_eq!(tasks[0].message_id, Some(3), "the second retry's message");
    engine::complete_tasks(&pool, &[TaskCompletion::of(&tasks[0], json!("ok"))])
        .await
        .unwrap();
    let finished = run(&pool, started.run_id).await;
    assert_eq!(finished.status, RunStatus::Completed);
    let error: Option<String> = sqlx::query_scalar("select error_message from pgflow.step_tasks")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        error.as_deref(),
        Some("upstream 503"),
        "last error kept for operators"
    );
}

#[sqlx::test(migrations = false)]
async fn exhausted_attempts_fail_the_task_step_and_run(pool: PgPool) {
    install(&pool).await;
    // Two root steps: when `flaky` fails for good, its sibling's queued task is failed too.
    let f = compiled(
        &pool,
        retrying("doomed", 2, 0)
            .step(single("sibling", &[]))
            .step(single("after", &["flaky", "sibling"])),
    )
    .await;
    let q = f.slug.default_queue();
    let started = engine::start_flow(&pool, "doomed", &json!(null))
        .await
        .unwrap();

    let only_flaky = {
        let mut p = SupportedPairs::new();
        p.insert(&flow("doomed"), &crate::support::step("flaky"));
        p
    };
    for attempt in 0..2 {
        make_visible(&pool, "doomed").await;
        // Claim only the flaky task's message: id 1 first, then its retry's new message (3;
        // the sibling's is 2).
        let ids: Vec<i64> = vec![if attempt == 0 { 1 } else { 3 }];
        let tasks = engine::start_tasks(&pool, &q, &ids, uuid::Uuid::new_v4(), &only_flaky)
            .await
            .unwrap()
            .tasks;
        assert_eq!(tasks.len(), 1);
        engine::fail_tasks(&pool, &[TaskFailure::of(&tasks[0], "boom")])
            .await
            .unwrap();
    }

    let failed = run(&pool, started.run_id).await;
    assert_eq!(failed.status, RunStatus::Failed);
    assert!(failed.failed_at.is_some());
    assert_eq!(
        step_statuses(&pool, started.run_id).await,
        vec![
            ("after".into(), "created".into()),
            ("flaky".into(), "failed".into()),
            ("sibling".into(), "started".into()),
        ]
    );
    assert_eq!(
        task_rows(&pool, started.run_id).await,
        vec![
            ("flaky".into(), 0, "failed".into(), 2),
            ("sibling".into(), 0, "failed".into(), 0),
        ]
    );
    let step_error: String = sqlx::query_scalar(
        "select error_message from pgflow.step_states where step_slug = 'flaky'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(step_error, "boom");
    assert!(
        messages(&pool, "doomed").await.is_empty(),
        "no message left to read"
    );
    // Both of flaky's messages (archived by their claims) and the sibling's (archived when the
    // run failed).
    assert_eq!(archived(&pool, "doomed").await, 3);
}

#[sqlx::test(migrations = false)]
async fn duplicate_and_late_reports_change_nothing(pool: PgPool) {
    install(&pool).await;
    let f = compiled(
        &pool,
        retrying("twice", 3, 0).step(single("next", &["flaky"])),
    )
    .await;
    let q = f.slug.default_queue();
    let started = engine::start_flow(&pool, "twice", &json!(null))
        .await
        .unwrap();

    let first = claim(&pool, &q, &pairs_for(&[&f], &q)).await.remove(0);
    engine::fail_tasks(&pool, &[TaskFailure::of(&first, "timeout")])
        .await
        .unwrap();
    make_visible(&pool, "twice").await;
    let second = claim(&pool, &q, &pairs_for(&[&f], &q)).await.remove(0);
    assert_eq!(second.attempt, 2);

    // A late completion of attempt 1 is ignored: attempt 2 owns the task now.
    let late = engine::complete_tasks(&pool, &[TaskCompletion::of(&first, json!("stale"))])
        .await
        .unwrap();
    assert_eq!(late, 0);

    let done = engine::complete_tasks(&pool, &[TaskCompletion::of(&second, json!("fresh"))])
        .await
        .unwrap();
    assert_eq!(done, 1);
    let snapshot = (
        task_rows(&pool, started.run_id).await,
        step_statuses(&pool, started.run_id).await,
    );

    // Completing or failing it again changes nothing.
    let again = engine::complete_tasks(&pool, &[TaskCompletion::of(&second, json!("again"))])
        .await
        .unwrap();
    assert_eq!(again, 0);
    let outcome = engine::fail_tasks(&pool, &[TaskFailure::of(&second, "too late")])
        .await
        .unwrap();
    assert!(
        matches!(outcome.as_slice(), [late] if late.discarded && !late.will_retry),
        "the late failure is answered, and discarded: {outcome:?}"
    );
    assert_eq!(
        (
            task_rows(&pool, started.run_id).await,
            step_statuses(&pool, started.run_id).await
        ),
        snapshot
    );
    let output: serde_json::Value =
        sqlx::query_scalar("select output from pgflow.step_states where step_slug = 'flaky'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(output, json!("fresh"));

    // The dependent got exactly one task.
    let next_tasks: i64 =
        sqlx::query_scalar("select count(*) from pgflow.step_tasks where step_slug = 'next'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(next_tasks, 1);
}

#[sqlx::test(migrations = false)]
async fn a_repeated_completion_is_told_apart_from_a_late_one(pool: PgPool) {
    install(&pool).await;
    let f = compiled(&pool, retrying("again", 3, 0)).await;
    let q = f.slug.default_queue();
    engine::start_flow(&pool, "again", &json!(null))
        .await
        .unwrap();
    let first = claim(&pool, &q, &pairs_for(&[&f], &q)).await;
    engine::fail_tasks(&pool, &[TaskFailure::of(&first[0], "flaky")])
        .await
        .unwrap();
    make_visible(&pool, q.as_str()).await;
    let second = claim(&pool, &q, &pairs_for(&[&f], &q)).await;

    let late = TaskCompletion::of(&first[0], json!("from attempt 1"));
    let current = TaskCompletion::of(&second[0], json!("from attempt 2"));
    assert_eq!(
        engine::complete_tasks(&pool, std::slice::from_ref(&current))
            .await
            .unwrap(),
        1
    );
    // The same call again (as after a lost reply) stores nothing more, and the completion
    // counts as stored; the first attempt's completion never was.
    let both = [late, current];
    assert_eq!(engine::complete_tasks(&pool, &both).await.unwrap(), 0);
    assert_eq!(
        engine::count_stored_completions(&pool, &both)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        engine::count_stored_completions(&pool, &both[..1])
            .await
            .unwrap(),
        0
    );
}

/// One call's failures are answered one by one, in the order given, whatever the order of
/// their keys, a late report included: the worker reads each answer beside its failure.
#[sqlx::test(migrations = false)]
async fn failures_are_answered_in_the_order_given(pool: PgPool) {
    install(&pool).await;
    let f = compiled(&pool, retrying("answered", 3, 0)).await;
    let q = f.slug.default_queue();
    for input in 0..4 {
        engine::start_flow(&pool, "answered", &json!(input))
            .await
            .unwrap();
    }
    let mut tasks = claim(&pool, &q, &pairs_for(&[&f], &q)).await;
    assert_eq!(tasks.len(), 4);
    tasks.sort_by_key(|t| t.run_id);
    let done = tasks.remove(0);
    engine::complete_tasks(&pool, &[TaskCompletion::of(&done, json!("done"))])
        .await
        .unwrap();

    // Against key order: the highest run first, a permanent failure, the late one last.
    let failures = [
        TaskFailure::of(&tasks[2], "third"),
        TaskFailure::of(&tasks[0], "first"),
        TaskFailure::permanent(&tasks[1], "second"),
        TaskFailure::of(&done, "too late"),
    ];
    let outcomes = engine::fail_tasks(&pool, &failures).await.unwrap();
    let answered: Vec<_> = outcomes
        .iter()
        .map(|o| (o.run_id, o.will_retry, o.discarded))
        .collect();
    assert_eq!(
        answered,
        vec![
            (tasks[2].run_id, true, false),
            (tasks[0].run_id, true, false),
            (tasks[1].run_id, false, false),
            (done.run_id, false, true),
        ]
    );
    assert_eq!(run(&pool, tasks[1].run_id).await.status, RunStatus::Failed);
    assert_eq!(run(&pool, done.run_id).await.status, RunStatus::Completed);
}
