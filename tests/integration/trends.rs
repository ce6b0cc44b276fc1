//! Queue samples for the dashboard's trends (`pgflow.sample_queues`): one sample of every queue a
//! minute, whichever processes ask and however many at once, kept for a day. On the test clock,
//! so that the minutes and the day pass at once.

use std::time::Duration;

use pgflow::engine;
use pgflow::testing::TestEnv;
use pgflow_runtime::admin::inspect;

const EVERY: Duration = Duration::from_secs(60);
const KEEP: Duration = Duration::from_secs(86_400);

#[pgflow::flow(slug = "sampled_v1", input = u32)]
pub mod sampled_v1 {
    #[step]
    pub async fn work(input: u32) -> Result<u32, String> {
        Ok(input)
    }
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
    let takers = (0..6).map(|_| engine::sample_queues(db, EVERY, KEEP));
    let sampled: i32 = futures_util::future::try_join_all(takers)
        .await
        .unwrap()
        .into_iter()
        .sum();
    assert_eq!(sampled, 1, "one queue, sampled once");
    let samples = inspect::queue_samples(db, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(samples.len(), 1, "{samples:?}");
    let sample = &samples[0];
    assert_eq!(
        (sample.queue_name.as_str(), sample.depth, sample.in_flight),
        ("sampled_v1", 3, 0)
    );
    assert!(sample.oldest_message_age_seconds.is_some());

    // Not again within the minute; again once it has passed.
    env.advance(Duration::from_secs(30)).await.unwrap();
    assert_eq!(engine::sample_queues(db, EVERY, KEEP).await.unwrap(), 0);
    env.advance(Duration::from_secs(31)).await.unwrap();
    assert_eq!(engine::sample_queues(db, EVERY, KEEP).await.unwrap(), 1);
    let samples = inspect::queue_samples(db, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(samples.len(), 2, "{samples:?}");
    assert!(samples[0].sampled_at < samples[1].sampled_at);

    // A day on, the next sample is the only one left.
    env.advance(KEEP + Duration::from_secs(1)).await.unwrap();
    assert_eq!(engine::sample_queues(db, EVERY, KEEP).await.unwrap(), 1);
    let kept: i64 = sqlx::query_scalar("select count(*) from pgflow.queue_samples")
        .fetch_one(client.pool())
        .await
        .unwrap();
    assert_eq!(kept, 1, "samples older than a day are deleted");
    env.close().await.unwrap();
}

#[tokio::test]
async fn a_sample_period_or_retention_that_cannot_work_is_refused() {
    let env = TestEnv::new().await.unwrap();
    let refused = engine::sample_queues(env.client().db(), EVERY, Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("keep at least one period"),
        "{refused}"
    );
    env.close().await.unwrap();
}
