//! The command says the truth, the same way everywhere: everyday commands first in `--help`,
//! exit codes and JSON errors, run ids by a unique prefix, an alias refused by `delete-flow`
//! naming the flow to pass, a graph that shows maps and conditions, and a scheduled run shown
//! as scheduled (and, cancelled before it began, without a duration).

use pgflow::{Client, Start, StartOptions};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{install, pgflow, queue_in_status, row_of, stderr, stdout, triage_v1};

/// A flow with a map step and a conditional one.
#[pgflow::flow(slug = "shapes_v1", alias = "shapes")]
pub mod shapes_v1 {
    use serde_json::Value;

    #[step(queue = "cli_shapes")]
    pub async fn split(input: Value) -> Result<Vec<u32>, String> {
        Ok(vec![input.as_u64().unwrap_or(1) as u32])
    }

    #[step(map = split, queue = "cli_shapes")]
    pub async fn double(n: u32) -> Result<u32, String> {
        Ok(n * 2)
    }

    #[step(depends_on = [split], when = serde_json::json!({"split": [7]}), when_unmet = fail,
           queue = "cli_shapes")]
    pub async fn page(split: Vec<u32>) -> Result<usize, String> {
        Ok(split.len())
    }
}

async fn deployed(pool: &PgPool) -> Client {
    install(pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    pgflow::engine::activate_flow(pool, "triage_v1")
        .await
        .unwrap();
    client
}

#[test]
fn help_lists_everyday_commands_first_and_says_the_exit_codes() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .arg("--help")
        .output()
        .unwrap();
    let help = stdout(&help);
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .expect("a command list")
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .take(4)
        .collect();
    assert_eq!(commands, ["status", "runs", "run", "start"], "{help}");
    assert!(
        help.contains("Exit codes: 0 done; 1 the command ran and failed"),
        "{help}"
    );
    assert!(help.contains("2 the command line is wrong"), "{help}");

    let cancel = std::process::Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args(["cancel", "--help"])
        .output()
        .unwrap();
    let cancel = stdout(&cancel);
    assert!(cancel.contains("(--flow, --older-than)"), "{cancel}");
    assert!(!cancel.contains("started-before"), "{cancel}");
}

#[sqlx::test(migrations = false)]
async fn with_json_a_failure_is_a_json_object_with_its_exit_code(pool: PgPool) {
    deployed(&pool).await;
    let unknown = uuid::Uuid::new_v4().to_string();
    let output = pgflow(&pool, &["run", &unknown, "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let error: Value = serde_json::from_str(stderr(&output).trim()).unwrap();
    assert_eq!(error["exit_code"], 1);
    assert!(
        error["error"].as_str().unwrap().contains(&unknown),
        "{error}"
    );

    // A wrong command line too, with exit code 2.
    let output = pgflow(&pool, &["runs", "--status", "weird", "--json"]);
    assert_eq!(output.status.code(), Some(2));
    let error: Value = serde_json::from_str(stderr(&output).trim()).unwrap();
    assert_eq!(error["exit_code"], 2);
    assert!(
        error["error"].as_str().unwrap().contains("weird"),
        "{error}"
    );

    // Without --json, one plain line.
    let output = pgflow(&pool, &["run", &unknown]);
    assert!(
        stderr(&output).starts_with("error: "),
        "{}",
        stderr(&output)
    );
}

#[sqlx::test(migrations = false)]
async fn a_unique_prefix_of_a_run_id_names_the_run(pool: PgPool) {
    deployed(&pool).await;
    let ids = [
        "abcd0000-0000-4000-8000-000000000001",
        "abcd1111-0000-4000-8000-000000000002",
        "12345678-0000-4000-8000-000000000003",
    ];
    for id in ids {
        sqlx::query("select pgflow.start_flow('triage_v1', 'null', p_run_id => $1::uuid)")
            .bind(id)
            .execute(&pool)
            .await
            .unwrap();
    }

    let shown: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["run", "1234", "--json"]))).unwrap();
    assert_eq!(shown["run_id"], json!(ids[2]));
    let text = stdout(&pgflow(&pool, &["run", "abcd1"]));
    assert!(text.starts_with(&format!("run {}", ids[1])), "{text}");
    let output = pgflow(&pool, &["cancel", "abcd-0"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output).trim(), format!("cancelled run {}", ids[0]));

    let output = pgflow(&pool, &["run", "abcd"]);
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains("more than one run id") && message.contains(ids[0]),
        "{message}"
    );
    let output = pgflow(&pool, &["run", "ffff"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("no run id starts with `ffff`"));
    for short in ["abc", "xyz12"] {
        let output = pgflow(&pool, &["run", short]);
        assert_eq!(output.status.code(), Some(2), "{short}");
        assert!(stderr(&output).contains("is not a run id"), "{short}");
    }
}

