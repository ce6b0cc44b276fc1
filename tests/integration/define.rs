//! Compiling and verifying concrete flows.

use pgflow::EngineError;
use pgflow::definition::{FlowDefinition, FlowOptions, StepOptions};
use pgflow::engine::{self, CompileStatus};
use sqlx::PgPool;
use std::time::Duration;

use crate::support::{flow, install, map, queue, single};

fn triage() -> FlowDefinition {
    FlowDefinition::new(flow("triage_v1"))
        .alias(flow("triage"), 1)
        .step(single("fetch", &[]).queue(queue("fetch_threads")))
        .step(single("split", &["fetch"]))
        .step(map("classify", &["split"]).queue(queue("classify_threads")))
        .step(single("alert", &["fetch", "classify"]).queue(queue("deliver_slack_alerts")))
}

async fn queues_in_pgmq(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar("select queue_name::text from pgmq.meta order by queue_name")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn compile_then_verify(pool: PgPool) {
    install(&pool).await;
    let definition = triage();
    assert_eq!(
        engine::compile_flow(&pool, &definition).await.unwrap(),
        CompileStatus::Compiled
    );
    assert_eq!(
        engine::compile_flow(&pool, &definition).await.unwrap(),
        CompileStatus::Verified
    );

    let steps: Vec<(String, i32, String, i32, String)> = sqlx::query_as(
        "select step_slug, step_index, step_type, deps_count, queue_name from pgflow.steps
         where flow_slug = 'triage_v1' order by step_index",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        steps,
        vec![
            (
                "fetch".into(),
                0,
                "single".into(),
                0,
                "fetch_threads".into()
            ),
            ("split".into(), 1, "single".into(), 1, "triage_v1".into()),
            (
                "classify".into(),
                2,
                "map".into(),
                1,
                "classify_threads".into()
            ),
            (
                "alert".into(),
                3,
                "single".into(),
                2,
                "deliver_slack_alerts".into()
            ),
        ]
    );
    assert_eq!(
        queues_in_pgmq(&pool).await,
        [
            "classify_threads",
            "deliver_slack_alerts",
            "fetch_threads",
            "triage_v1"
        ]
    );
}

#[sqlx::test(migrations = false)]
async fn verify_updates_options_but_not_shape(pool: PgPool) {
    install(&pool).await;
    engine::compile_flow(&pool, &triage()).await.unwrap();
    let mut tuned = triage().options(FlowOptions {
        max_attempts: 5,
        base_delay: Duration::from_secs(2),
        max_delay: Some(Duration::from_secs(600)),
        jitter_percent: 20,
        timeout: Duration::from_secs(90),
    });
    tuned.steps[2].options = StepOptions {
        timeout: Some(Duration::from_secs(30)),
        jitter_percent: Some(0),
        ..StepOptions::default()
    };
    assert_eq!(
        engine::compile_flow(&pool, &tuned).await.unwrap(),
        CompileStatus::Verified
    );
    let options: (i32, Option<i32>, i32, Option<i32>, Option<i32>, i32) = sqlx::query_as(
        "select f.opt_max_attempts, f.opt_max_delay, f.opt_jitter, s.opt_timeout,
                s.opt_jitter, o.jitter
         from pgflow.flows f
         join pgflow.steps s using (flow_slug)
         join pgflow.step_options o using (flow_slug, step_slug)
         where s.step_slug = 'classify'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(options, (5, Some(600), 20, Some(30), Some(0), 0));
}

#[sqlx::test(migrations = false)]
async fn a_different_shape_under_an_existing_slug_lists_every_difference(pool: PgPool) {
    install(&pool).await;
    engine::compile_flow(&pool, &triage()).await.unwrap();

    let changed = FlowDefinition::new(flow("triage_v1"))
        .alias(flow("triage"), 1)
        .step(single("fetch", &[]).queue(queue("fetch_threads")))
        .step(single("split", &["fetch"]).queue(queue("splitting")))
        .step(single("classify", &["split"]).queue(queue("classify_threads")))
        .step(single("alert", &["classify"]).queue(queue("deliver_slack_alerts")))
        .step(single("archive", &["alert"]));

    match engine::compile_flow(&pool, &changed).await {
        Err(EngineError::ShapeMismatch {
            flow_slug,
            differences,
        }) => {
            assert_eq!(flow_slug, "triage_v1");
            assert_eq!(
                differences,
                vec![
                    "step count: stored 4, definition 5".to_owned(),
                    "step `split` queue: stored `triage_v1`, definition `splitting`".to_owned(),
                    "step `classify` type: stored `map`, definition `single`".to_owned(),
                    "step `alert` dependencies: stored [\"classify\", \"fetch\"], definition [\"classify\"]".to_owned(),
                    "step `archive` is in the definition but not stored".to_owned(),
                ]
            );
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
    // Nothing changed: still four steps, no new queue.
    let steps: i64 =
        sqlx::query_scalar("select count(*) from pgflow.steps where flow_slug = 'triage_v1'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(steps, 4);
    assert!(
        !queues_in_pgmq(&pool)
            .await
            .contains(&"splitting".to_owned())
    );
}

#[sqlx::test(migrations = false)]
async fn another_alias_or_version_is_a_difference(pool: PgPool) {
    install(&pool).await;
    engine::compile_flow(&pool, &triage()).await.unwrap();
    let moved = FlowDefinition {
        version: 2,
        ..triage()
    };
    match engine::compile_flow(&pool, &moved).await {
        Err(EngineError::ShapeMismatch { differences, .. }) => assert_eq!(
            differences,
            vec!["alias/version: stored `triage` v1, definition `triage` v2".to_owned()]
        ),
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
}

#[sqlx::test(migrations = false)]
async fn invalid_definitions_are_refused_with_the_reason(pool: PgPool) {
    install(&pool).await;
    let cases = [
        (
            FlowDefinition::new(flow("bad"))
                .step(single("b", &["a"]))
                .step(single("a", &[])),
            "step `b` depends on `a`, which is not a step defined before it",
        ),
        (
            FlowDefinition::new(flow("bad"))
                .step(single("a", &[]))
                .step(single("b", &[]))
                .step(map("m", &["a", "b"])),
            "map step `m` has 2 dependencies",
        ),
        (
            FlowDefinition::new(flow("bad"))
                .step(single("a", &[]))
                .step(single("a", &[])),
            "step `a` is defined twice",
        ),
        (
            FlowDefinition::new(flow("bad")),
            "steps must be a non-empty JSON array",
        ),
        (
            FlowDefinition::new(flow("bad")).step(single("a", &["a"])),
            "step `a` depends on itself",
        ),
        (
            FlowDefinition::new(flow("bad"))
                .options(FlowOptions {
                    max_attempts: 0,
                    ..FlowOptions::DEFAULT
                })
                .step(single("a", &[])),
            "flow option `max_attempts` must be a whole number of at least 1, got 0",
        ),
        (
            FlowDefinition::new(flow("bad"))
                .options(FlowOptions {
                    max_delay: Some(Duration::ZERO),
                    ..FlowOptions::DEFAULT
                })
                .step(single("a", &[])),
            "flow option `max_delay` must be a whole number of at least 1, got 0",
        ),
        (
            FlowDefinition::new(flow("bad")).step(single("a", &[]).options(StepOptions {
                jitter_percent: Some(101),
                ..StepOptions::default()
            })),
            "step `a` option `jitter` is a percentage: a whole number from 0 to 100, got 101",
        ),
    ];
    for (definition, expected) in cases {
        match engine::compile_flow(&pool, &definition).await {
            Err(EngineError::InvalidDefinition { message }) => assert!(
                message.contains(expected) && message.contains("flow `bad`"),
                "{message:?} should mention {expected:?}"
            ),
            other => panic!("expected InvalidDefinition ({expected}), got {other:?}"),
        }
    }
    let flows: i64 = sqlx::query_scalar("select count(*) from pgflow.flows")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(flows, 0, "nothing half-done");

    // The SQL core also guards queue names it is handed directly.
    let error = sqlx::query("select pgflow.define_flow('bad', 'bad', 1, '{}', '[{\"slug\": \"a\", \"queue\": \"Has-Dash\"}]')")
        .execute(&pool)
        .await
        .map_err(EngineError::from)
        .unwrap_err();
    assert!(error.to_string().contains("queue `Has-Dash`"), "{error}");
}

#[sqlx::test(migrations = false)]
async fn a_shared_queue_is_created_once(pool: PgPool) {
    install(&pool).await;
    let a = FlowDefinition::new(flow("a")).step(single("s", &[]).queue(queue("shared")));
    let b = FlowDefinition::new(flow("b")).step(single("s", &[]).queue(queue("shared")));
    engine::compile_flow(&pool, &a).await.unwrap();
    engine::compile_flow(&pool, &b).await.unwrap();
    assert_eq!(queues_in_pgmq(&pool).await, ["shared"]);
}

#[sqlx::test(migrations = false)]
async fn concurrent_compiles_of_one_flow_agree(pool: PgPool) {
    install(&pool).await;
    let compiles: Vec<_> = (0..8)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { engine::compile_flow(&pool, &triage()).await })
        })
        .collect();
    let mut compiled = 0;
    for c in compiles {
        if c.await.unwrap().unwrap() == CompileStatus::Compiled {
            compiled += 1;
        }
    }
    assert_eq!(compiled, 1, "exactly one compile creates the flow");
}
