//! Priorities: a run started with `StartOptions::priority` has its ready tasks claimed before
//! those of lower priority on each queue, including tasks that were waiting before it started;
//! runs of one priority keep their order. A task that waited, ready, longer than its queue's
//! aging limit is claimed ahead of every priority, oldest first, so no priority starves
//! another. Under a concurrency cap, a key's held tasks are released highest priority first.

use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use pgflow::definition::FlowDefinition;
use pgflow::engine::{self, StartRuns, TaskCompletion};
use pgflow::{Client, Priority, RunHandle, Start, StartOptions, Worker};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{claim, compiled, flow, install, pairs_for, single, worker_config};

/// A job: its label (which priority it was started at) and its place among its label's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub label: String,
    pub n: u32,
}

impl Job {
    fn many(label: &str, count: u32) -> Vec<Job> {
        (0..count)
            .map(|n| Job {
                label: label.to_owned(),
                n,
            })
            .collect()
    }
}

/// Records `job` (with `step`) in `log` as its handler starts, then works a little.
async fn record(log: &Mutex<Vec<String>>, step: &str, job: &Job) {
    log.lock()
        .unwrap()
        .push(format!("{} {} {step}", job.label, job.n));
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// The labels of `log`'s entries, in order.
fn labels(log: &Mutex<Vec<String>>) -> Vec<String> {
    log.lock()
        .unwrap()
        .iter()
        .map(|entry| entry.split(' ').next().unwrap().to_owned())
        .collect()
}

/// Starts `jobs` of flow `F` at `priority`, one call each, in order (the runs of one
/// `start_many` call have no order among themselves).
async fn start_at<F>(client: &Client, jobs: &[Job], priority: Priority) -> Vec<RunHandle<F::Output>>
where
    F: pgflow::FlowSpec<Input = Job>,
{
    let mut runs = Vec::new();
    for job in jobs {
        runs.push(
            client
                .start(
                    Start::flow::<F>(),
                    job,
                    StartOptions::new().priority(priority),
                )
                .await
                .unwrap(),
        );
    }
    runs
}

static ORDERED: LazyLock<Mutex<Vec<String>>> = LazyLock::new(|| Mutex::new(Vec::new()));

/// Two steps on one queue: the second is claimed at release, by the worker that completed the
/// first, only when nothing of a higher priority waits.
#[pgflow::flow(slug = "ordered_v1", alias = "ordered", input = Job)]
pub mod ordered_v1 {
    use super::*;

    #[step(queue = "prio_ordered")]
    pub async fn first(input: Job) -> Result<Job, String> {
        record(&ORDERED, "first", &input).await;
        Ok(input)
    }

    #[step(depends_on = [first], queue = "prio_ordered")]
    pub async fn second(first: Job) -> Result<u32, String> {
        record(&ORDERED, "second", &first).await;
        Ok(first.n)
    }
}

#[sqlx::test(migrations = false)]
async fn a_worker_claims_the_highest_priority_first_and_each_priority_in_order(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&ordered_v1::deployment()).await.unwrap();

    // Low runs wait first, then normal ones; the urgent ones come last.
    let mut runs = start_at::<ordered_v1::Flow>(&client, &Job::many("low", 6), Priority::Low).await;
    runs.extend(
        start_at::<ordered_v1::Flow>(&client, &Job::many("normal", 6), Priority::Normal).await,
    );
    runs.extend(
        start_at::<ordered_v1::Flow>(&client, &Job::many("highest", 4), Priority::Highest).await,
    );
    let lanes: Vec<(String, i16)> =
        sqlx::query_as("select queue_name, priority from pgflow.queue_lanes order by priority")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        lanes,
        vec![
            ("prio_ordered".to_owned(), 1),
            ("prio_ordered".to_owned(), 4)
        ],
        "a lane for each priority used, none for normal"
    );

    let worker = Worker::start_with(
        ordered_v1::deployment(),
        worker_config(ordered_v1::Queue::PrioOrdered, &pool).max_concurrent(1),
    )
    .await
    .unwrap();
    for run in &runs {
        run.wait(&client, Duration::from_secs(60)).await.unwrap();
    }
    worker.shutdown();

    // A second step is ready only once its first completed, and may then wait for the next
    // poll (the worker's one slot can go to a poll before the completion claims): so the
    // order is strict for the first steps, all ready from the start, and every task of a
    // highest-priority run still runs before any of a low one.
    let labels = labels(&ORDERED);
    let last_highest = labels.iter().rposition(|l| l == "highest").unwrap();
    let first_low = labels.iter().position(|l| l == "low").unwrap();
    assert!(
        last_highest < first_low,
        "by priority: {:?}",
        ORDERED.lock().unwrap()
    );
    // Within a priority, the runs keep the order they were started in.
    let firsts: Vec<String> = ORDERED
        .lock()
        .unwrap()
        .iter()
        .filter(|entry| entry.ends_with(" first"))
        .cloned()
        .collect();
    let in_order: Vec<String> = ["highest", "normal", "low"]
        .iter()
        .flat_map(|label| {
            let count = if *label == "highest" { 4 } else { 6 };
            (0..count).map(move |n| format!("{label} {n} first"))
        })
        .collect();
    assert_eq!(firsts, in_order);
    let priorities: Vec<Option<i16>> =
        sqlx::query_scalar("select priority from pgflow.runs order by priority nulls first")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(priorities.iter().filter(|p| p.is_none()).count(), 6);
    assert_eq!(
        runs[0].run(&client).await.unwrap().priority(),
        Priority::Low
    );
}

