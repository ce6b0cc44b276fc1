//! Start guards: a throttle key starts at most one run per window (the other starts refused,
//! or dropped with the window's run given back), and a singleton key one going run at a time
//! (the other starts refused, or waiting their turn), however many callers start at once.

use std::time::Duration;

use pgflow::{Client, EngineError, Excess, Start, StartOptions, StartOutcome};
use sqlx::PgPool;

use crate::support::install;

/// Never claimed in these tests: the runs stay going.
#[pgflow::flow(slug = "guarded_v1", alias = "guarded", input = u32)]
pub mod guarded_v1 {
    #[step(queue = "start_guards")]
    pub async fn only(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

async fn runs(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Ten callers, each with a pool of its own, start ten runs of `F` each, all at once, with
/// `options`; each start's run and outcome.
async fn hundred_starts_at_once<F>(
    pool: &PgPool,
    options: StartOptions,
) -> Vec<(uuid::Uuid, Option<StartOutcome>)>
where
    F: pgflow::FlowSpec<Input = u32> + 'static,
{
    let mut callers = Vec::new();
    for caller in 0..10u32 {
        let own = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect_with(pool.connect_options().as_ref().clone())
            .await
            .unwrap();
        let options = options.clone();
        callers.push(tokio::spawn(async move {
            let client = Client::new(own);
            let mut outcomes = Vec::new();
            for n in 0..10 {
                let run = client
                    .start(Start::flow::<F>(), &(caller * 10 + n), &options)
                    .await
                    .unwrap();
                outcomes.push((run.run_id(), run.start_outcome()));
            }
            outcomes
        }));
    }
    let mut outcomes = Vec::new();
    for caller in callers {
        outcomes.extend(caller.await.unwrap());
    }
    outcomes
}

#[sqlx::test(migrations = false)]
async fn a_throttle_refuses_starts_in_its_window_then_opens_again(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&guarded_v1::deployment()).await.unwrap();
    pgflow::engine::activate_flow(&pool, "guarded_v1")
        .await
        .unwrap();
    let throttled =
        || StartOptions::new().throttle("account-7", Duration::from_secs(2), Excess::Refuse);

    let first = client
        .start(Start::flow::<guarded_v1::Flow>(), &1, throttled())
        .await
        .unwrap();
    let refused = client
        .start(Start::flow::<guarded_v1::Flow>(), &2, throttled())
        .await
        .unwrap_err();
    match &refused {
        EngineError::Throttled { key, run_id, .. } => {
            assert_eq!(key, "account-7");
            assert_eq!(*run_id, first.run_id());
        }
        other => panic!("expected Throttled, got {other:?}"),
    }
    assert_eq!(runs(&pool).await, 1, "the refused start started nothing");
    // Another key, and the alias (the same scope), are their own business.
    client
        .start(
            Start::named("guarded"),
            &3,
            StartOptions::new().throttle("account-8", Duration::from_secs(2), Excess::Refuse),
        )
        .await
        .unwrap();
    let through_alias = client
        .start(
            Start::<u32, serde_json::Value>::named("guarded"),
            &4,
            throttled(),
        )
        .await
        .unwrap_err();
    assert!(matches!(through_alias, EngineError::Throttled { .. }));

    tokio::time::sleep(Duration::from_millis(2100)).await;
    let after = client
        .start(Start::flow::<guarded_v1::Flow>(), &5, throttled())
        .await
        .unwrap();
    assert_ne!(after.run_id(), first.run_id());
    assert_eq!(runs(&pool).await, 3);
}

#[sqlx::test(migrations = false)]
async fn many_callers_at_once_start_one_run_per_window_and_the_rest_are_dropped(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&guarded_v1::deployment()).await.unwrap();
    let outcomes = hundred_starts_at_once::<guarded_v1::Flow>(
        &pool,
        StartOptions::new().throttle("webhook-storm", Duration::from_secs(60), Excess::Drop),
    )
    .await;
    assert_eq!(runs(&pool).await, 1, "one run for the window");
    let started: Vec<_> = outcomes
        .iter()
        .filter(|(_, outcome)| *outcome == Some(StartOutcome::Started))
        .collect();
    assert_eq!(started.len(), 1);
    let window_run = started[0].0;
    assert!(
        outcomes.iter().all(|(run_id, _)| *run_id == window_run),
        "every start got the window's run back: {outcomes:?}"
    );
    assert_eq!(
        outcomes
            .iter()
            .filter(|(_, outcome)| *outcome == Some(StartOutcome::Dropped))
            .count(),
        99
    );
}

#[sqlx::test(migrations = false)]
async fn a_singleton_refuses_a_second_run_while_the_first_is_going(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&guarded_v1::deployment()).await.unwrap();
    let single = || StartOptions::new().singleton("nightly-import");

