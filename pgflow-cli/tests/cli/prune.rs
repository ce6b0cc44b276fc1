//! `pgflow prune`: ended runs older than asked, and a duration it cannot read.

use pgflow::Client;
use pgflow::{Start, StartOptions};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{install, pgflow, stderr, stdout, triage_v1};

#[sqlx::test(migrations = false)]
async fn prune_deletes_ended_runs_older_than_asked_and_says_how_many(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    let run_id = client
        .start(
            Start::flow::<triage_v1::Flow>(),
            &json!(1),
            StartOptions::new(),
        )
        .await
        .unwrap()
        .run_id();
    // Fail the run (its tasks with it) and date its end three days back.
    sqlx::query("select pgflow.fail_runs(array[$1]::uuid[], 'given up')")
        .bind(run_id)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("update pgflow.runs set failed_at = failed_at - interval '3 days'")
        .execute(&pool)
        .await
        .unwrap();

    let kept = pgflow(&pool, &["prune", "--older-than", "3days 1h", "--json"]);
    assert!(kept.status.success(), "{}", stderr(&kept));
    let kept: Value = serde_json::from_str(&stdout(&kept)).unwrap();
    assert_eq!(kept["runs"], 0, "{kept}");

    // A dry run counts what the prune then deletes, and deletes nothing.
    let dry = pgflow(
        &pool,
        &["prune", "--older-than", "2days 23h30m", "--dry-run"],
    );
    assert!(dry.status.success(), "{}", stderr(&dry));
    let text = stdout(&dry);
    assert!(text.starts_with("would prune 1 run ("), "{text}");
    assert!(text.ends_with("(dry run: nothing deleted)\n"), "{text}");
    let dry = pgflow(
        &pool,
        &[
            "prune",
            "--older-than",
            "2days 23h30m",
            "--dry-run",
            "--json",
        ],
    );
    let dry: Value = serde_json::from_str(&stdout(&dry)).unwrap();
    let runs: i64 = sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(runs, 1, "the dry run deleted nothing");

    let output = pgflow(&pool, &["prune", "--older-than", "2days 23h30m", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let pruned: Value = serde_json::from_str(&stdout(&output)).unwrap();
    for count in ["runs", "step_states", "tasks", "workers"] {
        assert_eq!(dry[count], pruned[count], "{count}: {dry} against {pruned}");
    }
    assert_eq!(dry["dry_run"], true);
    assert_eq!(pruned["runs"], 1);
    let left: i64 = sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0);

    let bad = pgflow(&pool, &["prune", "--older-than", "7"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = stderr(&bad);
    assert!(
        err.contains("`7` is not a duration") && err.contains("write it like 7days, 12h, 1h30m"),
        "{err}"
    );
}
