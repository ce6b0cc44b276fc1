//! The `pgflow` binary against a real database: output and exit codes. Every test gets a
//! fresh database from `#[sqlx::test]` (server from `DATABASE_URL`, default in
//! `.env`).

#![allow(
    unreachable_pub,
    reason = "a test crate exports nothing; its flows and helpers are `pub`, as in a user's crate"
)]
#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};
use std::time::Duration;

use pgflow::Client;
use pgflow::{Start, StartOptions};
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
    queue: &pgflow::names::QueueName,
    pairs: &pgflow::engine::SupportedPairs,
) -> Vec<pgflow::engine::ClaimedTask> {
    pgflow::engine::read_and_start_tasks(pool, queue, uuid::Uuid::new_v4(), pairs, 100)
        .await
        .expect("claim tasks")
        .tasks
}

fn pgflow(pool: &PgPool, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args(args)
        .args(["--database-url", &database_url(pool)])
        .output()
        .unwrap()
}

/// The whitespace-separated cells of the first line of `text` whose first cell is `first`.
fn row_of<'a>(text: &'a str, first: &str) -> Vec<&'a str> {
    text.lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row starts with `{first}` in:\n{text}"))
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
    assert_eq!(output.status.code(), Some(2));
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
    let queue = pgflow::names::QueueName::new("classify_threads").unwrap();
    let pairs = pgflow::engine::SupportedPairs::routed_to(definition.definition(), &queue);
    let tasks = claim(&pool, &queue, &pairs).await;
    pgflow::engine::complete_tasks(
        &pool,
        &[pgflow::engine::TaskCompletion::of(
            &tasks[0],
            json!("label"),
        )],
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
    // queue, depth, oldest, in flight, workers, serving
    assert_eq!(
        row_of(&text, "classify_threads"),
        [
            "classify_threads",
            "0",
            "-",
            "0",
            "1",
            "alive",
            "cli_fn[triage_v1]"
        ],
        "{text}"
    );
    let alerts = row_of(&text, "deliver_slack_alerts");
    assert_eq!(alerts[1], "1", "depth: {text}");
    assert_eq!(alerts[3..], ["0", "0", "alive", "-"], "{text}");
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
    // step, status, queue, tasks, attempts, took, ended (date and time), output size, error
    let classify = row_of(&text, "classify");
    assert_eq!(
        classify[..5],
        ["classify", "completed", "classify_threads", "1", "1"],
        "{text}"
    );
    assert_eq!(
        classify[classify.len() - 2..],
        ["7", "B"],
        "`\"label\"` is 7 bytes: {text}"
    );
    let alert = row_of(&text, "alert");
    assert_eq!(
        alert[..3],
        ["alert", "started", "deliver_slack_alerts"],
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
fn bad_arguments_get_claps_whole_message_and_exit_code_2() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pgflow"))
            .args(args)
            .output()
            .unwrap()
    };
    let output = run(&["drain-status", "--frobnicate"]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.starts_with("error: unexpected argument '--frobnicate'")
            && err.contains("Usage: pgflow drain-status"),
        "{err}"
    );
    let err = stderr(&run(&["rnus"]));
    assert!(
        err.contains("tip: some similar subcommands exist: 'run', 'runs'"),
        "{err}"
    );
    let output = run(&["graph", "triage", "--format", "png"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("[possible values: mermaid, dot]"),
        "{}",
        stderr(&output)
    );
    let err = stderr(&run(&["runs", "--status", "weird"]));
    assert!(
        err.contains("[possible values: started, completed, failed, cancelled]"),
        "{err}"
    );
}

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

    let output = pgflow(&pool, &["prune", "--older-than", "2days 23h30m"]);
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
        err.contains("`7` is not a duration") && err.contains("write it like 7days, 12h, 1h30m"),
        "{err}"
    );
}

/// A flow whose `notify` step runs only for urgent inputs and skips `log` with it.
#[pgflow::flow(slug = "skipping")]
mod skipping {
    use super::*;

    #[step(queue = "skipping", when = json!({"urgent": true}), when_unmet = skip_cascade)]
    pub async fn notify(input: Value) -> Result<String, String> {
        Ok(input.to_string())
    }

    #[step(queue = "skipping", depends_on = [notify])]
    pub async fn log(notify: String) -> Result<usize, String> {
        Ok(notify.len())
    }
}

