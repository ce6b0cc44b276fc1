//! Outputs are stored and passed on exactly, including falsy values.

use pgflow::definition::FlowDefinition;
use pgflow::engine;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::{compiled, drain, flow, install, map, run, single};

#[sqlx::test(migrations = false)]
async fn falsy_outputs_round_trip(pool: PgPool) {
    install(&pool).await;
    let values = [
        json!(0),
        json!(false),
        json!(""),
        json!(null),
        json!([]),
        json!({}),
        json!(0.5),
    ];
    let f = compiled(
        &pool,
        FlowDefinition::new(flow("falsy"))
            .step(map("each", &[]))
            .step(single("single_null", &[]))
            .step(single("collect", &["each", "single_null"])),
    )
    .await;
    let started = engine::start_flow(&pool, "falsy", &Value::Array(values.to_vec()))
        .await
        .unwrap();

    let handled = drain(&pool, &f, |task| match task.step_slug.as_str() {
        "each" => task.input.clone(),
        "single_null" => Value::Null,
        _ => task.input.clone(),
    })
    .await;

    let each_inputs: Vec<Value> = {
        let mut tasks: Vec<_> = handled.iter().filter(|t| t.step_slug == "each").collect();
        tasks.sort_by_key(|t| t.task_index);
        tasks.iter().map(|t| t.input.clone()).collect()
    };
    assert_eq!(each_inputs, values.to_vec(), "map elements arrive exactly");

    let collect = handled.iter().find(|t| t.step_slug == "collect").unwrap();
    assert_eq!(
        collect.input,
        json!({"each": values.to_vec(), "single_null": null})
    );

    let finished = run(&pool, started.run_id).await;
    assert_eq!(
        finished.output,
        Some(json!({"collect": {"each": values.to_vec(), "single_null": null}}))
    );
    let stored: Vec<Value> = sqlx::query_scalar(
        "select output from pgflow.step_tasks where step_slug = 'each' order by task_index",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(stored, values.to_vec());
}
