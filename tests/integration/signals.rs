//! Signals: a step declared with `signal = name` waits, once its dependencies are done, until
//! its run receives that signal, and then runs with the payload as its parameter. Waiting holds
//! no task, message or worker slot. A signal sent before the step waits is kept for it; a second
//! one with an equal payload changes nothing and one with another payload is refused; a signal
//! to an ended run, an unknown name or a payload that does not fit the signal's schema is
//! refused, changing nothing; a signal sent in a transaction that rolls back was never sent; a
//! wait with a timeout fails or skips the step when its deadline passes, also when no worker
//! ran at that moment; a retry of a run whose wait timed out waits again.

use std::time::Duration;

use pgflow::schemars::{self, JsonSchema};
use pgflow::{Client, EngineError, SignalOutcome, SignalRefusal, Start, StartOptions, Worker};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{eventually, install, run, step_error, step_status, task_rows, worker_config};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Refund {
    pub order: u64,
    pub cents: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Approval {
    pub by: String,
    pub approved: bool,
}

/// A refund waits for a person's approval before it is paid.
#[pgflow::flow(slug = "refund_v1", alias = "refund", input = Refund)]
pub mod refund_v1 {
    use super::*;

    #[step(queue = "signals_refund")]
    pub async fn request(input: Refund) -> Result<u64, String> {
        Ok(input.cents)
    }

    #[step(depends_on = [request], signal = approval, queue = "signals_refund")]
    pub async fn pay(request: u64, approval: Approval) -> Result<String, String> {
        Ok(if approval.approved {
            format!("paid {request} cents, approved by {}", approval.by)
        } else {
            format!("refused by {}", approval.by)
        })
    }
}

/// The same wait, with a deadline: a wait that times out skips the step, whose dependent runs
/// without it.
#[pgflow::flow(slug = "reminder_v1", alias = "reminder", input = u64)]
pub mod reminder_v1 {
    #[step(queue = "signals_reminder")]
    pub async fn ask(input: u64) -> Result<u64, String> {
        Ok(input)
    }

    #[step(depends_on = [ask], signal = answer, wait_timeout = 1,
           when_timed_out = skip, queue = "signals_reminder")]
    pub async fn record(ask: u64, answer: String) -> Result<String, String> {
        Ok(format!("{ask}: {answer}"))
    }

    #[step(depends_on = [record], queue = "signals_reminder")]
    pub async fn close(record: Option<String>) -> Result<String, String> {
        Ok(record.unwrap_or_else(|| "no answer".to_owned()))
    }
}

/// A root step that waits, with a deadline that fails the run, in a flow that checks what
/// comes in (so untyped signals are checked against the payload's schema).
#[pgflow::flow(slug = "vetted_v1", alias = "vetted", input = Refund, check_input)]
pub mod vetted_v1 {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
    pub struct Vetting {
        pub passed: bool,
    }

    #[step(signal = vetting, wait_timeout = 1, when_timed_out = fail, queue = "signals_vetted")]
    pub async fn vet(input: Refund, vetting: Vetting) -> Result<bool, String> {
        Ok(vetting.passed && input.cents > 0)
    }
}

fn approval(by: &str) -> Approval {
    Approval {
        by: by.to_owned(),
        approved: true,
    }
}

async fn refund_worker(pool: &PgPool) -> pgflow::WorkerHandle {
    Worker::start_with(
        refund_v1::deployment(),
        worker_config(refund_v1::Queue::SignalsRefund, pool),
    )
    .await
    .unwrap()
}

async fn waits_for(pool: &PgPool, run_id: Uuid, step: &str) -> bool {
    eventually(20, async || {
        step_status(pool, run_id, step).await == "waiting"
    })
    .await
}

async fn signal_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from pgflow.signals")
        .fetch_one(pool)
        .await
        .unwrap()
}

fn refusal(result: Result<SignalOutcome, EngineError>) -> (SignalRefusal, String) {
    match result {
        Err(EngineError::SignalRefused(refused)) => (refused.reason, refused.message.clone()),
        other => panic!("expected a refused signal, got {other:?}"),
    }
}

