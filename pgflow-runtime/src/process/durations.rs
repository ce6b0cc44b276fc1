//! How long the handlers of each step took, for the dashboard's trends: the process's workers
//! count every successful handler run into a histogram per step in memory, and its maintenance
//! adds them to the current minute's row of each step (`pgflow.add_task_durations`) at every
//! pass. A task's completion writes nothing more for it; what a killed process had not written
//! yet (one maintenance interval at most) is not counted.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::db::Db;
use crate::error::EngineError;
use crate::histogram::Histogram;

/// The handler durations counted since the last write, by flow and step.
#[derive(Debug, Default)]
pub(crate) struct TaskDurations {
    pending: Mutex<HashMap<(String, String), Histogram>>,
}

impl TaskDurations {
    /// Counts one successful handler run of `flow`/`step`.
    pub(crate) fn record(&self, flow: &str, step: &str, took: Duration) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        match pending.get_mut(&(flow.to_owned(), step.to_owned())) {
            Some(histogram) => histogram.record(took),
            None => {
                let mut histogram = Histogram::default();
                histogram.record(took);
                pending.insert((flow.to_owned(), step.to_owned()), histogram);
            }
        }
    }

    /// Writes what was counted since the last write; on failure it is kept for the next.
    pub(crate) async fn write(&self, db: &Db) -> Result<(), EngineError> {
        let taken = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        if taken.is_empty() {
            return Ok(());
        }
        let steps: Vec<serde_json::Value> = taken
            .iter()
            .map(|((flow, step), histogram)| {
                serde_json::json!({
                    "flow": flow,
                    "step": step,
                    "completed": histogram.total(),
                    "buckets": histogram.counts(),
                })
            })
            .collect();
        let written = sqlx::query("select pgflow.add_task_durations($1)")
            .bind(serde_json::Value::Array(steps))
            .execute(db)
            .await;
        if let Err(error) = written {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            for (key, histogram) in taken {
                pending.entry(key).or_default().add(&histogram);
            }
            return Err(error.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_counted_per_step() {
        let durations = TaskDurations::default();
        durations.record("f", "a", Duration::from_millis(5));
        durations.record("f", "a", Duration::from_millis(50));
        durations.record("f", "b", Duration::from_millis(5));
        let pending = durations.pending.lock().unwrap();
        assert_eq!(pending[&("f".to_owned(), "a".to_owned())].total(), 2);
        assert_eq!(pending[&("f".to_owned(), "b".to_owned())].total(), 1);
    }
}
