//! Input checked at start: a flow with `check_input` records its input type's JSON Schema, and
//! every start not typed by that type (by alias, by concrete slug, many at once, from SQL) is
//! refused when its input does not fit, naming the field and what was expected, with nothing
//! started. A flow without it still fails such a run at its first attempt: a step input that
//! cannot decode is a permanent failure naming the field.

use std::time::Duration;

use pgflow::{Client, EngineError, RunError, Start, StartOptions, Worker};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{install, run_count, worker_config};

/// The checked flow's input: nested, optional, a list, an enum and a bounded integer.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ticket {
    pub thread_id: u64,
    pub subject: String,
    pub labels: Vec<String>,
    pub priority: Priority,
    pub contact: Option<Contact>,
    pub retries: u8,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Low,
    High,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Contact {
    pub email: String,
}

#[pgflow::flow(slug = "checked_v1", alias = "checked", input = super::Ticket, check_input)]
pub mod checked_v1 {
    #[step(queue = "input_checks")]
    pub async fn read(input: super::Ticket) -> Result<u64, String> {
        Ok(input.thread_id)
    }
}

/// The same input type without `check_input`: a bad input reaches the worker.
#[pgflow::flow(slug = "unchecked_v1", alias = "unchecked", input = super::Ticket, max_attempts = 3,
               base_delay = 0)]
pub mod unchecked_v1 {
    #[step(queue = "input_checks_unchecked")]
    pub async fn read(input: super::Ticket) -> Result<u64, String> {
        Ok(input.thread_id)
    }
}

fn good() -> Value {
    json!({"thread_id": 7, "subject": "refund", "labels": ["billing"], "priority": "high",
           "contact": {"email": "a@example.com"}, "retries": 2})
}

/// `good()` with `field` set to `value` (or removed when `value` is `None`).
fn with(field: &str, value: Option<Value>) -> Value {
    let mut input = good();
    let object = input.as_object_mut().expect("an object");
    match value {
        Some(value) => object.insert(field.to_owned(), value),
        None => object.remove(field),
    };
    input
}

async fn deployed(pool: &PgPool) -> Client {
    install(pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&checked_v1::deployment()).await.unwrap();
    pgflow::engine::activate_flow(pool, "checked_v1")
        .await
        .unwrap();
    client
}

/// The misfit a refused start reports: (input number, path, problem).
fn misfit(error: &EngineError) -> (usize, String, String) {
    match error {
        EngineError::InputMismatch(misfit) => {
            (misfit.input, misfit.path.clone(), misfit.problem.clone())
        }
        other => panic!("expected InputMismatch, got {other:?}"),
    }
}

