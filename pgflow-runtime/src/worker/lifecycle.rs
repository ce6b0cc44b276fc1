//! The worker's life after startup: heartbeats (which stop a deprecated worker and cancel the
//! handlers of runs that ended elsewhere), the drain at
//! shutdown, and marking the worker stopped.

use std::sync::Arc;
use std::time::Duration;

use crate::engine;
use crate::worker::runtime::Runtime;

/// Heartbeats, stopping the worker when it was deprecated, and cancelling the handlers of runs
/// that ended elsewhere. It beats through the drain too: once at once when the drain begins (a
/// run cancelled just before the shutdown still reaches its handlers, instead of holding the
/// drain for its whole grace), then at its interval until the drain ends (`run` stops it) or a
/// hard stop.
pub(super) async fn heartbeat(rt: Arc<Runtime>) {
    let started = &rt.started;
    let mut draining = false;
    loop {
        if draining {
            tokio::select! {
                () = tokio::time::sleep(rt.settings.heartbeat_interval) => {}
                () = rt.hard_stop.cancelled() => return,
            }
        } else {
            tokio::select! {
                () = tokio::time::sleep(rt.settings.heartbeat_interval) => {}
                () = rt.shutdown.cancelled() => draining = true,
                () = rt.hard_stop.cancelled() => return,
            }
        }
        let running = rt.in_flight.run_ids();
        match engine::heartbeat(&started.pool, started.worker_id, &running).await {
            Ok(beat) => {
                for run_id in &beat.ended_runs {
                    tracing::info!(
                        queue = started.queue.as_str(),
                        run_id = %run_id,
                        "run ended elsewhere (cancelled or failed): cancelling its handlers"
                    );
                }
                rt.in_flight.end(&beat.ended_runs);
                if beat.deprecated && !draining {
                    tracing::info!(
                        queue = started.queue.as_str(),
                        worker_id = %started.worker_id,
                        "worker deprecated: finishing in-flight tasks, then stopping"
                    );
                    rt.shutdown.cancel();
                    draining = true;
                }
            }
            Err(error) => {
                tracing::warn!(queue = started.queue.as_str(), %error, "heartbeat failed");
            }
        }
    }
}

/// Waits for in-flight handlers for the shutdown grace, then cancels what is left.
pub(super) async fn drain(rt: &Runtime) {
    let drained = tokio::select! {
        () = rt.slots.all_free() => true,
        () = tokio::time::sleep(rt.settings.shutdown_grace) => false,
        () = rt.hard_stop.cancelled() => false,
    };
    if !drained {
        tracing::warn!(
            queue = rt.started.queue.as_str(),
            "in-flight handlers did not finish within the shutdown grace; cancelling them \
             (their tasks will be recovered as stalled)"
        );
        rt.hard_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(1), rt.slots.all_free()).await;
    }
}

/// Records that the worker stopped, retrying a few times.
pub(super) async fn mark_stopped(rt: &Runtime) {
    let started = &rt.started;
    for _ in 0..3 {
        match engine::stop_worker(&started.pool, started.worker_id).await {
            Ok(()) => return,
            Err(error) => {
                tracing::warn!(queue = started.queue.as_str(), %error, "cannot mark the worker stopped; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