#[sqlx::test(migrations = false)]
async fn a_waiting_step_holds_nothing_and_starts_with_the_payload_of_its_signal(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = refund_worker(&pool).await;
    let refund = Refund {
        order: 7,
        cents: 1250,
    };
    let handle = refund_v1::start(&client, &refund).await.unwrap();
    let run_id = handle.run_id();

    assert!(
        waits_for(&pool, run_id, "pay").await,
        "pay waits once request is done"
    );
    // Waiting holds no task and no message: only the wait itself.
    let tasks = task_rows(&pool, run_id).await;
    assert_eq!(tasks.len(), 1, "only request has a task: {tasks:?}");
    let queued: i64 = sqlx::query_scalar("select count(*) from pgmq.q_signals_refund")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(queued, 0, "no message waits on the queue");
    let waiting: Vec<(String, String)> =
        sqlx::query_as("select step_slug, signal_name from pgflow.waits where run_id = $1")
            .bind(run_id)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(waiting, vec![("pay".to_owned(), "approval".to_owned())]);

    let sent = refund_v1::signal_approval(&client, run_id, &approval("ana"))
        .await
        .unwrap();
    assert_eq!(sent, SignalOutcome::Delivered);
    let output = handle.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.pay, "paid 1250 cents, approved by ana");

    // The same signal again changes nothing; another payload is refused; so is a name no
    // step waits for, and the run is left as it was.
    let again = client
        .signal(run_id, "approval", &approval("ana"))
        .await
        .unwrap();
    assert_eq!(again, SignalOutcome::Duplicate);
    let (reason, message) = refusal(client.signal(run_id, "approval", &approval("bo")).await);
    assert_eq!(reason, SignalRefusal::AlreadySent);
    assert!(
        message.contains("already received signal `approval`"),
        "{message}"
    );
    let (reason, message) = refusal(client.signal(run_id, "approve", &approval("bo")).await);
    assert_eq!(reason, SignalRefusal::UnknownSignal);
    assert!(message.contains("its signals: approval"), "{message}");
    assert_eq!(signal_count(&pool).await, 1);
    assert_eq!(
        run(&pool, run_id).await.status,
        pgflow::RunStatus::Completed
    );

    let unknown = Uuid::new_v4();
    match client.signal(unknown, "approval", &approval("ana")).await {
        Err(EngineError::UnknownRun { run_id }) => assert_eq!(run_id, unknown),
        other => panic!("expected UnknownRun, got {other:?}"),
    }

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_signal_sent_before_the_step_waits_is_kept_and_the_step_does_not_wait(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    // No worker yet (the flow compiled by hand): the run cannot reach `pay`.
    client.deploy(&refund_v1::deployment()).await.unwrap();
    let handle = refund_v1::start(
        &client,
        &Refund {
            order: 8,
            cents: 10,
        },
    )
    .await
    .unwrap();
    let kept = refund_v1::signal_approval(&client, handle.run_id(), &approval("cy"))
        .await
        .unwrap();
    assert_eq!(kept, SignalOutcome::Kept);
    assert_eq!(step_status(&pool, handle.run_id(), "pay").await, "created");

    let worker = refund_worker(&pool).await;
    let output = handle.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.pay, "paid 10 cents, approved by cy");
    let waits: i64 = sqlx::query_scalar("select count(*) from pgflow.waits")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(waits, 0, "the step never waited");

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_signal_in_a_transaction_that_rolls_back_is_never_sent(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = refund_worker(&pool).await;
    let handle = refund_v1::start(&client, &Refund { order: 9, cents: 5 })
        .await
        .unwrap();
    let run_id = handle.run_id();
    assert!(waits_for(&pool, run_id, "pay").await);

    // The application marks the refund approved and signals, in one transaction that fails.
    sqlx::query("create table approvals (order_id bigint primary key)")
        .execute(&pool)
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("insert into approvals values (9)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let sent = refund_v1::signal_approval_in(&mut *tx, run_id, &approval("di"))
        .await
        .unwrap();
    assert_eq!(
        sent,
        SignalOutcome::Delivered,
        "delivered within the transaction"
    );
    tx.rollback().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(step_status(&pool, run_id, "pay").await, "waiting");
    assert_eq!(signal_count(&pool).await, 0);
    assert!(task_rows(&pool, run_id).await.len() == 1, "pay has no task");

    // The same, committed: the approval and the signal land together.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("insert into approvals values (9)")
        .execute(&mut *tx)
        .await
        .unwrap();
    client
        .signal_in(&mut *tx, run_id, "approval", &approval("di"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let output = handle.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.pay, "paid 5 cents, approved by di");

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_signal_to_a_cancelled_run_is_refused_and_cancelling_ends_the_wait(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = refund_worker(&pool).await;
    let handle = refund_v1::start(&client, &Refund { order: 1, cents: 1 })
        .await
        .unwrap();
    let run_id = handle.run_id();
    assert!(waits_for(&pool, run_id, "pay").await);

    client
        .cancel(run_id, Some("customer withdrew"))
        .await
        .unwrap();
    assert_eq!(step_status(&pool, run_id, "pay").await, "cancelled");
    let waits: i64 = sqlx::query_scalar("select count(*) from pgflow.waits")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(waits, 0, "the wait ended with the run");

    let (reason, message) = refusal(client.signal(run_id, "approval", &approval("ed")).await);
    assert_eq!(reason, SignalRefusal::RunEnded);
    assert!(message.contains("is cancelled"), "{message}");
    assert_eq!(signal_count(&pool).await, 0, "nothing was kept");

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_wait_that_times_out_skips_its_step_even_when_no_worker_ran_at_the_deadline(
    pool: PgPool,
) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        reminder_v1::deployment(),
        worker_config(reminder_v1::Queue::SignalsReminder, &pool),
    )
    .await
    .unwrap();
    let handle = reminder_v1::start(&client, &3).await.unwrap();
    let run_id = handle.run_id();
    assert!(waits_for(&pool, run_id, "record").await);
    worker.shutdown();
    worker.wait().await.unwrap();

    // Past the deadline with no process looking: the step still waits.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(step_status(&pool, run_id, "record").await, "waiting");

    // The next process to run ends it: the step is skipped and its dependent runs without it.
    let worker = Worker::start_with(
        reminder_v1::deployment(),
        worker_config(reminder_v1::Queue::SignalsReminder, &pool),
    )
    .await
    .unwrap();
    let output = handle.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.close, "no answer");
    let reason: Option<String> = sqlx::query_scalar(
        "select skip_reason from pgflow.step_states where run_id = $1 and step_slug = 'record'",
    )
    .bind(run_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(reason.as_deref(), Some("timed_out"));

    // Too late now: the run completed, so the signal is refused.
    let (reason, _) = refusal(reminder_v1::signal_answer(&client, run_id, &"yes".to_owned()).await);
    assert_eq!(reason, SignalRefusal::RunEnded);

    // Answered in time, the step records the answer.
    let answered = reminder_v1::start(&client, &4).await.unwrap();
    reminder_v1::signal_answer(&client, answered.run_id(), &"yes".to_owned())
        .await
        .unwrap();
    let output = answered
        .wait(&client, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(output.close, "4: yes");

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_wait_that_times_out_fails_its_run_and_a_retry_waits_again(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        vetted_v1::deployment(),
        worker_config(vetted_v1::Queue::SignalsVetted, &pool),
    )
    .await
    .unwrap();
    let refund = Refund {
        order: 3,
        cents: 99,
    };
    let handle = vetted_v1::start(&client, &refund).await.unwrap();
    let run_id = handle.run_id();
    // A root step waits from the start.
    assert_eq!(step_status(&pool, run_id, "vet").await, "waiting");

    let failed = eventually(20, async || {
        run(&pool, run_id).await.status == pgflow::RunStatus::Failed
    })
    .await;
    assert!(failed, "the run fails when the wait times out");
    let error = step_error(&pool, run_id, "vet").await;
    assert!(
        error.contains("waited")
            && error.contains("signal `vetting`")
            && error.contains("timed out"),
        "{error}"
    );
    let (reason, _) = refusal(
        vetted_v1::signal_vetting(&client, run_id, &vetted_v1::Vetting { passed: true }).await,
    );
    assert_eq!(reason, SignalRefusal::RunEnded);

    // A retry decides the step again: it waits anew, and a signal in time completes the run.
    let retry = client.retry(run_id).await.unwrap();
    assert!(retry.retried);
    assert_eq!(step_status(&pool, run_id, "vet").await, "waiting");
    let sent = vetted_v1::signal_vetting(&client, run_id, &vetted_v1::Vetting { passed: true })
        .await
        .unwrap();
    assert_eq!(sent, SignalOutcome::Delivered);
    let output = handle.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert!(output.vet);

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn an_untyped_signal_that_does_not_fit_its_schema_is_refused_naming_the_field(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    // The flow must be compiled for its run to start: a worker does it.
    let worker = Worker::start_with(
        vetted_v1::deployment(),
        worker_config(vetted_v1::Queue::SignalsVetted, &pool),
    )
    .await
    .unwrap();
    let handle = client
        .start(
            Start::named("vetted"),
            &serde_json::json!({"order": 1, "cents": 2}),
            StartOptions::new(),
        )
        .await
        .unwrap();
    let run_id = handle.run_id();
    let (reason, message) = refusal(
        client
            .signal(run_id, "vetting", &serde_json::json!({"passed": "yes"}))
            .await,
    );
    assert_eq!(reason, SignalRefusal::PayloadMisfit);
    assert!(
        message.contains("at passed") && message.contains("expected boolean"),
        "{message}"
    );
    assert_eq!(signal_count(&pool).await, 0);
    assert_eq!(step_status(&pool, run_id, "vet").await, "waiting");

    // From SQL, as an application would in its own transaction.
    let sent: String =
        sqlx::query_scalar("select pgflow.send_signal($1, 'vetting', '{\"passed\": true}')")
            .bind(run_id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(sent, "delivered");
    let done = eventually(20, async || {
        run(&pool, run_id).await.status == pgflow::RunStatus::Completed
    })
    .await;
    assert!(done);

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_thousand_waiting_runs_hold_no_slot_of_a_worker_with_one(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        refund_v1::deployment(),
        worker_config(refund_v1::Queue::SignalsRefund, &pool).max_concurrent(1),
    )
    .await
    .unwrap();
    let inputs: Vec<Refund> = (0..1000).map(|order| Refund { order, cents: 1 }).collect();
    let handles = client
        .start_many(Start::flow::<refund_v1::Flow>(), &inputs, &[])
        .await
        .unwrap();

    // With its one slot, the worker serves every run's first step while the others wait.
    let all_waiting = eventually(120, async || {
        let waiting: i64 =
            sqlx::query_scalar("select count(*) from pgflow.step_states where status = 'waiting'")
                .fetch_one(&pool)
                .await
                .unwrap();
        waiting == 1000
    })
    .await;
    assert!(all_waiting, "every run reaches its wait");

    // Every wait resolved in one statement; the one slot then runs them all.
    let delivered: i64 = sqlx::query_scalar(
        "select count(*) from pgflow.runs r
         cross join lateral pgflow.send_signal(r.run_id, 'approval',
                                               '{\"by\": \"batch\", \"approved\": true}') s
         where s = 'delivered'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(delivered, 1000);
    for handle in handles.iter().step_by(97) {
        let output = handle
            .wait(&client, Duration::from_secs(120))
            .await
            .unwrap();
        assert_eq!(output.pay, "paid 1 cents, approved by batch");
    }
    let done = eventually(120, async || {
        let completed: i64 =
            sqlx::query_scalar("select count(*) from pgflow.runs where status = 'completed'")
                .fetch_one(&pool)
                .await
                .unwrap();
        completed == 1000
    })
    .await;
    assert!(done, "every run completes");

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn retention_leaves_waiting_runs_alone(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = refund_worker(&pool).await;
    let handle = refund_v1::start(&client, &Refund { order: 2, cents: 2 })
        .await
        .unwrap();
    assert!(waits_for(&pool, handle.run_id(), "pay").await);
    let pruned = pgflow::engine::prune(&pool, Duration::ZERO, 100)
        .await
        .unwrap();
    assert_eq!(pruned.runs, 0, "{pruned:?}");
    assert_eq!(step_status(&pool, handle.run_id(), "pay").await, "waiting");

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    pub order_id: String,
    pub cents: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Paid {
    pub provider_ref: String,
}

/// A payment waits for the provider's webhook, matched by the order id its first step returns.
#[pgflow::flow(slug = "payment_v1", alias = "payment", input = Order)]
pub mod payment_v1 {
    use super::*;

    #[step(queue = "signals_payment")]
    pub async fn charge(input: Order) -> Result<Order, String> {
        Ok(input)
    }

    #[step(depends_on = [charge], signal = paid, key = charge.order_id, queue = "signals_payment")]
    pub async fn settle(charge: Order, paid: Paid) -> Result<String, String> {
        Ok(format!(
            "{} settled by {}",
            charge.order_id, paid.provider_ref
        ))
    }
}

/// Another flow waits for the same event, keyed by its input's order id, at its root.
#[pgflow::flow(slug = "shipping_v1", alias = "shipping", input = Order)]
pub mod shipping_v1 {
    use super::*;

    #[step(signal = paid, key = input.order_id, queue = "signals_shipping")]
    pub async fn ship(input: Order, paid: Paid) -> Result<String, String> {
        Ok(format!(
            "{} shipped after {}",
            input.order_id, paid.provider_ref
        ))
    }
}

#[sqlx::test(migrations = false)]
async fn an_event_by_key_resolves_every_run_waiting_for_that_key_in_one_call(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let payments = Worker::start_with(
        payment_v1::deployment(),
        worker_config(payment_v1::Queue::SignalsPayment, &pool),
    )
    .await
    .unwrap();
    let shipping = Worker::start_with(
        shipping_v1::deployment(),
        worker_config(shipping_v1::Queue::SignalsShipping, &pool),
    )
    .await
    .unwrap();
    let order = |n: u64| Order {
        order_id: format!("o-{n}"),
        cents: n,
    };
    let inputs: Vec<Order> = (0..50).map(order).collect();
    let runs = client
        .start_many(Start::flow::<payment_v1::Flow>(), &inputs, &[])
        .await
        .unwrap();
    let ship = shipping_v1::start(&client, &order(7)).await.unwrap();
    let all_waiting = eventually(30, async || {
        let keys: i64 = sqlx::query_scalar(
            "select count(*) from pgflow.waits where signal_name = 'paid' and signal_key like 'o-%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        keys == 51
    })
    .await;
    assert!(
        all_waiting,
        "51 runs wait for `paid`, each with its order id as key"
    );

    // No run waits for this key: nothing happens, and that is no error.
    let none = client
        .emit_event(
            "paid",
            "o-999",
            &Paid {
                provider_ref: "x".into(),
            },
        )
        .await
        .unwrap();
    assert!(none.is_empty());

    // One key reaches both flows' runs for order o-7.
    let reached = payment_v1::emit_paid(
        &client,
        "o-7",
        &Paid {
            provider_ref: "pr-7".into(),
        },
    )
    .await
    .unwrap();
    let mut reached: Vec<(Uuid, String)> = reached
        .into_iter()
        .map(|d| (d.run_id, d.step_slug))
        .collect();
    reached.sort();
    let mut expected = vec![
        (runs[7].run_id(), "settle".to_owned()),
        (ship.run_id(), "ship".to_owned()),
    ];
    expected.sort();
    assert_eq!(reached, expected);
    let shipped = ship.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(shipped.ship, "o-7 shipped after pr-7");

    // The other 49 in one call.
    let events: Vec<(String, serde_json::Value)> = (0..50)
        .filter(|n| *n != 7)
        .map(|n| {
            (
                format!("o-{n}"),
                serde_json::json!({ "provider_ref": format!("pr-{n}") }),
            )
        })
        .collect();
    let reached = pgflow::engine::emit_events(&pool, "paid", &events)
        .await
        .unwrap();
    assert_eq!(reached.len(), 49);
    for (n, run) in runs.iter().enumerate() {
        let output = run.wait(&client, Duration::from_secs(30)).await.unwrap();
        assert_eq!(output.settle, format!("o-{n} settled by pr-{n}"));
    }
    // Emitted again, the event reaches nobody: the runs no longer wait.
    let again = payment_v1::emit_paid(
        &client,
        "o-7",
        &Paid {
            provider_ref: "pr-7".into(),
        },
    )
    .await
    .unwrap();
    assert!(again.is_empty());

    for worker in [payments, shipping] {
        worker.shutdown();
        worker.wait().await.unwrap();
    }
}

/// An invoice's first step mints the callback token of the confirmation its run waits for
/// (the link an e-mail would carry); the confirmation may be skipped when it does not come.
#[pgflow::flow(slug = "invoice_v1", alias = "invoice", input = u64)]
pub mod invoice_v1 {
    use pgflow::Context;

    #[step(queue = "signals_invoice")]
    pub async fn send_link(input: u64, ctx: Context) -> Result<String, String> {
        let _ = input;
        ctx.signal_token("confirmed")
            .await
            .map_err(|e| e.to_string())
    }

    #[step(depends_on = [send_link], signal = confirmed, wait_timeout = 1,
           when_timed_out = skip, queue = "signals_invoice")]
    pub async fn book(send_link: String, confirmed: bool) -> Result<bool, String> {
        let _ = send_link;
        Ok(confirmed)
    }
}

#[sqlx::test(migrations = false)]
async fn a_callback_token_sends_its_signal_once_and_only_while_its_run_waits(pool: PgPool) {
    use pgflow::engine::{CallbackOutcome, send_signal_by_token, signal_token};

    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        invoice_v1::deployment(),
        worker_config(invoice_v1::Queue::SignalsInvoice, &pool),
    )
    .await
    .unwrap();
    let link_of = async |run_id: Uuid| -> String {
        sqlx::query_scalar(
            "select output #>> '{}' from pgflow.step_states
             where run_id = $1 and step_slug = 'send_link'",
        )
        .bind(run_id)
        .fetch_one(&pool)
        .await
        .unwrap()
    };

    let paid = invoice_v1::start(&client, &1).await.unwrap();
    assert!(waits_for(&pool, paid.run_id(), "book").await);
    let token = link_of(paid.run_id()).await;
    assert_eq!(
        token,
        signal_token(&pool, paid.run_id(), "confirmed")
            .await
            .unwrap(),
        "the handler's token is the run's"
    );
    // Forged or mangled tokens are no tokens, and change nothing.
    let mut forged = token.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == '0' { '1' } else { '0' });
    let other_run = format!("{}{}", Uuid::new_v4().simple(), &token[32..]);
    for bad in [forged.as_str(), other_run.as_str(), "nothing", "", "a.b.c"] {
        let outcome = send_signal_by_token(&pool, bad, &serde_json::json!(true))
            .await
            .unwrap();
        assert_eq!(outcome, CallbackOutcome::Unknown, "{bad:?}");
    }
    assert_eq!(step_status(&pool, paid.run_id(), "book").await, "waiting");

    // Used once it sends the signal; a second use changes nothing.
    let first = send_signal_by_token(&pool, &token, &serde_json::json!(true))
        .await
        .unwrap();
    assert_eq!(first, CallbackOutcome::Delivered);
    let output = paid.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.book, Some(true));
    let again = send_signal_by_token(&pool, &token, &serde_json::json!(true))
        .await
        .unwrap();
    assert_eq!(again, CallbackOutcome::AlreadyUsed);

    // A token expires with its wait: after the timeout it is refused.
    let late = invoice_v1::start(&client, &2).await.unwrap();
    let output = late.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.book, None, "the wait timed out and skipped the step");
    let token = link_of(late.run_id()).await;
    let (reason, _) = refusal(
        send_signal_by_token(&pool, &token, &serde_json::json!(true))
            .await
            .map(|_| SignalOutcome::Delivered),
    );
    assert_eq!(reason, SignalRefusal::RunEnded);

    // No token is made for a signal the flow does not wait for.
    let (reason, _) = refusal(
        signal_token(&pool, late.run_id(), "paid")
            .await
            .map(|_| SignalOutcome::Delivered),
    );
    assert_eq!(reason, SignalRefusal::UnknownSignal);

    worker.shutdown();
    worker.wait().await.unwrap();
}
