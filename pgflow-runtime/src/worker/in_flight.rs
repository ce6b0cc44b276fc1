//! The runs a worker is running handlers of, each with a token that fires when the run ends
//! elsewhere (cancelled by an operator, or failed by another task), as the heartbeat learns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// The runs with handlers in flight on this worker.
#[derive(Default)]
pub(super) struct InFlightRuns {
    runs: Mutex<HashMap<Uuid, Entry>>,
}

struct Entry {
    handlers: usize,
    ended: CancellationToken,
}

impl InFlightRuns {
    /// Records a handler of `run_id` until the guard drops; the guard's token fires when the
    /// run is reported ended.
    pub(super) fn enter(self: &Arc<Self>, run_id: Uuid) -> InFlightGuard {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let entry = runs.entry(run_id).or_insert_with(|| Entry {
            handlers: 0,
            ended: CancellationToken::new(),
        });
        entry.handlers += 1;
        InFlightGuard {
            runs: Arc::clone(self),
            run_id,
            ended: entry.ended.clone(),
        }
    }

    /// The runs with handlers in flight now.
    pub(super) fn run_ids(&self) -> Vec<Uuid> {
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.keys().copied().collect()
    }

    /// Fires the tokens of `run_ids`: those runs ended elsewhere.
    pub(super) fn end(&self, run_ids: &[Uuid]) {
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        for run_id in run_ids {
            if let Some(entry) = runs.get(run_id) {
                entry.ended.cancel();
            }
        }
    }
}

/// One handler's place in [`InFlightRuns`].
pub(super) struct InFlightGuard {
    runs: Arc<InFlightRuns>,
    run_id: Uuid,
    ended: CancellationToken,
}

impl InFlightGuard {
    /// Fires when the run is reported ended.
    pub(super) fn ended(&self) -> &CancellationToken {
        &self.ended
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut runs = self.runs.runs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = runs.get_mut(&self.run_id) {
            entry.handlers -= 1;
            if entry.handlers == 0 {
                runs.remove(&self.run_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_listed_while_a_handler_of_it_runs_and_its_end_fires_every_guard() {
        let runs = Arc::new(InFlightRuns::default());
        let run = Uuid::new_v4();
        let first = runs.enter(run);
        let second = runs.enter(run);
        assert_eq!(runs.run_ids(), vec![run]);
        runs.end(&[run, Uuid::new_v4()]);
        assert!(first.ended().is_cancelled() && second.ended().is_cancelled());
        drop(first);
        assert_eq!(runs.run_ids(), vec![run]);
        drop(second);
        assert!(runs.run_ids().is_empty());
    }
}
