//! Flows that wait: a refund waits for a person's approval (sent in the same transaction as
//! the application's own record of it, or through the signed link the run made), reminds the
//! approvers after a sleep, and escalates when no decision comes in time; a payment waits for
//! its provider's webhook, matched by order id.
//!
//! ```sh
//! cargo run --example approval
//! ```
//!
//! Database: as for the `triage` example (`examples/common/database.rs`); the example works in
//! a database of its own, `pgflow_approval`, created afresh on every run.

#[path = "common/database.rs"]
mod database;

use std::time::Duration;

use pgflow::{Client, Start, Worker, WorkerConfig, WorkerHandle};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A refund to decide.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Refund {
    /// The order refunded.
    pub order_id: String,
    /// How much.
    pub cents: u64,
}

/// What a person decides about a refund.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Approval {
    /// Who decided.
    pub by: String,
    /// Whether the refund is approved.
    pub approved: bool,
}

/// A recorded refund request, with the link that decides it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// The refund.
    pub refund: Refund,
    /// Where an approver posts their decision (`POST /signals/<token>` on the dashboard's
    /// server, or on `pgflow_dashboard::callback_router` mounted in your own app): the token
    /// sends this run's `approval` once, with no other credential.
    pub approval_link: String,
}

/// A refund: recorded, then it waits up to two seconds (days, in real life) for a person's
/// decision, reminding the approvers after one second; without a decision, it escalates.
#[pgflow::flow(slug = "refund_v1", alias = "refund", input = Refund)]
pub mod refund_v1 {
    use super::*;

    /// Records the request and makes the link an approver decides it with.
    #[step(queue = "refunds")]
    pub async fn request(input: Refund, ctx: pgflow::Context) -> Result<Request, String> {
        let token = ctx
            .signal_token("approval")
            .await
            .map_err(|e| e.to_string())?;
        Ok(Request {
            refund: input,
            approval_link: format!("https://refunds.example/signals/{token}"),
        })
    }

    /// Waits for a person's decision.
    #[step(depends_on = [request], signal = approval, wait_timeout = 2, when_timed_out = skip,
           queue = "refunds")]
    pub async fn decide(request: Request, approval: Approval) -> Result<Approval, String> {
        let _ = request;
        Ok(approval)
    }

    /// A second after the request (a day, in real life), reminds the approvers. The sleep holds
    /// no worker and survives restarts.
    #[step(depends_on = [request], sleep = 1, queue = "refunds")]
    pub async fn remind(request: Request) -> Result<String, String> {
        Ok(format!(
            "reminder: refund {} waits for a decision at {}",
            request.refund.order_id, request.approval_link
        ))
    }

    /// Pays, refuses or escalates.
    #[step(depends_on = [request, decide, remind], queue = "refunds")]
    pub async fn settle(
        request: Request,
        decide: Option<Approval>,
        remind: String,
    ) -> Result<String, String> {
        let _ = remind;
        let request = request.refund;
        Ok(match decide {
            Some(Approval { by, approved: true }) => {
                format!(
                    "refunded {} cents for {}, approved by {by}",
                    request.cents, request.order_id
                )
            }
            Some(Approval { by, .. }) => format!("refund for {} refused by {by}", request.order_id),
            None => format!(
                "no decision on {} in time: escalated to a manager",
                request.order_id
            ),
        })
    }
}

/// An order to charge.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Order {
    /// Its id, which the provider's webhook names.
    pub order_id: String,
}

/// What the payment provider's webhook says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Paid {
    /// The provider's reference of the payment.
    pub provider_ref: String,
}

/// A payment: the charge is made, then the run waits for the provider's webhook, which knows
/// the order id and not the run.
#[pgflow::flow(slug = "payment_v1", alias = "payment", input = Order)]
pub mod payment_v1 {
    use super::*;

    /// Charges the order.
    #[step(queue = "payments")]
    pub async fn charge(input: Order) -> Result<Order, String> {
        Ok(input)
    }

