//! Stalled-task recovery.

use pgflow::definition::FlowDefinition;
use pgflow::engine::{self, RunStatus};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{claim, compiled, flow, install, messages, pairs_for, run, single, task_rows};

/// Pretends the claimed tasks started long ago (their worker died an hour ago).
async fn age_started_tasks(pool: &PgPool) {
    sqlx::query("update pgflow.step_tasks set started_at = now() - interval '1 hour' where status = 'started'")
        .execute(pool)
        .await
        .unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_stalled_task_is_requeued_a_bounded_number_of_times(pool: PgPool) {
    install(&pool).await;
    let f = compiled(
        &pool,
        FlowDefinition::new(flow("stally")).step(single("slow", &[])),
    )
    .await;
    let q = f.slug.default_queue();
    let started = engine::start_flow(&pool, "stally", &json!(null))
        .await
        .unwrap();

    let first = claim(&pool, &q, &pairs_for(&[&f], &q)).await;
    assert_eq!(first.len(), 1);
    // Not stalled yet: within timeout + grace.
    assert!(
        engine::requeue_stalled_tasks(&pool, 30, 2)
            .await
            .unwrap()
            .is_empty()
    );

    for requeue in 1..=2 {
        age_started_tasks(&pool).await;
        let stalled = engine::requeue_stalled_tasks(&pool, 30, 2).await.unwrap();
        assert_eq!(stalled.len(), 1);
        assert!(stalled[0].requeued);
        // The claim archived the task's message; the requeue sent a new one.
        assert_eq!(stalled[0].message_id, Some(i64::from(requeue) + 1));
        let requeue_count: i32 = sqlx::query_scalar("select requeue_count from pgflow.step_tasks")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(requeue_count, requeue);
        // A new message, visible at once, and claimable with the next attempt.
        let waiting = messages(&pool, "stally").await;
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting[0].0, i64::from(requeue) + 1);
        assert!(waiting[0].2);
        let again = claim(&pool, &q, &pairs_for(&[&f], &q)).await;
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].attempt, requeue + 1);
    }

    age_started_tasks(&pool).await;
    let stalled = engine::requeue_stalled_tasks(&pool, 30, 2).await.unwrap();
    assert_eq!(stalled.len(), 1);
    assert!(!stalled[0].requeued, "the third stall is one too many");
    assert_eq!(run(&pool, started.run_id).await.status, RunStatus::Failed);
    assert_eq!(
        task_rows(&pool, started.run_id).await,
        vec![("slow".into(), 0, "failed".into(), 3)]
    );
    assert!(messages(&pool, "stally").await.is_empty());
}

#[sqlx::test(migrations = false)]
async fn a_late_completion_after_requeue_is_ignored(pool: PgPool) {
    install(&pool).await;
    let f = compiled(
        &pool,
        FlowDefinition::new(flow("zombie")).step(single("slow", &[])),
    )
    .await;
    let q = f.slug.default_queue();
    let started = engine::start_flow(&pool, "zombie", &json!(null))
        .await
        .unwrap();
    let lost = claim(&pool, &q, &pairs_for(&[&f], &q)).await.remove(0);
    age_started_tasks(&pool).await;
    engine::requeue_stalled_tasks(&pool, 30, 3).await.unwrap();

    let late = engine::complete_tasks(&pool, &[engine::TaskCompletion::of(&lost, json!("late"))])
        .await
        .unwrap();
    assert_eq!(late, 0, "the requeued task belongs to the next claim");
    assert_eq!(
        task_rows(&pool, started.run_id).await,
        vec![("slow".into(), 0, "queued".into(), 1)]
    );
}