static SHARED: LazyLock<Mutex<Vec<String>>> = LazyLock::new(|| Mutex::new(Vec::new()));

#[pgflow::flow(slug = "shared_prio_v1", alias = "shared_prio", input = Job)]
pub mod shared_prio_v1 {
    use super::*;

    #[step(queue = "prio_shared")]
    pub async fn work(input: Job) -> Result<u32, String> {
        record(&SHARED, "work", &input).await;
        Ok(input.n)
    }
}

#[sqlx::test(migrations = false)]
async fn several_workers_claim_by_priority_with_at_most_their_slots_out_of_order(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&shared_prio_v1::deployment()).await.unwrap();
    let mut runs =
        start_at::<shared_prio_v1::Flow>(&client, &Job::many("lowest", 30), Priority::Lowest).await;
    runs.extend(
        start_at::<shared_prio_v1::Flow>(&client, &Job::many("normal", 30), Priority::Normal).await,
    );
    runs.extend(
        start_at::<shared_prio_v1::Flow>(&client, &Job::many("high", 15), Priority::High).await,
    );

    // Three workers of two slots, each with a pool of its own (as three processes would have).
    const SLOTS: usize = 6;
    let mut workers = Vec::new();
    for _ in 0..3 {
        let own = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .connect_with(pool.connect_options().as_ref().clone())
            .await
            .unwrap();
        workers.push(
            Worker::start_with(
                shared_prio_v1::deployment(),
                worker_config(shared_prio_v1::Queue::PrioShared, &own).max_concurrent(2),
            )
            .await
            .unwrap(),
        );
    }
    for run in &runs {
        run.wait(&client, Duration::from_secs(60)).await.unwrap();
    }
    for worker in workers {
        worker.shutdown();
    }

    let labels = labels(&SHARED);
    assert_eq!(labels.len(), 75);
    // A claim takes a lower lane only when every message of the higher ones is taken by
    // claims in flight: each priority starts at most a worker's slots out of place.
    let last_high = labels.iter().rposition(|l| l == "high").unwrap();
    let first_lowest = labels.iter().position(|l| l == "lowest").unwrap();
    assert!(
        last_high < 15 + SLOTS,
        "the last high task started at {last_high}: {labels:?}"
    );
    assert!(
        first_lowest >= 45 - SLOTS,
        "a lowest task started at {first_lowest}: {labels:?}"
    );
}

static AGED: LazyLock<Mutex<Vec<String>>> = LazyLock::new(|| Mutex::new(Vec::new()));

#[pgflow::flow(slug = "aged_v1", alias = "aged", input = Job)]
pub mod aged_v1 {
    use super::*;

    #[step(queue = "prio_aged")]
    pub async fn work(input: Job) -> Result<u32, String> {
        record(&AGED, "work", &input).await;
        Ok(input.n)
    }
}

#[sqlx::test(migrations = false)]
async fn tasks_waiting_past_the_aging_limit_get_a_quarter_of_the_claims(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&aged_v1::deployment()).await.unwrap();
    engine::set_priority_aging(&pool, "prio_aged", Some(1))
        .await
        .unwrap();
    let error = engine::set_priority_aging(&pool, "prio_aged", Some(0))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("at least 1 s"), "{error}");

    let mut runs =
        start_at::<aged_v1::Flow>(&client, &Job::many("lowest", 3), Priority::Lowest).await;
    // The lowest tasks have waited longer than the limit when the urgent ones arrive.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    runs.extend(
        start_at::<aged_v1::Flow>(&client, &Job::many("highest", 60), Priority::Highest).await,
    );

    // One slot: each claim takes one task, an aged one one time in four.
    let worker = Worker::start_with(
        aged_v1::deployment(),
        worker_config(aged_v1::Queue::PrioAged, &pool).max_concurrent(1),
    )
    .await
    .unwrap();
    for run in &runs {
        run.wait(&client, Duration::from_secs(60)).await.unwrap();
    }
    worker.shutdown();
    let labels = labels(&AGED);
    let last_lowest = labels.iter().rposition(|l| l == "lowest").unwrap();
    // Were they served only once the highest ones ran out, the last would start at 62. Three
    // aged tasks at one chance in four a claim all start within 50 claims but for a chance of
    // about 1 in 20,000.
    assert!(
        last_lowest < 50,
        "the aged tasks waited for the whole backlog: {labels:?}"
    );
}

