//! Aliases, versions, coverage and the fenced production rollout, with several workers.

use std::time::Duration;

use pgflow::engine::{self, Activation};
use pgflow::engine::{CompileStatus, SupportedPairs};
use pgflow::{Client, FlowQueue, Worker, WorkerError, WorkerHandle};
use pgflow::{Start, StartOptions};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{install, worker_config};

#[pgflow::flow(slug = "triage_v1", alias = "triage", version = 1)]
pub mod triage_v1 {
    use super::*;

    #[step(queue = "classify_threads")]
    pub async fn classify(input: Value) -> Result<String, String> {
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(format!("v1:{input}"))
    }

    #[step(depends_on = [classify], queue = "deliver_slack_alerts")]
    pub async fn alert(classify: String) -> Result<String, String> {
        Ok(format!("{classify}:alerted-by-v1"))
    }
}

#[pgflow::flow(slug = "triage_v2", alias = "triage", version = 2)]
pub mod triage_v2 {
    use super::*;

    #[step(queue = "classify_threads")]
    pub async fn classify(input: Value) -> Result<String, String> {
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(format!("v2:{input}"))
    }

    #[step(depends_on = [classify], queue = "deliver_slack_alerts")]
    pub async fn alert(classify: String) -> Result<String, String> {
        Ok(format!("{classify}:alerted-by-v2"))
    }
}

async fn v1_workers(pool: &PgPool) -> (WorkerHandle, WorkerHandle) {
    let classify = Worker::start_with(
        triage_v1::deployment(),
        worker_config(triage_v1::Queue::ClassifyThreads, pool)
            .function_name("classify_threads")
            .max_concurrent(1),
    )
    .await
    .unwrap();
    let alerts = Worker::start_with(
        triage_v1::deployment(),
        worker_config(triage_v1::Queue::DeliverSlackAlerts, pool)
            .function_name("deliver_slack_alerts")
            .max_concurrent(5),
    )
    .await
    .unwrap();
    (classify, alerts)
}

async fn both_versions_on(
    pool: &PgPool,
    queue: triage_v2::Queue,
    function: &str,
) -> Result<WorkerHandle, WorkerError> {
    Worker::start_with(
        (triage_v1::deployment(), triage_v2::deployment()),
        worker_config(queue, pool).function_name(function),
    )
    .await
}

async fn start_alias(client: &Client, n: usize, offset: usize) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            client
                .start(
                    Start::named("triage"),
                    &json!(offset + i),
                    StartOptions::new(),
                )
                .await
                .unwrap()
                .run_id(),
        );
    }
    ids
}

