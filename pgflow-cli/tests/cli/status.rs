//! What the database holds, read: `pgflow status`, `runs`, `run`, `graph` and `workers` over a
//! half-done run, a worker that went silent, and empty results.

use std::time::Duration;

use pgflow::Client;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{claim, install, pgflow, queue_in_status, row_of, stderr, stdout, triage_v1};

#[sqlx::test(migrations = false)]
async fn status_runs_run_start_graph_and_workers(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let definition = triage_v1::deployment();
    client.deploy(&definition).await.unwrap();
    pgflow::engine::activate_flow(&pool, "triage_v1")
        .await
        .unwrap();

    // start through the alias
    let output = pgflow(
        &pool,
        &["start", "triage", "--input", "{\"n\": 1}", "--json"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let started: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(started["flow_slug"], json!("triage_v1"));
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    let output = pgflow(&pool, &["start", "triage", "--input", "{not json"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).starts_with("error: --input is not valid JSON"),
        "{}",
        stderr(&output)
    );

    // run classify so that the run is half way
    let queue = pgflow::names::QueueName::new("classify_threads").unwrap();
    let pairs = pgflow::engine::SupportedPairs::routed_to(definition.definition(), &queue);
    let tasks = claim(&pool, &queue, &pairs).await;
    pgflow::engine::complete_tasks(
        &pool,
        &[pgflow::engine::TaskCompletion::of(
            &tasks[0],
            json!("label"),
        )],
    )
    .await
    .unwrap();
    let worker = pgflow::Worker::start_with(
        triage_v1::deployment(),
        pgflow::WorkerConfig::new(triage_v1::Queue::ClassifyThreads)
            .pool(pool.clone())
            .function_name("cli_fn"),
    )
    .await
    .unwrap();

    let output = pgflow(&pool, &["status", "--json"]);
    let status: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let alerts = queue_in_status(&pool, "deliver_slack_alerts");
    assert_eq!(alerts["depth"], json!(1));
    let classify = queue_in_status(&pool, "classify_threads");
    assert_eq!(classify["workers"][0]["function_name"], json!("cli_fn"));
    assert_eq!(status["aliases"][0]["flow_slug"], json!("triage_v1"));
    let autovacuum: bool = sqlx::query_scalar("select current_setting('autovacuum')::boolean")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status["autovacuum"], json!(autovacuum));
    let text = stdout(&pgflow(&pool, &["status"]));
    // queue, depth, oldest, in flight, workers, serving
    assert_eq!(
        row_of(&text, "classify_threads"),
        [
            "classify_threads",
            "0",
            "-",
            "0",
            "1",
            "alive",
            "cli_fn[triage_v1]"
        ],
        "{text}"
    );
    let alerts = row_of(&text, "deliver_slack_alerts");
    assert_eq!(alerts[1], "1", "depth: {text}");
    assert_eq!(
        alerts[3..],
        ["0", "no", "live", "worker", "-"],
        "work waits and nothing serves it, said in words: {text}"
    );
    assert_eq!(
        text.contains("warning: autovacuum is off"),
        !autovacuum,
        "{text}"
    );

    let text = stdout(&pgflow(
        &pool,
        &["runs", "--flow", "triage_v1", "--status", "started"],
    ));
    assert!(text.contains(&run_id), "{text}");
    let output = pgflow(&pool, &["runs", "--status", "weird"]);
    assert_eq!(output.status.code(), Some(2));

    let text = stdout(&pgflow(&pool, &["run", &run_id]));
    // step, status, queue, tasks, attempts, took, ended (date and time), output size, error
    let classify = row_of(&text, "classify");
    assert_eq!(
        classify[..5],
        ["classify", "completed", "classify_threads", "1", "1"],
        "{text}"
    );
    assert_eq!(
        classify[classify.len() - 2..],
        ["7", "B"],
        "`\"label\"` is 7 bytes: {text}"
    );
    // No worker has claimed its task yet: queued, not started.
    let alert = row_of(&text, "alert");
    assert_eq!(
        alert[..3],
        ["alert", "queued", "deliver_slack_alerts"],
        "{text}"
    );

    let text = stdout(&pgflow(&pool, &["graph", "triage_v1", "--run", &run_id]));
    assert!(text.starts_with("flowchart TD"), "{text}");
    assert!(
        text.contains("classify --> alert") && text.contains("style classify fill:#b7e4c7"),
        "{text}"
    );
    let text = stdout(&pgflow(&pool, &["graph", "triage_v1", "--format", "dot"]));
    assert!(text.contains("\"classify\" -> \"alert\";"), "{text}");
    let output = pgflow(&pool, &["graph", "missing"]);
    assert_eq!(output.status.code(), Some(1));

    let text = stdout(&pgflow(&pool, &["workers", "deprecate", "cli_fn"]));
    assert_eq!(
        text.trim(),
        "1 live worker of `cli_fn` asked to drain and stop"
    );
    tokio::time::timeout(Duration::from_secs(15), worker.wait())
        .await
        .unwrap()
        .unwrap();
    let text = stdout(&pgflow(&pool, &["workers", "list", "--all"]));
    assert!(text.contains("stopped"), "{text}");
}

#[sqlx::test(migrations = false)]
async fn status_and_workers_list_agree_on_a_worker_that_went_silent(pool: PgPool) {
    install(&pool).await;
    let worker_id = killed_worker(&pool, "silent_fn", "76 s").await;
    sqlx::query("select pgflow.start_flow('triage_v1', 'null')")
        .execute(&pool)
        .await
        .unwrap();

    let text = stdout(&pgflow(&pool, &["workers", "list"]));
    let row = row_of(&text, &worker_id.simple().to_string()[..8]);
    assert_eq!(
        row[1..],
        [
            "classify_threads",
            "silent_fn",
            "stale",
            "1m",
            "ago",
            "triage_v1"
        ],
        "{text}"
    );
    let text = stdout(&pgflow(&pool, &["status"]));
    assert_eq!(
        row_of(&text, "classify_threads")[4..],
        ["no", "live", "worker,", "1", "stale", "-"],
        "{text}"
    );
    for (args, path) in [
        (vec!["workers", "list", "--json"], "/0/state"),
        (vec!["status", "--json"], "/queues/0/workers/0/state"),
    ] {
        let value: Value = serde_json::from_str(&stdout(&pgflow(&pool, &args))).unwrap();
        assert_eq!(
            value.pointer(path),
            Some(&json!("stale")),
            "{args:?}: {value}"
        );
    }

    // Silent for more than ten intervals: the next maintenance sweep declares it lost.
    sqlx::query("select * from pgflow.mark_lost_workers()")
        .execute(&pool)
        .await
        .unwrap();
    let text = stdout(&pgflow(&pool, &["workers", "list"]));
    assert!(
        text.starts_with("no workers running"),
        "a lost worker is not running: {text}"
    );
    let text = stdout(&pgflow(&pool, &["workers", "list", "--all"]));
    let row = row_of(&text, &worker_id.simple().to_string()[..8]);
    assert_eq!(row[3], "lost", "{text}");
    let value: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["status", "--json"]))).unwrap();
    assert_eq!(
        value.pointer("/queues/0/workers"),
        Some(&json!([])),
        "status lists running workers only: {value}"
    );
}

