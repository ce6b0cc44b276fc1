//! The run history (issue 39, point 4): a run that ended a while ago moves, with its step
//! states, tasks and attempts, from the live tables into history tables partitioned by the day
//! it ended. Every reader finds it as it was; retrying or resuming it brings it back first; its
//! idempotency key still returns it, even to starts racing the move; a late result changes
//! nothing; and prune drops whole days, with their keys. On the test clock, so that hours and
//! days pass at once.

use std::time::Duration;

use chrono::{DateTime, Utc};
use pgflow::testing::TestEnv;
use pgflow::{ProcessConfig, RunStatus, Start, StartOptions, StartOutcome, engine};
use pgflow_runtime::admin::{browse, inspect};
use uuid::Uuid;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// What `kept_v1` produces.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reported {
    pub report: String,
}

#[pgflow::flow(slug = "kept_v1", alias = "kept", version = 1, input = u32,
               output = super::Reported)]
pub mod kept_v1 {
    use pgflow::Context;

    /// Fails its first attempt; fails every attempt for inputs over 100.
    #[step(max_attempts = 2)]
    pub async fn double(input: u32, ctx: Context) -> Result<u32, String> {
        if ctx.attempt() == 1 || input > 100 {
            return Err(format!("attempt {} at {input}", ctx.attempt()));
        }
        Ok(input * 2)
    }

    #[step(depends_on = [double])]
    pub async fn report(double: u32) -> Result<String, String> {
        Ok(format!("doubled to {double}"))
    }
}

/// A test environment whose workers do no maintenance of their own: the test archives.
async fn env() -> TestEnv {
    let config = ProcessConfig::default().stalled_check_interval(Duration::from_secs(3600));
    let env = TestEnv::with_config(config).await.unwrap();
    env.start_workers(kept_v1::deployment()).await.unwrap();
    env
}

/// Rows of a run in (runs, step_states, step_tasks, task_attempts) of the live tables, or of
/// the history tables with `_history`.
async fn rows(db: &pgflow::Db, suffix: &str, run_id: Uuid) -> [i64; 4] {
    let mut counts = [0; 4];
    for (count, table) in
        counts
            .iter_mut()
            .zip(["runs", "step_states", "step_tasks", "task_attempts"])
    {
        *count = sqlx::query_scalar(&format!(
            "select count(*) from pgflow.{table}{suffix} where run_id = $1"
        ))
        .bind(run_id)
        .fetch_one(db)
        .await
        .unwrap();
    }
    counts
}

/// Moves every run that ended over an hour ago into the history; returns how many moved.
async fn archive(db: &pgflow::Db) -> i64 {
    engine::archive_all(db, HOUR, 1000, Duration::from_secs(60))
        .await
        .unwrap()
}

/// The days the history has partitions for, as `YYYYMMDD`, in order.
async fn partition_days(db: &pgflow::Db) -> Vec<String> {
    sqlx::query_scalar(
        "select to_char(d.day, 'YYYYMMDD') from pgflow.history_partition_days() d order by 1",
    )
    .fetch_all(db)
    .await
    .unwrap()
}

fn day_of(at: DateTime<Utc>) -> String {
    at.format("%Y%m%d").to_string()
}

/// What every reader of a run shows of it: the run, its steps, failed attempts, troubled
/// tasks, payloads, task counts and input.
async fn readings<O: serde::de::DeserializeOwned>(
    client: &pgflow::Client,
    run: &pgflow::RunHandle<O>,
) -> (
    engine::Run,
    Vec<engine::StepState>,
    Vec<inspect::FailedAttempt>,
    Vec<inspect::TaskAttempts>,
    browse::RunPayloads,
    Vec<browse::StepTaskCounts>,
    serde_json::Value,
) {
    let (db, id) = (client.db(), run.run_id());
    (
        engine::run(db, id).await.unwrap(),
        run.steps(client).await.unwrap(),
        inspect::failed_attempts(db, id, 10).await.unwrap(),
        inspect::troubled_tasks(db, id, 10).await.unwrap(),
        browse::run_payloads(db, id, 100).await.unwrap(),
        browse::step_task_counts(db, id).await.unwrap(),
        engine::run_input(db, id).await.unwrap(),
    )
}

