//! `pgflow signal`: a signal sent from the command line, with its payload inline, from a file
//! or from stdin, saying what it did; a refused one exits 1 naming why, changing nothing.
//! `pgflow emit`: an event by key, reaching every run that waits for it by that key.

use std::io::Write;
use std::process::{Command, Stdio};

use pgflow::Client;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{database_url, install, pgflow, stderr, stdout};

#[pgflow::flow(slug = "approval_v1")]
pub mod approval_v1 {
    use serde_json::Value;

    #[step(signal = verdict)]
    pub async fn decide(input: Value, verdict: Value) -> Result<Value, String> {
        Ok(serde_json::json!({ "input": input, "verdict": verdict }))
    }
}

async fn started(pool: &PgPool) -> uuid::Uuid {
    Client::new(pool.clone())
        .deploy(&approval_v1::deployment())
        .await
        .unwrap();
    pgflow::engine::start_flow(pool, "approval_v1", &json!(1))
        .await
        .unwrap()
        .run_id
}

async fn payload_of(pool: &PgPool, run_id: uuid::Uuid) -> Option<Value> {
    sqlx::query_scalar("select payload from pgflow.signals where run_id = $1")
        .bind(run_id)
        .fetch_optional(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn signal_delivers_a_payload_and_says_what_it_did(pool: PgPool) {
    install(&pool).await;
    let run_id = started(&pool).await;
    let id = run_id.to_string();

    // `pgflow run` says what the run waits for.
    let output = pgflow(&pool, &["run", &id]);
    let text = stdout(&output);
    assert!(
        text.contains("waiting steps") && text.contains("signal `verdict`"),
        "{text}"
    );
    let row = crate::support::row_of(&text, "decide");
    assert_eq!(row.get(1), Some(&"waiting"), "{text}");
    let output = pgflow(&pool, &["--json", "run", &id]);
    let shown: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(shown["waits"][0]["signal_name"], "verdict");
    assert_eq!(shown["waits"][0]["reason"], "signal");
    assert_eq!(shown["waits"][0]["deadline"], Value::Null);
    // The run only waits: shown `waiting`, and listed by that state and not as `started`.
    assert_eq!(shown["status"], "waiting", "{shown}");
    let listed = |status: &str| -> Vec<Value> {
        let output = pgflow(&pool, &["--json", "runs", "--status", status]);
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_str(&stdout(&output)).unwrap()
    };
    let waiting = listed("waiting");
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0]["run_id"], id.as_str());
    assert_eq!(waiting[0]["status"], "waiting");
    assert!(listed("started").is_empty());

    let output = pgflow(
        &pool,
        &["signal", &id[..8], "verdict", "--payload", "{\"ok\": true}"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("signal `verdict` delivered to run"),
        "{}",
        stdout(&output)
    );
    assert_eq!(payload_of(&pool, run_id).await, Some(json!({"ok": true})));

    // Again with the same payload, from stdin: a duplicate, said so.
    let mut child = Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args(["--database-url", &database_url(&pool), "--json"])
        .args(["signal", &id, "verdict", "--payload", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"ok\": true}")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let answer: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(answer["outcome"], "duplicate");

    // Another payload, from a file: refused, exit 1, nothing changed.
    let file = std::env::temp_dir().join(format!("pgflow-payload-{run_id}.json"));
    std::fs::write(&file, "{\"ok\": false}").unwrap();
    let output = pgflow(
        &pool,
        &[
            "signal",
            &id,
            "verdict",
            "--payload-file",
            file.to_str().unwrap(),
        ],
    );
    std::fs::remove_file(&file).unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("already received signal `verdict`"),
        "{}",
        stderr(&output)
    );
    assert_eq!(payload_of(&pool, run_id).await, Some(json!({"ok": true})));
}

#[sqlx::test(migrations = false)]
async fn signal_refuses_an_unknown_name_and_bad_json(pool: PgPool) {
    install(&pool).await;
    let run_id = started(&pool).await;
    let id = run_id.to_string();

    let output = pgflow(&pool, &["signal", &id, "verdikt", "--payload", "1"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output)
            .contains("has no step that waits for a signal `verdikt`; its signals: verdict"),
        "{}",
        stderr(&output)
    );

    let output = pgflow(&pool, &["signal", &id, "verdict", "--payload", "{nope"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--payload is not valid JSON"),
        "{}",
        stderr(&output)
    );
    assert_eq!(payload_of(&pool, run_id).await, None);
}

#[pgflow::flow(slug = "keyed_v1")]
pub mod keyed_v1 {
    use serde_json::Value;

    #[step(signal = paid, key = input)]
    pub async fn settle(input: Value, paid: Value) -> Result<Value, String> {
        Ok(serde_json::json!({ "order": input, "paid": paid }))
    }
}

#[sqlx::test(migrations = false)]
async fn emit_reaches_every_run_waiting_by_the_key(pool: PgPool) {
    install(&pool).await;
    Client::new(pool.clone())
        .deploy(&keyed_v1::deployment())
        .await
        .unwrap();
    let mut runs = Vec::new();
    for order in ["k-1", "k-1", "k-2"] {
        let run = pgflow::engine::start_flow(&pool, "keyed_v1", &json!(order))
            .await
            .unwrap();
        runs.push(run.run_id);
    }

    let output = pgflow(&pool, &["emit", "paid", "--key", "k-9", "--payload", "1"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("no run waits for event `paid` with key `k-9`"),
        "{}",
        stdout(&output)
    );

    let output = pgflow(
        &pool,
        &["emit", "paid", "--key", "k-1", "--payload", "{\"ref\": 1}"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("reached 2 runs"), "{text}");
    assert!(
        text.contains(&runs[0].to_string()) && text.contains(&runs[1].to_string()),
        "{text}"
    );
    for run_id in &runs[..2] {
        assert_eq!(payload_of(&pool, *run_id).await, Some(json!({"ref": 1})));
    }
    assert_eq!(payload_of(&pool, runs[2]).await, None, "k-2 is not reached");

    let output = pgflow(&pool, &["--json", "emit", "paid", "--key", "k-2"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let answer: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(answer["runs"][0]["run_id"], json!(runs[2]));
    assert_eq!(payload_of(&pool, runs[2]).await, Some(Value::Null));
}
