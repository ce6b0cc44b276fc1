//! Subflows: a step declared with `subflow = child` runs flow `child` with what its handler
//! returns (checked at compile time against the child's input type), and its output is the
//! child run's output; a map step runs one child per element, its output the children's
//! outputs in order. A child records its parent run, step and task; a child that fails (or is
//! cancelled) fails the parent's step with its error; cancelling the parent cancels its
//! children; retrying the parent reuses the children that completed and retries those that
//! failed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pgflow::{Client, RunStatus, Worker};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{eventually, install, run, step_error, step_status, worker_config};

/// Whether `authorize` declines a charge of 13 cents (a test turns it off to let a retry pass).
static DECLINE_13: AtomicBool = AtomicBool::new(true);
/// The same for 17 cents (another test's, so that the two may run at once).
static DECLINE_17: AtomicBool = AtomicBool::new(true);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChargeIn {
    pub cents: u64,
}

/// The child: a charge, authorized then captured. 13 cents is declined (while `DECLINE_13`).
#[pgflow::flow(slug = "charge_v1", alias = "charge", input = ChargeIn, max_attempts = 1)]
pub mod charge_v1 {
    use super::*;

    #[step(queue = "subflows")]
    pub async fn authorize(input: ChargeIn) -> Result<u64, String> {
        if (input.cents == 13 && DECLINE_13.load(Ordering::SeqCst))
            || (input.cents == 17 && DECLINE_17.load(Ordering::SeqCst))
        {
            return Err("card declined".to_owned());
        }
        Ok(input.cents)
    }

    #[step(depends_on = [authorize], queue = "subflows")]
    pub async fn capture(authorize: u64) -> Result<String, String> {
        Ok(format!("captured {authorize}"))
    }
}

/// A parent: totals an order, charges it through the child flow, writes a receipt.
#[pgflow::flow(slug = "order_v1", alias = "order", input = Vec<u64>, max_attempts = 1)]
pub mod order_v1 {
    use super::*;

    #[step(queue = "subflows")]
    pub async fn total(input: Vec<u64>) -> Result<u64, String> {
        Ok(input.iter().sum())
    }

    #[step(depends_on = [total], subflow = charge_v1, queue = "subflows")]
    pub async fn charge(total: u64) -> Result<ChargeIn, String> {
        Ok(ChargeIn { cents: total })
    }

    #[step(depends_on = [charge], queue = "subflows")]
    pub async fn receipt(charge: charge_v1::Output) -> Result<String, String> {
        Ok(format!("receipt: {}", charge.capture))
    }
}

/// A parent that maps over subflows: one charge per element.
#[pgflow::flow(slug = "batch_v1", alias = "batch", input = Vec<u64>, max_attempts = 1)]
pub mod batch_v1 {
    use super::*;

    #[step(map, subflow = charge_v1, queue = "subflows")]
    pub async fn charge_each(cents: u64) -> Result<ChargeIn, String> {
        Ok(ChargeIn { cents })
    }

    #[step(depends_on = [charge_each], queue = "subflows")]
    pub async fn summary(charge_each: Vec<charge_v1::Output>) -> Result<Vec<String>, String> {
        Ok(charge_each.into_iter().map(|c| c.capture).collect())
    }
}

/// A parent that waits a second at most for its child (which waits for a signal), then goes
/// on without it.
#[pgflow::flow(slug = "impatient_v1", input = u32)]
pub mod impatient_v1 {
    use super::*;

    #[step(subflow = held_v1, wait_timeout = 1, when_timed_out = skip, queue = "subflows")]
    pub async fn ask(input: u32) -> Result<u32, String> {
        Ok(input)
    }

    #[step(depends_on = [ask], queue = "subflows")]
    pub async fn conclude(ask: Option<held_v1::Output>) -> Result<String, String> {
        Ok(match ask {
            Some(answer) => format!("answered {}", answer.hold),
            None => "gave up".to_owned(),
        })
    }
}

/// A parent that names its child flow by alias: the handler's type is checked against the
/// input type the child records when the child starts, and the child's output comes as JSON.
#[pgflow::flow(slug = "named_v1", input = u64, max_attempts = 1)]
pub mod named_v1 {
    use super::*;

    #[step(subflow = "charge", queue = "subflows_named")]
    pub async fn charge(input: u64) -> Result<ChargeIn, String> {
        Ok(ChargeIn { cents: input })
    }

    #[step(depends_on = [charge], queue = "subflows_named")]
    pub async fn receipt(charge: serde_json::Value) -> Result<String, String> {
        Ok(format!(
            "receipt: {}",
            charge["capture"].as_str().unwrap_or("?")
        ))
    }
}