static SHARE: LazyLock<Mutex<Vec<String>>> = LazyLock::new(|| Mutex::new(Vec::new()));

#[pgflow::flow(slug = "aged_share_v1", alias = "aged_share", input = Job)]
pub mod aged_share_v1 {
    use super::*;

    #[step(queue = "prio_aged_share")]
    pub async fn work(input: Job) -> Result<u32, String> {
        record(&SHARE, "work", &input).await;
        Ok(input.n)
    }
}

#[sqlx::test(migrations = false)]
async fn a_claim_of_four_takes_one_aged_task_and_three_by_priority(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&aged_share_v1::deployment()).await.unwrap();
    engine::set_priority_aging(&pool, "prio_aged_share", Some(1))
        .await
        .unwrap();
    let mut runs =
        start_at::<aged_share_v1::Flow>(&client, &Job::many("lowest", 4), Priority::Lowest).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    runs.extend(
        start_at::<aged_share_v1::Flow>(&client, &Job::many("high", 8), Priority::High).await,
    );
    // The same claim a worker with four free slots makes.
    let deployment = aged_share_v1::deployment();
    let q = crate::support::queue("prio_aged_share");
    let claimed = engine::read_and_start_tasks(
        &pool,
        &q,
        Uuid::new_v4(),
        &pairs_for(&[deployment.definition()], &q),
        4,
    )
    .await
    .unwrap();
    let mut labels = Vec::new();
    for task in &claimed.tasks {
        let input: Job = serde_json::from_value(task.input.clone()).unwrap();
        labels.push(input.label);
    }
    labels.sort();
    assert_eq!(
        labels,
        ["high", "high", "high", "lowest"],
        "one aged, three by priority"
    );
    assert_eq!(runs.len(), 12);
}

static CAPPED: LazyLock<Mutex<Vec<String>>> = LazyLock::new(|| Mutex::new(Vec::new()));

/// One task at a time: the held ones are released by priority.
#[pgflow::flow(slug = "capped_prio_v1", alias = "capped_prio", input = Job)]
pub mod capped_prio_v1 {
    use super::*;

    #[step(concurrency = 1, queue = "prio_capped")]
    pub async fn work(input: Job) -> Result<u32, String> {
        record(&CAPPED, "work", &input).await;
        Ok(input.n)
    }
}

#[sqlx::test(migrations = false)]
async fn a_cap_releases_its_held_tasks_by_priority(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&capped_prio_v1::deployment()).await.unwrap();
    // normal 0 takes the slot at once; the rest wait for it, the urgent ones last.
    let mut runs =
        start_at::<capped_prio_v1::Flow>(&client, &Job::many("normal", 4), Priority::Normal).await;
    runs.extend(
        start_at::<capped_prio_v1::Flow>(&client, &Job::many("high", 2), Priority::High).await,
    );
    let held: Vec<(i16, i64)> = sqlx::query_as(
        "select priority, count(*) from pgflow.held_tasks group by priority order by priority",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(held, vec![(2, 2), (3, 3)]);

    let worker = Worker::start_with(
        capped_prio_v1::deployment(),
        worker_config(capped_prio_v1::Queue::PrioCapped, &pool).max_concurrent(2),
    )
    .await
    .unwrap();
    for run in &runs {
        run.wait(&client, Duration::from_secs(60)).await.unwrap();
    }
    worker.shutdown();
    assert_eq!(
        CAPPED.lock().unwrap().clone(),
        [
            "normal 0 work",
            "high 0 work",
            "high 1 work",
            "normal 1 work",
            "normal 2 work",
            "normal 3 work",
        ]
    );
}

static HELD_AGED: LazyLock<Mutex<Vec<String>>> = LazyLock::new(|| Mutex::new(Vec::new()));

/// One task at a time, on a queue whose aging limit is a second.
#[pgflow::flow(slug = "capped_aging_v1", alias = "capped_aging", input = Job)]
pub mod capped_aging_v1 {
    use super::*;

    #[step(concurrency = 1, queue = "prio_capped_aging")]
    pub async fn work(input: Job) -> Result<u32, String> {
        record(&HELD_AGED, "work", &input).await;
        Ok(input.n)
    }
}

