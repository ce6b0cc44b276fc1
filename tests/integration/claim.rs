//! Queue-scoped claims: shared queues, separate step queues, unsupported pairs, concurrency.

use std::collections::HashSet;

use pgflow::EngineError;
use pgflow::definition::FlowDefinition;
use pgflow::engine::{self, SupportedPairs};
use pgflow::error::UnsupportedPair;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{
    archived, claim, compiled, flow, install, messages, pairs_for, queue, single, step, task_rows,
};

/// Two concrete flows (v1, v2 of one alias) whose `classify` steps share `classify_threads`.
async fn shared_flows(pool: &PgPool) -> (FlowDefinition, FlowDefinition) {
    let v1 = FlowDefinition::new(flow("triage_v1"))
        .alias(flow("triage"), 1)
        .step(single("classify", &[]).queue(queue("classify_threads")));
    let v2 = FlowDefinition::new(flow("triage_v2"))
        .alias(flow("triage"), 2)
        .step(single("classify", &[]).queue(queue("classify_threads")))
        .step(single("alert", &["classify"]).queue(queue("deliver_slack_alerts")));
    (compiled(pool, v1).await, compiled(pool, v2).await)
}

#[sqlx::test(migrations = false)]
async fn one_claim_returns_tasks_of_two_flows_sharing_a_queue(pool: PgPool) {
    install(&pool).await;
    let (v1, v2) = shared_flows(&pool).await;
    let r1 = engine::start_flow(&pool, "triage_v1", &json!("one"))
        .await
        .unwrap();
    let r2 = engine::start_flow(&pool, "triage_v2", &json!("two"))
        .await
        .unwrap();

    let classify = queue("classify_threads");
    let tasks = claim(&pool, &classify, &pairs_for(&[&v1, &v2], &classify)).await;
    let mut got: Vec<(String, String, Uuid, String, serde_json::Value, i32)> = tasks
        .iter()
        .map(|t| {
            (
                t.flow_slug.to_string(),
                t.step_slug.to_string(),
                t.run_id,
                t.queue_name.to_string(),
                t.input.clone(),
                t.attempt,
            )
        })
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            (
                "triage_v1".into(),
                "classify".into(),
                r1.run_id,
                "classify_threads".into(),
                json!("one"),
                1
            ),
            (
                "triage_v2".into(),
                "classify".into(),
                r2.run_id,
                "classify_threads".into(),
                json!("two"),
                1
            ),
        ]
    );
}

#[sqlx::test(migrations = false)]
async fn steps_of_one_flow_are_claimed_from_their_own_queues(pool: PgPool) {
    install(&pool).await;
    let (_, v2) = shared_flows(&pool).await;
    let run = engine::start_flow(&pool, "triage_v2", &json!("t"))
        .await
        .unwrap();
    let alerts = queue("deliver_slack_alerts");
    let classify = queue("classify_threads");

    // Nothing for the alerts queue until classify completes.
    assert!(
        claim(&pool, &alerts, &pairs_for(&[&v2], &alerts))
            .await
            .is_empty()
    );
    let tasks = claim(&pool, &classify, &pairs_for(&[&v2], &classify)).await;
    assert_eq!(tasks.len(), 1);
    engine::complete_tasks(
        &pool,
        &[engine::TaskCompletion::of(&tasks[0], json!("urgent"))],
    )
    .await
    .unwrap();

    let snapshot: String = sqlx::query_scalar(
        "select queue_name from pgflow.step_tasks where run_id = $1 and step_slug = 'alert'",
    )
    .bind(run.run_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(snapshot, "deliver_slack_alerts");
    let tasks = claim(&pool, &alerts, &pairs_for(&[&v2], &alerts)).await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].step_slug, "alert");
    assert_eq!(tasks[0].input, json!({"classify": "urgent"}));
}

