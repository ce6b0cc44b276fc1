//! `pgflow start`: a large input from a file or stdin, an idempotency key (saying whether the
//! run was started or already existed), and an input refused by the flow's input schema.

use std::process::Command;

use pgflow::Client;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{database_url, install, pgflow, stderr, stdout, triage_v1};

#[sqlx::test(migrations = false)]
async fn start_reads_a_large_input_from_a_file_or_stdin(pool: PgPool) {
    install(&pool).await;
    Client::new(pool.clone())
        .deploy(&triage_v1::deployment())
        .await
        .unwrap();
    pgflow::engine::activate_flow(&pool, "triage_v1")
        .await
        .unwrap();
    // 200 KB: more than an argument list may carry.
    let input = json!({ "text": "x".repeat(200_000) });
    let file = std::env::temp_dir().join(format!("pgflow-input-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&file, input.to_string()).unwrap();
    let output = pgflow(
        &pool,
        &[
            "start",
            "triage",
            "--input-file",
            file.to_str().unwrap(),
            "--json",
        ],
    );
    std::fs::remove_file(&file).unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let from_file: Value = serde_json::from_str(&stdout(&output)).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args(["start", "triage", "--input", "-", "--json"])
        .args(["--database-url", &database_url(&pool)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.to_string().as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let from_stdin: Value = serde_json::from_str(&stdout(&output)).unwrap();

    for started in [from_file, from_stdin] {
        let stored: Value = sqlx::query_scalar("select input from pgflow.runs where run_id = $1")
            .bind(uuid::Uuid::parse_str(started["run_id"].as_str().unwrap()).unwrap())
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(stored, input);
    }

    let output = pgflow(
        &pool,
        &["start", "triage", "--input-file", "/nonexistent/input.json"],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).starts_with("error: cannot read --input-file /nonexistent/input.json"),
        "{}",
        stderr(&output)
    );
    let output = pgflow(
        &pool,
        &["start", "triage", "--input", "1", "--input-file", "x"],
    );
    assert_eq!(
        output.status.code(),
        Some(2),
        "the two input forms exclude each other"
    );
}

#[sqlx::test(migrations = false)]
async fn start_with_an_idempotency_key_answers_with_the_keys_run(pool: PgPool) {
    install(&pool).await;
    Client::new(pool.clone())
        .deploy(&triage_v1::deployment())
        .await
        .unwrap();
    pgflow::engine::activate_flow(&pool, "triage_v1")
        .await
        .unwrap();
    let start = |input: &str| {
        pgflow(
            &pool,
            &[
                "start",
                "triage",
                "--input",
                input,
                "--idempotency-key",
                "ticket-7",
                "--json",
            ],
        )
    };

    let first = start("{\"n\": 1}");
    assert!(first.status.success(), "{}", stderr(&first));
    let first: Value = serde_json::from_str(&stdout(&first)).unwrap();
    assert_eq!(first["idempotency_key"], json!("ticket-7"));
    assert_eq!(first["outcome"], json!("started"));
    let second: Value = serde_json::from_str(&stdout(&start("{\"n\": 1}"))).unwrap();
    assert_eq!(second["run_id"], first["run_id"]);
    assert_eq!(second["outcome"], json!("already_existed"));

    let text = stdout(&pgflow(
        &pool,
        &[
            "start",
            "triage",
            "--input",
            "{\"n\": 1}",
            "--idempotency-key",
            "ticket-7",
        ],
    ));
    assert!(
        text.starts_with(&format!(
            "already existed: run {} of `triage_v1` holds key `ticket-7`",
            first["run_id"].as_str().unwrap()
        )),
        "{text}"
    );
    assert!(text.contains("nothing new was started"), "{text}");

    let other = start("{\"n\": 2}");
    assert_eq!(other.status.code(), Some(1));
    let message = stderr(&other);
    assert!(
        message.contains("ticket-7") && message.contains(first["run_id"].as_str().unwrap()),
        "{message}"
    );
    let runs: i64 = sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(runs, 1);
}

#[sqlx::test(migrations = false)]
async fn start_with_a_priority_and_the_run_and_queue_commands_show_it(pool: PgPool) {
    install(&pool).await;
    Client::new(pool.clone())
        .deploy(&triage_v1::deployment())
        .await
        .unwrap();
    let started = pgflow(
        &pool,
        &["start", "triage_v1", "--priority", "high", "--json"],
    );
    assert!(started.status.success(), "{}", stderr(&started));
    let started: Value = serde_json::from_str(&stdout(&started)).unwrap();
    assert_eq!(started["priority"], json!("high"));
    let run_id = started["run_id"].as_str().unwrap();
    let shown = stdout(&pgflow(&pool, &["run", run_id]));
    assert!(shown.contains("priority high"), "{shown}");
    let lanes: i64 =
        sqlx::query_scalar("select count(*) from pgflow.queue_lanes where priority = 2")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(lanes >= 1, "the start made its queues' lane for `high`");

    let bad = pgflow(&pool, &["start", "triage_v1", "--priority", "urgent"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("`urgent` is no priority"),
        "{}",
        stderr(&bad)
    );

    let queue: String = sqlx::query_scalar("select queue_name from pgflow.queue_lanes limit 1")
        .fetch_one(&pool)
        .await
        .unwrap();
    let set = pgflow(&pool, &["queue", "aging", &queue, "5m"]);
    assert!(set.status.success(), "{}", stderr(&set));
    assert!(
        stdout(&set).contains("longer than 300 s"),
        "{}",
        stdout(&set)
    );
    let seconds: i32 =
        sqlx::query_scalar("select aging_seconds from pgflow.queue_aging where queue_name = $1")
            .bind(&queue)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(seconds, 300);
    let reset = pgflow(&pool, &["queue", "aging", &queue, "default"]);
    assert!(reset.status.success(), "{}", stderr(&reset));
    let unknown = pgflow(&pool, &["queue", "aging", "no_such_queue", "5m"]);
    assert_eq!(unknown.status.code(), Some(1), "{}", stderr(&unknown));
}

#[sqlx::test(migrations = false)]
async fn start_with_a_throttle_or_a_singleton_key_holds_back_a_second_start(pool: PgPool) {
    install(&pool).await;
    Client::new(pool.clone())
        .deploy(&triage_v1::deployment())
        .await
        .unwrap();
    let throttled = |extra: &[&str]| {
        let mut args = vec![
            "start",
            "triage_v1",
            "--throttle",
            "k",
            "--window",
            "1m",
            "--json",
        ];
        args.extend_from_slice(extra);
        pgflow(&pool, &args)
    };
    let first = throttled(&[]);
    assert!(first.status.success(), "{}", stderr(&first));
    let first: Value = serde_json::from_str(&stdout(&first)).unwrap();
    let refused = throttled(&[]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("throttle key `k`"),
        "{}",
        stderr(&refused)
    );
    let dropped = throttled(&["--drop"]);
    assert!(dropped.status.success(), "{}", stderr(&dropped));
    let dropped: Value = serde_json::from_str(&stdout(&dropped)).unwrap();
    assert_eq!(dropped["outcome"], json!("dropped"));
    assert_eq!(dropped["run_id"], first["run_id"]);

    let single = || pgflow(&pool, &["start", "triage_v1", "--singleton", "s"]);
    assert!(single().status.success());
    let busy = single();
    assert_eq!(busy.status.code(), Some(1));
    assert!(
        stderr(&busy).contains("singleton key `s`"),
        "{}",
        stderr(&busy)
    );
    let runs: i64 = sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(runs, 2);
    // With --in-turn, the start waits in the key's line instead.
    let in_line = pgflow(
        &pool,
        &["start", "triage_v1", "--singleton", "s", "--in-turn"],
    );
    assert!(in_line.status.success(), "{}", stderr(&in_line));
    assert!(
        stdout(&in_line).starts_with("in line: run "),
        "{}",
        stdout(&in_line)
    );
    let waiting: i64 = sqlx::query_scalar("select count(*) from pgflow.singleton_waits")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(waiting, 1);
    // `pgflow run` says where it waits, and behind which run.
    let (in_line, holder): (uuid::Uuid, uuid::Uuid) = sqlx::query_as(
        "select w.run_id, g.run_id from pgflow.singleton_waits w
         join pgflow.start_guards g on g.scope = w.scope and g.key = w.key",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let shown = pgflow(&pool, &["run", &in_line.to_string(), "--json"]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let shown: Value = serde_json::from_str(&stdout(&shown)).unwrap();
    assert_eq!(shown["status"], json!("waiting"));
    assert_eq!(shown["in_line"]["key"], json!("s"));
    assert_eq!(shown["in_line"]["place"], json!(1));
    assert_eq!(shown["in_line"]["holder_run_id"], json!(holder));
    let text = stdout(&pgflow(&pool, &["run", &in_line.to_string()]));
    assert!(
        text.contains(&format!(
            "in line for singleton key `s`, held by run {holder}: place 1"
        )),
        "{text}"
    );
    // `pgflow status` lists the key's line.
    let status: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["status", "--json"]))).unwrap();
    let line = &status["singleton_lines"][0];
    assert_eq!(line["key"], json!("s"), "{status}");
    assert_eq!(line["waiting"], json!(1));
    assert_eq!(line["holder_run_id"], json!(holder));
    let text = stdout(&pgflow(&pool, &["status"]));
    assert!(text.contains("runs waiting their turn"), "{text}");

    let debounced = |input: &str| {
        let out = pgflow(
            &pool,
            &[
                "start",
                "triage_v1",
                "--input",
                input,
                "--debounce",
                "d",
                "--window",
                "1m",
                "--json",
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_str::<Value>(&stdout(&out)).unwrap()
    };
    let first = debounced("{\"n\": 1}");
    let second = debounced("{\"n\": 2}");
    assert_eq!(first["outcome"], json!("started"));
    assert_eq!(second["outcome"], json!("debounced"));
    assert_eq!(second["run_id"], first["run_id"]);
    let input: Value = sqlx::query_scalar("select input from pgflow.runs where run_id = $1::uuid")
        .bind(first["run_id"].as_str().unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(input, json!({"n": 2}));
    let lone = pgflow(&pool, &["start", "triage_v1", "--window", "1m"]);
    assert_eq!(lone.status.code(), Some(2), "{}", stderr(&lone));
}

/// A checked flow's input.
#[derive(serde::Serialize, serde::Deserialize, pgflow::schemars::JsonSchema)]
#[schemars(crate = "pgflow::schemars")]
pub struct Thread {
    pub thread: String,
}

#[pgflow::flow(slug = "checked_v1", alias = "checked", input = super::Thread, check_input)]
pub mod checked_v1 {
    #[step(queue = "cli_checked")]
    pub async fn read(input: super::Thread) -> Result<usize, String> {
        Ok(input.thread.len())
    }
}

#[sqlx::test(migrations = false)]
async fn start_refuses_an_input_that_does_not_fit_naming_the_field(pool: PgPool) {
    install(&pool).await;
    Client::new(pool.clone())
        .deploy(&checked_v1::deployment())
        .await
        .unwrap();
    pgflow::engine::activate_flow(&pool, "checked_v1")
        .await
        .unwrap();

    for name in ["checked", "checked_v1"] {
        let output = pgflow(&pool, &["start", name, "--input", "{\"thread\": 5}"]);
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        let message = stderr(&output);
        assert!(
            message.contains("at `thread`: expected string, found integer"),
            "{message}"
        );
        assert!(message.contains("nothing was started"), "{message}");

        // No input at all is `null`, which is no `Thread` either.
        let output = pgflow(&pool, &["start", name]);
        assert_eq!(output.status.code(), Some(1));
        assert!(
            stderr(&output).contains("expected object, found null"),
            "{}",
            stderr(&output)
        );
    }
    let runs: i64 = sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(runs, 0);

    let output = pgflow(
        &pool,
        &["start", "checked", "--input", "{\"thread\": \"t\"}"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
}