#[tokio::test]
async fn an_archived_run_reads_as_it_did_live() {
    let env = env().await;
    let client = env.client();
    let db = client.db();
    let run = kept_v1::start(client, &3).await.unwrap();
    let finished = env.run_to_end(&run).await.unwrap();
    assert_eq!(finished.status(), RunStatus::Completed);
    let id = run.run_id();

    let before = readings(client, &run).await;
    assert_eq!(
        before.2.len(),
        1,
        "the first attempt failed: {:?}",
        before.2
    );
    assert_eq!(rows(db, "", id).await, [1, 2, 2, 1]);

    // Not before an hour has passed since it ended.
    assert_eq!(archive(db).await, 0);
    env.advance(2 * HOUR).await.unwrap();
    assert_eq!(archive(db).await, 1);
    assert_eq!(rows(db, "", id).await, [0, 0, 0, 0], "nothing is left live");
    assert_eq!(rows(db, "_history", id).await, [1, 2, 2, 1]);
    let ended = before.0.completed_at.unwrap();
    assert_eq!(partition_days(db).await, [day_of(ended)]);

    assert_eq!(readings(client, &run).await, before);
    assert_eq!(
        run.wait(client, Duration::from_secs(5))
            .await
            .unwrap()
            .report,
        "doubled to 6",
        "the client reads the output of an archived run"
    );
    let listed = browse::list_runs(db, &browse::RunListing::default())
        .await
        .unwrap();
    assert_eq!(
        listed.runs.iter().map(|r| r.run_id).collect::<Vec<_>>(),
        [id]
    );
}

#[tokio::test]
async fn a_key_returns_its_archived_run_and_frees_when_its_day_is_pruned() {
    let env = env().await;
    let client = env.client();
    let db = client.db();
    let key = |k: &str| StartOptions::new().idempotency_key(k);
    let first = client
        .start(Start::flow::<kept_v1::Flow>(), &5, &key("k"))
        .await
        .unwrap();
    env.run_to_end(&first).await.unwrap();
    env.advance(2 * HOUR).await.unwrap();
    assert_eq!(archive(db).await, 1);

    // The same key and input: the archived run, through the alias too.
    let again = client
        .start(Start::flow::<kept_v1::Flow>(), &5, &key("k"))
        .await
        .unwrap();
    let by_alias = client
        .start(Start::named("kept"), &5, &key("k"))
        .await
        .unwrap();
    for handle in [again.run_id(), by_alias.run_id()] {
        assert_eq!(handle, first.run_id());
    }
    for outcome in [again.start_outcome(), by_alias.start_outcome()] {
        assert_eq!(outcome, Some(StartOutcome::AlreadyExisted));
    }
    let many = client
        .start_many(
            Start::flow::<kept_v1::Flow>(),
            &[5, 6],
            &[key("k"), key("new")],
        )
        .await
        .unwrap();
    assert_eq!(many[0].run_id(), first.run_id());
    assert_eq!(many[1].start_outcome(), Some(StartOutcome::Started));
    env.run_to_end(&many[1]).await.unwrap();
    // Another input under the key is refused, naming the archived run.
    let refused = client
        .start(Start::flow::<kept_v1::Flow>(), &7, &key("k"))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains(&first.run_id().to_string()),
        "{refused}"
    );
    assert_eq!(
        rows(db, "", first.run_id()).await[0],
        0,
        "it stayed archived"
    );

    // Two days on, a prune keeping a day drops the day it ended, and the key with it (and
    // deletes the live run of the new key, which ended two days ago too).
    env.advance(2 * DAY).await.unwrap();
    let pruned = engine::prune_all(db, DAY, 100).await.unwrap();
    assert_eq!(
        (pruned.runs, pruned.step_states, pruned.tasks),
        (2, 4, 4),
        "{pruned:?}"
    );
    assert!(partition_days(db).await.is_empty());
    let fresh = client
        .start(Start::flow::<kept_v1::Flow>(), &7, &key("k"))
        .await
        .unwrap();
    assert_eq!(fresh.start_outcome(), Some(StartOutcome::Started));
    assert_ne!(fresh.run_id(), first.run_id());
}

