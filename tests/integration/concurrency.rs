//! Several claimers completing tasks of the same runs at once: no deadlock, no lost or
//! doubled work.

use pgflow::definition::FlowDefinition;
use pgflow::engine::{self, TaskCompletion};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{compiled, flow, install, map, pairs_for, single};

#[sqlx::test(migrations = false)]
async fn concurrent_batched_completions_of_shared_runs_finish_every_run_once(pool: PgPool) {
    install(&pool).await;
    // root fans out to a 20-element map and a side branch; the side branch feeds an empty map;
    // `join` waits for all of them.
    let f = compiled(
        &pool,
        FlowDefinition::new(flow("fan"))
            .step(single("root", &[]))
            .step(map("items", &["root"]))
            .step(single("side", &["root"]))
            .step(map("nothing", &["side"]))
            .step(single("join", &["items", "side", "nothing"])),
    )
    .await;
    let inputs: Vec<Value> = (0..20).map(|i| json!(i)).collect();
    let runs = engine::start_flows(&pool, "fan", &inputs).await.unwrap();
    let q = f.slug.default_queue();
    let pairs = pairs_for(&[&f], &q);

    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (pool, q, pairs) = (pool.clone(), q.clone(), pairs.clone());
            tokio::spawn(async move {
                let worker = Uuid::new_v4();
                let mut idle_rounds = 0;
                while idle_rounds < 20 {
                    let tasks = engine::read_and_start_tasks(&pool, &q, worker, &pairs, 5)
                        .await
                        .unwrap()
                        .tasks;
                    if tasks.is_empty() {
                        idle_rounds += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                    idle_rounds = 0;
                    let completions: Vec<_> = tasks
                        .iter()
                        .map(|t| {
                            let output = match t.step_slug.as_str() {
                                "root" => json!((0..20).collect::<Vec<_>>()),
                                "side" => json!([]),
                                "items" => json!(t.input.as_i64().unwrap() * 2),
                                _ => json!(t.input["items"].as_array().unwrap().len()),
                            };
                            TaskCompletion::of(t, output)
                        })
                        .collect();
                    engine::complete_tasks(&pool, &completions).await.unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }

    let ids: Vec<Uuid> = runs.iter().map(|r| r.run_id).collect();
    let completed: Vec<Value> = sqlx::query_scalar(
        "select output from pgflow.runs where run_id = any($1) and status = 'completed'",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(completed.len(), 20, "every run completed");
    assert!(completed.iter().all(|o| *o == json!({"join": 20})));

    let (tasks, once): (i64, i64) = sqlx::query_as(
        "select count(*), count(*) filter (where status = 'completed' and attempts_count = 1)
         from pgflow.step_tasks",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(tasks, 20 * (1 + 20 + 1 + 1));
    assert_eq!(
        once, tasks,
        "each task completed exactly once, first attempt"
    );
    let left: i64 = sqlx::query_scalar("select count(*) from pgmq.q_fan")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "every message archived");
}
