//! The dashboard's trends (`pgflow.sample_trends`): one sample a minute, whichever processes
//! ask and however many at once, of every queue, of the runs that completed and failed per flow
//! and minute, and of the tasks' durations per step and minute; kept for a day. On the test
//! clock, so that the minutes and the day pass at once.

use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use pgflow::testing::TestEnv;
use pgflow::{ProcessConfig, RunStatus, engine};
use pgflow_runtime::admin::trends::{self, Trends};

const EVERY: Duration = Duration::from_secs(60);
const KEEP: Duration = Duration::from_secs(86_400);

#[pgflow::flow(slug = "sampled_v1", input = u32)]
pub mod sampled_v1 {
    #[step]
    pub async fn work(input: u32) -> Result<u32, String> {
        Ok(input)
    }
}

/// The trends of the last hour, a minute a point.
async fn hour(db: &pgflow::Db) -> Trends {
    trends::trends(db, Duration::from_secs(3600), Duration::from_secs(60))
        .await
        .unwrap()
}

#[tokio::test]
async fn every_queue_is_sampled_once_a_minute_and_its_samples_are_kept_a_day() {
    let env = TestEnv::new().await.unwrap();
    let client = env.client();
    client.deploy(&sampled_v1::deployment()).await.unwrap();
    // Three runs and no worker: three messages wait.
    for input in 1..=3 {
        sampled_v1::start(client, &input).await.unwrap();
    }
    let db = client.db();

    // Many processes at once take one sample.
    let takers = (0..6).map(|_| engine::sample_trends(db, EVERY, KEEP));
    let sampled = futures_util::future::try_join_all(takers).await.unwrap();
    assert_eq!(sampled.iter().filter(|s| **s).count(), 1, "{sampled:?}");
    let samples = hour(db).await.queues;
    assert_eq!(samples.len(), 1, "{samples:?}");
    let sample = &samples[0];
    assert_eq!(
        (sample.queue_name.as_str(), sample.depth, sample.in_flight),
        ("sampled_v1", 3, 0)
    );
    assert!(sample.oldest_message_age_seconds.is_some());

    // Not again within the minute; again once it has passed.
    env.advance(Duration::from_secs(30)).await.unwrap();
    assert!(!engine::sample_trends(db, EVERY, KEEP).await.unwrap());
    env.advance(Duration::from_secs(31)).await.unwrap();
    assert!(engine::sample_trends(db, EVERY, KEEP).await.unwrap());
    let samples = hour(db).await.queues;
    assert_eq!(samples.len(), 2, "{samples:?}");
    assert!(samples[0].sampled_at < samples[1].sampled_at);

    // A day on, the next sample is the only one left.
    env.advance(KEEP + Duration::from_secs(1)).await.unwrap();
    assert!(engine::sample_trends(db, EVERY, KEEP).await.unwrap());
    let kept: (i64, i64) = sqlx::query_as(
        "select (select count(*) from pgflow.queue_samples),
                (select count(*) from pgflow.trend_passes)",
    )
    .fetch_one(client.pool())
    .await
    .unwrap();
    assert_eq!(kept, (1, 1), "samples older than a day are deleted");
    env.close().await.unwrap();
}

#[tokio::test]
async fn a_sample_period_or_retention_that_cannot_work_is_refused() {
    let env = TestEnv::new().await.unwrap();
    let refused = engine::sample_trends(env.client().db(), EVERY, Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("keep at least one period"),
        "{refused}"
    );
    env.close().await.unwrap();
}

#[pgflow::flow(slug = "tallied_v1", input = u32)]
pub mod tallied_v1 {
    /// Fails at once for odd inputs.
    #[step(max_attempts = 1)]
    pub async fn work(input: u32) -> Result<u32, String> {
        if input % 2 == 1 {
            Err(format!("{input} is odd"))
        } else {
            Ok(input)
        }
    }
}

/// Runs `inputs` of `tallied_v1` to their ends.
async fn run_all(env: &TestEnv, inputs: impl IntoIterator<Item = u32>) -> Vec<RunStatus> {
    let mut statuses = Vec::new();
    for input in inputs {
        let run = tallied_v1::start(env.client(), &input).await.unwrap();
        statuses.push(env.run_to_end(&run).await.unwrap().status());
    }
    statuses
}

/// Moves the engine's clock to five seconds into the next minute: what a test does in the 55 s
/// of real time after stays within one minute.
async fn five_seconds_into_a_minute(env: &TestEnv) {
    let now = env.now().await.unwrap();
    env.advance(Duration::from_secs(65 - u64::from(now.second())))
        .await
        .unwrap();
}

fn minute_of(at: DateTime<Utc>) -> DateTime<Utc> {
    at.with_second(0).unwrap().with_nanosecond(0).unwrap()
}

