//! Ending timed-out waits, once per client while its workers run: a step that waits for a
//! signal with a `wait_timeout` fails or is skipped when its deadline passes (the database's
//! clock), as its `when_timed_out` says. Every process may do it at once; the SQL core ends
//! each wait once. A wait whose deadline passed while no process ran ends at the next look.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::engine;
use crate::process::Shared;

/// The longest a process goes without looking for waits past their deadline (a wait another
/// process began is seen this soon).
const WAIT_POLL: Duration = Duration::from_secs(1);

/// Waits ended per call at most: a long backlog is ended in several short transactions.
const EXPIRE_BATCH: i32 = 1_000;

/// Ends waits past their deadline until `stop`.
pub(super) async fn expire_waits(shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        let pass = async {
            loop {
                match engine::expire_waits(&shared.db, EXPIRE_BATCH).await {
                    Ok(ended) if ended.expired > 0 => {
                        tracing::info!(expired = ended.expired, "ended waits past their deadline");
                        if ended.expired < EXPIRE_BATCH.unsigned_abs() {
                            return;
                        }
                    }
                    Ok(_) => return,
                    Err(error) => {
                        tracing::warn!(%error, "ending waits past their deadline failed; retrying");
                        return;
                    }
                }
            }
        };
        tokio::select! {
            () = pass => {}
            () = stop.cancelled() => return,
        }
        tokio::select! {
            () = tokio::time::sleep(WAIT_POLL) => {}
            () = stop.cancelled() => return,
        }
    }
}