#[tokio::test]
async fn prune_drops_whole_days_that_ended_before_the_cutoff() {
    let env = env().await;
    let client = env.client();
    let db = client.db();
    // At one in the morning (UTC), two runs end on each of three days; each day's runs are
    // archived the next day.
    let now = env.now().await.unwrap();
    let midnight = now
        .date_naive()
        .succ_opt()
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap();
    let to_one_am = (midnight.and_utc() - now).to_std().unwrap() + HOUR;
    env.advance(to_one_am).await.unwrap();
    let mut days = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..3 {
        for input in [1, 2] {
            let run = kept_v1::start(client, &input).await.unwrap();
            env.run_to_end(&run).await.unwrap();
            runs.push(run.run_id());
        }
        days.push(day_of(env.now().await.unwrap()));
        env.advance(DAY).await.unwrap();
        assert_eq!(archive(db).await, 2);
    }
    days.dedup();
    assert_eq!(partition_days(db).await, days);

    // Three days on from the first, keeping a day (the cutoff: one in the morning, the day
    // before): the two days wholly before it go; the last day's runs ended before the cutoff
    // too, but their day is not over by then, so they stay (history goes a day at a time).
    let preview = engine::prune_preview(db, DAY).await.unwrap();
    let pruned = engine::prune_all(db, DAY, 100).await.unwrap();
    assert_eq!((pruned.runs, pruned.step_states, pruned.tasks), (4, 8, 8));
    assert_eq!(
        (preview.runs, preview.step_states, preview.tasks),
        (pruned.runs, pruned.step_states, pruned.tasks)
    );
    assert_eq!(partition_days(db).await, days[2..]);
    let left_detached: i64 = sqlx::query_scalar(
        "select count(*) from pg_class where relname like '%\\_history\\_p%\\_pruned'",
    )
    .fetch_one(db)
    .await
    .unwrap();
    assert_eq!(
        left_detached, 0,
        "prune_all drops the days a prune detached"
    );
    for (n, run_id) in runs.iter().enumerate() {
        let kept = rows(db, "_history", *run_id).await[0];
        assert_eq!(kept, i64::from(n >= 4), "run {n}");
    }
    // The history's day counts went with the days.
    let counted: Vec<(String, i64)> = sqlx::query_as(
        "select to_char(day, 'YYYYMMDD'), runs from pgflow.history_days order by day",
    )
    .fetch_all(db)
    .await
    .unwrap();
    assert_eq!(counted, [(days[2].clone(), 2)]);
}

#[tokio::test]
async fn retry_and_resume_bring_an_archived_run_back() {
    let env = env().await;
    let client = env.client();
    let db = client.db();
    // Fails for good: its input is over 100.
    let failed = kept_v1::start(client, &101).await.unwrap();
    assert_eq!(
        env.run_to_end(&failed).await.unwrap().status(),
        RunStatus::Failed
    );
    let completed = kept_v1::start(client, &4).await.unwrap();
    env.run_to_end(&completed).await.unwrap();
    env.advance(2 * HOUR).await.unwrap();
    assert_eq!(archive(db).await, 2);

    // A retry finds it, brings it back and runs its failed step again (and fails again: the
    // input is the same), attempts numbered on from the old ones.
    let retried = engine::retry_runs(db, &[failed.run_id()]).await.unwrap();
    assert_eq!(retried.len(), 1);
    assert!(retried[0].retried, "{retried:?}");
    assert_eq!(rows(db, "_history", failed.run_id()).await, [0, 0, 0, 0]);
    assert_eq!(
        env.run_to_end(&failed).await.unwrap().status(),
        RunStatus::Failed
    );
    let attempts = inspect::failed_attempts(db, failed.run_id(), 10)
        .await
        .unwrap();
    assert_eq!(
        attempts.iter().map(|a| a.attempt).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );

    // A resume of the archived completed run: a new run, the old one back as it was.
    let resumed = completed.resume_from(client, "report").await.unwrap();
    assert_ne!(resumed.run_id(), completed.run_id());
    let resumed_end = env.run_to_end(&resumed).await.unwrap();
    assert_eq!(resumed_end.status(), RunStatus::Completed);
    assert_eq!(resumed_end.run().resumed_from, Some(completed.run_id()));
    assert_eq!(resumed_end.output().unwrap().report, "doubled to 8");
    assert_eq!(rows(db, "", completed.run_id()).await, [1, 2, 2, 1]);

    // Both are archived again once they are old enough.
    env.advance(2 * HOUR).await.unwrap();
    assert_eq!(archive(db).await, 3);
}

