//! Conditional steps and skips: `when` / `unless` patterns on the flow input and on
//! dependency outputs, each `when_unmet` and `when_exhausted` mode, cascades through a
//! diamond, a skipped dependency into a map, and what a skip leaves behind (statuses, reasons,
//! tasks, messages, the run output).

use std::time::Duration;

use pgflow::definition::{FlowDefinition, StepCondition, WhenExhausted, WhenUnmet};
use pgflow::engine::{self, TaskCompletion, TaskFailure};
use pgflow::{Client, RunError, StepError, Worker};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{
    claim, compiled, flow, install, map, messages, pairs_for, queue, single, worker_config,
};

/// `(step_slug, status, skip_reason)` of every step of a run, by step slug.
async fn skips(pool: &PgPool, run_id: Uuid) -> Vec<(String, String, Option<String>)> {
    sqlx::query_as(
        "select step_slug, status, skip_reason from pgflow.step_states
         where run_id = $1 order by step_slug",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await
    .unwrap()
}

fn row(step: &str, status: &str, reason: Option<&str>) -> (String, String, Option<String>) {
    (
        step.to_owned(),
        status.to_owned(),
        reason.map(str::to_owned),
    )
}

/// How many tasks a step of a run has.
async fn task_count(pool: &PgPool, run_id: Uuid, step: &str) -> i64 {
    sqlx::query_scalar(
        "select count(*) from pgflow.step_tasks where run_id = $1 and step_slug = $2",
    )
    .bind(run_id)
    .bind(step)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Signup {
    pub email: String,
    pub plan: String,
}

/// Conditions on the flow input: `welcome_pro` runs for the pro plan only, `nudge` for every
/// plan but pro, and `report` takes both as `Option`s.
#[pgflow::flow(slug = "cond_signup", input = super::Signup)]
pub mod cond_signup {
    #[step(queue = "cond_signup", when = json!({"plan": "pro"}))]
    pub async fn welcome_pro(input: super::Signup) -> Result<String, String> {
        Ok(format!("welcome, pro {}", input.email))
    }

    #[step(queue = "cond_signup", unless = r#"{"plan": "pro"}"#)]
    pub async fn nudge(input: super::Signup) -> Result<String, String> {
        Ok(format!("upgrade, {}", input.email))
    }

    #[step(queue = "cond_signup", depends_on = [welcome_pro, nudge])]
    pub async fn report(
        welcome_pro: Option<String>,
        nudge: Option<String>,
    ) -> Result<String, String> {
        Ok(format!(
            "{} / {}",
            welcome_pro.as_deref().unwrap_or("-"),
            nudge.as_deref().unwrap_or("-")
        ))
    }
}

#[sqlx::test(migrations = false)]
async fn when_and_unless_on_the_flow_input_skip_and_dependents_receive_none(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        cond_signup::deployment(),
        worker_config(cond_signup::Queue::CondSignup, &pool),
    )
    .await
    .unwrap();

    let pro = Signup {
        email: "ada@example.com".into(),
        plan: "pro".into(),
    };
    let run = cond_signup::start(&client, &pro).await.unwrap();
    let output = run.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(output.report, "welcome, pro ada@example.com / -");
    assert_eq!(
        skips(&pool, run.run_id()).await,
        vec![
            row("nudge", "skipped", Some("condition_unmet")),
            row("report", "completed", None),
            row("welcome_pro", "completed", None),
        ]
    );
    assert_eq!(
        task_count(&pool, run.run_id(), "nudge").await,
        0,
        "a step skipped by its condition never gets a task"
    );

    let free = Signup {
        email: "bob@example.com".into(),
        plan: "free".into(),
    };
    let run = cond_signup::start(&client, &free).await.unwrap();
    let output = run.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(output.report, "- / upgrade, bob@example.com");
    assert_eq!(
        skips(&pool, run.run_id()).await[2],
        row("welcome_pro", "skipped", Some("condition_unmet"))
    );
    worker.shutdown();
    worker.wait().await.unwrap();
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Label {
    pub kind: String,
}

/// A condition on a dependency's output, failing the run when unmet.
#[pgflow::flow(slug = "cond_ticket", input = String)]
pub mod cond_ticket {
    use super::Label;

    #[step(queue = "cond_ticket")]
    pub async fn classify(input: String) -> Result<Label, String> {
        let kind = if input.contains("down") {
            "urgent"
        } else {
            "routine"
        };
        Ok(Label { kind: kind.into() })
    }

    #[step(queue = "cond_ticket", depends_on = [classify], when = json!({"classify": {"kind": "urgent"}}))]
    pub async fn page(classify: Label) -> Result<String, String> {
        Ok(format!("paged for {}", classify.kind))
    }

    #[step(queue = "cond_ticket", depends_on = [classify],
           unless = json!({"classify": {"kind": "urgent"}}), when_unmet = fail)]
    pub async fn file(classify: Label) -> Result<String, String> {
        Ok(format!("filed as {}", classify.kind))
    }
}

