//! Acting on runs and flows: `pgflow cancel`, `retry`, `resume` and `delete-flow`, each with
//! its dry run or its refusal.

use pgflow::Client;
use pgflow::{Start, StartOptions};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{claim, install, pgflow, stderr, stdout, triage_v1, triage_v2};

#[sqlx::test(migrations = false)]
async fn cancel_one_run_or_a_filter_with_a_dry_run(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    pgflow::engine::activate_flow(&pool, "triage_v1")
        .await
        .unwrap();
    let first = client
        .start(Start::named("triage"), &json!(1), StartOptions::new())
        .await
        .unwrap();
    let second = client
        .start(Start::named("triage"), &json!(2), StartOptions::new())
        .await
        .unwrap()
        .run_id()
        .to_string();
    let id = first.run_id().to_string();

    let output = pgflow(&pool, &["cancel", &id, "--reason", "wrong customer"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output).trim(), format!("cancelled run {id}"));
    let output = pgflow(&pool, &["cancel", &id]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output).trim(),
        format!("run {id} had already ended (cancelled); left as it is")
    );
    let run: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["run", &id, "--json"]))).unwrap();
    assert_eq!(run["status"], json!("cancelled"), "{run}");
    assert_eq!(run["cancel_reason"], json!("wrong customer"), "{run}");
    let text = stdout(&pgflow(&pool, &["run", &id]));
    assert!(text.contains("cancelled: wrong customer"), "{text}");

    let dry: Value = serde_json::from_str(&stdout(&pgflow(
        &pool,
        &["cancel", "--flow", "triage", "--dry-run", "--json"],
    )))
    .unwrap();
    assert_eq!(
        dry,
        json!({"dry_run": true, "count": 1, "run_ids": [second]}),
        "a dry run names the runs"
    );
    let output = pgflow(&pool, &["cancel", "--flow", "triage", "--dry-run"]);
    assert_eq!(
        stdout(&output).trim(),
        format!("1 run would be cancelled (dry run: nothing changed):\n  {second}")
    );
    let output = pgflow(&pool, &["cancel", "--flow", "triage"]);
    assert_eq!(
        stdout(&output).trim(),
        format!("cancelled 1 run:\n  {second}")
    );
    let listed: Value = serde_json::from_str(&stdout(&pgflow(
        &pool,
        &["runs", "--status", "cancelled", "--json"],
    )))
    .unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");

    let output = pgflow(&pool, &["cancel"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("name the runs to cancel"),
        "{}",
        stderr(&output)
    );
    let unknown = uuid::Uuid::new_v4().to_string();
    let output = pgflow(&pool, &["cancel", &unknown]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains(&unknown), "{}", stderr(&output));
}

#[sqlx::test(migrations = false)]
async fn retry_and_resume_runs_with_a_dry_run(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let definition = triage_v1::deployment();
    client.deploy(&definition).await.unwrap();
    pgflow::engine::activate_flow(&pool, "triage_v1")
        .await
        .unwrap();
    // A run whose classify step fails for good.
    let run = client
        .start(Start::named("triage"), &json!(1), StartOptions::new())
        .await
        .unwrap();
    let id = run.run_id().to_string();
    let queue = pgflow::names::QueueName::new("classify_threads").unwrap();
    let pairs = pgflow::engine::SupportedPairs::routed_to(definition.definition(), &queue);
    let tasks = claim(&pool, &queue, &pairs).await;
    pgflow::engine::fail_tasks(
        &pool,
        &[pgflow::engine::TaskFailure::permanent(&tasks[0], "bad")],
    )
    .await
    .unwrap();

    let dry: Value = serde_json::from_str(&stdout(&pgflow(
        &pool,
        &["retry", "--flow", "triage", "--dry-run", "--json"],
    )))
    .unwrap();
    assert_eq!(dry, json!({"dry_run": true, "count": 1, "run_ids": [id]}));
    let output = pgflow(&pool, &["retry", &id]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output).trim(), format!("retried run {id}"));
    let output = pgflow(&pool, &["retry", &id]);
    assert_eq!(
        stdout(&output).trim(),
        format!("run {id} is started, not failed; left as it is")
    );
    let output = pgflow(&pool, &["resume", &id, "--from", "alert"]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(
        stderr(&output).contains("still going"),
        "{}",
        stderr(&output)
    );

    pgflow::engine::cancel_runs(&pool, &[run.run_id()], None)
        .await
        .unwrap();
    let resumed: Value = serde_json::from_str(&stdout(&pgflow(
        &pool,
        &["resume", &id, "--from", "alert", "--json"],
    )))
    .unwrap();
    assert_eq!(resumed[0]["resumed_from"], json!(id));
    assert_eq!(resumed[0]["status"], json!("started"));
    let dry: Value = serde_json::from_str(&stdout(&pgflow(
        &pool,
        &[
            "resume",
            "--flow",
            "triage",
            "--from",
            "alert",
            "--status",
            "cancelled",
            "--dry-run",
            "--json",
        ],
    )))
    .unwrap();
    assert_eq!(dry, json!({"dry_run": true, "count": 1, "run_ids": [id]}));
    let resumed: Value = serde_json::from_str(&stdout(&pgflow(
        &pool,
        &[
            "resume",
            "--flow",
            "triage",
            "--from",
            "alert",
            "--status",
            "cancelled",
            "--json",
        ],
    )))
    .unwrap();
    assert_eq!(resumed["count"], 1, "{resumed}");
    assert_eq!(resumed["runs"][0]["resumed_from"], json!(id), "{resumed}");
    assert!(resumed["runs"][0]["run_id"].is_string(), "{resumed}");
}

#[sqlx::test(migrations = false)]
async fn delete_flow_refuses_a_busy_flow_and_deletes_it_when_forced(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    client.deploy(&triage_v2::deployment()).await.unwrap();
    pgflow::engine::activate_flow(&pool, "triage_v2")
        .await
        .unwrap();
    client
        .start(
            Start::flow::<triage_v1::Flow>(),
            &json!(1),
            StartOptions::new(),
        )
        .await
        .unwrap();

    let output = pgflow(&pool, &["delete-flow", "triage_v1"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("still going"),
        "{}",
        stderr(&output)
    );
    let output = pgflow(&pool, &["delete-flow", "triage_v2", "--force"]);
    assert!(
        stderr(&output).contains("move it to another version"),
        "{}",
        stderr(&output)
    );
    let deleted: Value = serde_json::from_str(&stdout(&pgflow(
        &pool,
        &["delete-flow", "triage_v1", "--force", "--json"],
    )))
    .unwrap();
    assert_eq!(
        deleted,
        json!({"flow_slug": "triage_v1", "runs": 1, "tasks": 1, "messages": 1})
    );
}
