//! `pgflow schedules list|pause|resume|trigger|delete`, and a start for later (`start --after`,
//! `--at`).

use pgflow::Client;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{install, pgflow, row_of, stderr, stdout, triage_v1};

#[sqlx::test(migrations = false)]
async fn schedules_are_listed_paused_resumed_triggered_and_deleted(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    pgflow::engine::activate_flow(&pool, "triage_v1")
        .await
        .unwrap();
    let schedule = pgflow::Schedule::new("hourly_triage", "triage", "0 0 * * * *")
        .time_zone("Europe/Paris")
        .input(&json!({"n": 3}))
        .catch_up(2);
    pgflow::engine::define_schedule(&pool, &schedule)
        .await
        .unwrap();

    let text = stdout(&pgflow(&pool, &["schedules", "list"]));
    let row = row_of(&text, "hourly_triage");
    assert!(
        row.contains(&"triage") && row.contains(&"Europe/Paris") && row.contains(&"active"),
        "{text}"
    );
    let output = pgflow(&pool, &["schedules", "pause", "hourly_triage"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let listed: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["schedules", "list", "--json"]))).unwrap();
    assert_eq!(listed[0]["paused"], json!(true));
    assert_eq!(listed[0]["missed"], json!("catch_up"));
    pgflow(&pool, &["schedules", "resume", "hourly_triage"]);
    let triggered: Value = serde_json::from_str(&stdout(&pgflow(
        &pool,
        &["schedules", "trigger", "hourly_triage", "--json"],
    )))
    .unwrap();
    assert_eq!(triggered["flow_slug"], json!("triage_v1"));
    let output = pgflow(&pool, &["schedules", "delete", "hourly_triage"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let output = pgflow(&pool, &["schedules", "trigger", "hourly_triage"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("no schedule `hourly_triage` exists"),
        "{}",
        stderr(&output)
    );

    // A start for later says when its first tasks start.
    let output = pgflow(&pool, &["start", "triage", "--after", "1h", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let started: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert!(started["scheduled_for"].is_string(), "{started}");
    let output = pgflow(&pool, &["start", "triage", "--at", "2060-01-01T00:00:00Z"]);
    assert!(
        stdout(&output).contains("its first tasks start at 2060-01-01T00:00:00+00:00"),
        "{}",
        stdout(&output)
    );
}