#[sqlx::test(migrations = false)]
async fn a_condition_on_a_dependency_output_decides_and_when_unmet_fail_fails_the_run(
    pool: PgPool,
) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        cond_ticket::deployment(),
        worker_config(cond_ticket::Queue::CondTicket, &pool),
    )
    .await
    .unwrap();

    let routine = cond_ticket::start(&client, &"printer jammed".to_owned())
        .await
        .unwrap();
    let output = routine
        .wait(&client, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(output.file, "filed as routine");
    assert_eq!(
        output.page, None,
        "a skipped leaf is None in the run output"
    );
    let stored: serde_json::Value =
        sqlx::query_scalar("select output from pgflow.runs where run_id = $1")
            .bind(routine.run_id())
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        stored,
        json!({"file": "filed as routine", "page": null}),
        "the run output keeps a skipped leaf as null"
    );

    let urgent = cond_ticket::start(&client, &"site is down".to_owned())
        .await
        .unwrap();
    let error = urgent
        .wait(&client, Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, RunError::Failed { step_slug, .. } if step_slug == "file"),
        "the unmet `fail` condition failed the run at `file`: {error}"
    );
    let (status, message): (String, String) = sqlx::query_as(
        "select status, error_message from pgflow.step_states where run_id = $1 and step_slug = 'file'",
    )
    .bind(urgent.run_id())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(status, "failed");
    assert!(message.contains("condition was not met"), "{message}");
    worker.shutdown();
    worker.wait().await.unwrap();
}

/// A diamond under a cascading skip: `gate` → `left`, `right` → `join`, with `audit` beside
/// it and `summary` after `join` and `audit`.
#[pgflow::flow(slug = "cond_diamond", input = serde_json::Value)]
pub mod cond_diamond {
    #[step(queue = "cond_diamond", when = json!({"go": true}), when_unmet = skip_cascade)]
    pub async fn gate(input: serde_json::Value) -> Result<i64, String> {
        Ok(input["n"].as_i64().unwrap_or(0))
    }

    #[step(queue = "cond_diamond", depends_on = [gate])]
    pub async fn left(gate: i64) -> Result<i64, String> {
        Ok(gate + 1)
    }

    #[step(queue = "cond_diamond", depends_on = [gate])]
    pub async fn right(gate: i64) -> Result<i64, String> {
        Ok(gate * 10)
    }

    #[step(queue = "cond_diamond", depends_on = [left, right])]
    pub async fn join(left: i64, right: i64) -> Result<i64, String> {
        Ok(left + right)
    }

    #[step(queue = "cond_diamond")]
    pub async fn audit(input: serde_json::Value) -> Result<bool, String> {
        Ok(input.is_object())
    }

    #[step(queue = "cond_diamond", depends_on = [join, audit])]
    pub async fn summary(join: i64, audit: bool) -> Result<String, String> {
        Ok(format!("{join} {audit}"))
    }
}

