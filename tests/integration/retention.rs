//! Retention: `pgflow.prune` deletes what ended before a cutoff (runs with their step states,
//! tasks and attempt history, archived messages, stopped workers) and never touches live work.

use std::time::Duration;

use pgflow::definition::{FlowDefinition, FlowOptions};
use pgflow::engine::{self, ClaimedTask, Pruned, RunStatus, TaskCompletion, TaskFailure};
use pgflow::names::QueueName;
use pgflow::{Client, EngineError, ProcessConfig, Worker};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{
    archived, compiled, eventually, flow, install, messages, pairs_for, run, single, worker_config,
};

const DAY: Duration = Duration::from_secs(86_400);

/// `first → second`, one attempt per task.
fn two_steps(slug: &str) -> FlowDefinition {
    FlowDefinition::new(flow(slug))
        .options(FlowOptions {
            max_attempts: 1,
            ..FlowOptions::DEFAULT
        })
        .step(single("first", &[]))
        .step(single("second", &["first"]))
}

/// Moves a run's end, and the archiving of its tasks' messages, `days` into the past.
async fn age(pool: &PgPool, queue: &str, run_id: Uuid, days: i32) {
    sqlx::query(
        "update pgflow.runs
         set completed_at = completed_at - make_interval(days => $2),
             failed_at = failed_at - make_interval(days => $2)
         where run_id = $1",
    )
    .bind(run_id)
    .bind(days)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "update pgmq.a_{queue} a set archived_at = archived_at - make_interval(days => $2)
         from pgflow.step_tasks t where t.run_id = $1 and t.message_id = a.msg_id"
    ))
    .bind(run_id)
    .bind(days)
    .execute(pool)
    .await
    .unwrap();
}

/// Claims the visible tasks of `queue` as an SQL caller that reads messages itself does: PGMQ's
/// read, then `start_tasks`, which archives the messages it is given. (A worker's claim pops
/// its messages and archives none; cancellations and failures archive the messages of queued
/// tasks.) These tests prune what this archives.
async fn claim_archiving(
    pool: &PgPool,
    queue: &QueueName,
    definition: &FlowDefinition,
) -> Vec<ClaimedTask> {
    let ids: Vec<i64> = sqlx::query_scalar("select msg_id from pgmq.read($1, 30, 100)")
        .bind(queue.as_str())
        .fetch_all(pool)
        .await
        .unwrap();
    engine::start_tasks(
        pool,
        queue,
        &ids,
        Uuid::new_v4(),
        &pairs_for(&[definition], queue),
    )
    .await
    .unwrap()
    .tasks
}

/// Completes every task of `definition`'s runs, claiming with [`claim_archiving`].
async fn drain_archiving(pool: &PgPool, definition: &FlowDefinition) {
    let queue = definition.slug.default_queue();
    loop {
        let tasks = claim_archiving(pool, &queue, definition).await;
        if tasks.is_empty() {
            return;
        }
        let done: Vec<_> = tasks
            .iter()
            .map(|t| TaskCompletion::of(t, json!("done")))
            .collect();
        engine::complete_tasks(pool, &done).await.unwrap();
    }
}

/// Starts a run of `slug` and completes it.
async fn completed_run(pool: &PgPool, definition: &FlowDefinition) -> Uuid {
    let started = engine::start_flow(pool, definition.slug.as_str(), &json!(null))
        .await
        .unwrap();
    drain_archiving(pool, definition).await;
    assert_eq!(run(pool, started.run_id).await.status, RunStatus::Completed);
    started.run_id
}