#[tokio::test]
async fn a_late_result_for_an_archived_task_changes_nothing() {
    let env = env().await;
    let client = env.client();
    let db = client.db();
    let run = kept_v1::start(client, &2).await.unwrap();
    env.run_to_end(&run).await.unwrap();
    env.advance(2 * HOUR).await.unwrap();
    assert_eq!(archive(db).await, 1);
    let before = rows(db, "_history", run.run_id()).await;

    // The first attempt's result, arriving now, and a failure of the second.
    sqlx::query(
        "select pgflow.complete_tasks(array[$1]::uuid[], array['double'], array[0], array[1],
                                      array['1'::jsonb])",
    )
    .bind(run.run_id())
    .execute(db)
    .await
    .unwrap();
    sqlx::query(
        "select pgflow.fail_tasks(array[$1]::uuid[], array['report'], array[0], array[1],
                                  array['late'])",
    )
    .bind(run.run_id())
    .execute(db)
    .await
    .unwrap();
    assert_eq!(rows(db, "", run.run_id()).await, [0, 0, 0, 0]);
    assert_eq!(rows(db, "_history", run.run_id()).await, before);
    assert_eq!(
        run.wait(client, Duration::from_secs(5))
            .await
            .unwrap()
            .report,
        "doubled to 4"
    );
}

