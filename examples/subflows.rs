//! A parent flow that maps over subflows: an order charges each of its parcels through a flow
//! of its own (`charge`), one child run per parcel, then writes a receipt from the children's
//! outputs. A declined card fails its child, which fails the order; once the card goes
//! through, a retry of the order reruns only the declined charge and reuses the others.
//!
//! ```sh
//! cargo run --example subflows
//! ```
//!
//! Database: as for the `triage` example (`examples/common/database.rs`); the example works in
//! a database of its own, `pgflow_subflows`, created afresh on every run.

#[path = "common/database.rs"]
mod database;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pgflow::{Client, RunStatus, Start, Worker, WorkerConfig};
use serde::{Deserialize, Serialize};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Whether the card of parcel `p-13` is declined (until the customer fixes it).
static DECLINED: AtomicBool = AtomicBool::new(true);

/// One parcel to charge.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Parcel {
    /// Its id.
    pub id: String,
    /// What it costs.
    pub cents: u64,
}

/// A charge: authorized, then captured. A flow of its own, which other flows run.
#[pgflow::flow(slug = "charge_v1", alias = "charge", input = Parcel, max_attempts = 1)]
pub mod charge_v1 {
    use super::*;

    /// Authorizes the amount.
    #[step(queue = "orders")]
    pub async fn authorize(input: Parcel) -> Result<Parcel, String> {
        if input.id == "p-13" && DECLINED.load(Ordering::SeqCst) {
            return Err(format!("card declined for {}", input.id));
        }
        Ok(input)
    }

    /// Captures it.
    #[step(depends_on = [authorize], queue = "orders")]
    pub async fn capture(authorize: Parcel) -> Result<String, String> {
        Ok(format!("{}: {} cents", authorize.id, authorize.cents))
    }
}

/// An order: one charge per parcel, run as child runs of `charge`, then a receipt.
#[pgflow::flow(slug = "order_v1", alias = "order", input = Vec<Parcel>, max_attempts = 1)]
pub mod order_v1 {
    use super::*;

    /// Runs `charge` for this parcel: the handler returns the child's input.
    #[step(map, subflow = charge_v1, queue = "orders")]
    pub async fn charge_each(parcel: Parcel) -> Result<Parcel, String> {
        Ok(parcel)
    }

    /// The children's outputs, in parcel order.
    #[step(depends_on = [charge_each], queue = "orders")]
    pub async fn receipt(charge_each: Vec<charge_v1::Output>) -> Result<String, String> {
        let lines: Vec<&str> = charge_each.iter().map(|c| c.capture.as_str()).collect();
        Ok(lines.join("; "))
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let database = database::fresh("pgflow_subflows", 10).await?;
    println!("database: {}", database.description);
    let pool = database.pool.clone();
    pgflow::install(&pool).await?;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        (charge_v1::deployment(), order_v1::deployment()),
        WorkerConfig::new(order_v1::Queue::Orders)
            .pool(pool.clone())
            .poll_interval(Duration::from_millis(200))
            .function_name("subflows_example"),
    )
    .await?;

    let parcel = |id: &str, cents| Parcel {
        id: id.to_owned(),
        cents,
    };
    let orders = vec![
        vec![parcel("p-1", 500), parcel("p-2", 250)],
        vec![parcel("p-3", 100), parcel("p-13", 1300), parcel("p-4", 40)],
    ];
    println!("1. two orders, five parcels: one child run of `charge` per parcel");
    let runs = client
        .start_many(Start::flow::<order_v1::Flow>(), &orders, &[])
        .await?;

    let first = runs[0].wait(&client, Duration::from_secs(30)).await?;
    println!("   order 1: {}", first.receipt);
    if first.receipt != "p-1: 500 cents; p-2: 250 cents" {
        return Err(format!("unexpected receipt `{}`", first.receipt).into());
    }

    println!("2. the card of p-13 is declined: its child fails, and so does order 2");
    let second = runs[1].run_id();
    for _ in 0..150 {
        if pgflow::engine::run(&pool, second).await?.status == RunStatus::Failed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let children = pgflow::engine::run_children(&pool, second).await?;
    for child in &children {
        println!(
            "   task {} -> run {} of `{}`: {}",
            child.parent_task_index, child.run_id, child.flow_slug, child.status
        );
    }
    let statuses: Vec<&str> = children.iter().map(|c| c.status.as_str()).collect();
    if statuses != ["completed", "failed", "completed"] {
        return Err(format!("unexpected children: {statuses:?}").into());
    }

    println!("3. the card is fixed; a retry of order 2 reruns only the declined charge");
    DECLINED.store(false, Ordering::SeqCst);
    client.retry(second).await?;
    let output = runs[1].wait(&client, Duration::from_secs(30)).await?;
    println!("   order 2: {}", output.receipt);
    if output.receipt != "p-3: 100 cents; p-13: 1300 cents; p-4: 40 cents" {
        return Err(format!("unexpected receipt `{}`", output.receipt).into());
    }
    let again = pgflow::engine::run_children(&pool, second).await?;
    let same: Vec<_> = children.iter().map(|c| c.run_id).collect();
    if again.iter().map(|c| c.run_id).collect::<Vec<_>>() != same {
        return Err("the retry started new children".into());
    }
    for child in &again {
        let run = pgflow::engine::run(&pool, child.run_id).await?;
        println!(
            "   task {}: run {} retried {} time(s)",
            child.parent_task_index, child.run_id, run.retry_count
        );
    }

    worker.shutdown();
    worker.wait().await?;
    println!("done");
    Ok(())
}
