//! Reading a run's steps through its handle (status, attempts, output, error per step) and
//! waiting for one step, as pgflow's TypeScript client does.

use std::time::Duration;

use pgflow::engine::StepStatus;
use pgflow::{Client, RunError, Worker};
use serde_json::json;
use sqlx::PgPool;

use crate::support::{install, worker_config};

#[pgflow::flow(slug = "stepwise_v1", input = u32, max_attempts = 2, base_delay = 0)]
pub mod stepwise_v1 {
    #[step(queue = "stepwise")]
    pub async fn parts(input: u32) -> Result<Vec<u32>, String> {
        Ok((0..input).collect())
    }

    #[step(depends_on = [parts], map = parts, queue = "stepwise")]
    pub async fn checked(item: u32) -> Result<u32, String> {
        if item == 7 {
            return Err(format!("element {item} is unlucky"));
        }
        Ok(item + 100)
    }

    #[step(depends_on = [checked], queue = "stepwise")]
    pub async fn count(checked: Vec<u32>) -> Result<usize, String> {
        Ok(checked.len())
    }
}

#[sqlx::test(migrations = false)]
async fn a_handle_reads_each_steps_state_and_waits_for_one(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        stepwise_v1::deployment(),
        worker_config(stepwise_v1::Queue::Stepwise, &pool),
    )
    .await
    .unwrap();

    let run = stepwise_v1::start(&client, &3).await.unwrap();
    let parts = run
        .wait_for_step(&client, "parts", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(parts.status, StepStatus::Completed);
    assert_eq!(parts.output, Some(json!([0, 1, 2])));
    run.wait(&client, Duration::from_secs(20)).await.unwrap();
    let steps = run.steps(&client).await.unwrap();
    let summary: Vec<_> = steps
        .iter()
        .map(|s| (s.step_slug.as_str(), s.status, s.tasks, s.output.clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "parts",
                StepStatus::Completed,
                Some(1),
                Some(json!([0, 1, 2]))
            ),
            (
                "checked",
                StepStatus::Completed,
                Some(3),
                Some(json!([100, 101, 102]))
            ),
            ("count", StepStatus::Completed, Some(1), Some(json!(3))),
        ]
    );
    assert!(
        steps
            .iter()
            .all(|s| s.max_attempt == Some(1) && s.ended_at.is_some())
    );

    // A failing element: the step shows its error and attempts; a step after it never ends.
    let failing = stepwise_v1::start(&client, &8).await.unwrap();
    let checked = failing
        .wait_for_step(&client, "checked", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(checked.status, StepStatus::Failed);
    assert_eq!(checked.max_attempt, Some(2));
    assert!(
        checked
            .error
            .as_deref()
            .is_some_and(|e| e.contains("element 7 is unlucky")),
        "{checked:?}"
    );
    match failing
        .wait_for_step(&client, "count", Duration::from_secs(20))
        .await
    {
        Err(RunError::StepNotReached {
            step_slug, status, ..
        }) => {
            assert_eq!(step_slug, "count");
            assert_eq!(status, "failed");
        }
        other => panic!("expected StepNotReached, got {other:?}"),
    }
    assert!(matches!(
        failing
            .wait_for_step(&client, "nope", Duration::from_secs(1))
            .await,
        Err(RunError::UnknownStep { .. })
    ));

    worker.shutdown();
    worker.wait().await.unwrap();
}
