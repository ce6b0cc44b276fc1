//! The `pgflow` binary against a real database: output and exit codes. Every test gets a
//! fresh database from `#[sqlx::test]` (server from `DATABASE_URL`, default in
//! `.cargo/config.toml`).

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};
use std::time::Duration;

use pgflow::Client;
use serde_json::{Value, json};
use sqlx::PgPool;

/// Two versions of one flow behind the alias `triage`, with steps on two queues.
#[pgflow::flow(slug = "triage_v1", alias = "triage", version = 1)]
mod triage_v1 {
    use super::*;

    #[step(queue = "classify_threads")]
    pub async fn classify(input: Value) -> Result<String, String> {
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(format!("v1:{input}"))
    }

    #[step(depends_on = [classify], queue = "deliver_slack_alerts")]
    pub async fn alert(classify: String) -> Result<String, String> {
        Ok(format!("{classify}:alerted-by-v1"))
    }
}

/// The second version of `triage`.
#[pgflow::flow(slug = "triage_v2", alias = "triage", version = 2)]
mod triage_v2 {
    use super::*;

    #[step(queue = "classify_threads")]
    pub async fn classify(input: Value) -> Result<String, String> {
        Ok(format!("v2:{input}"))
    }

    #[step(depends_on = [classify], queue = "deliver_slack_alerts")]
    pub async fn alert(classify: String) -> Result<String, String> {
        Ok(format!("{classify}:alerted-by-v2"))
    }
}

async fn install(pool: &PgPool) {
    pgflow::install(pool).await.expect("install pgflow");
}

/// The URL of the test database behind `pool`, for the binary.
fn database_url(pool: &PgPool) -> String {
    let options = pool.connect_options();
    format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().expect("test database name")
    )
}

/// Reads and claims up to 100 visible tasks of `queue`.
async fn claim(
    pool: &PgPool,
    queue: &pgflow::QueueName,
    pairs: &pgflow::SupportedPairs,
) -> Vec<pgflow::ClaimedTask> {
    pgflow::engine::read_and_start_tasks(pool, queue, uuid::Uuid::new_v4(), pairs, 100, 30)
        .await
        .expect("claim tasks")
}

fn pgflow(pool: &PgPool, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args(args)
        .args(["--database-url", &database_url(pool)])
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[sqlx::test(migrations = false)]
async fn commands_on_a_database_without_pgflow_say_to_install(pool: PgPool) {
    let output = pgflow(&pool, &["drain-status", "anything"]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("pgflow is not installed") && err.contains("run `pgflow install`"),
        "{err}"
    );
}

#[sqlx::test(migrations = false)]
async fn drain_status_reports_the_truth_as_text_and_json(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    client.start::<triage_v1::Flow>(&json!(1)).await.unwrap();

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
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output).trim(),
        "error: no concrete flow or active alias is named `no_such_flow` in this database; \
         compile the flow first (a worker carrying it does so at startup, and activates its alias)"
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
    assert!(
        text.contains("open") && text.contains("off,on") && text.contains(" on "),
        "{text}"
    );

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
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("already finished"),
        "{}",
        stderr(&output)
    );
    let output = pgflow(&pool, &["rollout", "status"]);
    assert_eq!(stdout(&output).trim(), "no open rollouts");
}