#[tokio::test]
async fn runs_that_ended_are_counted_per_flow_and_minute_and_recounted_late() {
    // No maintenance pass of the workers' own during the test: the test takes each sample.
    let config = ProcessConfig::default().stalled_check_interval(Duration::from_secs(3600));
    let env = TestEnv::with_config(config).await.unwrap();
    env.start_workers(tallied_v1::deployment()).await.unwrap();
    let db = env.client().db();
    // So that the minutes below are the ones meant.
    five_seconds_into_a_minute(&env).await;
    let first = minute_of(env.now().await.unwrap());

    // Three completed and two failed runs, then a sample in the same minute.
    let statuses = run_all(&env, [2, 4, 6, 1, 3]).await;
    assert_eq!(
        statuses.iter().filter(|s| **s == RunStatus::Failed).count(),
        2
    );
    assert!(engine::sample_trends(db, EVERY, KEEP).await.unwrap());
    let seen = hour(db).await;
    let counts: Vec<_> = seen
        .runs
        .iter()
        .map(|r| (r.period, r.flow_slug.as_str(), r.completed, r.failed))
        .collect();
    assert_eq!(counts, [(first, "tallied_v1", 3, 2)]);
    assert!(seen.counted_from.unwrap() <= first);

    // One more failure in that minute after the sample, then two completions a minute on: the
    // next sample counts the first minute again and the second one anew.
    run_all(&env, [5]).await;
    env.advance(Duration::from_secs(60)).await.unwrap();
    run_all(&env, [8, 10]).await;
    assert!(engine::sample_trends(db, EVERY, KEEP).await.unwrap());
    let seen = hour(db).await;
    let second = first + chrono::Duration::minutes(1);
    let counts: Vec<_> = seen
        .runs
        .iter()
        .map(|r| (r.period, r.completed, r.failed))
        .collect();
    assert_eq!(counts, [(first, 3, 3), (second, 2, 0)]);
    // Over ten-minute periods, the counts add up.
    let day = trends::trends(db, Duration::from_secs(86_400), Duration::from_secs(600))
        .await
        .unwrap();
    let ended: (i64, i64) = day
        .runs
        .iter()
        .fold((0, 0), |(c, f), r| (c + r.completed, f + r.failed));
    assert_eq!(ended, (3 + 2, 3));
    env.close().await.unwrap();
}

#[pgflow::flow(slug = "timed_v1", input = u64)]
pub mod timed_v1 {
    /// Takes `input` milliseconds.
    #[step]
    pub async fn wait(input: u64) -> Result<u64, String> {
        tokio::time::sleep(std::time::Duration::from_millis(input)).await;
        Ok(input)
    }
}

#[tokio::test]
async fn the_workers_handler_durations_give_each_steps_percentiles() {
    // Maintenance passes every 100 ms write what the workers measured.
    let config = ProcessConfig::default().stalled_check_interval(Duration::from_millis(100));
    let env = TestEnv::with_config(config).await.unwrap();
    env.start_workers(timed_v1::deployment()).await.unwrap();
    let db = env.client().db();
    // So that every write of durations lands in the same minute.
    five_seconds_into_a_minute(&env).await;
    // Twenty handlers of 10, 20, ..., 200 ms: the median is 100 ms, the 95th percentile 190.
    let mut runs = Vec::new();
    for input in (1..=20).map(|i| i * 10) {
        runs.push(timed_v1::start(env.client(), &input).await.unwrap());
    }
    for run in &runs {
        assert_eq!(
            env.run_to_end(run).await.unwrap().status(),
            RunStatus::Completed
        );
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let step = loop {
        let seen = hour(db).await;
        let counted: i64 = seen.tasks.iter().map(|t| t.completed).sum();
        if counted == 20 && seen.tasks.len() == 1 {
            break seen.tasks[0].clone();
        }
        assert!(
            counted <= 20 && std::time::Instant::now() < deadline,
            "{counted} durations written: {:?}",
            seen.tasks
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (step.flow_slug.as_str(), step.step_slug.as_str()),
        ("timed_v1", "wait")
    );
    // Within the scale's 9 %, and a little over for the timer's own lateness.
    for (read, truth) in [(step.p50_ms, 100.0), (step.p95_ms, 190.0)] {
        assert!(
            (0.9..1.2).contains(&(read / truth)),
            "read {read} ms where the handlers took {truth} ms"
        );
    }
    env.close().await.unwrap();
}

#[tokio::test]
async fn durations_written_by_several_processes_add_up_bucket_by_bucket() {
    let env = TestEnv::new().await.unwrap();
    let pool = env.client().pool();
    // Two processes write the same step in the same minute; a second step once.
    for steps in [
        r#"[{"flow": "f", "step": "a", "completed": 3, "buckets": [1, 2]},
            {"flow": "f", "step": "b", "completed": 1, "buckets": [0, 0, 1]}]"#,
        r#"[{"flow": "f", "step": "a", "completed": 4, "buckets": [0, 1, 0, 3]}]"#,
    ] {
        let added: i32 = sqlx::query_scalar("select pgflow.add_task_durations($1::jsonb)")
            .bind(steps)
            .fetch_one(pool)
            .await
            .unwrap();
        assert!(added >= 1);
    }
    let rows: Vec<(String, i32, Vec<i32>)> = sqlx::query_as(
        "select step_slug, completed, buckets from pgflow.task_samples
         where period_seconds = 60 order by step_slug",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            ("a".to_owned(), 7, vec![1, 3, 0, 3]),
            ("b".to_owned(), 1, vec![0, 0, 1])
        ]
    );
    // The same counts go to the step's ten minutes.
    let ten: (i64, i64) = sqlx::query_as(
        "select count(*), sum(completed) from pgflow.task_samples where period_seconds = 600",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(ten, (2, 8));
    let refused = sqlx::query("select pgflow.add_task_durations('{}'::jsonb)")
        .execute(pool)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("expected a JSON array"),
        "{refused}"
    );
    env.close().await.unwrap();
}