#[sqlx::test(migrations = false)]
async fn skip_cascade_skips_everything_downstream_of_a_diamond_and_the_run_completes(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        cond_diamond::deployment(),
        worker_config(cond_diamond::Queue::CondDiamond, &pool),
    )
    .await
    .unwrap();

    let run = cond_diamond::start(&client, &json!({"go": true, "n": 2}))
        .await
        .unwrap();
    let output = run.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(output.summary.as_deref(), Some("23 true"));

    let run = cond_diamond::start(&client, &json!({"go": false}))
        .await
        .unwrap();
    let output = run.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        output.summary, None,
        "summary is downstream of the skipped gate"
    );
    assert_eq!(
        skips(&pool, run.run_id()).await,
        vec![
            row("audit", "completed", None),
            row("gate", "skipped", Some("condition_unmet")),
            row("join", "skipped", Some("dependency_skipped")),
            row("left", "skipped", Some("dependency_skipped")),
            row("right", "skipped", Some("dependency_skipped")),
            row("summary", "skipped", Some("dependency_skipped")),
        ]
    );
    let (status, remaining): (String, i32) =
        sqlx::query_as("select status, remaining_steps from pgflow.runs where run_id = $1")
            .bind(run.run_id())
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((status.as_str(), remaining), ("completed", 0));
    let tasks: i64 = sqlx::query_scalar("select count(*) from pgflow.step_tasks where run_id = $1")
        .bind(run.run_id())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(tasks, 1, "only audit ran");
    worker.shutdown();
    worker.wait().await.unwrap();
}

/// A skippable producer feeding a map step, and a skippable map step.
#[pgflow::flow(slug = "cond_batch", input = serde_json::Value)]
pub mod cond_batch {
    #[step(queue = "cond_batch", when = json!({"items": true}))]
    pub async fn produce(input: serde_json::Value) -> Result<Vec<i64>, String> {
        Ok(serde_json::from_value(input["list"].clone()).unwrap_or_default())
    }

    #[step(queue = "cond_batch", map = produce)]
    pub async fn double(n: i64) -> Result<i64, String> {
        Ok(n * 2)
    }

    #[step(queue = "cond_batch", depends_on = [double])]
    pub async fn total(double: Vec<i64>) -> Result<i64, String> {
        Ok(double.iter().sum())
    }
}

#[sqlx::test(migrations = false)]
async fn a_map_over_a_skipped_dependency_has_no_tasks_and_yields_an_empty_array(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        cond_batch::deployment(),
        worker_config(cond_batch::Queue::CondBatch, &pool),
    )
    .await
    .unwrap();

    let run = cond_batch::start(&client, &json!({"items": true, "list": [1, 2, 3]}))
        .await
        .unwrap();
    assert_eq!(
        run.wait(&client, Duration::from_secs(10))
            .await
            .unwrap()
            .total,
        12
    );

    let run = cond_batch::start(&client, &json!({"items": false, "list": [1, 2, 3]}))
        .await
        .unwrap();
    assert_eq!(
        run.wait(&client, Duration::from_secs(10))
            .await
            .unwrap()
            .total,
        0
    );
    assert_eq!(
        skips(&pool, run.run_id()).await,
        vec![
            row("double", "completed", None),
            row("produce", "skipped", Some("condition_unmet")),
            row("total", "completed", None),
        ]
    );
    assert_eq!(task_count(&pool, run.run_id(), "double").await, 0);
    let output: serde_json::Value = sqlx::query_scalar(
        "select output from pgflow.step_states where run_id = $1 and step_slug = 'double'",
    )
    .bind(run.run_id())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(output, json!([]));
    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_skipped_map_step_yields_no_tasks(pool: PgPool) {
    install(&pool).await;
    let definition = compiled(
        &pool,
        FlowDefinition::new(flow("cond_skip_map"))
            .step(map("each", &[]).condition(StepCondition {
                when: Some(json!(["go"])),
                ..StepCondition::default()
            }))
            .step(single("after", &["each"])),
    )
    .await;
    // A root map step skipped by its condition is not checked for an array: nothing maps.
    let run = engine::start_flow(&pool, definition.slug.as_str(), &json!({"not": "an array"}))
        .await
        .unwrap();
    assert_eq!(
        skips(&pool, run.run_id).await,
        vec![
            row("after", "started", None),
            row("each", "skipped", Some("condition_unmet")),
        ]
    );
    assert_eq!(task_count(&pool, run.run_id, "each").await, 0);
    let tasks = claim(
        &pool,
        &queue("cond_skip_map"),
        &pairs_for(&[&definition], &queue("cond_skip_map")),
    )
    .await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        tasks[0].input,
        json!({"each": null}),
        "a skipped dependency is null in the input"
    );
}