async fn count(pool: &PgPool, sql: &str, run_id: Uuid) -> i64 {
    sqlx::query_scalar(sql)
        .bind(run_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Rows a run left behind, live or archived: (run, step states, tasks).
async fn rows_of(pool: &PgPool, run_id: Uuid) -> (i64, i64, i64) {
    (
        count(
            pool,
            "select count(*) from pgflow.all_runs where run_id = $1",
            run_id,
        )
        .await,
        count(
            pool,
            "select count(*) from pgflow.all_step_states where run_id = $1",
            run_id,
        )
        .await,
        count(
            pool,
            "select count(*) from pgflow.all_step_tasks where run_id = $1",
            run_id,
        )
        .await,
    )
}

#[sqlx::test(migrations = false)]
async fn pruning_deletes_what_ended_before_the_cutoff_and_keeps_live_and_recent_work(pool: PgPool) {
    install(&pool).await;
    let f = compiled(&pool, two_steps("kept")).await;
    let q = f.slug.default_queue();

    let old_completed = completed_run(&pool, &f).await;
    let old_failed = engine::start_flow(&pool, "kept", &json!(null))
        .await
        .unwrap()
        .run_id;
    let tasks = claim_archiving(&pool, &q, &f).await;
    engine::fail_tasks(&pool, &[TaskFailure::of(&tasks[0], "boom")])
        .await
        .unwrap();
    assert_eq!(run(&pool, old_failed).await.status, RunStatus::Failed);
    let recent_completed = completed_run(&pool, &f).await;
    // Live: its first task is queued, its message waiting.
    let live = engine::start_flow(&pool, "kept", &json!(null))
        .await
        .unwrap()
        .run_id;
    age(&pool, "kept", old_completed, 2).await;
    age(&pool, "kept", old_failed, 2).await;
    // A live run that started long ago is still live.
    sqlx::query(
        "update pgflow.runs set started_at = started_at - interval '30 days' where run_id = $1",
    )
    .bind(live)
    .execute(&pool)
    .await
    .unwrap();

    sqlx::raw_sql(
        "insert into pgflow.worker_functions (function_name) values ('tests');
         insert into pgflow.workers (worker_id, queue_name, function_name, flow_slugs,
                                     started_at, stopped_at)
         values (gen_random_uuid(), 'kept', 'tests', '{kept}', now() - interval '3 days',
                 now() - interval '2 days'),
                (gen_random_uuid(), 'kept', 'tests', '{kept}', now() - interval '3 days',
                 now() - interval '1 hour'),
                (gen_random_uuid(), 'kept', 'tests', '{kept}', now() - interval '3 days', null)",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(archived(&pool, "kept").await, 5);

    let attempts = "select count(*) from pgflow.task_attempts where run_id = $1";
    assert_eq!(
        count(&pool, attempts, old_failed).await,
        1,
        "the failed attempt's history"
    );

    let pruned = engine::prune(&pool, DAY, 100).await.unwrap();
    assert!(!pruned.busy);
    assert_eq!(
        count(&pool, attempts, old_failed).await,
        0,
        "history goes with its run"
    );
    assert_eq!(
        (pruned.runs, pruned.step_states, pruned.tasks),
        // Tasks: two of the completed run, one of the failed run (its second step never started).
        (2, 4, 3)
    );
    assert_eq!((pruned.archived_messages, pruned.workers), (3, 1));
    assert_eq!(rows_of(&pool, old_completed).await, (0, 0, 0));
    assert_eq!(rows_of(&pool, old_failed).await, (0, 0, 0));
    assert_eq!(rows_of(&pool, recent_completed).await, (1, 2, 2));
    assert_eq!(rows_of(&pool, live).await, (1, 2, 1));
    assert_eq!(run(&pool, live).await.status, RunStatus::Started);
    assert_eq!(
        messages(&pool, "kept").await.len(),
        1,
        "the live task's message"
    );
    assert_eq!(
        archived(&pool, "kept").await,
        2,
        "the recent run's messages"
    );
    let workers: i64 = sqlx::query_scalar("select count(*) from pgflow.workers")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(workers, 2, "the live and the recently stopped worker");

    // The live run still completes, and a second prune finds nothing.
    drain_archiving(&pool, &f).await;
    assert_eq!(run(&pool, live).await.status, RunStatus::Completed);
    assert_eq!(
        engine::prune(&pool, DAY, 100).await.unwrap(),
        Pruned::default()
    );
}

#[sqlx::test(migrations = false)]
async fn pruning_goes_in_bounded_batches_and_leaves_a_run_locked_by_a_late_result_for_later(
    pool: PgPool,
) {
    install(&pool).await;
    let f = compiled(&pool, two_steps("batched")).await;
    let mut runs = Vec::new();
    for _ in 0..4 {
        let run_id = completed_run(&pool, &f).await;
        age(&pool, "batched", run_id, 2).await;
        runs.push(run_id);
    }

    // A late result for the first run holds its lock (the engine locks runs first).
    let mut late = pool.begin().await.unwrap();
    sqlx::query("select 1 from pgflow.runs where run_id = $1 for no key update")
        .bind(runs[0])
        .execute(&mut *late)
        .await
        .unwrap();

    // Batches of two runs and two archived messages (of the eight, two per run).
    let mut calls = Vec::new();
    for _ in 0..3 {
        let pruned = engine::prune(&pool, DAY, 2).await.unwrap();
        calls.push((pruned.runs, pruned.archived_messages, pruned.is_full(2)));
    }
    assert_eq!(calls, vec![(2, 2, true), (1, 2, true), (0, 2, true)]);
    assert_eq!(rows_of(&pool, runs[0]).await, (1, 2, 2));
    assert_eq!(archived(&pool, "batched").await, 2);
    late.commit().await.unwrap();

    let total = engine::prune_all(&pool, DAY, 1).await.unwrap();
    assert_eq!(
        (total.busy, total.runs, total.tasks, total.archived_messages),
        (false, 1, 2, 2)
    );
    for run_id in runs {
        assert_eq!(rows_of(&pool, run_id).await, (0, 0, 0));
    }
    assert_eq!(archived(&pool, "batched").await, 0);
}

#[sqlx::test(migrations = false)]
async fn prune_refuses_bad_arguments_and_one_caller_prunes_at_a_time(pool: PgPool) {
    install(&pool).await;
    match engine::prune(&pool, DAY, 0).await {
        Err(EngineError::InvalidArguments(message)) => {
            assert!(
                message.contains("batch_size must be at least 1"),
                "{message}"
            )
        }
        other => panic!("expected invalid arguments, got {other:?}"),
    }
    let error = sqlx::query("select * from pgflow.prune(interval '-1 day')")
        .execute(&pool)
        .await
        .unwrap_err();
    let error = error.as_database_error().unwrap();
    assert_eq!(error.code().as_deref(), Some("PF005"));
    assert!(
        error.message().contains("older_than must be zero or more"),
        "{}",
        error.message()
    );

    let mut first = pool.begin().await.unwrap();
    let pruned = engine::prune(&mut *first, DAY, 10).await.unwrap();
    assert!(!pruned.busy);
    let concurrent = engine::prune(&pool, DAY, 10).await.unwrap();
    let mut nothing_but_busy = Pruned::default();
    nothing_but_busy.busy = true;
    assert_eq!(concurrent, nothing_but_busy);
    first.commit().await.unwrap();
    assert!(!engine::prune(&pool, DAY, 10).await.unwrap().busy);
}

#[pgflow::flow(slug = "retained")]
pub mod retained {
    #[step]
    pub async fn only(input: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(input)
    }
}

#[sqlx::test(migrations = false)]
async fn a_worker_with_a_retention_prunes_ended_runs_at_its_maintenance_pass(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let process = || ProcessConfig::new().stalled_check_interval(Duration::from_millis(100));
    let config = |process: ProcessConfig| {
        worker_config(retained::Queue::Retained, &pool)
            .connection(Client::with_config(pool.clone(), process))
    };
    // Without a retention, nothing is pruned.
    let keeper = Worker::start_with(retained::deployment(), config(process()))
        .await
        .unwrap();
    let old = retained::start(&client, &json!(1)).await.unwrap();
    old.wait(&client, Duration::from_secs(10)).await.unwrap();
    age(&pool, "retained", old.run_id(), 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rows_of(&pool, old.run_id()).await, (1, 1, 1));
    keeper.shutdown();
    keeper.wait().await.unwrap();

    let pruner = Worker::start_with(retained::deployment(), config(process().retention(DAY)))
        .await
        .unwrap();
    let recent = retained::start(&client, &json!(2)).await.unwrap();
    recent.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert!(
        eventually(10, async || rows_of(&pool, old.run_id()).await == (0, 0, 0)).await,
        "the worker pruned the old run"
    );
    assert_eq!(rows_of(&pool, recent.run_id()).await, (1, 1, 1));
    assert_eq!(
        archived(&pool, "retained").await,
        0,
        "a worker's claims take their messages off the queue and archive none"
    );
    pruner.shutdown();
    pruner.wait().await.unwrap();
}