    let first = client
        .start(Start::flow::<guarded_v1::Flow>(), &1, single())
        .await
        .unwrap();
    let busy = client
        .start(Start::flow::<guarded_v1::Flow>(), &2, single())
        .await
        .unwrap_err();
    match &busy {
        EngineError::SingletonBusy { key, run_id, .. } => {
            assert_eq!(key, "nightly-import");
            assert_eq!(*run_id, first.run_id());
        }
        other => panic!("expected SingletonBusy, got {other:?}"),
    }
    // Two of one key in one call: the second is refused, and nothing of the call starts.
    let both = client
        .start_many(
            Start::flow::<guarded_v1::Flow>(),
            &[3, 4],
            &[StartOptions::new().singleton("weekly-report")],
        )
        .await
        .unwrap_err();
    assert!(matches!(both, EngineError::SingletonBusy { .. }), "{both}");
    assert_eq!(runs(&pool).await, 1);

    // Once the first run has ended, the key is free again.
    client
        .cancel(first.run_id(), Some("done by hand"))
        .await
        .unwrap();
    let second = client
        .start(Start::flow::<guarded_v1::Flow>(), &5, single())
        .await
        .unwrap();
    assert_ne!(second.run_id(), first.run_id());
    assert_eq!(
        sqlx::query_scalar::<_, uuid::Uuid>(
            "select run_id from pgflow.start_guards where kind = 'singleton'"
        )
        .fetch_one(&pool)
        .await
        .unwrap(),
        second.run_id()
    );
}

#[sqlx::test(migrations = false)]
async fn guards_do_not_go_with_idempotency_keys_or_a_zero_window(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&guarded_v1::deployment()).await.unwrap();
    let error = client
        .start(
            Start::flow::<guarded_v1::Flow>(),
            &1,
            StartOptions::new().idempotency_key("k").singleton("s"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&error, EngineError::InvalidArguments(m) if m.contains("idempotency keys")),
        "{error}"
    );
    let error = client
        .start(
            Start::flow::<guarded_v1::Flow>(),
            &1,
            StartOptions::new().throttle("t", Duration::ZERO, Excess::Refuse),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&error, EngineError::InvalidArguments(m) if m.contains("at least 1")),
        "{error}"
    );
    assert_eq!(runs(&pool).await, 0);
}

