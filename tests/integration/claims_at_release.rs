//! Claims at release: a completion call claims, for the room its worker has, the tasks its
//! completions release on the worker's queue; the rest are queued as usual.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pgflow::definition::{FlowDefinition, StepCondition, StepOptions};
use pgflow::engine::{self, RunStatus, SupportedPairs, TaskCompletion};
use pgflow::{Client, ProcessConfig, Worker};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{
    claim, compiled, eventually, flow, install, map, messages, pairs_for, queue, run, single, step,
    worker_config,
};

/// `a` releases four dependents: `b` on `a`'s queue, `c` on another queue, `d` on `a`'s queue
/// but 60 s later, and `e` on `a`'s queue.
async fn fork(pool: &PgPool) -> FlowDefinition {
    let later = StepOptions {
        start_delay: Some(Duration::from_secs(60)),
        ..StepOptions::default()
    };
    compiled(
        pool,
        FlowDefinition::new(flow("fork"))
            .step(single("a", &[]))
            .step(single("b", &["a"]))
            .step(single("c", &["a"]).queue(queue("fork_elsewhere")))
            .step(single("d", &["a"]).options(later))
            .step(single("e", &["a"])),
    )
    .await
}

/// `a` then `b`, on one queue.
async fn relay(pool: &PgPool) -> FlowDefinition {
    compiled(
        pool,
        FlowDefinition::new(flow("relay"))
            .step(single("a", &[]))
            .step(single("b", &["a"])),
    )
    .await
}

/// Each task of `run_id`: (step, status, has a message, attempts, last run by `worker_id`).
async fn tasks_of(pool: &PgPool, run_id: Uuid, worker_id: Uuid) -> Vec<Task> {
    sqlx::query_as(
        "select step_slug, status, message_id is not null, attempts_count,
                last_worker_id is not distinct from $2
         from pgflow.step_tasks where run_id = $1 order by step_slug",
    )
    .bind(run_id)
    .bind(worker_id)
    .fetch_all(pool)
    .await
    .unwrap()
}

type Task = (String, String, bool, i32, bool);

fn task(step: &str, status: &str, message: bool, attempts: i32, by_worker: bool) -> Task {
    (step.into(), status.into(), message, attempts, by_worker)
}

#[sqlx::test(migrations = false)]
async fn a_completion_claims_what_it_releases_for_the_room_it_has_and_queues_the_rest(
    pool: PgPool,
) {
    install(&pool).await;
    let fork = fork(&pool).await;
    let q = fork.slug.default_queue();
    let mut runs = Vec::new();
    for input in ["first", "second"] {
        runs.push(
            engine::start_flow(&pool, "fork", &json!(input))
                .await
                .unwrap()
                .run_id,
        );
    }
    runs.sort();
    let roots = claim(&pool, &q, &pairs_for(&[&fork], &q)).await;
    assert_eq!(roots.len(), 2);

    // The claimer runs every step of its queue but `e`, and has room for one task.
    let mut supported = SupportedPairs::new();
    for slug in ["a", "b", "d"] {
        supported.insert(&fork.slug, &step(slug));
    }
    let worker_id = Uuid::new_v4();
    let completions: Vec<_> = roots
        .iter()
        .map(|t| TaskCompletion::of(t, json!({ "from": t.run_id })))
        .collect();
    let stored =
        engine::complete_and_claim_tasks(&pool, &completions, &q, &supported, &[worker_id])
            .await
            .unwrap();

    assert_eq!(stored.completed, 2);
    assert_eq!(stored.claimed.len(), 1, "room for one task: one claimed");
    assert_eq!(stored.claimed[0].worker_id, worker_id);
    let claimed = &stored.claimed[0].task;
    assert_eq!(
        (claimed.run_id, claimed.step_slug.as_str(), claimed.attempt),
        (runs[0], "b", 1),
        "the first released task in run order, in its first attempt"
    );
    assert_eq!(
        claimed.message_id, None,
        "claimed at release: it never had a message"
    );
    assert_eq!(claimed.queue_name, q);
    assert_eq!(claimed.input, json!({ "a": { "from": runs[0] } }));

    assert_eq!(
        tasks_of(&pool, runs[0], worker_id).await,
        vec![
            task("a", "completed", true, 1, false),
            task("b", "started", false, 1, true),
            task("c", "queued", true, 0, false),
            task("d", "queued", true, 0, false),
            task("e", "queued", true, 0, false),
        ],
        "another queue (c), a start delay (d) and a pair the claimer does not run (e) are queued"
    );
    assert_eq!(
        tasks_of(&pool, runs[1], worker_id).await,
        vec![
            task("a", "completed", true, 1, false),
            task("b", "queued", true, 0, false),
            task("c", "queued", true, 0, false),
            task("d", "queued", true, 0, false),
            task("e", "queued", true, 0, false),
        ],
        "no room left: the second run's b is queued"
    );
    // What was queued is claimed as usual: b of the second run and both e (d is not visible
    // yet, c is on its own queue).
    let mut next: Vec<_> = claim(&pool, &q, &pairs_for(&[&fork], &q))
        .await
        .into_iter()
        .map(|t| (t.run_id, t.step_slug.to_string()))
        .collect();
    next.sort();
    assert_eq!(
        next,
        vec![
            (runs[0], "e".to_owned()),
            (runs[1], "b".to_owned()),
            (runs[1], "e".to_owned()),
        ]
    );
    let elsewhere = queue("fork_elsewhere");
    assert_eq!(
        claim(&pool, &elsewhere, &pairs_for(&[&fork], &elsewhere))
            .await
            .len(),
        2
    );

    // The claimed task completes like any other.
    let done = engine::complete_and_claim_tasks(
        &pool,
        &[TaskCompletion::of(claimed, json!("b done"))],
        &q,
        &supported,
        &[worker_id; 10],
    )
    .await
    .unwrap();
    assert_eq!(done.completed, 1);
    assert!(done.claimed.is_empty(), "b releases nothing");
}