#[sqlx::test(migrations = false)]
async fn run_graph_and_prune_show_and_handle_skipped_steps(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&skipping::deployment()).await.unwrap();
    let run = client
        .start(
            Start::flow::<skipping::Flow>(),
            &json!({"urgent": false}),
            StartOptions::new(),
        )
        .await
        .unwrap();
    let output = run.wait(&client, Duration::from_secs(5)).await.unwrap();
    assert!(output.log.is_none(), "the run completed with log skipped");
    let run_id = run.run_id().to_string();

    let text = stdout(&pgflow(&pool, &["run", &run_id]));
    assert_eq!(
        row_of(&text, "notify")[..3],
        ["notify", "skipped", "(condition_unmet)"],
        "{text}"
    );
    assert_eq!(
        row_of(&text, "log")[..3],
        ["log", "skipped", "(dependency_skipped)"],
        "{text}"
    );
    let json: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["run", &run_id, "--json"]))).unwrap();
    assert_eq!(
        json["steps"][0]["skip_reason"],
        json!("condition_unmet"),
        "{json}"
    );

    let text = stdout(&pgflow(&pool, &["graph", "skipping", "--run", &run_id]));
    assert!(
        text.contains("style notify fill:#d6e4f0,stroke-dasharray:5 5"),
        "a skipped step is drawn dashed: {text}"
    );
    let text = stdout(&pgflow(
        &pool,
        &["graph", "skipping", "--run", &run_id, "--format", "dot"],
    ));
    assert!(text.contains("style=\"filled,dashed\""), "{text}");

    sqlx::query("update pgflow.runs set completed_at = completed_at - interval '2 days'")
        .execute(&pool)
        .await
        .unwrap();
    let output = pgflow(&pool, &["prune", "--older-than", "1day", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let pruned: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        (pruned["runs"].clone(), pruned["step_states"].clone()),
        (json!(1), json!(2)),
        "a run with skipped steps is pruned with them: {pruned}"
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
    assert_eq!(
        migrations as usize,
        pgflow::schema::code_migration_versions().len()
    );
    let pgmq_scripts: i64 = sqlx::query_scalar("select count(*) from pgmq.__pgmq_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(pgmq_scripts, 1, "PGMQ's install script ran once");
    assert_eq!(
        pgflow::schema::check_schema(&pool).await.unwrap(),
        pgflow::schema::SchemaStatus::Current
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
async fn grant_gives_a_login_its_role_and_the_cli_then_works_as_it(pool: PgPool) {
    install(&pool).await;
    let login = format!("pgflow_cli_ops_{}", std::process::id());
    sqlx::raw_sql(&format!(
        "drop role if exists {login}; create role {login} login"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let as_login =
        database_url(&pool).replacen("postgres://postgres@", &format!("postgres://{login}@"), 1);
    let as_login_run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pgflow"))
            .args(args)
            .args(["--database-url", &as_login])
            .output()
            .unwrap()
    };

    // Before the grant: one line naming the login and the command that fixes it.
    let before = as_login_run(&["status"]);
    let err = stderr(&before);
    assert!(!before.status.success());
    assert!(
        err.contains(&login) && err.contains("pgflow grant"),
        "{err}"
    );

    let granted = pgflow(&pool, &["grant", &login, "--as", "operator"]);
    assert!(granted.status.success(), "{}", stderr(&granted));
    assert!(stdout(&granted).contains("pgflow_operator"));
    let again = pgflow(&pool, &["--json", "grant", &login, "--as", "operator"]);
    assert!(
        again.status.success(),
        "granting again is fine: {}",
        stderr(&again)
    );

    let status = as_login_run(&["status"]);
    assert!(status.status.success(), "{}", stderr(&status));
    let unknown = pgflow(
        &pool,
        &["grant", "no_such_login_anywhere", "--as", "worker"],
    );
    assert!(!unknown.status.success());
    assert!(stderr(&unknown).contains("no role named `no_such_login_anywhere`"));

    sqlx::raw_sql(&format!("drop role {login}"))
        .execute(&pool)
        .await
        .unwrap();
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
    assert_eq!(output.status.code(), Some(2));
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
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("`triage_v3` is neither a flow nor an alias"),
        "{}",
        stderr(&output)
    );
}

#[sqlx::test(migrations = false)]
async fn status_and_workers_list_agree_on_a_worker_that_went_silent(pool: PgPool) {
    install(&pool).await;
    let worker = pgflow::Worker::start_with(
        triage_v1::deployment(),
        pgflow::WorkerConfig::new(triage_v1::Queue::ClassifyThreads)
            .pool(pool.clone())
            .function_name("silent_fn"),
    )
    .await
    .unwrap();
    let worker_id = worker.worker_id();
    // What a kill -9 leaves: no stop, no heartbeat since 76 s.
    worker.stop_now();
    worker.wait().await.unwrap();
    sqlx::query(
        "update pgflow.workers set stopped_at = null, last_heartbeat_at = now() - interval '76 s'
         where worker_id = $1",
    )
    .bind(worker_id)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("select pgflow.start_flow('triage_v1', 'null')")
        .execute(&pool)
        .await
        .unwrap();

    let text = stdout(&pgflow(&pool, &["workers", "list"]));
    let row = row_of(&text, &worker_id.simple().to_string()[..8]);
    assert_eq!(
        row[1..],
        [
            "classify_threads",
            "silent_fn",
            "stale",
            "1m",
            "ago",
            "triage_v1"
        ],
        "{text}"
    );
    let text = stdout(&pgflow(&pool, &["status"]));
    assert_eq!(
        row_of(&text, "classify_threads")[4..],
        ["0", "alive,", "1", "stale", "-"],
        "{text}"
    );
    for (args, path) in [
        (vec!["workers", "list", "--json"], "/0/state"),
        (vec!["status", "--json"], "/queues/0/workers/0/state"),
    ] {
        let value: Value = serde_json::from_str(&stdout(&pgflow(&pool, &args))).unwrap();
        assert_eq!(
            value.pointer(path),
            Some(&json!("stale")),
            "{args:?}: {value}"
        );
    }

    // Silent for more than ten intervals: the next maintenance sweep declares it lost.
    sqlx::query("select * from pgflow.mark_lost_workers()")
        .execute(&pool)
        .await
        .unwrap();
    let text = stdout(&pgflow(&pool, &["workers", "list"]));
    assert!(
        text.starts_with("no workers running"),
        "a lost worker is not running: {text}"
    );
    let text = stdout(&pgflow(&pool, &["workers", "list", "--all"]));
    let row = row_of(&text, &worker_id.simple().to_string()[..8]);
    assert_eq!(row[3], "lost", "{text}");
    let value: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["status", "--json"]))).unwrap();
    assert_eq!(
        value.pointer("/queues/0/workers"),
        Some(&json!([])),
        "status lists running workers only: {value}"
    );
}

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
async fn run_shows_each_task_attempt_that_failed_or_stalled_with_its_error(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let definition = triage_v1::deployment();
    client.deploy(&definition).await.unwrap();
    let run_id = client
        .start(
            Start::flow::<triage_v1::Flow>(),
            &json!(1),
            StartOptions::new(),
        )
        .await
        .unwrap()
        .run_id();
    let queue = pgflow::names::QueueName::new("classify_threads").unwrap();
    let pairs = pgflow::engine::SupportedPairs::routed_to(definition.definition(), &queue);
    let tasks = claim(&pool, &queue, &pairs).await;
    let first_worker: uuid::Uuid = sqlx::query_scalar(
        "select last_worker_id from pgflow.step_tasks where run_id = $1 and step_slug = 'classify'",
    )
    .bind(run_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    pgflow::engine::fail_tasks(
        &pool,
        &[pgflow::engine::TaskFailure::of(
            &tasks[0],
            "model timed out",
        )],
    )
    .await
    .unwrap();

    // The retry's message, made visible now, is claimed again; that attempt's worker then
    // goes silent past the step's timeout, and the stalled-task sweep requeues it.
    let message_id: i64 = sqlx::query_scalar(
        "select message_id from pgflow.step_tasks where run_id = $1 and step_slug = 'classify'",
    )
    .bind(run_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    sqlx::query("select pgmq.set_vt('classify_threads', $1, 0)")
        .bind(message_id)
        .execute(&pool)
        .await
        .unwrap();
    let second = claim(&pool, &queue, &pairs).await;
    assert_eq!(second[0].attempt, 2);
    sqlx::query(
        "update pgflow.step_tasks set started_at = now() - interval '1 hour' where run_id = $1",
    )
    .bind(run_id)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("select * from pgflow.requeue_stalled_tasks(0, 3)")
        .execute(&pool)
        .await
        .unwrap();

    let text = stdout(&pgflow(&pool, &["run", &run_id.to_string()]));
    let (_, retried) = text
        .split_once("tasks that were retried, requeued or failed")
        .unwrap_or_else(|| panic!("no retried tasks section:\n{text}"));
    // step, task, status, attempts, requeues, last error
    assert_eq!(
        row_of(retried, "classify"),
        ["classify", "0", "queued", "2", "1", "model", "timed", "out"],
        "{text}"
    );
    let (_, history) = text
        .split_once("attempts that did not succeed")
        .unwrap_or_else(|| panic!("no attempt history:\n{text}"));
    let rows: Vec<Vec<&str>> = history
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|cells| cells.first() == Some(&"classify"))
        .collect();
    // step, task, attempt, outcome, worker, started (date, time), took, error
    assert_eq!(rows.len(), 2, "{text}");
    assert_eq!(rows[0][..4], ["classify", "0", "1", "failed"], "{text}");
    assert_eq!(rows[0][4], &first_worker.simple().to_string()[..8]);
    assert!(
        history.lines().nth(2).unwrap().ends_with("model timed out"),
        "{text}"
    );
    assert_eq!(rows[1][..4], ["classify", "0", "2", "stalled"], "{text}");
    assert!(
        history.contains("no result within the step's timeout"),
        "{text}"
    );

    let json: Value = serde_json::from_str(&stdout(&pgflow(
        &pool,
        &["run", &run_id.to_string(), "--json"],
    )))
    .unwrap();
    let attempts = json["failed_attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["error"], "model timed out");
    assert_eq!(attempts[1]["outcome"], "stalled");
    assert_eq!(attempts[1]["attempt"], 2);
}

#[sqlx::test(migrations = false)]
async fn empty_results_say_so_in_a_line(pool: PgPool) {
    install(&pool).await;
    for (args, line) in [
        (
            &["runs"][..],
            "no runs yet (`pgflow start <flow>` starts one)",
        ),
        (
            &["workers", "list"][..],
            "no workers running (`pgflow workers list --all` includes stopped ones)",
        ),
        (
            &["alias", "list"][..],
            "no aliases yet: a worker creates its flows' aliases when it starts",
        ),
    ] {
        let output = pgflow(&pool, args);
        assert!(output.status.success(), "{}", stderr(&output));
        assert_eq!(stdout(&output).trim(), line, "{args:?}");
    }
    let text = stdout(&pgflow(&pool, &["status"]));
    assert!(text.starts_with("no queues yet"), "{text}");
    // Piped output carries no colour codes.
    assert!(!text.contains('\u{1b}'), "{text:?}");
}

/// Runs the binary with `url` as its database URL.
fn pgflow_at(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args(args)
        .args(["--database-url", url])
        .output()
        .unwrap()
}

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
    let second: Value = serde_json::from_str(&stdout(&start("{\"n\": 1}"))).unwrap();
    assert_eq!(second["run_id"], first["run_id"]);

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
            "run {} of `triage_v1` holds key `ticket-7`",
            first["run_id"].as_str().unwrap()
        )),
        "{text}"
    );

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
    client
        .start(Start::named("triage"), &json!(2), StartOptions::new())
        .await
        .unwrap();
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
    assert_eq!(dry, json!({"dry_run": true, "runs": 1}));
    let output = pgflow(&pool, &["cancel", "--flow", "triage"]);
    assert_eq!(stdout(&output).trim(), "cancelled 1 run(s)");
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
    assert_eq!(output.status.code(), Some(2));
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
    assert_eq!(dry, json!({"dry_run": true, "runs": 1}));
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
    assert_eq!(dry, json!({"dry_run": true, "runs": 1}));
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
    assert_eq!(output.status.code(), Some(2));
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

