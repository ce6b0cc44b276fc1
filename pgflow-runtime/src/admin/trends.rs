//! The dashboard's trends, read over a span and gathered into periods of a chosen length: the
//! queue and run samples `pgflow.sample_trends` takes once a minute (each process's maintenance
//! calls it; see [`crate::engine::sample_trends`]), and the handler durations every worker
//! process adds to each minute. A longer period sums the counts of its minutes, keeps the
//! highest of each queue's figures, and reads the durations' percentiles from all of its
//! minutes together.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::FromRow;

use crate::db::Db;
use crate::error::EngineError;
use crate::histogram::Histogram;

/// Every series over a span, and where the samples begin.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Trends {
    /// The engine's clock when they were read.
    pub read_at: DateTime<Utc>,
    /// The first minute the samples kept count runs and tasks from (`None`: no sample yet).
    /// From it on, a period with no [`RunSample`] of a flow had no run of it end.
    pub counted_from: Option<DateTime<Utc>>,
    /// Every queue's samples, by queue and then time.
    pub queues: Vec<QueueSample>,
    /// Runs that ended, by flow and then period; periods with none are left out.
    pub runs: Vec<RunSample>,
    /// Tasks that completed, by flow, step and then period; periods with none are left out.
    pub tasks: Vec<TaskSample>,
}

/// A queue in one period: its highest samples.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
pub struct QueueSample {
    /// The start of the period (the sample's time, to the second, for one sample).
    pub sampled_at: DateTime<Utc>,
    /// The queue.
    pub queue_name: String,
    /// Messages waiting in it.
    pub depth: i64,
    /// The age of its oldest message, in seconds (`None` when it was empty).
    pub oldest_message_age_seconds: Option<i32>,
    /// Its tasks started and not ended.
    pub in_flight: i32,
}

/// The runs of a flow that ended in one period.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
pub struct RunSample {
    /// The start of the period.
    pub period: DateTime<Utc>,
    /// The flow.
    pub flow_slug: String,
    /// Runs that completed in it.
    pub completed: i64,
    /// Runs that failed in it.
    pub failed: i64,
}

/// The tasks of a step whose handler succeeded in one period, and how long the handlers ran.
/// The percentiles are read from the workers' histograms: within about 9 % of the true ones.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TaskSample {
    /// The start of the period.
    pub period: DateTime<Utc>,
    /// The flow.
    pub flow_slug: String,
    /// The step.
    pub step_slug: String,
    /// Tasks whose handler succeeded in it.
    pub completed: i64,
    /// The median handler duration, in milliseconds.
    pub p50_ms: f64,
    /// The 95th percentile, in milliseconds.
    pub p95_ms: f64,
}

/// A step's histogram of one period, as stored.
#[derive(FromRow)]
struct StoredDurations {
    period: DateTime<Utc>,
    flow_slug: String,
    step_slug: String,
    buckets: Vec<i32>,
}

/// Every series over the last `span`, gathered into periods of `period` (a minute or more;
/// periods start at whole multiples of it since the Unix epoch). Reads in one snapshot.
pub async fn trends(
    db: &Db,
    span: std::time::Duration,
    period: std::time::Duration,
) -> Result<Trends, EngineError> {
    let span = span.as_secs_f64();
    let period = period.as_secs_f64().max(60.0);
    let mut tx = db.pool().begin().await?;
    sqlx::query("set transaction isolation level repeatable read, read only")
        .execute(&mut *tx)
        .await?;
    let (read_at, counted_from): (DateTime<Utc>, Option<DateTime<Utc>>) = sqlx::query_as(
        "select pgflow.clock(), (select min(counted_from) from pgflow.trend_passes)",
    )
    .fetch_one(&mut *tx)
    .await?;
    let queues = sqlx::query_as(
        "select date_bin(make_interval(secs => $2), sampled_at, timestamptz 'epoch') as sampled_at,
                queue_name, max(depth) as depth,
                max(oldest_message_age_seconds) as oldest_message_age_seconds,
                max(in_flight) as in_flight
         from pgflow.queue_samples
         where sampled_at > pgflow.clock() - make_interval(secs => $1)
         group by 1, 2
         order by queue_name, sampled_at",
    )
    .bind(span)
    .bind(period)
    .fetch_all(&mut *tx)
    .await?;
    let runs = sqlx::query_as(
        "select date_bin(make_interval(secs => $2), minute, timestamptz 'epoch') as period,
                flow_slug, sum(completed)::bigint as completed, sum(failed)::bigint as failed
         from pgflow.run_samples
         where minute > pgflow.clock() - make_interval(secs => $1)
         group by 1, 2
         order by flow_slug, period",
    )
    .bind(span)
    .bind(period)
    .fetch_all(&mut *tx)
    .await?;
    let stored: Vec<StoredDurations> = sqlx::query_as(
        "select date_bin(make_interval(secs => $2), period_start, timestamptz 'epoch') as period,
                flow_slug, step_slug, buckets
         from pgflow.task_samples
         where period_seconds = $3
           and period_start > pgflow.clock() - make_interval(secs => $1)",
    )
    .bind(span)
    .bind(period)
    .bind(stored_period(period))
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Trends {
        read_at,
        counted_from,
        queues,
        runs,
        tasks: task_samples(stored),
    })
}

/// The longest period of the stored durations that a chart's period of `seconds` is a whole
/// number of: ten minutes or one.
fn stored_period(seconds: f64) -> i32 {
    if seconds >= 600.0 && seconds % 600.0 == 0.0 {
        600
    } else {
        60
    }
}

/// One sample per step and period, its stored periods' histograms added together, by flow, step
/// and then period. (Grouped here: sorting a day of wide rows by text in SQL took 20 ms.)
fn task_samples(stored: Vec<StoredDurations>) -> Vec<TaskSample> {
    let mut periods: BTreeMap<(String, String, DateTime<Utc>), Histogram> = BTreeMap::new();
    for minute in stored {
        periods
            .entry((minute.flow_slug, minute.step_slug, minute.period))
            .or_default()
            .add(&Histogram::from_counts(minute.buckets));
    }
    periods
        .into_iter()
        .filter_map(|((flow_slug, step_slug, period), histogram)| {
            Some(TaskSample {
                period,
                flow_slug,
                step_slug,
                completed: histogram.total(),
                p50_ms: histogram.quantile_ms(0.5)?,
                p95_ms: histogram.quantile_ms(0.95)?,
            })
        })
        .collect()
}