#[sqlx::test(migrations = false)]
async fn an_unsupported_pair_refuses_the_whole_batch_and_changes_nothing(pool: PgPool) {
    install(&pool).await;
    let (v1, _v2) = shared_flows(&pool).await;
    let r1 = engine::start_flow(&pool, "triage_v1", &json!(1))
        .await
        .unwrap();
    let r2 = engine::start_flow(&pool, "triage_v2", &json!(2))
        .await
        .unwrap();
    let classify = queue("classify_threads");
    let before = messages(&pool, "classify_threads").await;
    assert_eq!(before, vec![(1, 0, true), (2, 0, true)]);

    // A worker that carries only v1 reads both messages in one batch.
    let only_v1 = pairs_for(&[&v1], &classify);
    let error = engine::read_and_start_tasks(&pool, &classify, Uuid::new_v4(), &only_v1, 10)
        .await
        .unwrap_err();
    match &error {
        EngineError::UnsupportedTasks {
            queue_name,
            message_ids,
            unsupported,
        } => {
            assert_eq!(queue_name, "classify_threads");
            assert_eq!(message_ids, &vec![1, 2]);
            assert_eq!(
                unsupported,
                &vec![UnsupportedPair {
                    flow_slug: "triage_v2".into(),
                    step_slug: "classify".into(),
                    message_ids: vec![2],
                }]
            );
        }
        other => panic!("expected UnsupportedTasks, got {other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.contains("classify_threads") && text.contains("triage_v2.classify"),
        "{text}"
    );

    // Every message is visible again with its read count unchanged; no task moved.
    assert_eq!(messages(&pool, "classify_threads").await, before);
    for run in [r1.run_id, r2.run_id] {
        assert_eq!(
            task_rows(&pool, run).await,
            vec![("classify".into(), 0, "queued".into(), 0)]
        );
    }

    // A correctly configured worker then claims both. (The refused transaction's row locks
    // are released when the server finishes its rollback, which may trail the error the
    // client saw by a moment; a worker simply reads again on its next poll.)
    let mut both = Vec::new();
    for _ in 0..50 {
        both.extend(claim(&pool, &classify, &pairs_for(&[&v1, &_v2], &classify)).await);
        if both.len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(both.len(), 2);
}

#[sqlx::test(migrations = false)]
async fn start_tasks_refusal_leaves_messages_as_the_read_left_them(pool: PgPool) {
    install(&pool).await;
    shared_flows(&pool).await;
    engine::start_flow(&pool, "triage_v2", &json!(2))
        .await
        .unwrap();
    let classify = queue("classify_threads");
    let ids: Vec<i64> =
        sqlx::query_scalar("select msg_id from pgmq.read('classify_threads', 30, 10)")
            .fetch_all(&pool)
            .await
            .unwrap();
    let vt_before: Vec<(i64, i32, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as("select msg_id, read_ct, vt from pgmq.q_classify_threads order by msg_id")
            .fetch_all(&pool)
            .await
            .unwrap();

    let mut wrong = SupportedPairs::new();
    wrong.insert(&flow("triage_v2"), &step("alert"));
    let error = engine::start_tasks(&pool, &classify, &ids, Uuid::new_v4(), &wrong)
        .await
        .unwrap_err();
    assert!(
        matches!(error, EngineError::UnsupportedTasks { .. }),
        "{error:?}"
    );

    let vt_after: Vec<(i64, i32, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as("select msg_id, read_ct, vt from pgmq.q_classify_threads order by msg_id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(vt_after, vt_before);
    let attempts: i64 = sqlx::query_scalar("select sum(attempts_count) from pgflow.step_tasks")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(attempts, 0);
}

#[sqlx::test(migrations = false)]
async fn a_claim_never_matches_by_flow_only_by_queue_and_message(pool: PgPool) {
    install(&pool).await;
    let (v1, v2) = shared_flows(&pool).await;
    engine::start_flow(&pool, "triage_v2", &json!(1))
        .await
        .unwrap();
    // Message 1 of classify_threads exists; the same id on another queue matches nothing.
    let alerts = queue("deliver_slack_alerts");
    let tasks = engine::start_tasks(
        &pool,
        &alerts,
        &[1],
        Uuid::new_v4(),
        &pairs_for(&[&v1, &v2], &alerts),
    )
    .await
    .unwrap()
    .tasks;
    assert!(tasks.is_empty());
}

#[sqlx::test(migrations = false)]
async fn concurrent_claimers_never_get_the_same_task(pool: PgPool) {
    install(&pool).await;
    let f = compiled(
        &pool,
        FlowDefinition::new(flow("busy")).step(single("work", &[])),
    )
    .await;
    let inputs: Vec<_> = (0..300).map(|i| json!(i)).collect();
    engine::start_flows(&pool, "busy", &inputs).await.unwrap();
    let q = f.slug.default_queue();
    let pairs = pairs_for(&[&f], &q);

    let claimers: Vec<_> = (0..4)
        .map(|_| {
            let (pool, q, pairs) = (pool.clone(), q.clone(), pairs.clone());
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let batch = engine::read_and_start_tasks(&pool, &q, Uuid::new_v4(), &pairs, 7)
                        .await
                        .unwrap()
                        .tasks;
                    if batch.is_empty() {
                        return mine;
                    }
                    mine.extend(batch.into_iter().map(|t| t.run_id));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for c in claimers {
        all.extend(c.await.unwrap());
    }
    let distinct: HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), 300, "every task claimed");
    assert_eq!(distinct.len(), 300, "no task claimed twice");
}

#[sqlx::test(migrations = false)]
async fn a_queued_task_of_a_failed_run_is_failed_at_claim_not_returned(pool: PgPool) {
    install(&pool).await;
    let (v1, _) = shared_flows(&pool).await;
    let run = engine::start_flow(&pool, "triage_v1", &json!(1))
        .await
        .unwrap();
    // The run failed while this task's row was locked by someone else (so fail_runs skipped it).
    sqlx::query("update pgflow.runs set status = 'failed', failed_at = now() where run_id = $1")
        .bind(run.run_id)
        .execute(&pool)
        .await
        .unwrap();
    let classify = queue("classify_threads");
    assert!(
        claim(&pool, &classify, &pairs_for(&[&v1], &classify))
            .await
            .is_empty()
    );
    assert_eq!(
        task_rows(&pool, run.run_id).await,
        vec![("classify".into(), 0, "failed".into(), 0)]
    );
    assert!(
        messages(&pool, "classify_threads").await.is_empty(),
        "its message is off the queue"
    );
}

#[sqlx::test(migrations = false)]
async fn a_claim_takes_every_message_it_read_off_the_queue_and_names_the_stale_ones(pool: PgPool) {
    install(&pool).await;
    let f = compiled(
        &pool,
        FlowDefinition::new(flow("hidden")).step(single("work", &[])),
    )
    .await;
    let q = f.slug.default_queue();
    let pairs = pairs_for(&[&f], &q);
    let runs = engine::start_flows(&pool, "hidden", &[json!(1), json!(2)])
        .await
        .unwrap();
    // A stale message: its task is no longer queued (here: started by hand).
    sqlx::query(
        "update pgflow.step_tasks set status = 'started', started_at = now(), attempts_count = 1
         where run_id = $1",
    )
    .bind(runs[1].run_id)
    .execute(&pool)
    .await
    .unwrap();

    let left_over: i64 =
        sqlx::query_scalar("select message_id from pgflow.step_tasks where run_id = $1")
            .bind(runs[1].run_id)
            .fetch_one(&pool)
            .await
            .unwrap();
    // Another: sent by hand, with no task at all.
    let hand_sent: i64 = sqlx::query_scalar("select pgmq.send('hidden', '{\"x\": 1}')")
        .fetch_one(&pool)
        .await
        .unwrap();

    let claim = engine::read_and_start_tasks(&pool, &q, Uuid::new_v4(), &pairs, 10)
        .await
        .unwrap();
    let claimed = claim.tasks;
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].run_id, runs[0].run_id);
    assert_eq!(
        claim.stale_message_ids,
        vec![left_over, hand_sent],
        "the claim names the stale messages it removed"
    );
    // The claimed task is tracked by its row now; the queue holds only waiting messages, and
    // the claim archived none of them.
    assert!(messages(&pool, "hidden").await.is_empty());
    assert_eq!(archived(&pool, "hidden").await, 0);
    assert_eq!(
        task_rows(&pool, runs[0].run_id).await,
        vec![("work".into(), 0, "started".into(), 1)]
    );
}

#[sqlx::test(migrations = false)]
async fn a_claimed_task_carries_its_steps_timeout_or_else_its_flows(pool: PgPool) {
    install(&pool).await;
    let mut definition = FlowDefinition::new(flow("timed"))
        .options(pgflow::definition::FlowOptions {
            timeout: std::time::Duration::from_secs(45),
            ..pgflow::definition::FlowOptions::default()
        })
        .step(single("quick", &[]).queue(queue("timed_work")))
        .step(single("inherits", &[]).queue(queue("timed_work")));
    definition.steps[0].options = pgflow::definition::StepOptions {
        timeout: Some(std::time::Duration::from_secs(7)),
        ..pgflow::definition::StepOptions::default()
    };
    let definition = compiled(&pool, definition).await;
    engine::start_flows(&pool, "timed", &[json!(1)])
        .await
        .unwrap();

    let tasks = claim(
        &pool,
        &queue("timed_work"),
        &pairs_for(&[&definition], &queue("timed_work")),
    )
    .await;
    let mut timeouts: Vec<(String, i32)> = tasks
        .iter()
        .map(|t| (t.step_slug.to_string(), t.timeout_seconds))
        .collect();
    timeouts.sort();
    assert_eq!(
        timeouts,
        vec![("inherits".to_owned(), 45), ("quick".to_owned(), 7)],
        "a step's own timeout wins; a step without one gets the flow's"
    );
}
