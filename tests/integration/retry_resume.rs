//! Retrying a failed run (only its failed steps and map elements run again, with a fresh budget
//! of attempts; a late result from before the retry is discarded) and resuming an ended run from
//! a step (a new linked run; upstream outputs kept, the old run untouched); bulk forms with a
//! dry run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pgflow::engine::{self, RunFilter, SupportedPairs, TaskCompletion, TaskFailure};
use pgflow::{Client, EngineError, RunError, RunStatus, Worker};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{claim, install, queue, worker_config};

/// While set, `flaky_v1.square` fails on the element 2.
static BROKEN: AtomicBool = AtomicBool::new(true);

#[pgflow::flow(slug = "flaky_v1", input = u32, max_attempts = 2, base_delay = 0)]
pub mod flaky_v1 {
    use super::*;

    #[step(queue = "retry_flaky")]
    pub async fn list(input: u32) -> Result<Vec<u32>, String> {
        Ok((1..=input).collect())
    }

    #[step(depends_on = [list], map = list, queue = "retry_flaky")]
    pub async fn square(item: u32) -> Result<u32, String> {
        if item == 2 && BROKEN.load(Ordering::SeqCst) {
            return Err("element 2 is broken".to_owned());
        }
        Ok(item * item)
    }

    #[step(depends_on = [square], queue = "retry_flaky")]
    pub async fn total(square: Vec<u32>) -> Result<u32, String> {
        Ok(square.iter().sum())
    }
}

#[pgflow::flow(slug = "chain_v1", input = u32)]
pub mod chain_v1 {
    #[step(queue = "resume_chain")]
    pub async fn a(input: u32) -> Result<u32, String> {
        Ok(input + 1)
    }

    #[step(depends_on = [a], queue = "resume_chain")]
    pub async fn b(a: u32) -> Result<u32, String> {
        Ok(a * 10)
    }

    #[step(depends_on = [b], queue = "resume_chain")]
    pub async fn c(b: u32) -> Result<u32, String> {
        Ok(b + 5)
    }
}

