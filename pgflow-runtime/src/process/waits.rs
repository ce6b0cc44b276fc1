//! Ending waits whose time came, once per client while its workers run: a step that waits for
//! a signal with a `wait_timeout` fails or is skipped when its deadline passes (the database's
//! clock), as its `when_timed_out` says, and a sleeping step wakes at its wake time. Every
//! process may do it at once; the SQL core ends each wait once. A wait whose deadline passed
//! while no process ran ends at the next look. The same loop settles what subflows left over
//! (children of cancelled parents; see [`engine::settle_subflows`]), gives out the slots of
//! capped steps that ended tasks left free (see [`engine::release_capped_tasks`]) and begins
//! the runs whose debounce window ended or whose singleton key came free (see
//! [`engine::begin_deferred_runs`]).

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
        let leftovers = async {
            match engine::settle_subflows(&shared.db, EXPIRE_BATCH).await {
                Ok(0) => {}
                Ok(changed) => tracing::info!(changed, "settled subflows left over"),
                Err(error) => tracing::warn!(%error, "settling subflows failed; retrying"),
            }
            match engine::release_capped_tasks(&shared.db, EXPIRE_BATCH).await {
                Ok(0) => {}
                Ok(released) => tracing::debug!(released, "released held tasks to free slots"),
                Err(error) => tracing::warn!(%error, "releasing held tasks failed; retrying"),
            }
            match engine::begin_deferred_runs(&shared.db, EXPIRE_BATCH).await {
                Ok(0) => {}
                Ok(begun) => tracing::debug!(
                    begun,
                    "began deferred runs (debounced, or a singleton's turn)"
                ),
                Err(error) => tracing::warn!(%error, "beginning deferred runs failed; retrying"),
            }
        };
        tokio::select! {
            () = async { pass.await; leftovers.await } => {}
            () = stop.cancelled() => return,
        }
        tokio::select! {
            () = tokio::time::sleep(WAIT_POLL) => {}
            () = stop.cancelled() => return,
        }
    }
}
