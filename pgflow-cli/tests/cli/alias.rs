//! `pgflow alias set|list`, and an alias where a flow is expected (`runs`, `graph`,
//! `drain-status`).

use pgflow::Client;
use pgflow::{Start, StartOptions};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{install, pgflow, stderr, stdout, triage_v1, triage_v2};

#[sqlx::test(migrations = false)]
async fn alias_set_refuses_a_flow_of_another_alias(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v2::deployment()).await.unwrap();
    let output = pgflow(&pool, &["alias", "set", "other", "triage_v2"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output).trim(),
        "error: flow `triage_v2` belongs to alias `triage`, not `other`; an alias can only point at its own versions"
    );
    let output = pgflow(&pool, &["alias", "set", "triage", "triage_v2"]);
    assert_eq!(
        stdout(&output).trim(),
        "alias `triage` now points at `triage_v2` (it had no active version)"
    );
    let output = pgflow(&pool, &["alias", "list"]);
    assert!(stdout(&output).contains("triage_v2"), "{}", stdout(&output));
}

#[sqlx::test(migrations = false)]
async fn alias_set_moves_an_alias_back_and_says_from_where(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    client.deploy(&triage_v2::deployment()).await.unwrap();
    pgflow::engine::activate_flow(&pool, "triage_v2")
        .await
        .unwrap();

    // The operator's rollback; it says what it changed.
    let output = pgflow(&pool, &["alias", "set", "triage", "triage_v1"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output).trim(),
        "alias `triage` now points at `triage_v1` (was `triage_v2`); new runs start on `triage_v1`"
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
}

#[sqlx::test(migrations = false)]
async fn an_alias_is_accepted_wherever_a_flow_is(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    client.deploy(&triage_v2::deployment()).await.unwrap();
    pgflow::engine::activate_flow(&pool, "triage_v1")
        .await
        .unwrap();
    let v1_run = client
        .start(
            Start::flow::<triage_v1::Flow>(),
            &json!(1),
            StartOptions::new(),
        )
        .await
        .unwrap();
    let v2_run = client
        .start(
            Start::flow::<triage_v2::Flow>(),
            &json!(2),
            StartOptions::new(),
        )
        .await
        .unwrap();

    // runs --flow <alias>: the runs of every version of the alias.
    let text = stdout(&pgflow(&pool, &["runs", "--flow", "triage"]));
    for run in [v1_run.run_id(), v2_run.run_id()] {
        assert!(text.contains(&run.to_string()), "{text}");
    }
    let text = stdout(&pgflow(&pool, &["runs", "--flow", "triage_v2"]));
    assert!(!text.contains(&v1_run.run_id().to_string()), "{text}");

    // graph <alias>: the active flow's DAG; with --run, that run's flow (any version).
    let output = pgflow(&pool, &["graph", "triage", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let graph: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(graph["flow_slug"], json!("triage_v1"));
    let v2 = v2_run.run_id().to_string();
    let output = pgflow(&pool, &["graph", "triage", "--run", &v2, "--json"]);
    let graph: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(graph["flow_slug"], json!("triage_v2"), "{graph}");
    let output = pgflow(&pool, &["graph", "triage_v1", "--run", &v2]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("is of flow `triage_v2`, not of `triage_v1`"),
        "{}",
        stderr(&output)
    );

    // drain-status <alias>: about its active flow, and says so.
    let output = pgflow(&pool, &["drain-status", "triage"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with(
            "alias `triage` -> `triage_v1` (its active flow)\nnot yet safe to remove `triage_v1`"
        ),
        "{text}"
    );

    // A name that is neither is an error, not an empty table.
    let output = pgflow(&pool, &["runs", "--flow", "triage_v3"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("`triage_v3` is neither a flow nor an alias"),
        "{}",
        stderr(&output)
    );
}