    /// Waits for the provider's webhook.
    #[step(depends_on = [charge], signal = paid, key = charge.order_id, queue = "payments")]
    pub async fn confirm(charge: Order, paid: Paid) -> Result<String, String> {
        Ok(format!("{} paid ({})", charge.order_id, paid.provider_ref))
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
    let database = database::fresh("pgflow_approval", 10).await?;
    println!("database: {}", database.description);
    let pool = database.pool.clone();
    pgflow::install(&pool).await?;
    sqlx::query("create table refund_decisions (order_id text primary key, decided_by text)")
        .execute(&pool)
        .await?;
    let client = Client::new(pool.clone());
    let workers = [
        worker(&pool, refund_v1::deployment(), refund_v1::Queue::Refunds).await?,
        worker(&pool, payment_v1::deployment(), payment_v1::Queue::Payments).await?,
    ];

    println!("1. three refunds wait for a decision");
    let refunds: Vec<Refund> = ["r-1", "r-2", "r-3"]
        .iter()
        .map(|id| Refund {
            order_id: (*id).to_owned(),
            cents: 1250,
        })
        .collect();
    let runs = client
        .start_many(Start::flow::<refund_v1::Flow>(), &refunds, &[])
        .await?;
    for run in &runs {
        wait_for_step(&pool, run.run_id(), "decide", "waiting").await?;
    }

    println!("2. ana approves r-1: her record and the signal commit together");
    let mut tx = pool.begin().await?;
    sqlx::query("insert into refund_decisions values ('r-1', 'ana')")
        .execute(&mut *tx)
        .await?;
    let approval = Approval {
        by: "ana".into(),
        approved: true,
    };
    let sent = refund_v1::signal_approval_in(&mut *tx, runs[0].run_id(), &approval).await?;
    tx.commit().await?;
    println!("   {}", sent.as_str());

    println!("3. bo refuses r-2 through the run's link; nobody decides r-3");
    let link: String = sqlx::query_scalar(
        "select output ->> 'approval_link' from pgflow.step_states
         where run_id = $1 and step_slug = 'request'",
    )
    .bind(runs[1].run_id())
    .fetch_one(&pool)
    .await?;
    let token = link.rsplit('/').next().unwrap_or_default();
    let refusal = serde_json::json!({ "by": "bo", "approved": false });
    let used = pgflow::engine::send_signal_by_token(&pool, token, &refusal).await?;
    println!("   the link: {used:?}");

    let expected = [
        "refunded 1250 cents for r-1, approved by ana",
        "refund for r-2 refused by bo",
        "no decision on r-3 in time: escalated to a manager",
    ];
    for (run, expected) in runs.iter().zip(expected) {
        let output = run.wait(&client, Duration::from_secs(30)).await?;
        println!("   {}: {}", run.run_id(), output.settle);
        let (reminder, slept): (String, bool) = sqlx::query_as(
            "select remind.output #>> '{}', remind.started_at >= request.completed_at + interval '1s'
             from pgflow.step_states remind
             join pgflow.step_states request
               on request.run_id = remind.run_id and request.step_slug = 'request'
             where remind.run_id = $1 and remind.step_slug = 'remind'",
        )
        .bind(run.run_id())
        .fetch_one(&pool)
        .await?;
        println!("   {reminder}");
        if !slept {
            return Err("the reminder went out before its sleep ended".into());
        }
        if output.settle != expected {
            return Err(format!("expected `{expected}`, got `{}`", output.settle).into());
        }
    }

    println!("4. five payments wait for their webhooks; the provider calls back by order id");
    let orders: Vec<Order> = (1..=5)
        .map(|n| Order {
            order_id: format!("o-{n}"),
        })
        .collect();
    let payments = client
        .start_many(Start::flow::<payment_v1::Flow>(), &orders, &[])
        .await?;
    for run in &payments {
        wait_for_step(&pool, run.run_id(), "confirm", "waiting").await?;
    }
    let mut reached = 0;
    for order in &orders {
        let paid = Paid {
            provider_ref: format!("pr_{}", order.order_id),
        };
        reached += payment_v1::emit_paid(&client, &order.order_id, &paid)
            .await?
            .len();
    }
    println!("   the webhooks reached {reached} runs");
    for run in &payments {
        let output = run.wait(&client, Duration::from_secs(30)).await?;
        println!("   {}: {}", run.run_id(), output.confirm);
    }
    if reached != orders.len() {
        return Err(format!(
            "the webhooks reached {reached} runs, expected {}",
            orders.len()
        )
        .into());
    }

    for worker in workers {
        worker.shutdown();
        worker.wait().await?;
    }
    println!("done");
    Ok(())
}

async fn worker<F: pgflow::FlowSpec, Q: pgflow::FlowQueue<Flow = F>>(
    pool: &PgPool,
    deployment: pgflow::Deployment<F>,
    queue: Q,
) -> Result<WorkerHandle, Error> {
    let config = WorkerConfig::new(queue)
        .pool(pool.clone())
        .poll_interval(Duration::from_millis(200))
        .function_name("approval_example");
    Ok(Worker::start_with(deployment, config).await?)
}

/// Waits (10 s at most) until step `step` of run `run_id` is in `status`.
async fn wait_for_step(
    pool: &PgPool,
    run_id: uuid::Uuid,
    step: &str,
    status: &str,
) -> Result<(), Error> {
    for _ in 0..100 {
        let now: String = sqlx::query_scalar(
            "select status from pgflow.step_states where run_id = $1 and step_slug = $2",
        )
        .bind(run_id)
        .bind(step)
        .fetch_one(pool)
        .await?;
        if now == status {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("step `{step}` of run {run_id} did not become {status}").into())
}
