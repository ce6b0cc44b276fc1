//! Runs through DAG shapes: chain, diamond, maps, empty maps, batches.

use pgflow::EngineError;
use pgflow::definition::FlowDefinition;
use pgflow::engine::{self, RunStatus};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{
    compiled, drain, flow, install, map, queue, run, single, step_statuses, task_rows,
};

#[sqlx::test(migrations = false)]
async fn a_linear_chain_passes_outputs_along(pool: PgPool) {
    install(&pool).await;
    let chain = compiled(
        &pool,
        FlowDefinition::new(flow("chain"))
            .step(single("a", &[]))
            .step(single("b", &["a"]))
            .step(single("c", &["b"])),
    )
    .await;
    let started = engine::start_flow(&pool, "chain", &json!(1)).await.unwrap();
    assert_eq!(started.status, RunStatus::Started);

    let handled = drain(&pool, &chain, |task| match task.step_slug.as_str() {
        "a" => json!(task.input.as_i64().unwrap() + 1),
        "b" => json!(task.input["a"].as_i64().unwrap() * 10),
        _ => json!({ "total": task.input["b"] }),
    })
    .await;

    let inputs: Vec<(String, Value)> = handled
        .iter()
        .map(|t| (t.step_slug.to_string(), t.input.clone()))
        .collect();
    assert_eq!(
        inputs,
        vec![
            ("a".into(), json!(1)),
            ("b".into(), json!({"a": 2})),
            ("c".into(), json!({"b": 20})),
        ]
    );
    let finished = run(&pool, started.run_id).await;
    assert_eq!(finished.status, RunStatus::Completed);
    assert_eq!(finished.output, Some(json!({"c": {"total": 20}})));
    assert_eq!(finished.remaining_steps, 0);
    assert!(finished.completed_at.is_some());
}

#[sqlx::test(migrations = false)]
async fn a_diamond_joins_both_branches(pool: PgPool) {
    install(&pool).await;
    let diamond = compiled(
        &pool,
        FlowDefinition::new(flow("diamond"))
            .step(single("root", &[]))
            .step(single("left", &["root"]))
            .step(single("right", &["root"]))
            .step(single("join", &["left", "right"])),
    )
    .await;
    let started = engine::start_flow(&pool, "diamond", &json!("x"))
        .await
        .unwrap();

    let handled = drain(&pool, &diamond, |task| match task.step_slug.as_str() {
        "root" => json!("r"),
        "left" => json!("L"),
        "right" => json!("R"),
        _ => task.input.clone(),
    })
    .await;

    let join = handled.iter().find(|t| t.step_slug == "join").unwrap();
    assert_eq!(join.input, json!({"left": "L", "right": "R"}));
    // Both branches were released together by the root and claimed in one batch.
    let left = handled.iter().position(|t| t.step_slug == "left").unwrap();
    let right = handled.iter().position(|t| t.step_slug == "right").unwrap();
    assert_eq!(left.abs_diff(right), 1);
    let finished = run(&pool, started.run_id).await;
    assert_eq!(
        finished.output,
        Some(json!({"join": {"left": "L", "right": "R"}}))
    );
}

