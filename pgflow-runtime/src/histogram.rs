//! The scale the workers measure handler durations on for the dashboard's trends
//! (`pgflow.task_samples.buckets`): buckets a quarter of a doubling wide from 0.1 ms, so that
//! counts from many processes and minutes add up bucket by bucket, and a percentile read back
//! from them is within about 9 % of the true one. Bucket 0 holds everything up to 0.1 ms; the
//! last (about 5 days) everything longer.

use std::time::Duration;

/// The upper bound of bucket 0, in milliseconds.
const FIRST_BOUND_MS: f64 = 0.1;
/// Buckets per doubling.
const PER_DOUBLING: f64 = 4.0;
/// How many buckets there are: the last one's lower bound is 0.1 ms × 2^(127/4), about 5 days.
pub(crate) const BUCKETS: usize = 129;

/// The bucket `took` falls in.
pub(crate) fn bucket_of(took: Duration) -> usize {
    let ms = took.as_secs_f64() * 1000.0;
    if ms <= FIRST_BOUND_MS {
        return 0;
    }
    let index = (PER_DOUBLING * (ms / FIRST_BOUND_MS).log2()).ceil();
    (index as usize).min(BUCKETS - 1)
}

/// The duration a bucket stands for, in milliseconds: the geometric middle of its bounds.
fn middle_ms(bucket: usize) -> f64 {
    if bucket == 0 {
        return FIRST_BOUND_MS / 2.0;
    }
    FIRST_BOUND_MS * ((bucket as f64 - 0.5) / PER_DOUBLING).exp2()
}

/// Counts per bucket, index by index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Histogram {
    counts: Vec<i32>,
}

impl Histogram {
    /// Counts as stored (`buckets`), index 0 first.
    pub(crate) fn from_counts(counts: Vec<i32>) -> Self {
        Self { counts }
    }

    /// The counts, with no zeros past the last counted bucket.
    pub(crate) fn counts(&self) -> &[i32] {
        &self.counts
    }

    /// Counts one duration.
    pub(crate) fn record(&mut self, took: Duration) {
        let bucket = bucket_of(took);
        if self.counts.len() <= bucket {
            self.counts.resize(bucket + 1, 0);
        }
        self.counts[bucket] = self.counts[bucket].saturating_add(1);
    }

    /// Adds `other`'s counts to these.
    pub(crate) fn add(&mut self, other: &Self) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine = mine.saturating_add(*theirs);
        }
    }

    /// How many durations it counts.
    pub(crate) fn total(&self) -> i64 {
        self.counts.iter().map(|c| i64::from((*c).max(0))).sum()
    }

    /// The `quantile` (0 to 1) of the counted durations in milliseconds: the middle of the
    /// bucket holding it (`None` when it counts none).
    pub(crate) fn quantile_ms(&self, quantile: f64) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        // The rank of the quantile, 1-based, as the nearest-rank method has it.
        let rank = ((quantile.clamp(0.0, 1.0) * total as f64).ceil() as i64).max(1);
        let mut seen = 0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += i64::from((*count).max(0));
            if seen >= rank {
                return Some(middle_ms(bucket));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_grow_by_a_quarter_doubling_from_a_tenth_of_a_millisecond() {
        assert_eq!(bucket_of(Duration::ZERO), 0);
        assert_eq!(bucket_of(Duration::from_micros(100)), 0);
        assert_eq!(bucket_of(Duration::from_micros(101)), 1);
        assert_eq!(
            bucket_of(Duration::from_micros(150)),
            3,
            "1.5× is 2.3 quarter doublings"
        );
        assert_eq!(
            bucket_of(Duration::from_millis(1)),
            14,
            "10× is 13.3 quarter doublings"
        );
        assert_eq!(bucket_of(Duration::from_secs(86_400 * 30)), BUCKETS - 1);
    }

    #[test]
    fn a_quantile_read_back_is_within_a_tenth_of_the_true_one() {
        let mut histogram = Histogram::default();
        for ms in 1..=1000 {
            histogram.record(Duration::from_millis(ms));
        }
        for (quantile, truth) in [(0.5, 500.0), (0.95, 950.0), (0.01, 10.0)] {
            let read = histogram.quantile_ms(quantile).unwrap();
            assert!(
                (read / truth - 1.0).abs() < 0.1,
                "the {quantile} quantile reads {read}, truly {truth}"
            );
        }
        assert_eq!(Histogram::default().quantile_ms(0.5), None);
    }

    #[test]
    fn counts_add_bucket_by_bucket() {
        let mut a = Histogram::from_counts(vec![1, 2]);
        a.add(&Histogram::from_counts(vec![0, 1, 5]));
        assert_eq!(a.counts(), [1, 3, 5]);
        assert_eq!(a.total(), 9);
    }
}
