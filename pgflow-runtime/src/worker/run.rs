//! The running worker: starts the result storer and the heartbeat, enlists in its client's
//! maintenance and schedule firing, polls until it is told to stop, drains and marks the worker
//! stopped.
//!
//! The jobs live apart: `poll` (claiming), `execute` (one handler run), `results` (batched
//! result storage), `lifecycle` (heartbeats, drain, stop); the process-wide ones are in
//! [`crate::process`].

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::worker::error::WorkerError;
use crate::worker::lifecycle::{drain, heartbeat, mark_stopped};
use crate::worker::poll::poll;
use crate::worker::results::store_results;
use crate::worker::runtime::Runtime;

/// Runs the worker until it stops; returns the fatal error that stopped it, if any.
pub(super) async fn run(rt: Arc<Runtime>) -> Result<(), WorkerError> {
    let (results_tx, results_rx) = mpsc::unbounded_channel();
    let storer = tokio::spawn(store_results(
        Arc::clone(&rt),
        results_rx,
        results_tx.downgrade(),
    ));
    let heartbeat = tokio::spawn(heartbeat(Arc::clone(&rt)));
    let enlisted = rt.started.client.shared().enlist();

    let outcome = poll(&rt, results_tx).await;
    rt.shutdown.cancel();
    drain(&rt).await;

    // Every handler task held a sender; they are gone, so the storer ends after flushing.
    if let Err(error) = storer.await {
        tracing::error!(queue = rt.started.queue.as_str(), %error, "result storage task failed");
    }
    heartbeat.abort();
    drop(enlisted);
    mark_stopped(&rt).await;
    match &outcome {
        Ok(()) => tracing::info!(
            queue = rt.started.queue.as_str(),
            worker_id = %rt.started.worker_id,
            "pgflow worker stopped"
        ),
        Err(error) => tracing::error!(
            queue = rt.started.queue.as_str(),
            worker_id = %rt.started.worker_id,
            %error,
            "pgflow worker stopped on a fatal error"
        ),
    }
    outcome
}
