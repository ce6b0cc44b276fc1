//! One run in detail: `pgflow run` shows each failed or stalled attempt, and `run`, `graph`
//! and `prune` handle skipped steps.

use std::time::Duration;

use pgflow::Client;
use pgflow::{Start, StartOptions};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{claim, install, pgflow, row_of, stderr, stdout, triage_v1};

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

/// A flow that answers with what it was given, whole.
#[pgflow::flow(slug = "echoing")]
mod echoing {
    use super::*;

    #[step(queue = "echoing")]
    pub async fn echo(input: Value) -> Result<Value, String> {
        Ok(input)
    }
}

#[sqlx::test(migrations = false)]
async fn run_shows_the_input_and_outputs_cut_to_a_bound_or_whole(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = pgflow::Worker::start_with(
        echoing::deployment(),
        pgflow::WorkerConfig::new(echoing::Queue::Echoing).pool(pool.clone()),
    )
    .await
    .unwrap();
    let lines: Vec<String> = (0..50).map(|n| format!("line {n}")).collect();
    let input = json!({"thread": 5, "lines": lines});
    let run = client
        .start(Start::flow::<echoing::Flow>(), &input, StartOptions::new())
        .await
        .unwrap();
    run.wait(&client, Duration::from_secs(10)).await.unwrap();
    worker.shutdown();
    worker.wait().await.unwrap();
    let run_id = run.run_id().to_string();

    let text = stdout(&pgflow(&pool, &["run", &run_id]));
    assert!(
        text.contains("input (") && text.contains("  \"lines\": ["),
        "{text}"
    );
    assert!(
        text.contains("\"line 3\""),
        "the start of the input is shown: {text}"
    );
    assert!(!text.contains("\"line 40\""), "the input is cut: {text}");
    assert!(
        text.contains("in all; `--full` shows all of it"),
        "the cut says so and how to see the rest: {text}"
    );
    assert!(text.contains("output ("), "the run's output: {text}");
    assert!(
        text.contains("step outputs\n  echo ("),
        "each step's output: {text}"
    );

    let full = stdout(&pgflow(&pool, &["run", &run_id, "--full"]));
    assert!(
        full.contains("\"line 49\""),
        "--full shows everything: {full}"
    );
    assert!(!full.contains("cut here"), "{full}");

    let value: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["run", &run_id, "--json"]))).unwrap();
    assert_eq!(value["input"], input);
    assert_eq!(value["output"], json!({"echo": input}));
    assert_eq!(value["steps"][0]["output"], input);
}

/// A child flow, and a parent that runs it for each element of its input.
#[pgflow::flow(slug = "doubling")]
mod doubling {
    use super::*;

    #[step(queue = "family")]
    pub async fn double(input: Value) -> Result<u64, String> {
        Ok(input.as_u64().unwrap_or(0) * 2)
    }
}

#[pgflow::flow(slug = "fanning", input = Vec<u64>)]
mod fanning {
    use super::*;

    #[step(map, subflow = doubling, queue = "family")]
    pub async fn each(n: u64) -> Result<Value, String> {
        Ok(json!(n))
    }
}

#[sqlx::test(migrations = false)]
async fn run_links_a_parent_and_its_children(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = pgflow::Worker::start_with(
        (doubling::deployment(), fanning::deployment()),
        pgflow::WorkerConfig::new(fanning::Queue::Family).pool(pool.clone()),
    )
    .await
    .unwrap();
    let run = client
        .start(
            Start::flow::<fanning::Flow>(),
            &vec![1, 2],
            StartOptions::new(),
        )
        .await
        .unwrap();
    run.wait(&client, Duration::from_secs(20)).await.unwrap();
    worker.shutdown();
    worker.wait().await.unwrap();
    let parent = run.run_id().to_string();

    let text = stdout(&pgflow(&pool, &["run", &parent]));
    assert!(text.contains("child runs"), "{text}");
    let shown: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["--json", "run", &parent]))).unwrap();
    let children = shown["children"].as_array().unwrap();
    assert_eq!(children.len(), 2, "{shown}");
    assert_eq!(children[1]["parent_task_index"], 1);
    assert_eq!(children[1]["status"], "completed");
    let child = children[0]["run_id"].as_str().unwrap().to_owned();
    assert!(text.contains(&child), "{text}");

    let text = stdout(&pgflow(&pool, &["run", &child]));
    assert!(
        text.contains(&format!("child of run {parent} (step `each`, task 0)")),
        "{text}"
    );
    let shown: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["--json", "run", &child]))).unwrap();
    assert_eq!(shown["parent_run_id"], parent.as_str());
}