/// The same by name, with a handler that returns what the child does not take.
#[pgflow::flow(slug = "misnamed_v1", input = u64, max_attempts = 1)]
pub mod misnamed_v1 {
    #[step(subflow = "charge", queue = "subflows_named")]
    pub async fn charge(input: u64) -> Result<u64, String> {
        Ok(input)
    }
}

/// A child that waits for a signal, so that it is still going when its parent is cancelled.
#[pgflow::flow(slug = "held_v1", input = u32)]
pub mod held_v1 {
    #[step(signal = release, queue = "subflows")]
    pub async fn hold(input: u32, release: u32) -> Result<u32, String> {
        Ok(input + release)
    }
}

#[pgflow::flow(slug = "holder_v1", input = u32)]
pub mod holder_v1 {
    #[step(subflow = super::held_v1, queue = "subflows")]
    pub async fn delegate(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

async fn worker(pool: &PgPool) -> pgflow::WorkerHandle {
    Worker::start_with(
        (
            charge_v1::deployment(),
            order_v1::deployment(),
            batch_v1::deployment(),
            held_v1::deployment(),
            holder_v1::deployment(),
            impatient_v1::deployment(),
        ),
        worker_config(charge_v1::Queue::Subflows, pool),
    )
    .await
    .unwrap()
}

/// The children of a run: (child, flow, status, parent step, parent task), in task order.
async fn children(pool: &PgPool, run_id: Uuid) -> Vec<(Uuid, String, String, String, i32)> {
    sqlx::query_as(
        "select run_id, flow_slug, status, parent_step_slug, parent_task_index
         from pgflow.runs where parent_run_id = $1 order by parent_task_index",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn ended(pool: &PgPool, run_id: Uuid, status: RunStatus) -> bool {
    eventually(30, async || run(pool, run_id).await.status == status).await
}

/// Whether every child of a run ends within the test's patience.
async fn siblings_settle(pool: &PgPool, run_id: Uuid) -> bool {
    eventually(30, async || {
        children(pool, run_id)
            .await
            .iter()
            .all(|k| k.2 != "started")
    })
    .await
}

#[sqlx::test(migrations = false)]
async fn a_step_runs_a_child_flow_and_its_output_is_the_childs(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = worker(&pool).await;
    let handle = order_v1::start(&client, &vec![100, 250]).await.unwrap();
    let output = handle.wait(&client, Duration::from_secs(30)).await.unwrap();
    assert_eq!(output.receipt, "receipt: captured 350");

    // One child, linked to its parent's step and task, given what the handler returned.
    let kids = children(&pool, handle.run_id()).await;
    assert_eq!(kids.len(), 1, "{kids:?}");
    let (child_id, flow, status, step, task) = kids[0].clone();
    assert_eq!(
        (flow.as_str(), status.as_str(), step.as_str(), task),
        ("charge_v1", "completed", "charge", 0)
    );
    let child = run(&pool, child_id).await;
    assert_eq!(child.input, serde_json::json!({ "cents": 350 }));
    assert_eq!(child.parent_run_id, Some(handle.run_id()));
    let listed = pgflow::engine::run_children(&pool, handle.run_id())
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].run_id, child_id);
    // The step's output is the child run's output.
    let step_output: serde_json::Value = sqlx::query_scalar(
        "select output from pgflow.step_states where run_id = $1 and step_slug = 'charge'",
    )
    .bind(handle.run_id())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(step_output, child.output.unwrap());
    let waits: i64 = sqlx::query_scalar("select count(*) from pgflow.waits")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(waits, 0, "a settled step leaves no wait");

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_map_step_runs_a_child_per_element_and_gets_their_outputs_in_order(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = worker(&pool).await;
    let handle = batch_v1::start(&client, &vec![30, 10, 20]).await.unwrap();
    let output = handle.wait(&client, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        output.summary,
        vec!["captured 30", "captured 10", "captured 20"]
    );
    let kids = children(&pool, handle.run_id()).await;
    let tasks: Vec<i32> = kids.iter().map(|k| k.4).collect();
    assert_eq!(tasks, vec![0, 1, 2]);

    // A map over nothing runs no child and completes with nothing.
    let empty = batch_v1::start(&client, &vec![]).await.unwrap();
    let output = empty.wait(&client, Duration::from_secs(30)).await.unwrap();
    assert!(output.summary.is_empty());
    assert!(children(&pool, empty.run_id()).await.is_empty());

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_failed_child_fails_its_parent_and_a_retry_reruns_only_what_failed(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = worker(&pool).await;
    // 13 cents is declined: that child fails, its sibling completes, and the parent fails.
    let handle = batch_v1::start(&client, &vec![5, 13]).await.unwrap();
    let parent = handle.run_id();
    assert!(
        ended(&pool, parent, RunStatus::Failed).await,
        "the parent fails with its child"
    );
    // The failed child's sibling goes on, and completes.
    assert!(siblings_settle(&pool, parent).await);
    let kids = children(&pool, parent).await;
    assert_eq!(kids.len(), 2);
    assert_eq!(kids[0].2, "completed");
    assert_eq!(kids[1].2, "failed");
    let error = step_error(&pool, parent, "charge_each").await;
    assert!(
        error.contains(&format!(
            "child run {} of flow `charge_v1` failed",
            kids[1].0
        )) && error.contains("card declined"),
        "{error}"
    );

    // Retried once the card goes through: the failed child runs again (the same run), the
    // completed one is reused as it was.
    DECLINE_13.store(false, Ordering::SeqCst);
    client.retry(parent).await.unwrap();
    let output = handle.wait(&client, Duration::from_secs(30)).await;
    DECLINE_13.store(true, Ordering::SeqCst);
    assert_eq!(output.unwrap().summary, vec!["captured 5", "captured 13"]);
    let again = children(&pool, parent).await;
    assert_eq!(
        again.iter().map(|k| k.0).collect::<Vec<_>>(),
        kids.iter().map(|k| k.0).collect::<Vec<_>>(),
        "no new child"
    );
    assert_eq!(
        run(&pool, kids[0].0).await.retry_count,
        0,
        "the completed child was reused"
    );
    assert_eq!(
        run(&pool, kids[1].0).await.retry_count,
        1,
        "the failed child was retried"
    );

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn cancelling_a_parent_cancels_its_children_and_a_cancelled_child_fails_its_parent(
    pool: PgPool,
) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = worker(&pool).await;

    let handle = holder_v1::start(&client, &1).await.unwrap();
    let parent = handle.run_id();
    let child_waits = eventually(20, async || {
        children(&pool, parent).await.len() == 1
            && step_status(&pool, children(&pool, parent).await[0].0, "hold").await == "waiting"
    })
    .await;
    assert!(child_waits, "the child starts and waits for its signal");
    assert_eq!(step_status(&pool, parent, "delegate").await, "waiting");
    let reason: String = sqlx::query_scalar(
        "select kind from pgflow.waits where run_id = $1 and step_slug = 'delegate'",
    )
    .bind(parent)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(reason, "subflow");
    // A run whose only step waits for its child is shown waiting.
    assert_eq!(
        pgflow::engine::run(&pool, parent)
            .await
            .unwrap()
            .shown_status(),
        "waiting"
    );

    client
        .cancel(parent, Some("order withdrawn"))
        .await
        .unwrap();
    let child = children(&pool, parent).await[0].0;
    let child_run = run(&pool, child).await;
    assert_eq!(child_run.status, RunStatus::Cancelled);
    assert_eq!(
        child_run.cancel_reason.as_deref(),
        Some("its parent run was cancelled")
    );

    // A child cancelled on its own fails the step that waits for it, and its run.
    let handle = holder_v1::start(&client, &2).await.unwrap();
    let parent = handle.run_id();
    let started = eventually(20, async || children(&pool, parent).await.len() == 1).await;
    assert!(started);
    let child = children(&pool, parent).await[0].0;
    client
        .cancel(child, Some("operator stopped it"))
        .await
        .unwrap();
    assert_eq!(run(&pool, parent).await.status, RunStatus::Failed);
    let error = step_error(&pool, parent, "delegate").await;
    assert!(
        error.contains(&format!("child run {child} of flow `held_v1` cancelled"))
            && error.contains("operator stopped it"),
        "{error}"
    );

    // Retried, the parent resumes the cancelled child: a new run takes its place (linked to
    // it by resumed_from), waits for its signal again, and completes the parent.
    client.retry(parent).await.unwrap();
    let kids = children(&pool, parent).await;
    assert_eq!(kids.len(), 1, "{kids:?}");
    let resumed = kids[0].0;
    assert_ne!(resumed, child);
    assert_eq!(run(&pool, resumed).await.resumed_from, Some(child));
    assert_eq!(run(&pool, child).await.parent_run_id, None);
    let waits = eventually(20, async || {
        step_status(&pool, resumed, "hold").await == "waiting"
    })
    .await;
    assert!(waits, "the resumed child waits for its signal again");
    held_v1::signal_release(&client, resumed, &5).await.unwrap();
    let output = handle.wait(&client, Duration::from_secs(30)).await.unwrap();
    assert_eq!(output.delegate.hold, 7);

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_child_held_at_its_parents_cancel_is_cancelled_by_the_next_look(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = worker(&pool).await;
    let handle = holder_v1::start(&client, &3).await.unwrap();
    let parent = handle.run_id();
    let started = eventually(20, async || children(&pool, parent).await.len() == 1).await;
    assert!(started);
    let child = children(&pool, parent).await[0].0;

    // Another transaction holds the child (as a completion in flight would) while the parent
    // is cancelled: the cancel does not wait for it, and notes it.
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("select 1 from pgflow.runs where run_id = $1 for no key update")
        .bind(child)
        .execute(&mut *holder)
        .await
        .unwrap();
    client.cancel(parent, None).await.unwrap();
    holder.rollback().await.unwrap();
    assert_eq!(run(&pool, child).await.status, RunStatus::Started);

    // The next look (every process with a running worker looks each second) cancels it.
    let cancelled = eventually(20, async || {
        run(&pool, child).await.status == RunStatus::Cancelled
    })
    .await;
    assert!(cancelled, "the child is cancelled after its parent");
    let noted: i64 = sqlx::query_scalar("select count(*) from pgflow.children_to_cancel")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(noted, 0);

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_resumed_parent_takes_over_the_children_that_ran_its_input(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = worker(&pool).await;
    let handle = batch_v1::start(&client, &vec![6, 17]).await.unwrap();
    let old = handle.run_id();
    assert!(ended(&pool, old, RunStatus::Failed).await);
    // The failed child's sibling goes on, and completes.
    assert!(siblings_settle(&pool, old).await);
    let kids = children(&pool, old).await;
    assert_eq!(
        (kids[0].2.as_str(), kids[1].2.as_str()),
        ("completed", "failed")
    );

    // Resumed from the map step once the card goes through: the new run's handlers give the
    // same inputs, so it takes over both children; the failed one runs again, the completed
    // one is kept as it was.
    DECLINE_17.store(false, Ordering::SeqCst);
    let resumed = client.resume(old, "charge_each").await.unwrap();
    let new = resumed.run_id;
    let done = ended(&pool, new, RunStatus::Completed).await;
    DECLINE_17.store(true, Ordering::SeqCst);
    assert!(done, "the resumed run completes");
    let output = run(&pool, new).await.output.unwrap();
    assert_eq!(
        output["summary"],
        serde_json::json!(["captured 6", "captured 17"])
    );
    let taken = children(&pool, new).await;
    assert_eq!(
        taken.iter().map(|k| k.0).collect::<Vec<_>>(),
        kids.iter().map(|k| k.0).collect::<Vec<_>>(),
        "the same child runs, now the resumed run's"
    );
    assert_eq!(run(&pool, kids[0].0).await.retry_count, 0);
    assert_eq!(run(&pool, kids[1].0).await.retry_count, 1);
    assert!(children(&pool, old).await.is_empty());

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_child_flow_named_by_alias_is_typed_by_the_names_the_flows_record(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = worker(&pool).await;
    let named = Worker::start_with(
        (named_v1::deployment(), misnamed_v1::deployment()),
        worker_config(named_v1::Queue::SubflowsNamed, &pool),
    )
    .await
    .unwrap();
    let handle = named_v1::start(&client, &42).await.unwrap();
    let output = handle.wait(&client, Duration::from_secs(30)).await.unwrap();
    assert_eq!(output.receipt, "receipt: captured 42");

    // A handler whose type is not the input type the child's active version records: no child
    // starts, and the step and its run fail saying which types differ.
    let handle = misnamed_v1::start(&client, &42).await.unwrap();
    let parent = handle.run_id();
    assert!(ended(&pool, parent, RunStatus::Failed).await);
    assert!(children(&pool, parent).await.is_empty());
    let error = step_error(&pool, parent, "charge").await;
    assert!(
        error.contains("could not start its child run of flow `charge`")
            && error.contains("(version `charge_v1`) takes `")
            && error.contains("ChargeIn`, but the handler returns `u64`"),
        "{error}"
    );

    for worker in [worker, named] {
        worker.shutdown();
        worker.wait().await.unwrap();
    }
}

#[sqlx::test(migrations = false)]
async fn a_step_that_times_out_waiting_for_its_children_cancels_them(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = worker(&pool).await;
    let handle = impatient_v1::start(&client, &1).await.unwrap();
    let parent = handle.run_id();
    let output = handle.wait(&client, Duration::from_secs(30)).await.unwrap();
    assert_eq!(output.conclude, "gave up");
    let reason: Option<String> = sqlx::query_scalar(
        "select skip_reason from pgflow.step_states where run_id = $1 and step_slug = 'ask'",
    )
    .bind(parent)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(reason.as_deref(), Some("timed_out"));
    let child = run(&pool, children(&pool, parent).await[0].0).await;
    assert_eq!(child.status, RunStatus::Cancelled);
    assert_eq!(
        child.cancel_reason.as_deref(),
        Some("its parent step timed out waiting for it")
    );

    worker.shutdown();
    worker.wait().await.unwrap();
}