/// Echoes its input, so the run's output says which input it began with.
#[pgflow::flow(slug = "debounced_v1", alias = "debounced", input = u32)]
pub mod debounced_v1 {
    #[step(queue = "start_debounce")]
    pub async fn echo(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

#[sqlx::test(migrations = false)]
async fn a_debounce_makes_one_run_of_a_hundred_starts_with_the_last_input(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&debounced_v1::deployment()).await.unwrap();
    let debounced = || StartOptions::new().debounce("storm", Duration::from_secs(1));

    let mut handles = Vec::new();
    for n in 0..100u32 {
        handles.push(
            client
                .start(Start::flow::<debounced_v1::Flow>(), &n, debounced())
                .await
                .unwrap(),
        );
    }
    let run_id = handles[0].run_id();
    assert!(handles.iter().all(|h| h.run_id() == run_id), "one run");
    assert_eq!(handles[0].start_outcome(), Some(StartOutcome::Started));
    assert!(
        handles[1..]
            .iter()
            .all(|h| h.start_outcome() == Some(StartOutcome::Debounced))
    );
    assert_eq!(runs(&pool).await, 1);
    let run = handles[0].run(&client).await.unwrap();
    assert_eq!(run.input, serde_json::json!(99), "the last input won");
    assert_eq!(run.shown_status(), "scheduled");
    let begins_at = run
        .scheduled_for
        .expect("it begins a window after the last start");
    let steps: i64 = sqlx::query_scalar("select count(*) from pgflow.step_states")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(steps, 0, "nothing of it has begun");

    let worker = pgflow::Worker::start_with(
        debounced_v1::deployment(),
        crate::support::worker_config(debounced_v1::Queue::StartDebounce, &pool),
    )
    .await
    .unwrap();
    let output = handles[99]
        .wait(&client, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(output.echo, 99);
    let began: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("select started_at from pgflow.step_states where run_id = $1")
            .bind(run_id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        began >= begins_at,
        "it began at {began}, before its window ended at {begins_at}"
    );

    // Once it has begun, the key makes a new run.
    let next = client
        .start(Start::flow::<debounced_v1::Flow>(), &7, debounced())
        .await
        .unwrap();
    assert_ne!(next.run_id(), run_id);
    assert_eq!(next.start_outcome(), Some(StartOutcome::Started));
    assert_eq!(
        next.wait(&client, Duration::from_secs(30))
            .await
            .unwrap()
            .echo,
        7
    );
    worker.shutdown();
}

#[sqlx::test(migrations = false)]
async fn many_callers_debouncing_at_once_make_one_run(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&debounced_v1::deployment()).await.unwrap();
    let ids: Vec<uuid::Uuid> = hundred_starts_at_once::<debounced_v1::Flow>(
        &pool,
        StartOptions::new().debounce("burst", Duration::from_secs(30)),
    )
    .await
    .into_iter()
    .map(|(run_id, _)| run_id)
    .collect();
    assert_eq!(runs(&pool).await, 1, "one run for the burst");
    assert!(ids.iter().all(|id| *id == ids[0]));
    let deferred: i64 = sqlx::query_scalar("select count(*) from pgflow.deferred_runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(deferred, 1);
}

#[sqlx::test(migrations = false)]
async fn of_many_callers_with_one_singleton_key_at_once_one_starts(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&guarded_v1::deployment()).await.unwrap();
    let mut callers = Vec::new();
    for caller in 0..20u32 {
        let own = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect_with(pool.connect_options().as_ref().clone())
            .await
            .unwrap();
        callers.push(tokio::spawn(async move {
            Client::new(own)
                .start(
                    Start::flow::<guarded_v1::Flow>(),
                    &caller,
                    StartOptions::new().singleton("only-one"),
                )
                .await
        }));
    }
    let mut started = 0;
    for caller in callers {
        match caller.await.unwrap() {
            Ok(_) => started += 1,
            Err(EngineError::SingletonBusy { .. }) => {}
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(started, 1);
    assert_eq!(runs(&pool).await, 1);
}

#[sqlx::test(migrations = false)]
async fn a_debounce_key_met_twice_in_one_call_keeps_the_last_input(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&debounced_v1::deployment()).await.unwrap();
    let handles = client
        .start_many(
            Start::flow::<debounced_v1::Flow>(),
            &[1, 2, 3],
            &[StartOptions::new().debounce("batch", Duration::from_secs(30))],
        )
        .await
        .unwrap();
    assert_eq!(runs(&pool).await, 1);
    let outcomes: Vec<_> = handles.iter().map(|h| h.start_outcome()).collect();
    assert_eq!(
        outcomes,
        [
            Some(StartOutcome::Debounced),
            Some(StartOutcome::Debounced),
            Some(StartOutcome::Started)
        ]
    );
    assert!(handles.iter().all(|h| h.run_id() == handles[2].run_id()));
    let run = handles[2].run(&client).await.unwrap();
    assert_eq!(run.input, serde_json::json!(3));
    let error = client
        .start(
            Start::flow::<debounced_v1::Flow>(),
            &4,
            StartOptions::new()
                .debounce("batch", Duration::from_secs(30))
                .start_after(Duration::from_secs(60)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&error, EngineError::InvalidArguments(m) if m.contains("no start time")),
        "{error}"
    );
}

/// Waits for a signal before it answers.
#[pgflow::flow(slug = "debounced_signal_v1", input = u32)]
pub mod debounced_signal_v1 {
    #[step(signal = go, queue = "start_debounce_signal")]
    pub async fn answer(input: u32, go: u32) -> Result<u32, String> {
        Ok(input + go)
    }
}

#[sqlx::test(migrations = false)]
async fn a_signal_sent_while_a_debounced_run_waits_to_begin_is_kept(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client
        .deploy(&debounced_signal_v1::deployment())
        .await
        .unwrap();
    let run = client
        .start(
            Start::flow::<debounced_signal_v1::Flow>(),
            &40,
            StartOptions::new().debounce("sig", Duration::from_secs(1)),
        )
        .await
        .unwrap();
    debounced_signal_v1::signal_go(&client, run.run_id(), &2)
        .await
        .unwrap();
    let worker = pgflow::Worker::start_with(
        debounced_signal_v1::deployment(),
        crate::support::worker_config(debounced_signal_v1::Queue::StartDebounceSignal, &pool),
    )
    .await
    .unwrap();
    let output = run.wait(&client, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        output.answer, 42,
        "the run began with the signal it was sent"
    );
    worker.shutdown();
}

/// Takes a while, so that runs of one key would overlap if two ran at once.
#[pgflow::flow(slug = "turns_v1", alias = "turns", input = u32)]
pub mod turns_v1 {
    #[step(queue = "start_turns")]
    pub async fn slow(input: u32) -> Result<u32, String> {
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        Ok(input)
    }
}

#[sqlx::test(migrations = false)]
async fn singleton_starts_in_turn_run_one_at_a_time_in_start_order(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&turns_v1::deployment()).await.unwrap();
    let in_turn = || StartOptions::new().singleton_in_turn("nightly");

    let mut handles = Vec::new();
    for n in 1..=5u32 {
        handles.push(
            client
                .start(Start::flow::<turns_v1::Flow>(), &n, in_turn())
                .await
                .unwrap(),
        );
    }
    assert_eq!(handles[0].start_outcome(), Some(StartOutcome::Started));
    for handle in &handles[1..] {
        assert_eq!(handle.start_outcome(), Some(StartOutcome::InLine));
        let run = handle.run(&client).await.unwrap();
        assert_eq!(run.shown_status(), "waiting", "a run in line waits");
    }
    let begun: i64 = sqlx::query_scalar("select count(distinct run_id) from pgflow.step_states")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(begun, 1, "only the first run has begun");
    // A start that refuses a held key names the run that holds it.
    match client
        .start(
            Start::flow::<turns_v1::Flow>(),
            &9,
            StartOptions::new().singleton("nightly"),
        )
        .await
    {
        Err(EngineError::SingletonBusy { run_id, .. }) => assert_eq!(run_id, handles[0].run_id()),
        other => panic!("expected SingletonBusy, got {other:?}"),
    }
    // A run in line takes no start time.
    let timed = client
        .start(
            Start::flow::<turns_v1::Flow>(),
            &9,
            in_turn().start_after(Duration::from_secs(60)),
        )
        .await
        .unwrap_err();
    assert!(timed.to_string().contains("no start time"), "{timed}");
    // The third leaves the line: it never begins, and the fourth goes after the second.
    client
        .cancel(handles[2].run_id(), Some("not needed"))
        .await
        .unwrap();

    let config =
        || crate::support::worker_config(turns_v1::Queue::StartTurns, &pool).max_concurrent(4);
    let workers = [
        pgflow::Worker::start_with(turns_v1::deployment(), config())
            .await
            .unwrap(),
        pgflow::Worker::start_with(turns_v1::deployment(), config())
            .await
            .unwrap(),
    ];
    for n in [0, 1, 3, 4] {
        let output = handles[n]
            .wait(&client, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(output.slow, n as u32 + 1);
    }
    // One at a time, in start order: each began after the one before it ended.
    let spans: Vec<(
        i32,
        chrono::DateTime<chrono::Utc>,
        chrono::DateTime<chrono::Utc>,
    )> = sqlx::query_as(
        "select r.input::int, t.started_at, t.completed_at
             from pgflow.step_tasks t join pgflow.runs r on r.run_id = t.run_id
             where t.status = 'completed'
             order by t.started_at",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let order: Vec<i32> = spans.iter().map(|s| s.0).collect();
    assert_eq!(order, [1, 2, 4, 5], "the runs began in start order");
    for pair in spans.windows(2) {
        assert!(
            pair[1].1 >= pair[0].2,
            "run {} began at {} before run {} ended at {}",
            pair[1].0,
            pair[1].1,
            pair[0].0,
            pair[0].2
        );
    }
    let cancelled_steps: i64 =
        sqlx::query_scalar("select count(*) from pgflow.step_states where run_id = $1")
            .bind(handles[2].run_id())
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(cancelled_steps, 0, "the run cancelled in line never began");
    let line: i64 = sqlx::query_scalar("select count(*) from pgflow.singleton_waits")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(line, 0, "the line is empty");
    // The key is free again.
    let next = client
        .start(
            Start::flow::<turns_v1::Flow>(),
            &6,
            StartOptions::new().singleton("nightly"),
        )
        .await
        .unwrap();
    assert_eq!(
        next.wait(&client, Duration::from_secs(30))
            .await
            .unwrap()
            .slow,
        6
    );
    for worker in workers {
        worker.shutdown();
    }
}

#[sqlx::test(migrations = false)]
async fn of_many_callers_in_turn_at_once_one_starts_and_the_rest_line_up(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&turns_v1::deployment()).await.unwrap();
    let outcomes = hundred_starts_at_once::<turns_v1::Flow>(
        &pool,
        StartOptions::new().singleton_in_turn("herd"),
    )
    .await;
    let started = outcomes
        .iter()
        .filter(|(_, outcome)| *outcome == Some(StartOutcome::Started))
        .count();
    let in_line = outcomes
        .iter()
        .filter(|(_, outcome)| *outcome == Some(StartOutcome::InLine))
        .count();
    assert_eq!((started, in_line), (1, 99));
    assert_eq!(runs(&pool).await, 100);
    let (line, places): (i64, i64) =
        sqlx::query_as("select count(*), count(distinct wait_seq) from pgflow.singleton_waits")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((line, places), (99, 99), "each of the others has its place");
    // One call with the key three times: the first takes it (it was free), two line up.
    let runs = client
        .start_many(
            Start::flow::<turns_v1::Flow>(),
            &[1, 2, 3],
            &[StartOptions::new().singleton_in_turn("batch")],
        )
        .await
        .unwrap();
    let outcomes: Vec<_> = runs.iter().map(|r| r.start_outcome()).collect();
    assert_eq!(
        outcomes,
        [
            Some(StartOutcome::Started),
            Some(StartOutcome::InLine),
            Some(StartOutcome::InLine)
        ]
    );
    // Runs pruned (once ended) take their places in line and their keys' records along.
    sqlx::query("select pgflow.cancel_runs(array(select run_id from pgflow.runs), 'done')")
        .execute(&pool)
        .await
        .unwrap();
    pgflow::engine::prune(&pool, Duration::ZERO, 1000)
        .await
        .unwrap();
    let left: (i64, i64) = sqlx::query_as(
        "select (select count(*) from pgflow.singleton_waits),
                (select count(*) from pgflow.singleton_runs)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(left, (0, 0));
}

/// Fails for input 1; takes a second for input 2.
#[pgflow::flow(slug = "turn_retry_v1", alias = "turn_retry", input = u32, max_attempts = 1)]
pub mod turn_retry_v1 {
    #[step(queue = "start_turn_retry")]
    pub async fn work(input: u32) -> Result<u32, String> {
        match input {
            1 => Err("no".to_owned()),
            2 => {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                Ok(input)
            }
            _ => Ok(input),
        }
    }
}

#[sqlx::test(migrations = false)]
async fn a_retried_singleton_run_waits_for_the_run_that_took_its_key(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&turn_retry_v1::deployment()).await.unwrap();
    let in_turn = || StartOptions::new().singleton_in_turn("ledger");
    let first = client
        .start(Start::flow::<turn_retry_v1::Flow>(), &1, in_turn())
        .await
        .unwrap();
    let second = client
        .start(Start::flow::<turn_retry_v1::Flow>(), &2, in_turn())
        .await
        .unwrap();
    assert_eq!(second.start_outcome(), Some(StartOutcome::InLine));
    let worker = pgflow::Worker::start_with(
        turn_retry_v1::deployment(),
        crate::support::worker_config(turn_retry_v1::Queue::StartTurnRetry, &pool),
    )
    .await
    .unwrap();
    // The first fails; the second takes the key and runs for a second.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let begun: i64 =
            sqlx::query_scalar("select count(*) from pgflow.step_tasks where run_id = $1")
                .bind(second.run_id())
                .fetch_one(&pool)
                .await
                .unwrap();
        if begun > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the second never began"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        first.run(&client).await.unwrap().status,
        pgflow::RunStatus::Failed
    );
    // While it goes, retrying the first would make two runs of the key go: refused.
    match client.retry(first.run_id()).await {
        Err(EngineError::SingletonBusy { key, run_id, .. }) => {
            assert_eq!(key, "ledger");
            assert_eq!(run_id, second.run_id());
        }
        other => panic!("expected SingletonBusy, got {other:?}"),
    }
    assert_eq!(
        first.run(&client).await.unwrap().status,
        pgflow::RunStatus::Failed,
        "nothing was retried"
    );
    second.wait(&client, Duration::from_secs(30)).await.unwrap();
    // Once it has ended, the retry takes the key back.
    client.retry(first.run_id()).await.unwrap();
    let holder: uuid::Uuid =
        sqlx::query_scalar("select run_id from pgflow.start_guards where key = 'ledger'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(holder, first.run_id());
    worker.shutdown();
}

#[sqlx::test(migrations = false)]
async fn a_run_not_begun_yet_keeps_its_queue_from_draining(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&debounced_v1::deployment()).await.unwrap();
    client
        .start(
            Start::flow::<debounced_v1::Flow>(),
            &1,
            StartOptions::new().debounce("later", Duration::from_secs(60)),
        )
        .await
        .unwrap();
    // It has no step yet, but its step will run on the queue once its window ends.
    let runs: i64 = sqlx::query_scalar(
        "select started_runs from pgflow.drain_status('debounced_v1', 'start_debounce')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(runs, 1);
    // A worker that lacks the step is told the run needs it.
    let needed: i64 = sqlx::query_scalar(
        "select started_runs from pgflow.queue_coverage_gaps('start_debounce', '{}', '{}')
         where flow_slug = 'debounced_v1' and step_slug = 'echo'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(needed, 1);
    // So does a run waiting its turn in a singleton key's line.
    client.deploy(&turns_v1::deployment()).await.unwrap();
    for n in [1, 2] {
        client
            .start(
                Start::flow::<turns_v1::Flow>(),
                &n,
                StartOptions::new().singleton_in_turn("one-by-one"),
            )
            .await
            .unwrap();
    }
    let (runs, needed): (i64, i64) = sqlx::query_as(
        "select (select started_runs from pgflow.drain_status('turns_v1', 'start_turns')),
                (select started_runs
                 from pgflow.queue_coverage_gaps('start_turns', '{}', '{}')
                 where flow_slug = 'turns_v1' and step_slug = 'slow')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (runs, needed),
        (2, 2),
        "the first has begun, the second waits in line"
    );
}

#[sqlx::test(migrations = false)]
async fn prune_drops_spent_start_guards_and_keeps_live_ones(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&guarded_v1::deployment()).await.unwrap();
    client.deploy(&debounced_v1::deployment()).await.unwrap();
    let start = |options: StartOptions| {
        let client = client.clone();
        async move {
            client
                .start(Start::flow::<guarded_v1::Flow>(), &1, options)
                .await
                .unwrap()
        }
    };
    // Spent: a throttle window that ends, and a singleton key whose run will have ended.
    start(StartOptions::new().throttle("spent", Duration::from_secs(1), Excess::Refuse)).await;
    let ended = start(StartOptions::new().singleton("done")).await;
    // Live: a singleton key whose run goes, one whose run ended with a run in its line, and a
    // debounce whose run has not begun.
    start(StartOptions::new().singleton("going")).await;
    let holder = start(StartOptions::new().singleton_in_turn("queue")).await;
    start(StartOptions::new().singleton_in_turn("queue")).await;
    client.cancel(holder.run_id(), None).await.unwrap();
    client
        .start(
            Start::flow::<debounced_v1::Flow>(),
            &1,
            StartOptions::new().debounce("pending", Duration::from_secs(60)),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1600)).await;
    client.cancel(ended.run_id(), None).await.unwrap();

    // The window ended before the cutoff; the run that ended a moment ago keeps its key.
    pgflow::engine::prune(&pool, Duration::from_millis(500), 1000)
        .await
        .unwrap();
    let keys = |pool: PgPool| async move {
        sqlx::query_scalar::<_, String>("select key from pgflow.start_guards order by key")
            .fetch_all(&pool)
            .await
            .unwrap()
    };
    assert_eq!(
        keys(pool.clone()).await,
        ["done", "going", "pending", "queue"],
        "only the ended window goes"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    pgflow::engine::prune(&pool, Duration::from_millis(500), 1000)
        .await
        .unwrap();
    assert_eq!(
        keys(pool.clone()).await,
        ["going", "pending", "queue"],
        "the ended singleton goes once its run is past the cutoff; a line keeps its key"
    );
    // A pruned key is new again.
    let again = start(StartOptions::new().singleton("done")).await;
    assert_eq!(again.start_outcome(), Some(StartOutcome::Started));
}