/// Waits until every given run has ended; returns `(flow_slug, alert output)` per run.
async fn outcomes(pool: &PgPool, runs: &[Uuid]) -> Vec<(String, String)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let rows: Vec<(String, String, Option<Value>)> = sqlx::query_as(
            "select flow_slug, status, output from pgflow.runs where run_id = any($1) order by started_at",
        )
        .bind(runs)
        .fetch_all(pool)
        .await
        .unwrap();
        if rows.iter().all(|(_, status, _)| status != "started")
            || tokio::time::Instant::now() > deadline
        {
            return rows
                .into_iter()
                .map(|(flow, status, output)| {
                    assert_eq!(status, "completed", "run of {flow} did not complete");
                    let alert = output.unwrap()["alert"].as_str().unwrap().to_owned();
                    (flow, alert)
                })
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn every_task_ran_once(pool: &PgPool) {
    let (tasks, once): (i64, i64) = sqlx::query_as(
        "select count(*), count(*) filter (where status = 'completed' and attempts_count = 1)
         from pgflow.step_tasks",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(
        once, tasks,
        "every task completed exactly once, on its first attempt"
    );
}

async fn active_target(pool: &PgPool) -> Option<String> {
    sqlx::query_scalar("select flow_slug from pgflow.aliases where alias = 'triage'")
        .fetch_optional(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_fenced_multi_function_rollout_loses_nothing_and_runs_nothing_twice(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let (old_classify, old_alerts) = v1_workers(&pool).await;
    assert_eq!(old_classify.flows()[0].activation, Activation::Activated);
    let v1_runs = start_alias(&client, 12, 0).await;

    // Begin: both functions disabled, their workers deprecated; wait until they stopped.
    let functions = vec![
        "classify_threads".to_owned(),
        "deliver_slack_alerts".to_owned(),
    ];
    let rollout = pgflow::rollout::begin(&pool, &functions).await.unwrap();
    pgflow::rollout::wait_for_workers(&pool, rollout, Duration::from_secs(15), |_| {})
        .await
        .unwrap();
    old_classify.wait().await.unwrap();
    old_alerts.wait().await.unwrap();

    // Deploy the (v1, v2) registries while disabled: they wait without compiling or registering.
    let pending_classify = tokio::spawn({
        let pool = pool.clone();
        async move {
            both_versions_on(&pool, triage_v2::Queue::ClassifyThreads, "classify_threads").await
        }
    });
    let pending_alerts = tokio::spawn({
        let pool = pool.clone();
        async move {
            both_versions_on(
                &pool,
                triage_v2::Queue::DeliverSlackAlerts,
                "deliver_slack_alerts",
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!pending_classify.is_finished() && !pending_alerts.is_finished());
    let v2_compiled: bool = sqlx::query_scalar(
        "select exists (select 1 from pgflow.flows where flow_slug = 'triage_v2')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(!v2_compiled, "a disabled worker does not compile");
    let live: i64 =
        sqlx::query_scalar("select count(*) from pgflow.workers where stopped_at is null")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(live, 0, "a disabled worker does not register");
    assert_eq!(active_target(&pool).await.as_deref(), Some("triage_v1"));

    // Finish: the recorded functions are enabled again; the new workers start and activate v2.
    assert_eq!(
        pgflow::rollout::finish(&pool, rollout).await.unwrap(),
        functions
    );
    let new_classify = pending_classify.await.unwrap().unwrap();
    let new_alerts = pending_alerts.await.unwrap().unwrap();
    assert_eq!(active_target(&pool).await.as_deref(), Some("triage_v2"));
    let v2_runs = start_alias(&client, 5, 100).await;

    let old = outcomes(&pool, &v1_runs).await;
    assert!(
        old.iter().all(|(flow, alert)| flow == "triage_v1"
            && alert.starts_with("v1:")
            && alert.ends_with("alerted-by-v1")),
        "{old:?}"
    );
    let new = outcomes(&pool, &v2_runs).await;
    assert!(
        new.iter().all(|(flow, alert)| flow == "triage_v2"
            && alert.starts_with("v2:")
            && alert.ends_with("alerted-by-v2")),
        "{new:?}"
    );
    every_task_ran_once(&pool).await;

    new_classify.shutdown();
    new_alerts.shutdown();
    new_classify.wait().await.unwrap();
    new_alerts.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn the_first_new_worker_activates_and_work_for_the_other_queue_waits_for_its_worker(
    pool: PgPool,
) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    engine::activate_flow(&pool, "triage_v1").await.unwrap();

    let classify = both_versions_on(&pool, triage_v2::Queue::ClassifyThreads, "classify_threads")
        .await
        .unwrap();
    let states: Vec<(String, CompileStatus, Activation)> = classify
        .flows()
        .iter()
        .map(|f| (f.flow_slug.clone(), f.compile, f.activation))
        .collect();
    assert_eq!(
        states,
        vec![
            (
                "triage_v1".into(),
                CompileStatus::Verified,
                Activation::Inactive
            ),
            (
                "triage_v2".into(),
                CompileStatus::Compiled,
                Activation::Activated
            ),
        ]
    );
    let run = client
        .start(Start::named("triage"), &json!("x"), StartOptions::new())
        .await
        .unwrap();
    let run_id = run.run_id();
    // classify runs; the alert task waits durably on its queue, which has no worker yet.
    let waiting = async || {
        sqlx::query_scalar::<_, String>(
            "select status from pgflow.step_tasks where run_id = $1 and step_slug = 'alert'",
        )
        .bind(run_id)
        .fetch_optional(&pool)
        .await
        .unwrap()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while waiting().await.is_none() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(waiting().await.as_deref(), Some("queued"));

    let alerts = both_versions_on(
        &pool,
        triage_v2::Queue::DeliverSlackAlerts,
        "deliver_slack_alerts",
    )
    .await
    .unwrap();
    assert_eq!(alerts.flows()[1].activation, Activation::Active);
    let output = run.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(output["alert"], json!("v2:\"x\":alerted-by-v2"));
    classify.shutdown();
    alerts.shutdown();
    classify.wait().await.unwrap();
    alerts.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_version_drains_before_it_can_leave_the_registry(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    client.deploy(&triage_v2::deployment()).await.unwrap();
    engine::activate_flow(&pool, "triage_v1").await.unwrap();
    let v1_runs = start_alias(&client, 3, 0).await;
    engine::activate_flow(&pool, "triage_v2").await.unwrap();

    let status = engine::drain_status(&pool, "triage_v1", Some("classify_threads"))
        .await
        .unwrap();
    assert_eq!(
        (
            status.started_runs,
            status.queued_tasks,
            status.safe_to_remove
        ),
        (3, 3, false)
    );
    assert_eq!(status.pending_steps, vec!["classify".to_owned()]);
    assert!(!status.active);

    // A registry without v1 refuses to start while v1 work remains.
    let refused = refused_gaps(
        &pool,
        triage_v2::deployment(),
        triage_v2::Queue::ClassifyThreads,
    )
    .await;
    assert_eq!(refused[0].flow_slug, "triage_v1");

    // (v1, v2) workers drain v1.
    let classify = both_versions_on(&pool, triage_v2::Queue::ClassifyThreads, "classify_threads")
        .await
        .unwrap();
    // classify done, alerts not yet: v1 is gone from classify_threads but not from the alerts queue.
    outcomes_on_queue_done(&pool, &v1_runs, "classify").await;
    let on_classify = engine::drain_status(&pool, "triage_v1", Some("classify_threads"))
        .await
        .unwrap();
    assert!(on_classify.safe_to_remove, "{on_classify:?}");
    let on_alerts = engine::drain_status(&pool, "triage_v1", Some("deliver_slack_alerts"))
        .await
        .unwrap();
    assert_eq!(
        (
            on_alerts.started_runs,
            on_alerts.queued_tasks,
            on_alerts.safe_to_remove
        ),
        (3, 3, false)
    );
    let everywhere = engine::drain_status(&pool, "triage_v1", None)
        .await
        .unwrap();
    assert!(!everywhere.safe_to_remove);

    let alerts = both_versions_on(
        &pool,
        triage_v2::Queue::DeliverSlackAlerts,
        "deliver_slack_alerts",
    )
    .await
    .unwrap();
    outcomes(&pool, &v1_runs).await;
    let drained = engine::drain_status(&pool, "triage_v1", None)
        .await
        .unwrap();
    assert!(drained.safe_to_remove, "{drained:?}");
    for worker in [classify, alerts] {
        worker.shutdown();
        worker.wait().await.unwrap();
    }

    // Now the registry without v1 starts.
    let v2_only = Worker::start_with(
        triage_v2::deployment(),
        worker_config(triage_v2::Queue::ClassifyThreads, &pool).function_name("classify_threads"),
    )
    .await
    .unwrap();
    v2_only.shutdown();
    v2_only.wait().await.unwrap();
}

async fn outcomes_on_queue_done(pool: &PgPool, runs: &[Uuid], step: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let done: i64 = sqlx::query_scalar(
            "select count(*) from pgflow.step_states where run_id = any($1) and step_slug = $2 and status = 'completed'",
        )
        .bind(runs)
        .bind(step)
        .fetch_one(pool)
        .await
        .unwrap();
        if done as usize == runs.len() || tokio::time::Instant::now() > deadline {
            assert_eq!(done as usize, runs.len());
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[sqlx::test(migrations = false)]
async fn concurrent_startups_activate_once_never_backwards_and_rollback_sticks(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    engine::activate_flow(&pool, "triage_v1").await.unwrap();

    let starts: Vec<_> = (0..4)
        .map(|i| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let queue = if i % 2 == 0 {
                    triage_v2::Queue::ClassifyThreads
                } else {
                    triage_v2::Queue::DeliverSlackAlerts
                };
                both_versions_on(&pool, queue, &format!("function_{i}"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut workers = Vec::new();
    for start in starts {
        workers.push(start.await.unwrap());
    }
    let activated = workers
        .iter()
        .filter(|w| w.flows()[1].activation == Activation::Activated)
        .count();
    assert_eq!(activated, 1, "exactly one startup moved the alias");
    assert!(
        workers
            .iter()
            .all(|w| w.flows()[0].activation == Activation::Inactive)
    );
    let history: Vec<(Option<String>, String, String)> = sqlx::query_as(
        "select from_flow_slug, to_flow_slug, reason from pgflow.alias_history order by change_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        history,
        vec![
            (None, "triage_v1".into(), "activated".into()),
            (
                Some("triage_v1".into()),
                "triage_v2".into(),
                "activated".into()
            ),
        ]
    );

    // Never backwards.
    assert_eq!(
        engine::activate_flow(&pool, "triage_v1").await.unwrap(),
        Activation::Inactive
    );
    assert_eq!(active_target(&pool).await.as_deref(), Some("triage_v2"));

    // The operator's rollback (`pgflow alias set`, whose output `pgflow-cli/tests/cli/`
    // checks); it returns the target it moved the alias from.
    assert_eq!(
        engine::set_alias(&pool, "triage", "triage_v1")
            .await
            .unwrap()
            .as_deref(),
        Some("triage_v2")
    );
    let run = client
        .start(
            Start::named("triage"),
            &json!("after rollback"),
            StartOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(run.run(&client).await.unwrap().flow_slug, "triage_v1");

    // A worker restarting with (v1, v2) does not undo the rollback.
    let restarted = both_versions_on(&pool, triage_v2::Queue::ClassifyThreads, "function_0")
        .await
        .unwrap();
    assert_eq!(restarted.flows()[1].activation, Activation::Inactive);
    assert_eq!(active_target(&pool).await.as_deref(), Some("triage_v1"));
    workers.push(restarted);
    for worker in workers {
        worker.shutdown();
        worker.wait().await.unwrap();
    }
}

// ------------------------------------------------------- startup coverage, one test each

/// Installs pgflow and deploys both versions (neither activated).
async fn both_deployed(pool: &PgPool) -> Client {
    install(pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    client.deploy(&triage_v2::deployment()).await.unwrap();
    client
}

/// The gaps that make a worker carrying only `registry` refuse to start on `queue`.
async fn refused_gaps<R, Q, At>(pool: &PgPool, registry: R, queue: Q) -> Vec<engine::CoverageGap>
where
    R: pgflow::worker::Registry + pgflow::worker::Routes<Q::Flow, At>,
    Q: FlowQueue,
{
    match Worker::start_with(registry, worker_config(queue, pool).function_name("f")).await {
        Err(WorkerError::Coverage { gaps, .. }) => gaps,
        Err(other) => panic!("expected a coverage error, got {other}"),
        Ok(_) => panic!("expected a coverage error, the worker started"),
    }
}

/// `(queued_tasks, started_tasks, started_runs)` of a gap.
fn counts(gap: &engine::CoverageGap) -> (i64, i64, i64) {
    (gap.queued_tasks, gap.started_tasks, gap.started_runs)
}

#[sqlx::test(migrations = false)]
async fn coverage_requires_the_active_alias_target(pool: PgPool) {
    both_deployed(&pool).await;
    engine::activate_flow(&pool, "triage_v2").await.unwrap();
    // No run, no task: only the active target needs the queue.
    let gaps = refused_gaps(
        &pool,
        triage_v1::deployment(),
        triage_v1::Queue::ClassifyThreads,
    )
    .await;
    assert_eq!(gaps.len(), 1);
    assert_eq!(
        (gaps[0].flow_slug.as_str(), gaps[0].step_slug.as_str()),
        ("triage_v2", "classify")
    );
    assert_eq!(gaps[0].active_alias.as_deref(), Some("triage"));
    assert_eq!(counts(&gaps[0]), (0, 0, 0));
}

#[sqlx::test(migrations = false)]
async fn coverage_requires_draining_versions_whose_runs_can_still_reach_the_queue(pool: PgPool) {
    let client = both_deployed(&pool).await;
    engine::activate_flow(&pool, "triage_v1").await.unwrap();
    start_alias(&client, 2, 0).await; // their classify tasks wait; alert is still to come
    engine::activate_flow(&pool, "triage_v2").await.unwrap();
    let gaps = refused_gaps(
        &pool,
        triage_v2::deployment(),
        triage_v2::Queue::DeliverSlackAlerts,
    )
    .await;
    assert_eq!(gaps.len(), 1);
    assert_eq!(
        (gaps[0].flow_slug.as_str(), gaps[0].step_slug.as_str()),
        ("triage_v1", "alert")
    );
    assert_eq!(gaps[0].active_alias, None);
    assert_eq!(counts(&gaps[0]), (0, 0, 2));
}

#[sqlx::test(migrations = false)]
async fn coverage_requires_every_queued_task(pool: PgPool) {
    let client = both_deployed(&pool).await;
    engine::activate_flow(&pool, "triage_v2").await.unwrap();
    // Started by concrete slug: v1 is not active, yet its task is queued on classify_threads.
    client
        .start(
            Start::flow::<triage_v1::Flow>(),
            &json!(1),
            StartOptions::new(),
        )
        .await
        .unwrap();
    let gaps = refused_gaps(
        &pool,
        triage_v2::deployment(),
        triage_v2::Queue::ClassifyThreads,
    )
    .await;
    assert_eq!(
        (gaps[0].flow_slug.as_str(), gaps[0].step_slug.as_str()),
        ("triage_v1", "classify")
    );
    assert_eq!((gaps[0].queued_tasks, gaps[0].started_tasks), (1, 0));
}

#[sqlx::test(migrations = false)]
async fn coverage_requires_every_started_task(pool: PgPool) {
    let client = both_deployed(&pool).await;
    engine::activate_flow(&pool, "triage_v2").await.unwrap();
    client
        .start(
            Start::flow::<triage_v1::Flow>(),
            &json!(1),
            StartOptions::new(),
        )
        .await
        .unwrap();
    // A worker that has since died claimed it: the task is started (recoverable).
    let queue = pgflow::names::QueueName::new("classify_threads").unwrap();
    let pairs = SupportedPairs::routed_to(triage_v1::deployment().definition(), &queue);
    let claimed = engine::read_and_start_tasks(&pool, &queue, Uuid::new_v4(), &pairs, 10)
        .await
        .unwrap()
        .tasks;
    assert_eq!(claimed.len(), 1);
    let gaps = refused_gaps(
        &pool,
        triage_v2::deployment(),
        triage_v2::Queue::ClassifyThreads,
    )
    .await;
    assert_eq!(
        (gaps[0].flow_slug.as_str(), gaps[0].step_slug.as_str()),
        ("triage_v1", "classify")
    );
    assert_eq!((gaps[0].queued_tasks, gaps[0].started_tasks), (0, 1));
}
