//! Deleting a concrete flow: refused while its alias points at it (with other versions), while
//! live workers carry it or runs are going (unless forced); then its runs, steps, tasks and
//! queued messages are gone, other flows on the same queue untouched.

use std::time::Duration;

use pgflow::{Client, EngineError, Worker, engine};
use sqlx::PgPool;

use crate::support::{install, worker_config};

#[pgflow::flow(slug = "doomed_v1", alias = "doomed", version = 1, input = u32)]
pub mod doomed_v1 {
    #[step(queue = "doomed_shared")]
    pub async fn only(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

#[pgflow::flow(slug = "doomed_v2", alias = "doomed", version = 2, input = u32)]
pub mod doomed_v2 {
    #[step(queue = "doomed_shared")]
    pub async fn only(input: u32) -> Result<u32, String> {
        Ok(input + 1)
    }
}

#[pgflow::flow(slug = "bystander_v1", input = u32)]
pub mod bystander_v1 {
    #[step(queue = "doomed_shared")]
    pub async fn only(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[sqlx::test(migrations = false)]
async fn a_flow_is_deleted_with_everything_of_it_once_nothing_needs_it(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&doomed_v1::deployment()).await.unwrap();
    client.deploy(&doomed_v2::deployment()).await.unwrap();
    client.deploy(&bystander_v1::deployment()).await.unwrap();
    engine::activate_flow(&pool, "doomed_v1").await.unwrap();
    doomed_v1::start(&client, &1).await.unwrap();
    let bystander = bystander_v1::start(&client, &2).await.unwrap();

    // The alias points at it and has another version: move it first, even when forced.
    let error = engine::delete_flow(&pool, "doomed_v1", true)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, EngineError::FlowInUse(m) if m.contains("move it to another version")),
        "{error:?}"
    );
    engine::set_alias(&pool, "doomed", "doomed_v2")
        .await
        .unwrap();

    // A run is going: refused unless forced.
    let error = engine::delete_flow(&pool, "doomed_v1", false)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, EngineError::FlowInUse(m) if m.contains("still going")),
        "{error:?}"
    );
    // A live worker carries it: refused unless forced (the message names the worker).
    let worker = Worker::start_with(
        (
            doomed_v1::deployment(),
            doomed_v2::deployment(),
            bystander_v1::deployment(),
        ),
        worker_config(doomed_v1::Queue::DoomedShared, &pool).max_concurrent(1),
    )
    .await
    .unwrap();
    bystander
        .wait(&client, Duration::from_secs(20))
        .await
        .unwrap();
    let going = doomed_v1::start(&client, &5).await;
    drop(going);
    let error = engine::delete_flow(&pool, "doomed_v1", false)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, EngineError::FlowInUse(m) if m.contains("live workers carry")),
        "{error:?}"
    );
    worker.shutdown();
    worker.wait().await.unwrap();
    // A run of it queued with no worker left, and one more of the bystander.
    let queued = doomed_v1::start(&client, &6).await.unwrap();
    bystander_v1::start(&client, &3).await.unwrap();
    let runs_of_doomed = count(
        &pool,
        "select count(*) from pgflow.runs where flow_slug = 'doomed_v1'",
    )
    .await;
    let _ = queued;
    let queued_tasks = count(
        &pool,
        "select count(*) from pgflow.step_tasks where flow_slug = 'doomed_v1' and status = 'queued'",
    )
    .await;
    assert!(queued_tasks >= 1);

    let deleted = engine::delete_flow(&pool, "doomed_v1", true).await.unwrap();
    assert_eq!(deleted.runs, runs_of_doomed);
    assert_eq!(deleted.tasks, runs_of_doomed);
    assert_eq!(deleted.messages, queued_tasks, "the queued runs' messages");
    assert_eq!(
        count(
            &pool,
            "select count(*) from pgflow.flows where flow_slug = 'doomed_v1'"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &pool,
            "select count(*) from pgflow.steps where flow_slug = 'doomed_v1'"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &pool,
            "select count(*) from pgflow.runs where flow_slug = 'doomed_v1'"
        )
        .await,
        0
    );
    // The queue keeps the bystander's message.
    assert_eq!(
        count(&pool, "select count(*) from pgmq.q_doomed_shared").await,
        1
    );
    assert!(matches!(
        engine::delete_flow(&pool, "doomed_v1", false).await,
        Err(EngineError::UnknownFlow { .. })
    ));
}