#[sqlx::test(migrations = false)]
async fn empty_results_say_so_in_a_line(pool: PgPool) {
    install(&pool).await;
    for (args, line) in [
        (
            &["runs"][..],
            "no runs yet (`pgflow start <flow>` starts one)",
        ),
        (
            &["workers", "list"][..],
            "no workers running (`pgflow workers list --all` includes stopped ones)",
        ),
        (
            &["alias", "list"][..],
            "no aliases yet: a worker creates its flows' aliases when it starts",
        ),
    ] {
        let output = pgflow(&pool, args);
        assert!(output.status.success(), "{}", stderr(&output));
        assert_eq!(stdout(&output).trim(), line, "{args:?}");
    }
    let text = stdout(&pgflow(&pool, &["status"]));
    assert!(text.starts_with("no queues yet"), "{text}");
    // Piped output carries no colour codes.
    assert!(!text.contains('\u{1b}'), "{text:?}");
}

/// Every command judges a worker killed minutes ago by the one liveness rule: stale, not live.
/// None counts it as live, none waits for it, and no refusal asks to stop it.
#[sqlx::test(migrations = false)]
async fn every_command_calls_a_worker_killed_minutes_ago_stale_and_none_waits_for_it(pool: PgPool) {
    install(&pool).await;
    let worker_id = killed_worker(&pool, "killed_fn", "4 min").await;

    let text = stdout(&pgflow(&pool, &["workers", "list"]));
    assert_eq!(
        row_of(&text, &worker_id.simple().to_string()[..8])[3],
        "stale",
        "{text}"
    );
    let text = stdout(&pgflow(&pool, &["status"]));
    assert_eq!(
        row_of(&text, "classify_threads")[4..8],
        ["no", "live", "worker,", "1"],
        "{text}"
    );

    // Deprecating its function asks no live worker.
    let output = pgflow(&pool, &["workers", "deprecate", "killed_fn", "--json"]);
    let value: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(value["deprecated"], json!(0), "{value}");

    // A rollout of the queue finds no live worker to fence, and waits for none.
    let output = pgflow(
        &pool,
        &[
            "rollout",
            "begin",
            "--queue",
            "classify_threads",
            "--timeout",
            "5s",
        ],
    );
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("no live worker serves classify_threads"),
        "{}",
        stderr(&output)
    );

    // Deleting the flow it carried is not refused for it.
    let output = pgflow(&pool, &["delete-flow", "triage_v1"]);
    assert!(
        output.status.success(),
        "refused for a dead worker: {}",
        stderr(&output)
    );
}

/// A worker of `function` on `triage_v1`'s classify queue as a kill -9 leaves it: registered,
/// never stopped nor deprecated, its last heartbeat `silent_for` ago (a Postgres interval).
async fn killed_worker(pool: &PgPool, function: &str, silent_for: &str) -> uuid::Uuid {
    let worker = pgflow::Worker::start_with(
        triage_v1::deployment(),
        pgflow::WorkerConfig::new(triage_v1::Queue::ClassifyThreads)
            .pool(pool.clone())
            .function_name(function),
    )
    .await
    .unwrap();
    let worker_id = worker.worker_id();
    worker.stop_now();
    worker.wait().await.unwrap();
    sqlx::query(
        "update pgflow.workers
         set stopped_at = null, deprecated_at = null, last_heartbeat_at = now() - $2::interval
         where worker_id = $1",
    )
    .bind(worker_id)
    .bind(silent_for)
    .execute(pool)
    .await
    .unwrap();
    worker_id
}
