//! The commands through a transaction-mode PgBouncer: all work but `install`, which needs a
//! direct connection.

use pgflow::Client;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{install, pgflow_at, stderr, stdout, triage_v1};

#[sqlx::test(migrations = false)]
async fn the_cli_works_through_a_transaction_mode_pgbouncer_except_install(pool: PgPool) {
    let options = pool.connect_options();
    let bouncer = pgflow_testkit::PgBouncer::start_transaction_mode(
        options.get_host(),
        options.get_port(),
        1,
    )
    .expect("start pgbouncer (CI installs it: apt-get install pgbouncer)");
    let pooled = bouncer.url(
        options.get_username(),
        options.get_database().expect("test database name"),
    );

    let output = pgflow_at(&pooled, &["install"]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(
        stderr(&output).contains("direct URL"),
        "{}",
        stderr(&output)
    );

    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    pgflow::engine::activate_flow(&pool, "triage_v1")
        .await
        .unwrap();

    let output = pgflow_at(
        &pooled,
        &["start", "triage", "--input", "{\"n\": 1}", "--json"],
    );
    assert!(
        output.status.success(),
        "{}\n{}",
        stderr(&output),
        bouncer.log()
    );
    let started: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    for args in [
        vec!["status", "--json"],
        vec!["runs", "--json"],
        vec!["run", run_id.as_str(), "--json"],
        vec!["graph", "triage"],
        vec!["workers", "list", "--json"],
        vec!["alias", "list", "--json"],
        vec!["rollout", "status", "--json"],
        vec!["prune", "--older-than", "1day", "--json"],
    ] {
        let output = pgflow_at(&pooled, &args);
        assert!(
            output.status.success(),
            "pgflow {args:?}: {}\n{}",
            stderr(&output),
            bouncer.log()
        );
    }
    let output = pgflow_at(&pooled, &["run", run_id.as_str(), "--json"]);
    let run: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(run["status"], json!("started"), "{run}");
    assert_eq!(run["steps"][0]["step_slug"], json!("classify"), "{run}");
}