#[sqlx::test(migrations = false)]
async fn a_task_held_past_the_aging_limit_goes_before_higher_priorities(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&capped_aging_v1::deployment()).await.unwrap();
    engine::set_priority_aging(&pool, "prio_capped_aging", Some(1))
        .await
        .unwrap();
    // normal 0 takes the slot; lowest 0 and 1 are held, then wait past the aging limit.
    let mut runs =
        start_at::<capped_aging_v1::Flow>(&client, &Job::many("normal", 1), Priority::Normal).await;
    runs.extend(
        start_at::<capped_aging_v1::Flow>(&client, &Job::many("lowest", 2), Priority::Lowest).await,
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // High ones held after it, then the once-a-second sweep.
    runs.extend(
        start_at::<capped_aging_v1::Flow>(&client, &Job::many("high", 2), Priority::High).await,
    );
    engine::release_capped_tasks(&pool, 1000).await.unwrap();
    let held: Vec<(i16, i64)> = sqlx::query_as(
        "select priority, count(*) from pgflow.held_tasks group by priority order by priority",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        held,
        vec![(1, 1), (2, 2), (5, 1)],
        "the oldest aged task took the highest priority, one at a time"
    );

    let worker = Worker::start_with(
        capped_aging_v1::deployment(),
        worker_config(capped_aging_v1::Queue::PrioCappedAging, &pool).max_concurrent(2),
    )
    .await
    .unwrap();
    for run in &runs {
        run.wait(&client, Duration::from_secs(60)).await.unwrap();
    }
    worker.shutdown();
    let order = HELD_AGED.lock().unwrap().clone();
    assert_eq!(order[..2], ["normal 0 work", "lowest 0 work"], "{order:?}");
    assert_eq!(order.len(), 5, "every run ran: {order:?}");
}

#[sqlx::test(migrations = false)]
async fn a_priority_out_of_range_starts_nothing(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&aged_v1::deployment()).await.unwrap();
    let error = sqlx::query("select pgflow.start_flow('aged', 'null', p_priority => 0::smallint)")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("priority 0 is out of range"),
        "{error}"
    );
    let runs: i64 = sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(runs, 0);
    assert_eq!(Priority::parse("2"), Some(Priority::High));
    assert_eq!(Priority::parse("lowest"), Some(Priority::Lowest));
    assert_eq!(Priority::from_level(None), Some(Priority::Normal));
    assert_eq!(Priority::from_level(Some(9)), None);
}

/// A completion claims, at release, the tasks it releases for its worker's free slots; on a
/// queue with priority lanes, only those that rank with the best task waiting there.
#[sqlx::test(migrations = false)]
async fn a_completion_claims_no_lower_priority_task_while_a_higher_one_waits(pool: PgPool) {
    install(&pool).await;
    let relay = compiled(
        &pool,
        FlowDefinition::new(flow("relay"))
            .step(single("a", &[]))
            .step(single("b", &["a"])),
    )
    .await;
    let q = relay.slug.default_queue();
    let pairs = pairs_for(&[&relay], &q);
    let normal = engine::start_flow(&pool, "relay", &json!("normal"))
        .await
        .unwrap();
    let running = claim(&pool, &q, &pairs).await;
    assert_eq!(running.len(), 1);
    // While the normal run's `a` runs, an urgent run arrives.
    let urgent = engine::start_flows_with(
        &pool,
        "relay",
        &[json!("urgent")],
        &StartRuns::new().priority(Priority::High),
    )
    .await
    .unwrap();
    let completion = [TaskCompletion::of(&running[0], json!("done"))];
    let worker_id = Uuid::new_v4();
    let stored = engine::complete_and_claim_tasks(&pool, &completion, &q, &pairs, &[worker_id])
        .await
        .unwrap();
    assert!(
        stored.claimed.is_empty(),
        "the normal run's `b` is queued behind the urgent `a`, not claimed at release"
    );
    let next = claim(&pool, &q, &pairs).await;
    assert_eq!(
        next.iter()
            .map(|t| (t.run_id, t.step_slug.as_str()))
            .collect::<Vec<_>>(),
        [(urgent[0].run.run_id, "a"), (normal.run_id, "b")],
        "the urgent task first, then the normal one"
    );

    // With nothing ranked above it waiting, a completion claims what it releases.
    let urgent_a = next.iter().find(|t| t.step_slug.as_str() == "a").unwrap();
    let stored = engine::complete_and_claim_tasks(
        &pool,
        &[TaskCompletion::of(urgent_a, json!("done"))],
        &q,
        &pairs,
        &[worker_id],
    )
    .await
    .unwrap();
    assert_eq!(stored.claimed.len(), 1);
    assert_eq!(stored.claimed[0].task.run_id, urgent[0].run.run_id);
}