#[sqlx::test(migrations = false)]
async fn without_room_a_completion_claims_nothing(pool: PgPool) {
    install(&pool).await;
    let fork = fork(&pool).await;
    let q = fork.slug.default_queue();
    let run_id = engine::start_flow(&pool, "fork", &json!(null))
        .await
        .unwrap()
        .run_id;
    let roots = claim(&pool, &q, &pairs_for(&[&fork], &q)).await;

    let stored = engine::complete_and_claim_tasks(
        &pool,
        &[TaskCompletion::of(&roots[0], json!(1))],
        &q,
        &pairs_for(&[&fork], &q),
        &[],
    )
    .await
    .unwrap();

    assert_eq!(stored.completed, 1);
    assert!(stored.claimed.is_empty());
    assert!(
        tasks_of(&pool, run_id, Uuid::nil())
            .await
            .iter()
            .filter(|t| t.0 != "a")
            .all(|t| t.1 == "queued" && t.2),
        "every released task is queued with a message"
    );
}

#[sqlx::test(migrations = false)]
async fn a_task_claimed_at_release_whose_worker_died_is_requeued_with_a_message(pool: PgPool) {
    install(&pool).await;
    let relay = relay(&pool).await;
    let q = relay.slug.default_queue();
    let pairs = pairs_for(&[&relay], &q);
    let run_id = engine::start_flow(&pool, "relay", &json!(null))
        .await
        .unwrap()
        .run_id;
    let roots = claim(&pool, &q, &pairs).await;
    let stored = engine::complete_and_claim_tasks(
        &pool,
        &[TaskCompletion::of(&roots[0], json!("a"))],
        &q,
        &pairs,
        &[Uuid::new_v4(); 5],
    )
    .await
    .unwrap();
    assert_eq!(stored.claimed.len(), 1);
    assert!(
        messages(&pool, "relay").await.is_empty(),
        "b has no message"
    );

    // Its worker died an hour ago.
    sqlx::query(
        "update pgflow.step_tasks set started_at = now() - interval '1 hour'
         where status = 'started'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let stalled = engine::requeue_stalled_tasks(&pool, 30, 3).await.unwrap();
    assert_eq!(stalled.len(), 1);
    assert!(stalled[0].requeued);
    assert!(
        stalled[0].message_id.is_some(),
        "requeued with a new message"
    );

    let again = claim(&pool, &q, &pairs).await;
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].step_slug.as_str(), again[0].attempt),
        ("b", 2),
        "the next claim runs b's second attempt"
    );
    engine::complete_tasks(&pool, &[TaskCompletion::of(&again[0], json!("b"))])
        .await
        .unwrap();
    assert_eq!(run(&pool, run_id).await.status, RunStatus::Completed);
}

