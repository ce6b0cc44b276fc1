//! `--read-url`: the read commands ask a real streaming replica, the rest the primary. With the
//! replica's replay paused, a run started since is missing from `runs` on the replica, and a
//! start still reaches the primary. And `install` with both hosts in the URL, the replica
//! first, installs on the primary.

use serde_json::Value;
use sqlx::PgPool;

use crate::support::{pgflow_at, stderr, stdout, triage_v1};

/// The run ids `pgflow runs --json` lists with `args`.
fn listed(primary: &str, args: &[&str]) -> Vec<String> {
    let mut all = vec!["runs", "--json"];
    all.extend_from_slice(args);
    let output = pgflow_at(primary, &all);
    assert!(output.status.success(), "{}", stderr(&output));
    let runs: Value = serde_json::from_str(&stdout(&output)).unwrap();
    runs.as_array()
        .unwrap()
        .iter()
        .map(|run| run["run_id"].as_str().unwrap().to_owned())
        .collect()
}

fn start(primary: &str, args: &[&str]) -> String {
    let mut all = vec!["start", "triage_v1", "--input", "{\"n\": 1}", "--json"];
    all.extend_from_slice(args);
    let output = pgflow_at(primary, &all);
    assert!(output.status.success(), "{}", stderr(&output));
    let started: Value = serde_json::from_str(&stdout(&output)).unwrap();
    started["run_id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_commands_ask_the_replica_and_writes_the_primary() {
    let (primary, replica) = tokio::task::spawn_blocking(|| {
        let primary = pgflow_testkit::Cluster::start().unwrap();
        let replica = pgflow_testkit::Cluster::standby_of(&primary, &[]).unwrap();
        (primary, replica)
    })
    .await
    .unwrap();
    let (primary_url, replica_url) = (primary.url(), replica.url());
    // Both hosts in the URL, the replica first: install finds the primary.
    let both = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres",
        replica.port, primary.port
    );
    let output = pgflow_at(&both, &["install"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let pool = PgPool::connect(&primary_url).await.unwrap();
    pgflow::Client::new(pool.clone())
        .deploy(&triage_v1::deployment())
        .await
        .unwrap();
    let replica_pool = PgPool::connect(&replica_url).await.unwrap();
    let first = start(&primary_url, &[]);
    // The replica has the first run once it has replayed it.
    for _ in 0..100 {
        if listed(&primary_url, &["--read-url", &replica_url]).contains(&first) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    sqlx::query("select pg_wal_replay_pause()")
        .execute(&replica_pool)
        .await
        .unwrap();
    // A start with --read-url given still writes to the primary.
    let second = start(&primary_url, &["--read-url", &replica_url]);
    let on_replica = listed(&primary_url, &["--read-url", &replica_url]);
    assert!(on_replica.contains(&first), "{on_replica:?}");
    assert!(
        !on_replica.contains(&second),
        "`runs --read-url` listed a run the replica has not replayed: it asked the primary"
    );
    let on_primary = listed(&primary_url, &[]);
    assert!(on_primary.contains(&first) && on_primary.contains(&second));
    // `run` and `status` read there too: the second run is unknown on the replica.
    let output = pgflow_at(&primary_url, &["run", &second, "--read-url", &replica_url]);
    assert!(!output.status.success(), "{}", stdout(&output));
    let output = pgflow_at(&primary_url, &["status", "--read-url", &replica_url]);
    assert!(output.status.success(), "{}", stderr(&output));

    sqlx::query("select pg_wal_replay_resume()")
        .execute(&replica_pool)
        .await
        .unwrap();
}
