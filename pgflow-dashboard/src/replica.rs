//! Reading from a streaming replica: how far behind its primary it is, read from the replica
//! alone (nothing is asked of the primary) every few seconds and shown on every page.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use pgflow_runtime::admin::inspect;
use pgflow_runtime::{Db, EngineError};

/// How often the replica is asked how far behind it is.
const READ_EVERY: Duration = Duration::from_secs(2);

/// Where the replica stands, as last read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Lag {
    /// It has replayed all it received from the primary.
    CaughtUp,
    /// It has more to replay; its last replayed transaction committed this long ago.
    Behind { seconds: f64 },
    /// It is not in recovery: a primary of its own (promoted, or not a replica at all).
    NotReplica,
    /// Not known: it has not been asked yet, or did not answer the last time.
    Unknown,
}

/// The replica's latest [`Lag`], kept current by a background reader.
#[derive(Debug)]
pub(crate) struct ReplicaLag {
    latest: Mutex<Lag>,
}

impl Default for ReplicaLag {
    fn default() -> Self {
        Self {
            latest: Mutex::new(Lag::Unknown),
        }
    }
}

impl ReplicaLag {
    /// The last reading ([`Lag::Unknown`] before the first).
    pub(crate) fn latest(&self) -> Lag {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, lag: Lag) {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = lag;
    }

    /// Starts reading the replica behind `db` every [`READ_EVERY`] while the state holding
    /// `lag` lives and the pool is open (a no-op outside a Tokio runtime).
    pub(crate) fn start_reading(lag: &Arc<Self>, db: Db) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let lag: Weak<Self> = Arc::downgrade(lag);
        runtime.spawn(async move {
            loop {
                let read = read_lag(&db).await;
                let Some(lag) = lag.upgrade() else { return };
                match read {
                    Ok(read) => lag.set(read),
                    Err(error) => {
                        tracing::warn!(%error, "reading the replica's lag failed");
                        lag.set(Lag::Unknown);
                    }
                }
                drop(lag);
                if db.pool().is_closed() {
                    return;
                }
                tokio::time::sleep(READ_EVERY).await;
            }
        });
    }
}

/// Asks the replica where it stands.
async fn read_lag(db: &Db) -> Result<Lag, EngineError> {
    let state = inspect::replica_state(db).await?;
    Ok(
        match (
            state.in_recovery,
            state.replayed_all_received,
            state.last_replay_age_seconds,
        ) {
            (false, _, _) => Lag::NotReplica,
            (true, Some(true), _) => Lag::CaughtUp,
            (true, _, Some(seconds)) => Lag::Behind {
                seconds: seconds.max(0.0),
            },
            (true, _, None) => Lag::Unknown,
        },
    )
}