#[pgflow::flow(slug = "once_v1", input = u32, max_attempts = 1)]
pub mod once_v1 {
    #[step(queue = "retry_once")]
    pub async fn only(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

/// `(step, task index, status, attempts, attempts_base)` of a run's tasks.
async fn tasks(pool: &PgPool, run_id: Uuid) -> Vec<(String, i32, String, i32, i32)> {
    sqlx::query_as(
        "select step_slug, task_index, status, attempts_count, attempts_base
         from pgflow.step_tasks where run_id = $1 order by step_slug, task_index",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await
    .unwrap()
}

fn task(
    step: &str,
    index: i32,
    status: &str,
    attempts: i32,
    base: i32,
) -> (String, i32, String, i32, i32) {
    (step.to_owned(), index, status.to_owned(), attempts, base)
}

#[sqlx::test(migrations = false)]
async fn a_retried_run_reruns_only_its_failed_map_elements_with_fresh_attempts(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        flaky_v1::deployment(),
        worker_config(flaky_v1::Queue::RetryFlaky, &pool),
    )
    .await
    .unwrap();

    BROKEN.store(true, Ordering::SeqCst);
    let run = flaky_v1::start(&client, &3).await.unwrap();
    match run.wait(&client, Duration::from_secs(20)).await {
        Err(RunError::Failed { step_slug, .. }) => assert_eq!(step_slug, "square"),
        other => panic!("expected the run to fail at square, got {other:?}"),
    }
    assert_eq!(
        tasks(&pool, run.run_id()).await,
        vec![
            task("list", 0, "completed", 1, 0),
            task("square", 0, "completed", 1, 0),
            task("square", 1, "failed", 2, 0),
            task("square", 2, "completed", 1, 0),
        ]
    );

    BROKEN.store(false, Ordering::SeqCst);
    let outcome = run.retry(&client).await.unwrap();
    assert!(outcome.retried);
    assert_eq!(outcome.status, RunStatus::Started);
    let output = run.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.total, 1 + 4 + 9);

    // Only the failed element ran again, attempt 3 counted as the first of its new budget;
    // `list` and the other elements kept their outputs and ran once.
    assert_eq!(
        tasks(&pool, run.run_id()).await,
        vec![
            task("list", 0, "completed", 1, 0),
            task("square", 0, "completed", 1, 0),
            task("square", 1, "completed", 3, 2),
            task("square", 2, "completed", 1, 0),
            task("total", 0, "completed", 1, 0),
        ]
    );
    let stored = run.run(&client).await.unwrap();
    assert_eq!(stored.retry_count, 1);

    // A run that is not failed is left alone, and said so.
    let again = run.retry(&client).await.unwrap();
    assert!(!again.retried);
    assert_eq!(again.status, RunStatus::Completed);

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_late_result_of_an_attempt_from_before_the_retry_is_discarded(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&once_v1::deployment()).await.unwrap();
    let definition = once_v1::deployment();
    let pairs = SupportedPairs::routed_to(definition.definition(), &queue("retry_once"));
    let run = once_v1::start(&client, &5).await.unwrap();

    // Attempt 1 is claimed; its worker is presumed dead and the attempt fails for good, so the
    // run fails; then the run is retried.
    let first = claim(&pool, &queue("retry_once"), &pairs).await;
    engine::fail_tasks(&pool, &[TaskFailure::of(&first[0], "presumed dead")])
        .await
        .unwrap();
    assert_eq!(run.run(&client).await.unwrap().status, RunStatus::Failed);
    assert!(run.retry(&client).await.unwrap().retried);

    // The first attempt's result arrives late: discarded, before and after the new claim.
    let late = TaskCompletion::of(&first[0], 500.into());
    assert_eq!(
        engine::complete_tasks(&pool, std::slice::from_ref(&late))
            .await
            .unwrap(),
        0
    );
    let second = claim(&pool, &queue("retry_once"), &pairs).await;
    assert_eq!(second[0].attempt, 2);
    assert_eq!(
        engine::complete_tasks(&pool, std::slice::from_ref(&late))
            .await
            .unwrap(),
        0
    );
    assert_eq!(run.run(&client).await.unwrap().status, RunStatus::Started);

    engine::complete_tasks(&pool, &[TaskCompletion::of(&second[0], 5.into())])
        .await
        .unwrap();
    let output = run.wait(&client, Duration::from_secs(5)).await.unwrap();
    assert_eq!(output.only, 5);
}

#[sqlx::test(migrations = false)]
async fn resuming_from_a_step_reruns_it_and_what_follows_in_a_new_linked_run(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        chain_v1::deployment(),
        worker_config(chain_v1::Queue::ResumeChain, &pool),
    )
    .await
    .unwrap();
    let old = chain_v1::start(&client, &1).await.unwrap();
    let output = old.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.c, 25);
    let old_run = old.run(&client).await.unwrap();

    let new = old.resume_from(&client, "b").await.unwrap();
    assert_ne!(new.run_id(), old.run_id());
    let output = new.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.c, 25);
    let new_run = new.run(&client).await.unwrap();
    assert_eq!(new_run.resumed_from, Some(old.run_id()));
    assert_eq!(new_run.resumed_at_step.as_deref(), Some("b"));
    // `a` kept its output and did not run: the new run has no task for it.
    let steps: Vec<String> = tasks(&pool, new.run_id())
        .await
        .into_iter()
        .map(|t| t.0)
        .collect();
    assert_eq!(steps, vec!["b".to_owned(), "c".to_owned()]);
    let a_output: serde_json::Value = sqlx::query_scalar(
        "select output from pgflow.step_states where run_id = $1 and step_slug = 'a'",
    )
    .bind(new.run_id())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(a_output, serde_json::json!(2));
    // The old run is as it was.
    assert_eq!(old.run(&client).await.unwrap(), old_run);

    // What resume refuses.
    // (no worker serves `once_v1`: its run stays started)
    client.deploy(&once_v1::deployment()).await.unwrap();
    let going = once_v1::start(&client, &1).await.unwrap();
    match client.resume(going.run_id(), "only").await {
        Err(EngineError::RunControl(message)) => {
            assert!(message.contains("still going"), "{message}")
        }
        other => panic!("expected RunControl, got {other:?}"),
    }
    match client.resume(old.run_id(), "nope").await {
        Err(EngineError::RunControl(message)) => {
            assert!(
                message.contains("no step `nope`") && message.contains("a, b, c"),
                "{message}"
            );
        }
        other => panic!("expected RunControl, got {other:?}"),
    }
    let unknown = Uuid::new_v4();
    assert!(matches!(
        client.resume(unknown, "b").await,
        Err(EngineError::UnknownRun { run_id }) if run_id == unknown
    ));

    // Bulk: completed runs of the flow, from `c`, with a dry run first.
    let filter = RunFilter::all().flow("chain_v1");
    let completed = [RunStatus::Completed];
    let would = engine::resume_matching(&pool, &filter, "c", &completed, true)
        .await
        .unwrap();
    assert_eq!(
        would.len(),
        2,
        "the first run and the resumed one, both completed"
    );
    assert!(would.iter().all(|r| r.resumed_as.is_none()), "a dry run");
    let before: i64 = sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(before, 3);
    let resumed = engine::resume_matching(&pool, &filter, "c", &completed, false)
        .await
        .unwrap();
    assert_eq!(
        resumed.iter().map(|r| r.run_id).collect::<Vec<_>>(),
        would.iter().map(|r| r.run_id).collect::<Vec<_>>()
    );
    for r in &resumed {
        let new = engine::run(&pool, r.resumed_as.expect("a new run"))
            .await
            .unwrap();
        assert_eq!(new.resumed_from, Some(r.run_id));
    }
    let after: i64 = sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(after, 5);

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_failed_run_resumed_downstream_of_its_failure_reruns_the_failed_step_too(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&once_v1::deployment()).await.unwrap();
    client.deploy(&chain_v1::deployment()).await.unwrap();
    let definition = chain_v1::deployment();
    let pairs = SupportedPairs::routed_to(definition.definition(), &queue("resume_chain"));
    let run = chain_v1::start(&client, &1).await.unwrap();
    let a = claim(&pool, &queue("resume_chain"), &pairs).await;
    engine::complete_tasks(&pool, &[TaskCompletion::of(&a[0], 2.into())])
        .await
        .unwrap();
    let b = claim(&pool, &queue("resume_chain"), &pairs).await;
    engine::fail_tasks(&pool, &[TaskFailure::permanent(&b[0], "bad")])
        .await
        .unwrap();
    assert_eq!(run.run(&client).await.unwrap().status, RunStatus::Failed);

    // Bulk retry's dry run sees it; resuming from `c` reruns `b` too (it never completed).
    let failed = RunFilter::all().flow("chain_v1");
    assert_eq!(
        engine::retry_matching(&pool, &failed, true).await.unwrap(),
        vec![run.run_id()]
    );
    let new = run.resume_from(&client, "c").await.unwrap();
    let worker = Worker::start_with(
        chain_v1::deployment(),
        worker_config(chain_v1::Queue::ResumeChain, &pool),
    )
    .await
    .unwrap();
    let output = new.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.c, 25);
    let steps: Vec<String> = tasks(&pool, new.run_id())
        .await
        .into_iter()
        .map(|t| t.0)
        .collect();
    assert_eq!(steps, vec!["b".to_owned(), "c".to_owned()]);
    // The failed run stays failed (resume does not touch it); bulk retry then retries it.
    assert_eq!(run.run(&client).await.unwrap().status, RunStatus::Failed);
    assert_eq!(
        engine::retry_matching(&pool, &failed, false).await.unwrap(),
        vec![run.run_id()]
    );
    let output = run.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.c, 25);
    worker.shutdown();
    worker.wait().await.unwrap();
}
