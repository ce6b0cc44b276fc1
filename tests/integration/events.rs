//! Live events: a run's stream starts from its state and sees every step's transitions in
//! order, ending with the run's; cutting the listening connection mid-run (the backend
//! terminated) still delivers the final state; a flow's stream sees its runs; the channel and
//! payload are what any LISTEN client reads.

use std::time::Duration;

use pgflow::engine::{RunStatus, StepStatus};
use pgflow::events::{FlowEvent, RunEvent};
use pgflow::{Client, Worker};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{install, worker_config};

#[pgflow::flow(slug = "evented_v1", input = u64)]
pub mod evented_v1 {
    /// Sleeps `input` ms, so that each transition is its own transaction.
    #[step(queue = "evented")]
    pub async fn first(input: u64) -> Result<u64, String> {
        tokio::time::sleep(std::time::Duration::from_millis(input)).await;
        Ok(input)
    }

    #[step(depends_on = [first], queue = "evented")]
    pub async fn second(first: u64) -> Result<u64, String> {
        tokio::time::sleep(std::time::Duration::from_millis(first)).await;
        Ok(first)
    }
}

fn run_event(run_id: Uuid, status: RunStatus) -> RunEvent {
    RunEvent::Run {
        run_id,
        flow_slug: "evented_v1".to_owned(),
        status,
    }
}

fn step_event(run_id: Uuid, step: &str, status: StepStatus) -> RunEvent {
    RunEvent::Step {
        run_id,
        flow_slug: "evented_v1".to_owned(),
        step_slug: step.to_owned(),
        status,
    }
}

/// Every event of a stream until it ends.
async fn collect(
    client: &Client,
    run_id: Uuid,
    mut cut: impl FnMut(usize) -> bool,
    pool: &PgPool,
) -> Vec<RunEvent> {
    let mut events = client.run_events(run_id).await.unwrap();
    let mut seen = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), events.next())
        .await
        .expect("the stream stalled")
    {
        seen.push(event.unwrap());
        if cut(seen.len()) {
            let terminated: i64 = sqlx::query_scalar(
                "select count(pg_terminate_backend(pid)) from pg_stat_activity
                 where datname = current_database() and query ilike 'listen \"pgflow_events%'",
            )
            .fetch_one(pool)
            .await
            .unwrap();
            assert_eq!(terminated, 1, "the stream's listening connection");
        }
    }
    seen
}