static FLAKY_CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A step that always fails, skipped once its attempts are used up.
#[pgflow::flow(slug = "cond_enrich", input = String, base_delay = 0)]
pub mod cond_enrich {
    use std::sync::atomic::Ordering;

    use super::{FLAKY_CALLS, StepError};

    #[step(queue = "cond_enrich", max_attempts = 2, when_exhausted = skip)]
    pub async fn enrich(input: String) -> Result<String, StepError> {
        FLAKY_CALLS.fetch_add(1, Ordering::SeqCst);
        Err(StepError::retry(format!(
            "enrichment service down for {}",
            input.len()
        )))
    }

    #[step(queue = "cond_enrich", depends_on = [enrich])]
    pub async fn store(input: String, enrich: Option<String>) -> Result<String, String> {
        Ok(format!(
            "{input}: {}",
            enrich.unwrap_or_else(|| "plain".into())
        ))
    }
}

#[sqlx::test(migrations = false)]
async fn when_exhausted_skip_skips_the_step_after_its_last_attempt_and_the_run_goes_on(
    pool: PgPool,
) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        cond_enrich::deployment(),
        worker_config(cond_enrich::Queue::CondEnrich, &pool),
    )
    .await
    .unwrap();

    let run = cond_enrich::start(&client, &"order 7".to_owned())
        .await
        .unwrap();
    let output = run.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(output.store, "order 7: plain");
    assert_eq!(
        FLAKY_CALLS.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "both attempts were used"
    );
    let (status, reason, error, task_status): (String, String, String, String) = sqlx::query_as(
        "select ss.status, ss.skip_reason, ss.error_message, t.status
         from pgflow.step_states ss join pgflow.step_tasks t using (run_id, step_slug)
         where ss.run_id = $1 and ss.step_slug = 'enrich'",
    )
    .bind(run.run_id())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str(), task_status.as_str()),
        ("skipped", "handler_failed", "failed")
    );
    assert!(error.contains("enrichment service down"), "{error}");
    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn exhaustion_with_skip_cascade_drops_a_map_steps_other_tasks_and_its_downstream(
    pool: PgPool,
) {
    install(&pool).await;
    let definition = compiled(
        &pool,
        FlowDefinition::new(flow("cond_fanout"))
            .step(map("each", &[]).when_exhausted(WhenExhausted::SkipCascade))
            .step(single("after", &["each"]))
            .step(single("beside", &[])),
    )
    .await;
    let q = queue("cond_fanout");
    let pairs = pairs_for(&[&definition], &q);
    let run = engine::start_flow(&pool, definition.slug.as_str(), &json!([1, 2, 3]))
        .await
        .unwrap();
    let mut tasks = claim(&pool, &q, &pairs).await;
    tasks.sort_by_key(|t| (t.step_slug.to_string(), t.task_index));
    assert_eq!(tasks.len(), 4, "three elements and beside");
    let (each, beside): (Vec<_>, Vec<_>) = tasks
        .into_iter()
        .partition(|t| t.step_slug.as_str() == "each");

    let outcome = engine::fail_tasks(
        &pool,
        &[TaskFailure::permanent(&each[0], "element 0 is bad")],
    )
    .await
    .unwrap();
    assert!(
        !outcome[0].will_retry && outcome[0].step_skipped,
        "the outcome says the step was skipped, not the run failed: {outcome:?}"
    );
    assert_eq!(
        skips(&pool, run.run_id).await,
        vec![
            row("after", "skipped", Some("dependency_skipped")),
            row("beside", "started", None),
            row("each", "skipped", Some("handler_failed")),
        ]
    );
    let statuses: Vec<(i32, String)> = sqlx::query_as(
        "select task_index, status from pgflow.step_tasks
         where run_id = $1 and step_slug = 'each' order by task_index",
    )
    .bind(run.run_id)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        statuses,
        vec![
            (0, "failed".into()),
            (1, "skipped".into()),
            (2, "skipped".into())
        ]
    );
    // The running siblings' results arrive late and are discarded.
    let late: Vec<_> = each[1..]
        .iter()
        .map(|t| TaskCompletion::of(t, json!(0)))
        .collect();
    assert_eq!(engine::complete_tasks(&pool, &late).await.unwrap(), 0);

    engine::complete_tasks(&pool, &[TaskCompletion::of(&beside[0], json!("ok"))])
        .await
        .unwrap();
    let (status, output): (String, serde_json::Value) =
        sqlx::query_as("select status, output from pgflow.runs where run_id = $1")
            .bind(run.run_id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(status, "completed");
    assert_eq!(output, json!({"after": null, "beside": "ok"}));
}

