//! Taking a flow version out of service: `pgflow drain-status` and `pgflow rollout
//! begin|status|finish`.

use pgflow::Client;
use pgflow::{Start, StartOptions};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{install, pgflow, row_of, stderr, stdout, triage_v1};

#[sqlx::test(migrations = false)]
async fn drain_status_reports_the_truth_as_text_and_json(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    client
        .start(
            Start::flow::<triage_v1::Flow>(),
            &json!(1),
            StartOptions::new(),
        )
        .await
        .unwrap();

    let output = pgflow(
        &pool,
        &["drain-status", "triage_v1", "--queue", "classify_threads"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with(
            "not yet safe to remove `triage_v1` from the registries of queue `classify_threads`"
        ),
        "{text}"
    );
    assert!(
        text.contains("started runs          1") && text.contains("queued tasks          1"),
        "{text}"
    );

    let output = pgflow(&pool, &["drain-status", "triage_v1", "--json"]);
    let value: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(value["safe_to_remove"], json!(false));
    assert_eq!(value["pending_steps"], json!(["alert", "classify"]));

    let output = pgflow(&pool, &["drain-status", "no_such_flow"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output).trim(),
        "error: `no_such_flow` is neither a flow nor an alias in this database (`pgflow alias \
         list` shows the aliases and their flows)"
    );

    // A queue the flow does not route to (a typo) is refused, not reported safe.
    let output = pgflow(
        &pool,
        &["drain-status", "triage_v1", "--queue", "clasify_threads"],
    );
    assert!(!output.status.success(), "{}", stdout(&output));
    assert!(
        stderr(&output).contains(
            "flow `triage_v1` routes no step to queue `clasify_threads`; its queues are \
             `classify_threads`, `deliver_slack_alerts`"
        ),
        "{}",
        stderr(&output)
    );
}

#[sqlx::test(migrations = false)]
async fn rollout_begin_status_and_finish(pool: PgPool) {
    install(&pool).await;
    sqlx::query("insert into pgflow.worker_functions (function_name, enabled) values ('on', true), ('off', false)")
        .execute(&pool)
        .await
        .unwrap();

    let output = pgflow(&pool, &["rollout", "begin", "on", "off", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let begun: Value = serde_json::from_str(stdout(&output).lines().last().unwrap()).unwrap();
    let id = begun["rollout_id"].as_i64().unwrap();

    let output = pgflow(&pool, &["rollout", "status"]);
    let text = stdout(&output);
    let row = row_of(&text, &id.to_string());
    assert_eq!(row[1..], ["open", "off,on", "on", "0"], "{text}");

    let output = pgflow(&pool, &["rollout", "finish", &id.to_string()]);
    assert_eq!(
        stdout(&output).trim(),
        format!("rollout {id} finished; enabled again: on")
    );
    let enabled: Vec<(String, bool)> =
        sqlx::query_as("select function_name, enabled from pgflow.worker_functions order by 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        enabled,
        vec![("off".into(), false), ("on".into(), true)],
        "only the recorded set is enabled"
    );

    let output = pgflow(&pool, &["rollout", "finish", &id.to_string()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("already finished"),
        "{}",
        stderr(&output)
    );
    let output = pgflow(&pool, &["rollout", "status"]);
    assert_eq!(stdout(&output).trim(), "no open rollouts");
}