#[sqlx::test(migrations = false)]
async fn alias_set_refuses_a_flow_of_another_alias(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v2::deployment()).await.unwrap();
    let output = pgflow(&pool, &["alias", "set", "other", "triage_v2"]);
    assert_eq!(output.status.code(), Some(2));
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
    let queue = pgflow::QueueName::new("classify_threads").unwrap();
    let pairs = pgflow::SupportedPairs::routed_to(definition.definition(), &queue);
    let tasks = claim(&pool, &queue, &pairs).await;
    pgflow::engine::complete_tasks(
        &pool,
        &[pgflow::TaskCompletion::of(&tasks[0], json!("label"))],
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
    let alerts = status["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue_name"] == "deliver_slack_alerts")
        .unwrap();
    assert_eq!(alerts["depth"], json!(1));
    let classify = status["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue_name"] == "classify_threads")
        .unwrap();
    assert_eq!(classify["workers"][0]["function_name"], json!("cli_fn"));
    assert_eq!(status["aliases"][0]["flow_slug"], json!("triage_v1"));
    let autovacuum: bool = sqlx::query_scalar("select current_setting('autovacuum')::boolean")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status["autovacuum"], json!(autovacuum));
    let text = stdout(&pgflow(&pool, &["status"]));
    assert!(
        text.contains("deliver_slack_alerts") && text.contains("1 alive: cli_fn[triage_v1]"),
        "{text}"
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
    assert!(
        text.contains("classify             completed  classify_threads"),
        "{text}"
    );
    assert!(
        text.contains("alert                started    deliver_slack_alerts"),
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
    assert_eq!(output.status.code(), Some(2));

    let text = stdout(&pgflow(&pool, &["workers", "deprecate", "cli_fn"]));
    assert_eq!(
        text.trim(),
        "1 live worker(s) of `cli_fn` asked to drain and stop"
    );
    tokio::time::timeout(Duration::from_secs(15), worker.wait())
        .await
        .unwrap()
        .unwrap();
    let text = stdout(&pgflow(&pool, &["workers", "list", "--all"]));
    assert!(text.contains("stopped"), "{text}");
}

#[test]
fn bad_arguments_get_one_line_and_exit_code_2() {
    let output = Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args(["drain-status", "--frobnicate"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: unexpected argument '--frobnicate'"),
        "{err}"
    );
}

#[sqlx::test(migrations = false)]
async fn prune_deletes_ended_runs_older_than_asked_and_says_how_many(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    let run_id = client
        .start::<triage_v1::Flow>(&json!(1))
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

    let kept = pgflow(&pool, &["prune", "--older-than", "4d", "--json"]);
    assert!(kept.status.success(), "{}", stderr(&kept));
    let kept: Value = serde_json::from_str(&stdout(&kept)).unwrap();
    assert_eq!(kept["runs"], 0, "{kept}");

    let output = pgflow(&pool, &["prune", "--older-than", "2d"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with("pruned 1 run(s) ("), "{text}");
    let left: i64 = sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0);

    let bad = pgflow(&pool, &["prune", "--older-than", "7"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = stderr(&bad);
    assert!(
        err.contains("`7` has no unit: add s, m, h, d or w"),
        "{err}"
    );
}

#[sqlx::test(migrations = false)]
async fn ten_processes_install_at_the_same_moment(pool: PgPool) {
    let url = database_url(&pool);
    let mut running: Vec<_> = (0..10)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_pgflow"))
                .args(["install", "--database-url", &url])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn pgflow install")
        })
        .collect();
    for child in running.drain(..) {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "pgflow install failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    let migrations: i64 = sqlx::query_scalar("select count(*) from pgflow.schema_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(migrations as usize, pgflow::code_migration_versions().len());
    let pgmq_scripts: i64 = sqlx::query_scalar("select count(*) from pgmq.__pgmq_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(pgmq_scripts, 1, "PGMQ's install script ran once");
    assert_eq!(
        pgflow::check_schema(&pool).await.unwrap(),
        pgflow::SchemaStatus::Current
    );
}

#[test]
fn cli_reports_an_unreachable_database_in_one_line() {
    let output = Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args([
            "install",
            "--database-url",
            "postgres://postgres@127.0.0.1:1/postgres",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with("error: cannot connect to the database at 127.0.0.1:1/postgres"),
        "{stderr}"
    );
}

#[sqlx::test(migrations = false)]
async fn cli_reports_missing_permission_in_one_line(pool: PgPool) {
    let role = format!("pgflow_nopriv_{}", std::process::id());
    sqlx::query(&format!("drop role if exists {role}"))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(&format!("create role {role} login"))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(&format!(
        "revoke create on database \"{}\" from public",
        pool.connect_options().get_database().unwrap()
    ))
    .execute(&pool)
    .await
    .unwrap();
    let url =
        database_url(&pool).replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);

    let output = Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args(["install", "--database-url", &url])
        .output()
        .unwrap();
    sqlx::query(&format!("drop owned by {role}"))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(&format!("drop role {role}"))
        .execute(&pool)
        .await
        .unwrap();

    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("error: permission denied"), "{stderr}");
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
        .start_alias("triage", &json!("after rollback"))
        .await
        .unwrap();
    assert_eq!(run.run(&client).await.unwrap().flow_slug, "triage_v1");
}