/// One call at a time per tenant.
#[pgflow::flow(slug = "tenant_calls")]
mod tenant_calls {
    use super::*;

    #[step(queue = "tenant_calls", concurrency = 1, concurrency_key = input.tenant)]
    pub async fn call(input: Value) -> Result<Value, String> {
        Ok(input)
    }
}

#[sqlx::test(migrations = false)]
async fn run_and_status_say_which_tasks_a_cap_holds_back_and_why(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&tenant_calls::deployment()).await.unwrap();
    let mut runs = Vec::new();
    for n in 0..3 {
        let run = client
            .start(
                Start::flow::<tenant_calls::Flow>(),
                &json!({"tenant": "acme", "n": n}),
                StartOptions::new(),
            )
            .await
            .unwrap();
        runs.push(run.run_id().to_string());
    }

    // The first run's task has the tenant's one slot; the others wait for it.
    let first = stdout(&pgflow(&pool, &["run", &runs[0]]));
    assert!(!first.contains("held back"), "{first}");
    let second = stdout(&pgflow(&pool, &["run", &runs[1]]));
    assert!(
        second.contains("held: key `acme` is at its cap of 1 (1 running)"),
        "{second}"
    );
    let shown: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["--json", "run", &runs[2]]))).unwrap();
    assert_eq!(shown["held"][0]["step_slug"], "call", "{shown}");
    assert_eq!(shown["held"][0]["held"], 1);

    let status: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["--json", "status"]))).unwrap();
    let caps = status["caps"].as_array().unwrap();
    assert_eq!(caps.len(), 1, "{status}");
    assert_eq!(caps[0]["cap_key"], "acme");
    assert_eq!(caps[0]["cap"], 1);
    assert_eq!(caps[0]["running"], 1);
    assert_eq!(caps[0]["held"], 2);
    let text = stdout(&pgflow(&pool, &["status"]));
    assert!(text.contains("concurrency caps in use"), "{text}");
    assert!(text.contains("tenant_calls/call"), "{text}");
}

/// One call an hour per tenant.
#[pgflow::flow(slug = "rated_calls")]
mod rated_calls {
    use super::*;

    #[step(queue = "rated_calls", rate_limit = "1/h", rate_key = input.tenant)]
    pub async fn call(input: Value) -> Result<Value, String> {
        Ok(input)
    }
}

#[sqlx::test(migrations = false)]
async fn run_and_status_say_which_tasks_a_rate_limit_holds_back_and_why(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let definition = rated_calls::deployment();
    client.deploy(&definition).await.unwrap();
    let mut runs = Vec::new();
    for n in 0..3 {
        let run = client
            .start(
                Start::flow::<rated_calls::Flow>(),
                &json!({"tenant": "acme", "n": n}),
                StartOptions::new(),
            )
            .await
            .unwrap();
        runs.push(run.run_id().to_string());
    }
    // One claim meets all three: the first takes the tenant's token, the others wait an hour.
    let queue = pgflow::names::QueueName::new("rated_calls").unwrap();
    let pairs = pgflow::engine::SupportedPairs::routed_to(definition.definition(), &queue);
    let tasks = claim(&pool, &queue, &pairs).await;
    assert_eq!(tasks.len(), 1);

    let first = stdout(&pgflow(&pool, &["run", &runs[0]]));
    assert!(!first.contains("held back"), "{first}");
    let second = stdout(&pgflow(&pool, &["run", &runs[1]]));
    assert!(
        second.contains("held: key `acme` is at its rate limit of 1 per 1h"),
        "{second}"
    );
    assert!(second.contains("in 59m"), "the next due time: {second}");
    let shown: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["--json", "run", &runs[2]]))).unwrap();
    assert_eq!(shown["rate_waits"][0]["step_slug"], "call", "{shown}");
    assert_eq!(shown["rate_waits"][0]["waiting"], 1);
    assert_eq!(shown["rate_waits"][0]["rate_key"], "acme");

    let status: Value =
        serde_json::from_str(&stdout(&pgflow(&pool, &["--json", "status"]))).unwrap();
    let rates = status["rate_limits"].as_array().unwrap();
    assert_eq!(rates.len(), 1, "{status}");
    assert_eq!(rates[0]["rate_key"], "acme");
    assert_eq!(rates[0]["rate_limit"], 1);
    assert_eq!(rates[0]["period_ms"], 3_600_000);
    assert_eq!(rates[0]["started"], 1);
    assert_eq!(rates[0]["waiting"], 2);
    let text = stdout(&pgflow(&pool, &["status"]));
    assert!(text.contains("rate limits in use"), "{text}");
    assert!(text.contains("1 per 1h"), "{text}");
}