/// A plain HTTP/1.0 GET: the status line and the body.
fn http_get(addr: &str, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

#[sqlx::test(migrations = false)]
async fn dashboard_serves_prints_its_token_and_refuses_a_short_one(pool: PgPool) {
    use pgflow::FlowSpec;
    use std::io::{BufRead, BufReader};
    install(&pool).await;
    pgflow::engine::compile_flow(&pool, &triage_v1::Flow::definition())
        .await
        .unwrap();
    let url = database_url(&pool);

    let short = pgflow(&pool, &["dashboard", "--token", "short"]);
    assert_eq!(short.status.code(), Some(2), "{}", stderr(&short));
    assert!(stderr(&short).contains("at least 16"), "{}", stderr(&short));

    let mut child = Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args([
            "--database-url",
            &url,
            "dashboard",
            "--listen",
            "127.0.0.1:0",
            "--metrics",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first
        .strip_prefix("pgflow dashboard at http://")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_owned();
    let token_line = lines.next().unwrap().unwrap();
    let token = token_line.rsplit(": ").next().unwrap();
    assert_eq!(
        token.len(),
        64,
        "a generated token is printed: {token_line}"
    );

    let (status, body) = http_get(&addr, "/");
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("Overview") && body.contains("actions need the token"));
    let (status, body) = http_get(&addr, "/metrics");
    assert!(status.contains("200"), "{status}");
    assert!(
        body.contains("pgflow_queue_depth{queue=\"classify_threads\"} 0"),
        "the scrape lacks the queue's depth: {body}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