#[sqlx::test(migrations = false)]
async fn an_input_that_does_not_fit_is_refused_naming_the_field_and_nothing_starts(pool: PgPool) {
    let client = deployed(&pool).await;
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            with("thread_id", Some(json!("5"))),
            "thread_id",
            "expected integer, found string",
        ),
        (
            with("thread_id", Some(json!(1.5))),
            "thread_id",
            "expected integer, found a number with a fraction",
        ),
        (
            with("thread_id", Some(json!(-1))),
            "thread_id",
            "expected at least 0",
        ),
        (
            with("retries", Some(json!(300))),
            "retries",
            "expected at most 255",
        ),
        (
            with("subject", None),
            "subject",
            "missing; the field is required (string)",
        ),
        (
            with("labels", Some(json!(["a", 3]))),
            "labels[1]",
            "expected string, found integer",
        ),
        (
            with("priority", Some(json!("urgent"))),
            "priority",
            "expected one of \"low\", \"high\"",
        ),
        (
            with("contact", Some(json!({"email": 5}))),
            "contact.email",
            "expected string, found integer",
        ),
        (
            with("colour", Some(json!("red"))),
            "colour",
            "not a field of this type",
        ),
        (json!(null), "", "expected object, found null"),
        (
            json!({"thread": 5}),
            "thread_id",
            "missing; the field is required (integer)",
        ),
    ];
    for (input, path, problem) in &cases {
        for name in ["checked", "checked_v1"] {
            let error = client
                .start(Start::named(name), input, StartOptions::new())
                .await
                .expect_err("a misfit is refused");
            let (number, found_path, found_problem) = misfit(&error);
            assert_eq!(number, 1);
            assert_eq!(&found_path, path, "{input} by {name}: {error}");
            assert!(
                found_problem.starts_with(problem),
                "{input} by {name}: `{found_problem}` should start with `{problem}`"
            );
            let text = error.to_string();
            assert!(text.contains("checked_v1"), "{text}");
            assert!(text.contains("Ticket"), "the input type is named: {text}");
            if !path.is_empty() {
                assert!(text.contains(&format!("at `{path}`")), "{text}");
            }
        }
    }

    // The message never quotes the value given.
    let error = client
        .start(
            Start::named("checked"),
            &with("subject", Some(json!(["secret-value"]))),
            StartOptions::new(),
        )
        .await
        .unwrap_err();
    assert!(!error.to_string().contains("secret-value"), "{error}");

    // Many at once: the first misfit is named by its place, and no input of the call starts.
    let error = client
        .start_many(
            Start::named("checked"),
            &[good(), good(), with("thread_id", Some(json!("x")))],
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(misfit(&error).0, 3);
    assert!(error.to_string().contains("input 3 of 3"), "{error}");

    // From SQL, by alias: PF014.
    let refused = sqlx::query("select pgflow.start_flow('checked', '{\"thread_id\": 5}'::jsonb)")
        .execute(&pool)
        .await
        .unwrap_err();
    let refused = refused.as_database_error().unwrap();
    assert_eq!(refused.code().as_deref(), Some("PF014"));
    assert!(
        refused.message().contains("at `subject`"),
        "{}",
        refused.message()
    );
    assert_eq!(run_count(&pool).await, 0, "nothing was started");

    // Inputs that fit start, by every form; `contact` may be null or left out.
    let optional_null = with("contact", Some(Value::Null));
    let optional_missing = with("contact", None);
    for input in [good(), optional_null, optional_missing] {
        client
            .start(Start::named("checked"), &input, StartOptions::new())
            .await
            .unwrap();
    }
    let ticket: Ticket = serde_json::from_value(good()).unwrap();
    checked_v1::start(&client, &ticket).await.unwrap();
    sqlx::query("select pgflow.start_flow('checked_v1', $1)")
        .bind(good())
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(run_count(&pool).await, 5);

    // The schema is recorded on the flow, for anyone to read.
    let schema: Value =
        sqlx::query_scalar("select input_schema from pgflow.flows where flow_slug = 'checked_v1'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(schema["title"], "Ticket");
}

#[sqlx::test(migrations = false)]
async fn a_step_input_that_cannot_decode_fails_at_its_first_attempt_naming_the_field(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        unchecked_v1::deployment(),
        worker_config(unchecked_v1::Queue::InputChecksUnchecked, &pool),
    )
    .await
    .unwrap();

    // Without `check_input` the start is accepted...
    let run = client
        .start(
            Start::named("unchecked"),
            &with("thread_id", Some(json!("5"))),
            StartOptions::new(),
        )
        .await
        .unwrap();
    // ...and the run fails at the first attempt of three.
    let error = run
        .wait(&client, Duration::from_secs(20))
        .await
        .unwrap_err();
    assert!(matches!(&error, RunError::Failed { .. }), "{error}");
    let (attempts, message): (i32, String) = sqlx::query_as(
        "select attempts_count, error_message from pgflow.step_tasks where run_id = $1",
    )
    .bind(run.run_id())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(attempts, 1, "a decode failure is permanent: {message}");
    assert!(message.contains("at `thread_id`"), "{message}");
    assert!(message.contains("expected u64"), "{message}");

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_schedule_whose_input_does_not_fit_starts_nothing_and_keeps_the_error(pool: PgPool) {
    deployed(&pool).await;
    let schedule = pgflow::Schedule::new("bad_tickets", "checked", "0 * * * * *")
        .input(&with("thread_id", Some(json!("seven"))));
    pgflow::engine::define_schedule(&pool, &schedule)
        .await
        .unwrap();
    let stored = pgflow::engine::schedule_list(&pool)
        .await
        .unwrap()
        .remove(0);
    let tick = stored.ticks_after + chrono::Duration::seconds(60);
    let started = pgflow::engine::fire_schedule(
        &pool,
        "bad_tickets",
        stored.ticks_after,
        &[tick],
        tick,
        tick + chrono::Duration::seconds(60),
    )
    .await
    .unwrap();
    assert_eq!(started, Some(0), "the tick started nothing");
    let after = pgflow::engine::schedule_list(&pool)
        .await
        .unwrap()
        .remove(0);
    let error = after.last_error.expect("the error is kept on the schedule");
    assert!(error.contains("at `thread_id`"), "{error}");
    assert_eq!(
        after.ticks_after, tick,
        "the schedule moved on past the tick"
    );

    // Triggered by hand, the operator gets the misfit itself.
    let error = pgflow::engine::trigger_schedule(&pool, "bad_tickets")
        .await
        .unwrap_err();
    assert_eq!(misfit(&error).1, "thread_id");
    assert_eq!(run_count(&pool).await, 0);
}
