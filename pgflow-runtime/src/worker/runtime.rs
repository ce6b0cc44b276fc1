//! What the worker's tasks share: the started worker, its settings, its handler slots and its
//! stop signals; and the retry of database calls that must not be lost.

use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::error::EngineError;
use crate::worker::config::WorkerSettings;
use crate::worker::slots::Slots;
use crate::worker::startup::Started;

/// Shared by the worker's tasks.
pub(super) struct Runtime {
    /// The registered worker: pool, id, queue and handlers.
    pub started: Started,
    /// Its settings.
    pub settings: WorkerSettings,
    /// Its handler slots.
    pub slots: Slots,
    /// Cancelled to stop polling and drain.
    pub shutdown: CancellationToken,
    /// Cancelled to stop at once (in-flight handlers are cancelled, their tasks recovered
    /// later as stalled).
    pub hard_stop: CancellationToken,
    /// Stale messages (no queued task behind them) this worker's claims removed, in all.
    pub stale_messages: Arc<std::sync::atomic::AtomicU64>,
    /// The runs it is running handlers of, told at each heartbeat which of them ended.
    pub in_flight: Arc<crate::worker::in_flight::InFlightRuns>,
    /// The worker id as a metric label, formatted once rather than per task.
    pub worker_label: String,
    /// Whether a step it runs has a rate limit: its queue then holds messages due later, which
    /// an idle worker wakes for.
    pub rate_limited: bool,
}

/// Retries `call` with backoff until it succeeds; gives up only on a hard stop.
pub(super) async fn retry<T, F, Fut>(rt: &Runtime, what: &str, mut call: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EngineError>>,
{
    let mut backoff = Backoff::default();
    loop {
        match call().await {
            Ok(value) => return Some(value),
            Err(error) => {
                let pause = backoff.next_pause();
                tracing::warn!(
                    queue = rt.started.queue.as_str(),
                    %error,
                    retry_in_ms = pause.as_millis() as u64,
                    "{what} failed; retrying"
                );
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = rt.hard_stop.cancelled() => return None,
                }
            }
        }
    }
}