#[sqlx::test(migrations = false)]
async fn a_skip_archives_the_queued_messages_of_the_skipped_steps_tasks(pool: PgPool) {
    install(&pool).await;
    let definition = compiled(
        &pool,
        FlowDefinition::new(flow("cond_queued"))
            .step(map("each", &[]).when_exhausted(WhenExhausted::Skip))
            .step(single("after", &["each"])),
    )
    .await;
    let q = queue("cond_queued");
    let pairs = pairs_for(&[&definition], &q);
    let run = engine::start_flow(&pool, definition.slug.as_str(), &json!([1, 2, 3]))
        .await
        .unwrap();
    // Claim one element; the other two stay queued behind their messages.
    let first = engine::read_and_start_tasks(&pool, &q, Uuid::new_v4(), &pairs, 1)
        .await
        .unwrap()
        .tasks;
    assert_eq!(first.len(), 1);
    assert_eq!(messages(&pool, "cond_queued").await.len(), 2);

    engine::fail_tasks(&pool, &[TaskFailure::permanent(&first[0], "bad element")])
        .await
        .unwrap();
    assert!(
        messages(&pool, "cond_queued").await.len() <= 1,
        "the skipped siblings' messages were archived (only after's may wait)"
    );
    let tasks = claim(&pool, &q, &pairs).await;
    assert_eq!(
        tasks
            .iter()
            .map(|t| t.step_slug.to_string())
            .collect::<Vec<_>>(),
        ["after"],
        "no skipped element reaches a handler"
    );
    assert_eq!(tasks[0].input, json!({"each": null}));
    let _ = run;
}

#[sqlx::test(migrations = false)]
async fn conditions_are_part_of_the_flows_shape_and_bad_ones_are_refused(pool: PgPool) {
    install(&pool).await;
    let gated = |pattern: serde_json::Value| {
        FlowDefinition::new(flow("cond_shape"))
            .step(single("a", &[]))
            .step(single("b", &["a"]).condition(StepCondition {
                when: Some(pattern),
                when_unmet: WhenUnmet::SkipCascade,
                ..StepCondition::default()
            }))
    };
    compiled(&pool, gated(json!({"a": {"ok": true}}))).await;
    let error = engine::compile_flow(&pool, &gated(json!({"a": {"ok": false}})))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("step `b` condition and skip modes"),
        "a changed condition is a changed shape: {error}"
    );

    for (pattern, expected) in [
        (
            json!(["a"]),
            "must be a JSON object keyed by dependency slugs",
        ),
        (
            json!({"ghost": 1}),
            "names `ghost`, which is not one of its dependencies",
        ),
    ] {
        let error = engine::compile_flow(
            &pool,
            &FlowDefinition::new(flow("cond_bad"))
                .step(single("a", &[]))
                .step(single("b", &["a"]).condition(StepCondition {
                    when: Some(pattern),
                    ..StepCondition::default()
                })),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(error.contains(expected), "{error}");
    }

    let error = sqlx::query_scalar::<_, String>(
        "select pgflow.define_flow('cond_raw', 'cond_raw', 1, '{}',
           '[{\"slug\": \"a\", \"when_unmet\": \"skip\"}]')",
    )
    .fetch_one(&pool)
    .await
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("sets `when_unmet` but has no condition"),
        "{error}"
    );
    let error = sqlx::query_scalar::<_, String>(
        "select pgflow.define_flow('cond_raw', 'cond_raw', 1, '{}',
           '[{\"slug\": \"a\", \"when_exhausted\": \"retry\"}]')",
    )
    .fetch_one(&pool)
    .await
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("`when_exhausted` must be one of fail, skip, skip_cascade"),
        "{error}"
    );
}