#[sqlx::test(migrations = false)]
async fn delete_flow_on_an_alias_names_the_concrete_flow_to_pass(pool: PgPool) {
    deployed(&pool).await;
    let output = pgflow(&pool, &["delete-flow", "triage"]);
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains("`triage` is an alias")
            && message.contains("pgflow delete-flow triage_v1"),
        "{message}"
    );
    let flows: i64 = sqlx::query_scalar("select count(*) from pgflow.flows")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(flows, 1, "nothing was deleted");
}

#[sqlx::test(migrations = false)]
async fn the_graph_marks_maps_and_shows_conditions_in_mermaid_and_dot(pool: PgPool) {
    install(&pool).await;
    Client::new(pool.clone())
        .deploy(&shapes_v1::deployment())
        .await
        .unwrap();
    let mermaid = stdout(&pgflow(&pool, &["graph", "shapes_v1"]));
    assert!(
        mermaid.contains("double[[\"double (map)<br/>queue: cli_shapes\"]]"),
        "{mermaid}"
    );
    assert!(
        mermaid.contains("when {#quot;split#quot;:[7]}<br/>when unmet: fail"),
        "{mermaid}"
    );
    let dot = stdout(&pgflow(&pool, &["graph", "shapes_v1", "--format", "dot"]));
    assert!(
        dot.contains("\"double\" [shape=box3d, label=\"double (map)\\nqueue: cli_shapes\"]"),
        "{dot}"
    );
    assert!(
        dot.contains("when {\\\"split\\\":[7]}\\nwhen unmet: fail"),
        "{dot}"
    );
}

#[sqlx::test(migrations = false)]
async fn a_run_waiting_for_its_time_is_scheduled_and_cancelled_then_took_no_time(pool: PgPool) {
    let client = deployed(&pool).await;
    let later = client
        .start(
            Start::named("triage"),
            &json!(1),
            StartOptions::new().start_after(std::time::Duration::from_secs(3600)),
        )
        .await
        .unwrap()
        .run_id()
        .to_string();
    let now = client
        .start(Start::named("triage"), &json!(2), StartOptions::new())
        .await
        .unwrap()
        .run_id()
        .to_string();

    let scheduled: Value = serde_json::from_str(&stdout(&pgflow(
        &pool,
        &["runs", "--status", "scheduled", "--json"],
    )))
    .unwrap();
    assert_eq!(scheduled.as_array().unwrap().len(), 1, "{scheduled}");
    assert_eq!(scheduled[0]["run_id"], json!(later));
    assert_eq!(scheduled[0]["status"], "scheduled");
    let started: Value = serde_json::from_str(&stdout(&pgflow(
        &pool,
        &["runs", "--status", "started", "--json"],
    )))
    .unwrap();
    assert_eq!(started.as_array().unwrap().len(), 1, "{started}");
    assert_eq!(started[0]["run_id"], json!(now));

    let text = stdout(&pgflow(&pool, &["runs"]));
    assert_eq!(row_of(&text, &later)[2], "scheduled", "{text}");
    let text = stdout(&pgflow(&pool, &["run", &later]));
    assert!(
        text.starts_with(&format!("run {later} of `triage_v1`: scheduled")),
        "{text}"
    );
    assert!(
        text.contains("begins in 59m") || text.contains("begins in 1h"),
        "{text}"
    );

    let output = pgflow(&pool, &["cancel", &later]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&pgflow(&pool, &["runs"]));
    let row = row_of(&text, &later);
    assert_eq!(row[2], "cancelled", "{text}");
    assert_eq!(row.last().copied(), Some("-"), "no duration: {text}");
    let text = stdout(&pgflow(&pool, &["run", &later]));
    assert!(text.contains("ended before it began"), "{text}");
}