#[sqlx::test(migrations = false)]
async fn a_run_stream_sees_every_transition_in_order_and_ends_with_the_run(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&evented_v1::deployment()).await.unwrap();
    let run = evented_v1::start(&client, &300).await.unwrap();
    let id = run.run_id();
    let worker = Worker::start_with(
        evented_v1::deployment(),
        worker_config(evented_v1::Queue::Evented, &pool),
    )
    .await
    .unwrap();

    let seen = collect(&client, id, |_| false, &pool).await;
    assert_eq!(
        seen,
        vec![
            run_event(id, RunStatus::Started),
            step_event(id, "first", StepStatus::Started),
            step_event(id, "first", StepStatus::Completed),
            step_event(id, "second", StepStatus::Started),
            step_event(id, "second", StepStatus::Completed),
            run_event(id, RunStatus::Completed),
        ]
    );
    // A stream of an ended run gives its final state and ends.
    let replay = collect(&client, id, |_| false, &pool).await;
    assert_eq!(replay.last(), Some(&run_event(id, RunStatus::Completed)));
    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_cut_connection_still_delivers_the_final_state(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&evented_v1::deployment()).await.unwrap();
    let run = evented_v1::start(&client, &700).await.unwrap();
    let id = run.run_id();
    let worker = Worker::start_with(
        evented_v1::deployment(),
        worker_config(evented_v1::Queue::Evented, &pool),
    )
    .await
    .unwrap();

    // Cut the listener right after the first event (the run started), while `first` runs.
    let seen = collect(&client, id, |n| n == 1, &pool).await;
    assert_eq!(seen.first(), Some(&run_event(id, RunStatus::Started)));
    assert_eq!(seen.last(), Some(&run_event(id, RunStatus::Completed)));
    // Nothing twice, and each step's events in order.
    for step in ["first", "second"] {
        let statuses: Vec<_> = seen
            .iter()
            .filter_map(|e| match e {
                RunEvent::Step {
                    step_slug, status, ..
                } if step_slug == step => Some(*status),
                _ => None,
            })
            .collect();
        assert!(
            statuses == vec![StepStatus::Started, StepStatus::Completed]
                || statuses == vec![StepStatus::Completed],
            "{step}: {statuses:?}"
        );
    }
    // `wait` follows the same events.
    assert_eq!(
        run.wait(&client, Duration::from_secs(5))
            .await
            .unwrap()
            .second,
        700
    );
    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_flow_stream_and_a_plain_listen_see_the_runs_of_the_flow(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&evented_v1::deployment()).await.unwrap();
    let mut flow = client.flow_events("evented_v1").await.unwrap();
    // Any client language: LISTEN on the channel and read the JSON payload.
    let mut raw = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    raw.listen("pgflow_events.evented_v1").await.unwrap();

    let run = evented_v1::start(&client, &1).await.unwrap();
    let first = loop {
        let next = tokio::time::timeout(Duration::from_secs(10), flow.next()).await;
        match next.expect("no flow event").unwrap() {
            FlowEvent::Event(event) => break event,
            FlowEvent::Reconnected => {}
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(first, run_event(run.run_id(), RunStatus::Started));
    let notification = tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("no notification")
        .unwrap();
    let payload: serde_json::Value = serde_json::from_str(notification.payload()).unwrap();
    assert_eq!(payload["kind"], "run");
    assert_eq!(payload["run_id"], run.run_id().to_string());
    assert_eq!(payload["status"], "started");
    assert!(payload.get("input").is_none());
}

#[sqlx::test(migrations = false)]
async fn events_are_sent_only_while_someone_holds_a_lease(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&evented_v1::deployment()).await.unwrap();
    let mut raw = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    raw.listen("pgflow_events.evented_v1").await.unwrap();
    // Nobody follows the flow: starting a run notifies nothing.
    evented_v1::start(&client, &0).await.unwrap();
    assert!(
        quiet(&mut raw).await,
        "a notification with no lease on the flow"
    );

    // A plain LISTEN client takes a lease, as any language can: now runs are notified.
    let subscriber = Uuid::new_v4();
    let flows = ["evented_v1".to_owned()];
    let expires = pgflow::engine::subscribe_events(&pool, subscriber, &flows, 60)
        .await
        .unwrap();
    assert!(expires > chrono::Utc::now() + chrono::Duration::seconds(50));
    let run = evented_v1::start(&client, &0).await.unwrap();
    let notification = tokio::time::timeout(Duration::from_secs(10), raw.recv())
        .await
        .expect("no notification while a lease is held")
        .unwrap();
    let payload: serde_json::Value = serde_json::from_str(notification.payload()).unwrap();
    assert_eq!(payload["run_id"], run.run_id().to_string());

    // The run's other notifications (its first step started), then nothing.
    while !quiet(&mut raw).await {}

    // Given up: quiet again.
    pgflow::engine::unsubscribe_events(&pool, subscriber)
        .await
        .unwrap();
    evented_v1::start(&client, &0).await.unwrap();
    assert!(
        quiet(&mut raw).await,
        "a notification after the lease was given up"
    );
}

/// Whether nothing arrives within 300 ms (the worker takes a few ms per transition).
async fn quiet(raw: &mut sqlx::postgres::PgListener) -> bool {
    tokio::time::timeout(Duration::from_millis(300), raw.try_recv())
        .await
        .is_err()
}

#[sqlx::test(migrations = false)]
async fn a_resumed_run_announces_itself_and_the_steps_it_keeps(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    let worker = Worker::start_with(
        evented_v1::deployment(),
        worker_config(evented_v1::Queue::Evented, &pool),
    )
    .await
    .unwrap();
    let old = evented_v1::start(&client, &0).await.unwrap();
    old.wait(&client, Duration::from_secs(10)).await.unwrap();
    worker.shutdown();
    worker.wait().await.unwrap();

    let subscriber = Uuid::new_v4();
    pgflow::engine::subscribe_events(&pool, subscriber, &["evented_v1".to_owned()], 60)
        .await
        .unwrap();
    let mut raw = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    raw.listen("pgflow_events.evented_v1").await.unwrap();
    let resumed = pgflow::engine::resume_run(&pool, old.run_id(), "second")
        .await
        .unwrap();

    // The new run, the step it keeps (completed, as the old run left it), then the step it
    // runs again, started at once since what it depends on is kept.
    let mut payloads = Vec::new();
    for _ in 0..3 {
        let notification = tokio::time::timeout(Duration::from_secs(10), raw.recv())
            .await
            .expect("an event of the resumed run")
            .unwrap();
        let payload: serde_json::Value = serde_json::from_str(notification.payload()).unwrap();
        payloads.push((
            payload["kind"].as_str().unwrap().to_owned(),
            payload["step_slug"].as_str().unwrap_or_default().to_owned(),
            payload["status"].as_str().unwrap().to_owned(),
            payload["run_id"].as_str().unwrap().to_owned(),
        ));
    }
    let id = resumed.run_id.to_string();
    assert_eq!(
        payloads,
        vec![
            ("run".into(), String::new(), "started".into(), id.clone()),
            (
                "step".into(),
                "first".into(),
                "completed".into(),
                id.clone()
            ),
            ("step".into(), "second".into(), "started".into(), id),
        ]
    );
}