#[tokio::test]
async fn a_process_archives_at_its_maintenance_pass() {
    let config = ProcessConfig::default()
        .stalled_check_interval(Duration::from_millis(100))
        .archive_after(Duration::from_secs(60));
    let env = TestEnv::with_config(config).await.unwrap();
    env.start_workers(kept_v1::deployment()).await.unwrap();
    let client = env.client();
    let run = kept_v1::start(client, &1).await.unwrap();
    env.run_to_end(&run).await.unwrap();
    // Under the floor of 15 minutes, nothing moves.
    env.advance(Duration::from_secs(600)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rows(client.db(), "", run.run_id()).await[0], 1);
    env.advance(Duration::from_secs(600)).await.unwrap();
    let mut moved = false;
    for _ in 0..50 {
        if rows(client.db(), "_history", run.run_id()).await[0] == 1 {
            moved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(moved, "the process moved the run into the history");
}

#[tokio::test]
async fn a_start_that_waits_on_a_key_while_its_run_is_archived_gets_that_run() {
    let env = env().await;
    let client = env.client();
    let pool = client.pool().clone();
    let key = StartOptions::new().idempotency_key("raced");
    let first = client
        .start(Start::flow::<kept_v1::Flow>(), &9, &key)
        .await
        .unwrap();
    env.run_to_end(&first).await.unwrap();
    env.advance(2 * HOUR).await.unwrap();

    // The archiving moves the run, and has not committed when the start comes: the start's
    // insert waits for it on the key, then finds the key free in the live table.
    let mut archiving = pool.begin().await.unwrap();
    let moved: (bool, i64) = sqlx::query_as("select * from pgflow.archive_runs('1 hour', 10)")
        .fetch_one(&mut *archiving)
        .await
        .unwrap();
    assert_eq!(moved, (false, 1));
    let starter = {
        let client = client.clone();
        let key = key.clone();
        tokio::spawn(async move {
            client
                .start(Start::flow::<kept_v1::Flow>(), &9, &key)
                .await
                .unwrap()
        })
    };
    let mut waiting = false;
    for _ in 0..100 {
        let waiters: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
             where datname = current_database() and wait_event_type = 'Lock'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if waiters > 0 {
            waiting = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(waiting, "the start waits for the archiving on the key");
    archiving.commit().await.unwrap();

    let again = starter.await.unwrap();
    assert_eq!(
        again.run_id(),
        first.run_id(),
        "the key's run, now archived"
    );
    assert_eq!(again.start_outcome(), Some(StartOutcome::AlreadyExisted));
    let keyed: i64 =
        sqlx::query_scalar("select count(*) from pgflow.all_runs where idempotency_key = 'raced'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(keyed, 1, "one run holds the key");
}

/// Whether `tariff_v1` fails (the test lets a retry pass by turning it off).
static DECLINE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// A child flow that fails while [`DECLINE`] is set.
#[pgflow::flow(slug = "tariff_v1", input = u32, max_attempts = 1)]
pub mod tariff_v1 {
    #[step]
    pub async fn price(input: u32) -> Result<u32, String> {
        if super::DECLINE.load(std::sync::atomic::Ordering::SeqCst) {
            return Err("declined".to_owned());
        }
        Ok(input * 3)
    }
}

/// A parent whose one step runs `tariff_v1`.
#[pgflow::flow(slug = "invoice_v1", input = u32, max_attempts = 1)]
pub mod invoice_v1 {
    #[step(subflow = super::tariff_v1)]
    pub async fn priced(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

#[tokio::test]
async fn retrying_an_archived_parent_brings_back_its_children() {
    let config = ProcessConfig::default().stalled_check_interval(Duration::from_secs(3600));
    let env = TestEnv::with_config(config).await.unwrap();
    env.start_workers(tariff_v1::deployment()).await.unwrap();
    env.start_workers(invoice_v1::deployment()).await.unwrap();
    let client = env.client();
    let db = client.db();
    let parent = invoice_v1::start(client, &7).await.unwrap();
    assert_eq!(
        env.run_to_end(&parent).await.unwrap().status(),
        RunStatus::Failed
    );
    let children = || async {
        sqlx::query_as::<_, (Uuid, i32, String)>(
            "select run_id, retry_count, status from pgflow.all_runs where parent_run_id = $1",
        )
        .bind(parent.run_id())
        .fetch_all(db)
        .await
        .unwrap()
    };
    let before = children().await;
    assert_eq!(before.len(), 1);
    env.advance(2 * HOUR).await.unwrap();
    // The parent first: a child stays live while its parent is.
    assert_eq!(archive(db).await, 1, "the parent");
    assert_eq!(archive(db).await, 1, "then its child");

    // The retry brings both back; the child, failed, runs again (and passes now) rather than
    // a second child starting.
    DECLINE.store(false, std::sync::atomic::Ordering::SeqCst);
    parent.retry(client).await.unwrap();
    let finished = env.run_to_end(&parent).await.unwrap();
    assert_eq!(finished.status(), RunStatus::Completed);
    let after = children().await;
    assert_eq!(
        after,
        [(before[0].0, 1, "completed".to_owned())],
        "the same child, retried once"
    );
    assert_eq!(
        rows(db, "", before[0].0).await[0],
        1,
        "back in the live tables"
    );
}

#[tokio::test]
async fn the_history_tables_and_views_have_the_live_tables_columns() {
    let env = TestEnv::new().await.unwrap();
    let db = env.client().db();
    let columns = |relation: String| async move {
        sqlx::query_scalar::<_, String>(
            "select attname::text from pg_attribute
             where attrelid = $1::regclass and attnum > 0 and not attisdropped
             order by attnum",
        )
        .bind(relation)
        .fetch_all(db)
        .await
        .unwrap()
    };
    for table in ["runs", "step_states", "step_tasks", "task_attempts"] {
        let live = columns(format!("pgflow.{table}")).await;
        let mut history = columns(format!("pgflow.{table}_history")).await;
        history.retain(|c| c != "run_ended_at");
        history.sort();
        let mut sorted = live.clone();
        sorted.sort();
        assert_eq!(history, sorted, "{table}_history");
        assert_eq!(
            columns(format!("pgflow.all_{table}")).await,
            live,
            "all_{table}"
        );
    }
}

#[tokio::test]
async fn deleting_a_flow_deletes_its_archived_runs_with_their_counts_and_keys() {
    let env = env().await;
    let client = env.client();
    let db = client.db();
    let key = StartOptions::new().idempotency_key("gone");
    let archived = client
        .start(Start::flow::<kept_v1::Flow>(), &3, &key)
        .await
        .unwrap();
    env.run_to_end(&archived).await.unwrap();
    env.advance(2 * HOUR).await.unwrap();
    assert_eq!(archive(db).await, 1);
    let live = kept_v1::start(client, &4).await.unwrap();
    env.run_to_end(&live).await.unwrap();

    let deleted = engine::delete_flow(db, "kept_v1", true).await.unwrap();
    assert_eq!((deleted.runs, deleted.tasks), (2, 4), "{deleted:?}");
    let left: (i64, i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from pgflow.all_runs), (select count(*) from pgflow.all_step_tasks),
                (select coalesce(sum(runs + step_states + tasks), 0)::bigint
                 from pgflow.history_days),
                (select count(*) from pgflow.archived_keys)",
    )
    .fetch_one(db)
    .await
    .unwrap();
    assert_eq!(left, (0, 0, 0, 0));
}