#[sqlx::test(migrations = false)]
async fn a_queue_is_paused_and_resumed_and_status_says_so(pool: PgPool) {
    deployed(&pool).await;
    let output = pgflow(
        &pool,
        &["queue", "pause", "classify_threads", "--reason", "outage"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).starts_with("paused `classify_threads`"));
    let queue = queue_in_status(&pool, "classify_threads");
    assert_eq!(queue["paused"], true, "{queue}");
    let text = stdout(&pgflow(&pool, &["status"]));
    assert_eq!(row_of(&text, "classify_threads")[4], "paused;", "{text}");

    let output = pgflow(&pool, &["queue", "resume", "classify_threads"]);
    assert!(stdout(&output).starts_with("resumed `classify_threads`"));
    let output = pgflow(&pool, &["queue", "resume", "classify_threads"]);
    assert_eq!(stdout(&output).trim(), "`classify_threads` was not paused");
    let output = pgflow(&pool, &["queue", "pause", "nowhere"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(stderr(&output).contains("no flow routes to a queue `nowhere`"));
}

#[sqlx::test(migrations = false)]
async fn a_queue_is_capped_and_status_shows_its_cap(pool: PgPool) {
    deployed(&pool).await;
    let output = pgflow(&pool, &["queue", "cap", "classify_threads", "3"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output).trim(),
        "`classify_threads`: 3 at once (was no cap) across every worker"
    );
    let queue = queue_in_status(&pool, "classify_threads");
    assert_eq!(queue["concurrency"], 3, "{queue}");
    let text = stdout(&pgflow(&pool, &["status"]));
    assert_eq!(row_of(&text, "classify_threads")[3], "0", "{text}");
    assert_eq!(row_of(&text, "classify_threads")[4], "(cap", "{text}");

    let output = pgflow(
        &pool,
        &["queue", "cap", "classify_threads", "none", "--json"],
    );
    let lifted: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(lifted["before"], 3);
    assert_eq!(lifted["concurrency"], Value::Null);
    let output = pgflow(&pool, &["queue", "cap", "classify_threads", "0"]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "a usage error: {}",
        stderr(&output)
    );
    let output = pgflow(&pool, &["queue", "cap", "nowhere", "2"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(stderr(&output).contains("no flow routes to a queue `nowhere`"));
}

#[sqlx::test(migrations = false)]
async fn a_flow_is_paused_by_its_alias_and_resumed_and_status_says_so(pool: PgPool) {
    deployed(&pool).await;
    let output = pgflow(
        &pool,
        &["flow", "pause", "triage", "--reason", "supplier down"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).starts_with("paused `triage`"),
        "{}",
        stdout(&output)
    );
    let status: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["status", "--json"]))).unwrap();
    assert_eq!(
        status["paused_flows"][0]["flow_slug"], "triage_v1",
        "{status}"
    );
    assert_eq!(status["paused_flows"][0]["reason"], "supplier down");
    let text = stdout(&pgflow(&pool, &["status"]));
    assert!(text.contains("paused flows: triage_v1 (since"), "{text}");
    assert!(text.contains("supplier down; 0 tasks parked)"), "{text}");

    let output = pgflow(&pool, &["flow", "resume", "triage_v1"]);
    assert!(
        stdout(&output).starts_with("resumed `triage_v1`"),
        "{}",
        stdout(&output)
    );
    let output = pgflow(&pool, &["flow", "resume", "triage"]);
    assert_eq!(stdout(&output).trim(), "`triage` was not paused");
    let output = pgflow(&pool, &["flow", "pause", "nothing_here"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("is named `nothing_here`"),
        "{}",
        stderr(&output)
    );
}
