//! The run-state tables refuse rows without parents and duplicate queued messages, whoever
//! writes them (the checks run per statement, over all of its rows).

use pgflow::definition::FlowDefinition;
use pgflow::engine;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{compiled, flow, install, single};

/// The SQLSTATE and message of a statement that must fail.
async fn refusal(pool: &PgPool, sql: &str, run_id: Uuid) -> (String, String) {
    let error = sqlx::query(sql)
        .bind(run_id)
        .execute(pool)
        .await
        .expect_err("the statement must be refused");
    let database = error.as_database_error().expect("a database error");
    (
        database.code().expect("a SQLSTATE").into_owned(),
        database.message().to_owned(),
    )
}

#[sqlx::test(migrations = false)]
async fn step_states_tasks_and_attempts_without_parents_are_refused(pool: PgPool) {
    install(&pool).await;
    compiled(
        &pool,
        FlowDefinition::new(flow("parents")).step(single("only", &[])),
    )
    .await;
    let started = engine::start_flow(&pool, "parents", &json!(null))
        .await
        .unwrap();

    let missing_run = Uuid::new_v4();
    let (code, message) = refusal(
        &pool,
        "insert into pgflow.step_states (run_id, step_slug, flow_slug, remaining_deps)
         values ($1, 'only', 'parents', 0)",
        missing_run,
    )
    .await;
    assert_eq!(code, "23503");
    assert!(
        message.contains(&format!("run {missing_run}, which does not exist")),
        "{message}"
    );

    let (code, message) = refusal(
        &pool,
        "insert into pgflow.step_states (run_id, step_slug, flow_slug, remaining_deps)
         values ($1, 'elsewhere', 'parents', 0)",
        started.run_id,
    )
    .await;
    assert_eq!(code, "23503");
    assert!(
        message.contains("step parents.elsewhere, which is not defined"),
        "{message}"
    );

    // One good row does not carry a bad one through: the whole statement is refused.
    let (code, message) = refusal(
        &pool,
        "insert into pgflow.step_tasks (run_id, step_slug, task_index, flow_slug, queue_name,
                                        message_id)
         values ($1, 'only', 1, 'parents', 'parents', 1000001),
                ($1, 'nowhere', 0, 'parents', 'parents', 1000002)",
        started.run_id,
    )
    .await;
    assert_eq!(code, "23503");
    assert!(
        message.contains("refers to a step state that does not exist"),
        "{message}"
    );
    let tasks: i64 = sqlx::query_scalar("select count(*) from pgflow.step_tasks")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(tasks, 1, "only the run's own task is stored");

    let (code, message) = refusal(
        &pool,
        "insert into pgflow.task_attempts (run_id, step_slug, task_index, attempt, outcome,
                                           error_message)
         values ($1, 'only', 0, 1, 'failed', 'boom'), ($1, 'only', 7, 1, 'failed', 'boom')",
        started.run_id,
    )
    .await;
    assert_eq!(code, "23503");
    assert!(
        message.contains("attempt 1 of task") && message.contains("only, 7)"),
        "{message}"
    );
}

#[sqlx::test(migrations = false)]
async fn two_queued_tasks_cannot_share_a_message(pool: PgPool) {
    install(&pool).await;
    compiled(
        &pool,
        FlowDefinition::new(flow("shared_message")).step(single("only", &[])),
    )
    .await;
    let started = engine::start_flow(&pool, "shared_message", &json!(null))
        .await
        .unwrap();
    let (code, _) = refusal(
        &pool,
        "insert into pgflow.step_tasks (run_id, step_slug, task_index, flow_slug, queue_name,
                                        message_id)
         select run_id, step_slug, 1, flow_slug, queue_name, message_id
         from pgflow.step_tasks where run_id = $1",
        started.run_id,
    )
    .await;
    assert_eq!(code, "23505");
}

#[sqlx::test(migrations = false)]
async fn rows_that_break_a_state_invariant_are_refused(pool: PgPool) {
    install(&pool).await;
    compiled(
        &pool,
        FlowDefinition::new(flow("invariants")).step(single("only", &[])),
    )
    .await;
    let run = engine::start_flow(&pool, "invariants", &json!(null))
        .await
        .unwrap()
        .run_id;
    let broken = [
        // A completed run has its output and completion time.
        (
            "update pgflow.runs set status = 'completed', completed_at = now() where run_id = $1",
            "runs_row_valid",
        ),
        (
            "update pgflow.runs set remaining_steps = -1 where run_id = $1",
            "runs_row_valid",
        ),
        (
            "update pgflow.runs set status = 'paused' where run_id = $1",
            "runs_row_valid",
        ),
        // A cancelled run has its cancellation time, and only it has a reason.
        (
            "update pgflow.runs set cancel_reason = 'why' where run_id = $1",
            "runs_row_valid",
        ),
        // A started step has its start time and its task counts.
        (
            "update pgflow.step_states set remaining_tasks = null where run_id = $1",
            "step_states_row_valid",
        ),
        (
            "update pgflow.step_states set remaining_tasks = initial_tasks + 1 where run_id = $1",
            "step_states_row_valid",
        ),
        (
            "update pgflow.step_states set skip_reason = 'bored' where run_id = $1",
            "step_states_row_valid",
        ),
        // A completed task has its output; a queued one has none.
        (
            "update pgflow.step_tasks set status = 'completed', completed_at = now()
             where run_id = $1",
            "step_tasks_row_valid",
        ),
        (
            "update pgflow.step_tasks set output = '1' where run_id = $1",
            "step_tasks_row_valid",
        ),
        (
            "update pgflow.step_tasks set attempts_count = -1 where run_id = $1",
            "step_tasks_row_valid",
        ),
    ];
    for (sql, constraint) in broken {
        let (code, message) = refusal(&pool, sql, run).await;
        assert_eq!(code, "23514", "{sql}: {message}");
        assert!(message.contains(constraint), "{sql}: {message}");
    }
    // The same rows, consistent, pass.
    sqlx::query(
        "update pgflow.runs set status = 'cancelled', cancelled_at = now(), cancel_reason = 'ok'
         where run_id = $1",
    )
    .bind(run)
    .execute(&pool)
    .await
    .unwrap();
}