#[sqlx::test(migrations = false)]
async fn a_map_over_the_input_keeps_element_order(pool: PgPool) {
    install(&pool).await;
    let squares = compiled(
        &pool,
        FlowDefinition::new(flow("squares"))
            .step(map("square", &[]))
            .step(single("sum", &["square"])),
    )
    .await;
    let started = engine::start_flow(&pool, "squares", &json!([3, 1, 2]))
        .await
        .unwrap();

    // Claim the three map tasks and complete them in reverse order, one call each.
    let queue = squares.slug.default_queue();
    let tasks = crate::support::claim(
        &pool,
        &queue,
        &crate::support::pairs_for(&[&squares], &queue),
    )
    .await;
    let mut elements: Vec<(i32, Value)> = tasks
        .iter()
        .map(|t| (t.task_index, t.input.clone()))
        .collect();
    elements.sort_by_key(|(i, _)| *i);
    assert_eq!(elements, vec![(0, json!(3)), (1, json!(1)), (2, json!(2))]);
    for task in tasks.iter().rev() {
        let n = task.input.as_i64().unwrap();
        engine::complete_tasks(&pool, &[engine::TaskCompletion::of(task, json!(n * n))])
            .await
            .unwrap();
    }

    let handled = drain(&pool, &squares, |task| {
        json!(
            task.input["square"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .sum::<i64>()
        )
    })
    .await;
    assert_eq!(handled.len(), 1);
    assert_eq!(handled[0].input, json!({"square": [9, 1, 4]}));
    assert_eq!(
        run(&pool, started.run_id).await.output,
        Some(json!({"sum": 14}))
    );
}

#[sqlx::test(migrations = false)]
async fn a_map_over_a_dependency(pool: PgPool) {
    install(&pool).await;
    let words = compiled(
        &pool,
        FlowDefinition::new(flow("words"))
            .step(single("split", &[]))
            .step(map("upper", &["split"])),
    )
    .await;
    let started = engine::start_flow(&pool, "words", &json!("a bc d"))
        .await
        .unwrap();
    drain(&pool, &words, |task| match task.step_slug.as_str() {
        "split" => json!(task.input.as_str().unwrap().split(' ').collect::<Vec<_>>()),
        _ => json!(task.input.as_str().unwrap().to_uppercase()),
    })
    .await;
    let finished = run(&pool, started.run_id).await;
    assert_eq!(finished.status, RunStatus::Completed);
    assert_eq!(finished.output, Some(json!({"upper": ["A", "BC", "D"]})));
    assert_eq!(task_rows(&pool, started.run_id).await.len(), 4);
}

#[sqlx::test(migrations = false)]
async fn an_empty_map_completes_with_an_empty_array_and_cascades(pool: PgPool) {
    install(&pool).await;
    let f = compiled(
        &pool,
        FlowDefinition::new(flow("empties"))
            .step(map("each", &[]))
            .step(map("again", &["each"]))
            .step(single("report", &["again"])),
    )
    .await;
    let started = engine::start_flow(&pool, "empties", &json!([]))
        .await
        .unwrap();
    // Both maps completed inside start_flow; only `report` has a task.
    let handled = drain(&pool, &f, |task| json!({"seen": task.input["again"]})).await;
    assert_eq!(handled.len(), 1);
    assert_eq!(handled[0].input, json!({"again": []}));
    let finished = run(&pool, started.run_id).await;
    assert_eq!(finished.output, Some(json!({"report": {"seen": []}})));
}

#[sqlx::test(migrations = false)]
async fn a_flow_of_only_an_empty_map_is_complete_at_start(pool: PgPool) {
    install(&pool).await;
    compiled(
        &pool,
        FlowDefinition::new(flow("nothing")).step(map("each", &[])),
    )
    .await;
    let started = engine::start_flow(&pool, "nothing", &json!([]))
        .await
        .unwrap();
    assert_eq!(started.status, RunStatus::Completed);
    assert_eq!(started.output, Some(json!({"each": []})));
}

#[sqlx::test(migrations = false)]
async fn a_map_over_a_non_array_fails_the_run(pool: PgPool) {
    install(&pool).await;
    compiled(
        &pool,
        FlowDefinition::new(flow("mapper")).step(map("each", &[])),
    )
    .await;
    let started = engine::start_flow(&pool, "mapper", &json!({"not": "an array"}))
        .await
        .unwrap();
    assert_eq!(started.status, RunStatus::Failed);
    let error: String =
        sqlx::query_scalar("select error_message from pgflow.step_states where run_id = $1")
            .bind(started.run_id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        error,
        "map step `each` needs an array to map over, got object"
    );
    assert_eq!(
        step_statuses(&pool, started.run_id).await,
        vec![("each".into(), "failed".into())]
    );
}

#[sqlx::test(migrations = false)]
async fn a_non_array_map_fails_its_own_run_only_and_starts_nothing_else_in_it(pool: PgPool) {
    install(&pool).await;
    compiled(
        &pool,
        FlowDefinition::new(flow("mapper_with_sibling"))
            .step(map("each", &[]))
            .step(single("sibling", &[])),
    )
    .await;
    let runs = engine::start_flows(
        &pool,
        "mapper_with_sibling",
        &[json!("not an array"), json!([1, 2])],
    )
    .await
    .unwrap();
    assert_eq!(runs[0].status, RunStatus::Failed);
    assert_eq!(runs[1].status, RunStatus::Started);
    // The failed run's other ready step was never started: no task, no message.
    assert_eq!(
        step_statuses(&pool, runs[0].run_id).await,
        vec![
            ("each".into(), "failed".into()),
            ("sibling".into(), "created".into())
        ]
    );
    let tasks_of_failed: i64 =
        sqlx::query_scalar("select count(*) from pgflow.step_tasks where run_id = $1")
            .bind(runs[0].run_id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(tasks_of_failed, 0);
    // The good run in the same call started both steps: two map tasks and one single task.
    assert_eq!(
        step_statuses(&pool, runs[1].run_id).await,
        vec![
            ("each".into(), "started".into()),
            ("sibling".into(), "started".into())
        ]
    );
    let queued: i64 = sqlx::query_scalar(
        "select count(*) from pgflow.step_tasks where run_id = $1 and status = 'queued'",
    )
    .bind(runs[1].run_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(queued, 3);
}

#[sqlx::test(migrations = false)]
async fn a_map_over_a_non_array_output_fails_its_run_and_starts_no_sibling_in_it(pool: PgPool) {
    install(&pool).await;
    let f = compiled(
        &pool,
        FlowDefinition::new(flow("split_then_map"))
            .step(single("source", &[]))
            .step(map("each", &["source"]))
            .step(single("sibling", &["source"])),
    )
    .await;
    let runs = engine::start_flows(&pool, "split_then_map", &[json!("oops"), json!([1, 2])])
        .await
        .unwrap();
    // Both sources complete in one call; each run's dependents are released together.
    let handled = drain(&pool, &f, |task| match task.step_slug.as_str() {
        "source" => task.input.clone(),
        "each" => json!(task.input.as_i64().unwrap() * 10),
        _ => json!("sibling done"),
    })
    .await;
    assert_eq!(
        handled.iter().filter(|t| t.step_slug == "source").count(),
        2
    );

    let failed = run(&pool, runs[0].run_id).await;
    assert_eq!(failed.status, RunStatus::Failed);
    assert_eq!(
        step_statuses(&pool, runs[0].run_id).await,
        vec![
            ("each".into(), "failed".into()),
            ("sibling".into(), "created".into()),
            ("source".into(), "completed".into())
        ]
    );
    assert_eq!(task_rows(&pool, runs[0].run_id).await.len(), 1);

    let completed = run(&pool, runs[1].run_id).await;
    assert_eq!(completed.status, RunStatus::Completed);
    assert_eq!(
        completed.output,
        Some(json!({"each": [10, 20], "sibling": "sibling done"}))
    );
}

#[sqlx::test(migrations = false)]
async fn many_runs_start_in_one_call_in_input_order(pool: PgPool) {
    install(&pool).await;
    let f = compiled(
        &pool,
        FlowDefinition::new(flow("many")).step(single("echo", &[])),
    )
    .await;
    let inputs: Vec<Value> = (0..250).map(|i| json!(i)).collect();
    let runs = engine::start_flows(&pool, "many", &inputs).await.unwrap();
    assert_eq!(
        runs.iter().map(|r| r.input.clone()).collect::<Vec<_>>(),
        inputs
    );

    let handled = drain(&pool, &f, |task| task.input.clone()).await;
    assert_eq!(handled.len(), 250);
    let completed: i64 = sqlx::query_scalar("select count(*) from pgflow.runs where status = 'completed' and output = jsonb_build_object('echo', input)")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(completed, 250);
}

#[sqlx::test(migrations = false)]
async fn starting_an_unknown_flow_names_it(pool: PgPool) {
    install(&pool).await;
    match engine::start_flow(&pool, "missing", &json!({})).await {
        Err(EngineError::UnknownFlow { flow_slug }) => assert_eq!(flow_slug, "missing"),
        other => panic!("expected UnknownFlow, got {other:?}"),
    }
}

#[sqlx::test(migrations = false)]
async fn calls_on_a_database_without_pgflow_say_to_install(pool: PgPool) {
    match engine::start_flow(&pool, "any", &json!({})).await {
        Err(error @ EngineError::NotInstalled(_)) => {
            assert!(
                error.to_string().contains("run `pgflow install`"),
                "{error}"
            )
        }
        other => panic!("expected NotInstalled, got {other:?}"),
    }
}

#[sqlx::test(migrations = false)]
async fn start_delay_hides_the_tasks_until_it_passes(pool: PgPool) {
    install(&pool).await;
    let delayed = FlowDefinition::new(flow("later")).step(single("wait", &[]).options(
        pgflow::definition::StepOptions {
            start_delay: Some(std::time::Duration::from_secs(60)),
            ..Default::default()
        },
    ));
    let delayed = compiled(&pool, delayed).await;
    engine::start_flow(&pool, "later", &json!(null))
        .await
        .unwrap();
    assert!(drain(&pool, &delayed, |_| json!(null)).await.is_empty());
    crate::support::make_visible(&pool, "later").await;
    assert_eq!(drain(&pool, &delayed, |_| json!(null)).await.len(), 1);
}

#[sqlx::test(migrations = false)]
async fn ready_steps_on_several_queues_and_delays_get_their_own_messages(pool: PgPool) {
    install(&pool).await;
    compiled(
        &pool,
        FlowDefinition::new(flow("spread"))
            .step(single("fast", &[]).queue(queue("spread_fast")))
            .step(map("each", &[]).queue(queue("spread_slow")))
            .step(single("later", &[]).queue(queue("spread_slow")).options(
                pgflow::definition::StepOptions {
                    start_delay: Some(std::time::Duration::from_secs(60)),
                    ..Default::default()
                },
            )),
    )
    .await;
    let runs = engine::start_flows(&pool, "spread", &[json!([1, 2, 3]), json!([4])])
        .await
        .unwrap();
    // Every task has a message in its step's queue that names exactly that task, delayed for
    // the delayed step only.
    for queue_name in ["spread_fast", "spread_slow"] {
        let mismatched: i64 = sqlx::query_scalar(&format!(
            "select count(*) from pgflow.step_tasks t
             left join pgmq.q_{queue_name} m on m.msg_id = t.message_id
             where t.queue_name = $1 and (m.msg_id is null
               or m.message ->> 'run_id' <> t.run_id::text
               or m.message ->> 'step_slug' <> t.step_slug
               or (m.message ->> 'task_index')::int <> t.task_index
               or (t.step_slug = 'later') <> (m.vt > now() + interval '30 seconds'))"
        ))
        .bind(queue_name)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(
            mismatched, 0,
            "messages of {queue_name} pair with their tasks"
        );
    }
    let per_queue: Vec<(String, i64)> = sqlx::query_as(
        "select queue_name, count(*) from pgflow.step_tasks group by queue_name order by 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    // fast: one per run; slow: 3 + 1 map elements, plus one delayed task per run.
    assert_eq!(
        per_queue,
        vec![("spread_fast".to_owned(), 2), ("spread_slow".to_owned(), 6)]
    );
    assert!(runs.iter().all(|r| r.status == RunStatus::Started));
}
