//! Messages per second per queue, from two readings of PGMQ's counter of messages ever sent
//! (`pgflow.queue_overview().total_messages`) at least a few seconds apart: the dashboard
//! samples it in the background and the overview reads the rate over the last minute.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pgflow_runtime::Db;
use pgflow_runtime::admin::inspect::{self, QueueOverview};
use tokio_util::sync::CancellationToken;

/// How far back the rate looks.
const WINDOW: Duration = Duration::from_secs(60);

struct Sample {
    at: Instant,
    totals: HashMap<String, i64>,
}

/// The recent readings of every queue's counter.
#[derive(Default)]
pub(crate) struct Throughput {
    samples: Mutex<VecDeque<Sample>>,
}

impl Throughput {
    /// Records a reading taken now.
    pub(crate) fn record(&self, queues: &[QueueOverview]) {
        let totals = queues
            .iter()
            .map(|q| (q.queue_name.clone(), q.total_messages));
        self.record_at(Instant::now(), totals);
    }

    fn record_at(&self, at: Instant, totals: impl IntoIterator<Item = (String, i64)>) {
        let totals = totals.into_iter().collect();
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        samples.push_back(Sample { at, totals });
        // Keep the newest reading older than the window, so the rate spans all of it.
        while samples.len() > 2 && at.duration_since(samples[1].at) >= WINDOW {
            samples.pop_front();
        }
    }

    /// Messages per second sent to `queue` between the oldest and newest readings (`None`
    /// until two readings at least a second apart include it).
    pub(crate) fn per_second(&self, queue: &str) -> Option<f64> {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let newest = samples.back()?;
        let oldest = samples.iter().find(|s| {
            s.totals.contains_key(queue) && newest.at.duration_since(s.at).as_secs_f64() >= 1.0
        })?;
        let elapsed = newest.at.duration_since(oldest.at).as_secs_f64();
        let sent = newest.totals.get(queue)? - oldest.totals.get(queue)?;
        Some(sent.max(0) as f64 / elapsed)
    }
}

/// Reads the counters every `every` until `stop`; a failed read is logged and retried at the
/// next tick.
pub(crate) fn spawn_sampler(
    db: Db,
    throughput: Arc<Throughput>,
    every: Duration,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            match inspect::queues(&db).await {
                Ok(queues) => throughput.record(&queues),
                Err(error) => tracing::warn!(%error, "reading the queues' message counters failed"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
        pairs.iter().map(|(q, n)| ((*q).to_owned(), *n)).collect()
    }

    #[test]
    fn the_rate_spans_the_readings_of_the_last_minute() {
        let throughput = Throughput::default();
        let start = Instant::now();
        throughput.record_at(start, totals(&[("a", 100)]));
        assert_eq!(throughput.per_second("a"), None);
        throughput.record_at(
            start + Duration::from_secs(10),
            totals(&[("a", 600), ("b", 5)]),
        );
        assert_eq!(throughput.per_second("a"), Some(50.0));
        assert_eq!(throughput.per_second("b"), None);
        // The reading at 0 s falls out of the window; the one at 10 s is the newest before it.
        throughput.record_at(
            start + Duration::from_secs(100),
            totals(&[("a", 600), ("b", 5)]),
        );
        throughput.record_at(
            start + Duration::from_secs(110),
            totals(&[("a", 700), ("b", 25)]),
        );
        assert_eq!(throughput.per_second("a"), Some(1.0));
        assert_eq!(throughput.per_second("b"), Some(0.2));
    }
}