#[pgflow::flow(slug = "relay_race")]
pub mod relay_race {
    use std::time::Duration;

    /// Outlasts the poll loop's gathering, so that its worker is asleep when it completes.
    #[step]
    pub async fn first(input: serde_json::Value) -> Result<serde_json::Value, String> {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(input)
    }

    #[step(depends_on = [first])]
    pub async fn second(first: serde_json::Value) -> Result<serde_json::Value, String> {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(first)
    }

    #[step(depends_on = [second])]
    pub async fn third(second: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(second)
    }
}

#[sqlx::test(migrations = false)]
async fn a_chain_goes_on_on_the_worker_that_completed_each_step_without_polling(pool: PgPool) {
    install(&pool).await;
    engine::compile_flow(&pool, relay_race::deployment().definition())
        .await
        .unwrap();
    let client = Client::new(pool.clone());
    let run_handle = relay_race::start(&client, &json!("baton")).await.unwrap();

    // No notifications and an hour between polls: after its first claim the worker reads the
    // queue again only GATHER_FOR later, long before `first` completes, and then sleeps.
    let polling = Client::with_config(pool.clone(), ProcessConfig::new().without_notifications());
    let worker = Worker::start_with(
        relay_race::deployment(),
        worker_config(relay_race::Queue::RelayRace, &pool)
            .connection(&polling)
            .poll_interval(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let run_id = run_handle.run_id();
    assert!(
        eventually(10, async || run(&pool, run_id).await.status
            == RunStatus::Completed)
        .await,
        "each completion claimed the next step"
    );
    let worker_id: Uuid = sqlx::query_scalar("select worker_id from pgflow.workers")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        tasks_of(&pool, run_id, worker_id).await,
        vec![
            task("first", "completed", true, 1, true),
            task("second", "completed", false, 1, true),
            task("third", "completed", false, 1, true),
        ]
    );

    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn one_call_claims_for_several_workers_each_task_for_the_worker_of_its_slot(pool: PgPool) {
    install(&pool).await;
    let relay = relay(&pool).await;
    let q = relay.slug.default_queue();
    let pairs = pairs_for(&[&relay], &q);
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(
            engine::start_flow(&pool, "relay", &json!(null))
                .await
                .unwrap()
                .run_id,
        );
    }
    runs.sort();
    let roots = claim(&pool, &q, &pairs).await;
    let completions: Vec<_> = roots
        .iter()
        .map(|t| TaskCompletion::of(t, json!("a")))
        .collect();
    let (first, second) = (Uuid::new_v4(), Uuid::new_v4());

    // Two workers share the call: one slot each.
    let stored =
        engine::complete_and_claim_tasks(&pool, &completions, &q, &pairs, &[first, second])
            .await
            .unwrap();

    assert_eq!(stored.completed, 3);
    let mut claimed: Vec<_> = stored
        .claimed
        .iter()
        .map(|c| (c.task.run_id, c.worker_id))
        .collect();
    claimed.sort();
    assert_eq!(
        claimed,
        vec![(runs[0], first), (runs[1], second)],
        "in run order, the n-th released task for the n-th slot's worker"
    );
    for (run_id, worker_id) in [(runs[0], first), (runs[1], second)] {
        assert_eq!(
            tasks_of(&pool, run_id, worker_id).await[1],
            task("b", "started", false, 1, true),
            "recorded as run by the worker whose slot it took"
        );
    }
    assert_eq!(
        tasks_of(&pool, runs[2], Uuid::nil()).await[1],
        task("b", "queued", true, 0, false),
        "no slot left for the third: queued"
    );
}

/// What one worker's handlers saw: the tasks they ran, and how many ran at once. `gate`, shared
/// by every worker, holds the `first` handlers until the test opens it.
#[derive(Clone)]
pub struct Seen {
    pub ran: Arc<Mutex<Vec<(Uuid, String)>>>,
    pub running: Arc<AtomicUsize>,
    pub most_running: Arc<AtomicUsize>,
    pub gate: Arc<tokio::sync::Semaphore>,
}

impl Seen {
    fn new(gate: &Arc<tokio::sync::Semaphore>) -> Self {
        Self {
            ran: Arc::default(),
            running: Arc::default(),
            most_running: Arc::default(),
            gate: Arc::clone(gate),
        }
    }

    async fn run(&self, ctx: &pgflow::Context, gated: bool) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_running.fetch_max(now, Ordering::SeqCst);
        self.ran
            .lock()
            .unwrap()
            .push((ctx.run_id(), ctx.step_slug().to_string()));
        if gated {
            drop(self.gate.acquire().await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
}

#[pgflow::flow(slug = "shared_relay", state = Seen)]
pub mod shared_relay {
    use pgflow::{Context, State};

    use super::Seen;

    #[step]
    pub async fn first(ctx: Context, seen: State<Seen>) -> Result<i32, String> {
        seen.run(&ctx, true).await;
        Ok(1)
    }

    #[step(depends_on = [first])]
    pub async fn second(first: i32, ctx: Context, seen: State<Seen>) -> Result<i32, String> {
        seen.run(&ctx, false).await;
        Ok(first + 1)
    }

    #[step(depends_on = [second])]
    pub async fn third(second: i32, ctx: Context, seen: State<Seen>) -> Result<i32, String> {
        seen.run(&ctx, false).await;
        Ok(second + 1)
    }
}

#[sqlx::test(migrations = false)]
async fn workers_of_a_process_share_completion_calls_and_run_what_each_call_claimed_for_them(
    pool: PgPool,
) {
    install(&pool).await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let mut workers = Vec::new();
    let mut seen = Vec::new();
    // One client: its workers share their completion calls.
    let process = Client::new(pool.clone());
    for _ in 0..3 {
        let state = Seen::new(&gate);
        seen.push(state.clone());
        workers.push(
            Worker::start_with(
                shared_relay::deployment(state),
                worker_config(shared_relay::Queue::SharedRelay, &pool)
                    .connection(&process)
                    .batch_size(1)
                    .max_concurrent(1),
            )
            .await
            .unwrap(),
        );
    }
    let client = Client::new(pool.clone());
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(shared_relay::start(&client, &json!(null)).await.unwrap());
    }
    // Each worker holds one `first` at the gate (one slot each). The runs' rows are locked
    // until every `first` handler has finished: the first storer's call waits for the lock,
    // and the other two storers wait for their turn behind it.
    let ran = || {
        seen.iter()
            .map(|s| s.ran.lock().unwrap().len())
            .sum::<usize>()
    };
    assert!(
        eventually(10, async || ran() == 3).await,
        "each worker started one `first`"
    );
    let mut lock = pool.begin().await.unwrap();
    sqlx::query("select 1 from pgflow.runs for update")
        .execute(&mut *lock)
        .await
        .unwrap();
    gate.add_permits(1);
    let idle = || seen.iter().all(|s| s.running.load(Ordering::SeqCst) == 0);
    assert!(
        eventually(10, async || ran() == 3 && idle()).await,
        "each worker ran one `first`"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    lock.commit().await.unwrap();
    for handle in &runs {
        let output = handle.wait(&client, Duration::from_secs(30)).await.unwrap();
        assert_eq!(output.third, 3);
    }

    // Each task ran on the worker recorded for it, which never ran more than its one slot.
    let mut ran_on = HashMap::new();
    for (worker, seen) in workers.iter().zip(&seen) {
        assert_eq!(
            seen.most_running.load(Ordering::SeqCst),
            1,
            "a worker runs no more tasks at once than it has slots"
        );
        for task in seen.ran.lock().unwrap().iter() {
            ran_on.insert(task.clone(), worker.worker_id());
        }
    }
    let recorded: Vec<(Uuid, String, Uuid)> =
        sqlx::query_as("select run_id, step_slug, last_worker_id from pgflow.step_tasks")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(recorded.len(), 9);
    for (run_id, step, worker_id) in &recorded {
        assert_eq!(
            ran_on.get(&(*run_id, step.clone())),
            Some(worker_id),
            "{step} of run {run_id} ran on the worker recorded for it"
        );
    }
    // The two storers that waited were stored by one call: one transaction, one timestamp.
    let shared: i64 = sqlx::query_scalar(
        "select count(*) from (
           select completed_at from pgflow.step_tasks where step_slug = 'first'
           group by completed_at having count(distinct last_worker_id) = 2) shared",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(shared, 1, "the completions of two workers went in one call");

    for worker in workers {
        worker.shutdown();
        worker.wait().await.unwrap();
    }
}

#[sqlx::test(migrations = false)]
async fn supported_pairs_of_unequal_lengths_are_refused_by_name(pool: PgPool) {
    install(&pool).await;
    for (call, caller) in [
        (
            "select * from pgflow.complete_and_claim_tasks(array[]::uuid[], array[]::text[], \
             array[]::integer[], array[]::integer[], array[]::jsonb[], 'q', array['f'], \
             array[]::text[], array[]::uuid[])",
            "complete_and_claim_tasks",
        ),
        (
            "select * from pgflow.claim_tasks('q', array[]::bigint[], gen_random_uuid(), \
             array['f', 'g'], array['s'])",
            "claim",
        ),
    ] {
        let error = sqlx::query(call).execute(&pool).await.unwrap_err();
        let error = error.as_database_error().unwrap();
        assert_eq!(error.code().as_deref(), Some("PF005"));
        assert!(
            error.message().starts_with(&format!("{caller}: ")),
            "{}",
            error.message()
        );
        assert!(
            error.message().contains("supported pairs"),
            "{}",
            error.message()
        );
    }
}

/// What SQL says a completion of each of a worker's pairs may claim for it, by the rule the
/// claim follows: dependents on the worker's queue that it runs, without a start delay or a
/// condition; any number when one is a map; nothing for a map step's own tasks.
#[sqlx::test(migrations = false)]
async fn sql_says_how_many_tasks_each_completion_may_claim_for_a_worker(pool: PgPool) {
    install(&pool).await;
    // `a`'s dependents on the queue: b and e (c is elsewhere, d is delayed).
    let fork = fork(&pool).await;
    let fanned = compiled(
        &pool,
        FlowDefinition::new(flow("fanned"))
            .step(single("list", &[]))
            .step(map("each", &["list"]))
            .step(single("sum", &["each"]))
            .step(single("gated", &["sum"]).condition(StepCondition {
                when: Some(json!({"sum": 1})),
                ..StepCondition::default()
            }))
            .step(single("after", &["sum"])),
    )
    .await;
    let q = fork.slug.default_queue();
    let mut pairs = pairs_for(&[&fork], &q);
    let fanned_queue = fanned.slug.default_queue();
    let fanned_pairs = pairs_for(&[&fanned], &fanned_queue);

    let releases = |released: Vec<engine::ReleasedClaims>| -> Vec<(String, String, Option<u32>)> {
        let mut rows: Vec<_> = released
            .into_iter()
            .map(|r| (r.flow_slug.to_string(), r.step_slug.to_string(), r.at_most))
            .collect();
        rows.sort();
        rows
    };
    assert_eq!(
        releases(engine::claims_at_release(&pool, &q, &pairs).await.unwrap()),
        vec![("fork".into(), "a".into(), Some(2))],
        "b and e; not c (another queue) nor d (delayed); the leaves release nothing"
    );
    assert_eq!(
        releases(
            engine::claims_at_release(&pool, &fanned_queue, &fanned_pairs)
                .await
                .unwrap()
        ),
        vec![
            ("fanned".into(), "list".into(), None),
            ("fanned".into(), "sum".into(), Some(1)),
        ],
        "a map dependent: any number; a map step's tasks: none; a conditional dependent is \
         left to the slower path"
    );

    // A dependent the worker does not run is not claimed for it.
    pairs = SupportedPairs::new();
    pairs.insert(&fork.slug, &step("a"));
    assert!(
        engine::claims_at_release(&pool, &q, &pairs)
            .await
            .unwrap()
            .is_empty()
    );
}
