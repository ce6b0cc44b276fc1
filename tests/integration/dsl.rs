//! Flows written with `#[flow]`: their shape compiles and verifies in Postgres, and runs
//! execute end to end through the generated adapters.

use pgflow::engine::{self, TaskCompletion, TaskFailure};
use pgflow::engine::{ClaimedTask, CompileStatus, SupportedPairs};
use pgflow::handler::TaskInput;
use pgflow::names::QueueName;
use pgflow::{Client, Context, Deployment, FlowSpec, RunError};
use pgflow_runtime::StepFailure;
use pgflow_runtime::state::SharedState;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgPool;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::support::install;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriageInput {
    pub thread_id: u64,
    pub messages: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thread {
    pub id: u64,
    pub messages: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Label {
    Urgent,
    Normal,
}

#[pgflow::flow(slug = "dsl_triage", alias = "dsl", version = 1, input = TriageInput, max_attempts = 2, base_delay = 0)]
pub mod dsl_triage {
    use super::*;

    #[step(queue = "dsl_fetch")]
    pub async fn fetch(input: TriageInput) -> Result<Thread, String> {
        Ok(Thread {
            id: input.thread_id,
            messages: input.messages,
        })
    }

    #[step(depends_on = [fetch])]
    pub async fn split(fetch: Thread) -> Result<Vec<String>, String> {
        Ok(fetch.messages)
    }

    #[step(map = split, queue = "dsl_classify", timeout = "30s")]
    pub async fn classify(message: String, ctx: Context) -> Result<Label, String> {
        if message == "fail once" && ctx.attempt() == 1 {
            return Err("model overloaded".to_owned());
        }
        Ok(if message.ends_with('!') {
            Label::Urgent
        } else {
            Label::Normal
        })
    }

    #[step(depends_on = [fetch, classify], queue = "dsl_alerts")]
    pub async fn alert(
        fetch: Thread,
        classify: Vec<Label>,
        input: TriageInput,
    ) -> Result<String, String> {
        let urgent = classify.iter().filter(|l| **l == Label::Urgent).count();
        Ok(format!(
            "thread {} ({} sent): {urgent} urgent",
            fetch.id,
            input.messages.len()
        ))
    }
}

/// Runs the handler of a claimed task of `deployment` and returns its encoded output (no
/// timeout, no completion): what a worker's executor does, by hand.
async fn execute<F: FlowSpec>(
    deployment: &Deployment<F>,
    task: ClaimedTask,
    pool: &PgPool,
) -> Result<serde_json::Value, StepFailure> {
    let handler = deployment
        .handler(task.step_slug.as_str())
        .expect("the flow has a handler for each of its steps");
    let context = Context::for_task(&task, pool.into(), CancellationToken::new());
    let state: SharedState = deployment.state().clone();
    handler(TaskInput::new(task, context, state)).await
}

/// Claims and runs every task of `deployment` until none is left: the minimal loop the worker
/// replaces.
async fn run_until_idle<F: FlowSpec>(pool: &PgPool, deployment: &Deployment<F>) {
    let definition = deployment.definition();
    let mut queues: Vec<QueueName> = definition
        .steps
        .iter()
        .map(|s| definition.queue_of(s))
        .collect();
    queues.sort();
    queues.dedup();
    loop {
        let mut progressed = false;
        for queue in &queues {
            let pairs = SupportedPairs::routed_to(definition, queue);
            let tasks = engine::read_and_start_tasks(pool, queue, Uuid::new_v4(), &pairs, 50)
                .await
                .unwrap()
                .tasks;
            for task in tasks {
                progressed = true;
                match execute(deployment, task.clone(), pool).await {
                    Ok(output) => {
                        engine::complete_tasks(pool, &[TaskCompletion::of(&task, output)])
                            .await
                            .unwrap();
                    }
                    Err(failure) => {
                        engine::fail_tasks(pool, &[TaskFailure::of(&task, failure.to_string())])
                            .await
                            .unwrap();
                    }
                }
            }
        }
        if !progressed {
            return;
        }
    }
}

#[sqlx::test(migrations = false)]
async fn a_generated_flow_compiles_verifies_and_matches_its_queues(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let deployment = dsl_triage::deployment();
    assert_eq!(
        client.deploy(&deployment).await.unwrap(),
        CompileStatus::Compiled
    );
    assert_eq!(
        client.deploy(&deployment).await.unwrap(),
        CompileStatus::Verified
    );

    let routes: Vec<(String, String, String, i32)> = sqlx::query_as(
        "select step_slug, step_type, queue_name, deps_count from pgflow.steps
         where flow_slug = 'dsl_triage' order by step_index",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        routes,
        vec![
            ("fetch".into(), "single".into(), "dsl_fetch".into(), 0),
            ("split".into(), "single".into(), "dsl_triage".into(), 1),
            ("classify".into(), "map".into(), "dsl_classify".into(), 1),
            ("alert".into(), "single".into(), "dsl_alerts".into(), 2),
        ]
    );
    let queues: Vec<&str> = dsl_triage::Queue::ALL.iter().map(|q| q.as_str()).collect();
    assert_eq!(
        queues,
        ["dsl_fetch", "dsl_triage", "dsl_classify", "dsl_alerts"]
    );
    assert_eq!(dsl_triage::Queue::DslClassify.to_string(), "dsl_classify");
    let (alias, version, max_attempts, timeout): (String, i32, i32, Option<i32>) = sqlx::query_as(
        "select f.alias, f.version, f.opt_max_attempts, s.opt_timeout from pgflow.flows f
         join pgflow.steps s using (flow_slug) where s.step_slug = 'classify'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (alias.as_str(), version, max_attempts, timeout),
        ("dsl", 1, 2, Some(30))
    );
}

#[sqlx::test(migrations = false)]
async fn a_run_executes_end_to_end_through_the_adapters(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let deployment = dsl_triage::deployment();
    client.deploy(&deployment).await.unwrap();

    let input = TriageInput {
        thread_id: 7,
        messages: vec!["hi".into(), "fail once".into(), "fire!".into()],
    };
    let handle = dsl_triage::start(&client, &input).await.unwrap();
    run_until_idle(&pool, &deployment).await;
    // The failed attempt of "fail once" waits out base_delay = 0 s.
    run_until_idle(&pool, &deployment).await;

    let output = handle.wait(&client, Duration::from_secs(5)).await.unwrap();
    assert_eq!(output.alert, "thread 7 (3 sent): 1 urgent");
    let attempts: Vec<i32> = sqlx::query_scalar(
        "select attempts_count from pgflow.step_tasks where step_slug = 'classify' order by task_index",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(attempts, vec![1, 2, 1]);
}

#[sqlx::test(migrations = false)]
async fn an_input_that_does_not_decode_fails_the_task_naming_step_and_parameter(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let deployment = dsl_triage::deployment();
    client.deploy(&deployment).await.unwrap();
    // Started by hand with an input of the wrong shape, bypassing the typed `start`.
    let run = engine::start_flow(&pool, "dsl_triage", &json!({"thread_id": "secret-value"}))
        .await
        .unwrap();
    run_until_idle(&pool, &deployment).await;
    run_until_idle(&pool, &deployment).await;

    let error = pgflow::RunHandle::<dsl_triage::Output>::new(run.run_id)
        .wait(&client, Duration::from_secs(5))
        .await
        .unwrap_err();
    match error {
        RunError::Failed {
            step_slug, error, ..
        } => {
            assert_eq!(step_slug, "fetch");
            assert!(
                error.starts_with("step `fetch`: cannot decode parameter `input` as `"),
                "{error}"
            );
            assert!(error.contains("found string, expected u64"), "{error}");
            assert!(
                !error.contains("secret-value"),
                "no input values in errors: {error}"
            );
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
}
