//! Metrics through the [`metrics`] facade: the runtime records counters and histograms, and
//! whatever recorder the application installed receives them (none: they cost a lookup and
//! go nowhere). No exporter is forced on library users; the `prometheus` feature adds one,
//! `serve_prometheus`, which also reads the database gauges on each scrape.
//!
//! Labels are the queue, the concrete flow and the step, never a run id (one series per run
//! would grow without bound). Every name is in [`names`]; `docs/operations/observability.md`
//! lists them with example alerts.
//!
//! The facade rather than OpenTelemetry metrics: it is a small crate every Rust metrics backend
//! speaks (Prometheus, StatsD, and OpenTelemetry itself through a bridge), so an application
//! keeps the backend it has; OpenTelemetry's SDK would put its pipeline in every worker.

use std::time::Duration;

use crate::db::Db;
use crate::error::EngineError;

/// The metric names.
pub mod names {
    /// Counter: tasks claimed by a worker (`queue`, `flow`, `step`).
    pub const TASKS_CLAIMED: &str = "pgflow_tasks_claimed_total";
    /// Counter: task attempts that completed (`queue`, `flow`, `step`).
    pub const TASKS_COMPLETED: &str = "pgflow_tasks_completed_total";
    /// Counter: task attempts that failed (`queue`, `flow`, `step`, `outcome`: `retrying` when
    /// another attempt follows, `failed` when the task failed for good, `skipped` when that
    /// skipped its step, `discarded` when its run had ended).
    pub const TASKS_FAILED: &str = "pgflow_tasks_failed_total";
    /// Counter: attempts whose handler ran past the step's timeout (`queue`, `flow`, `step`).
    pub const TASKS_TIMED_OUT: &str = "pgflow_tasks_timed_out_total";
    /// Counter: attempts whose handler panicked (`queue`, `flow`, `step`).
    pub const TASKS_PANICKED: &str = "pgflow_tasks_panicked_total";
    /// Counter: started tasks found stalled by the recovery sweep (`queue`).
    pub const TASKS_STALLED: &str = "pgflow_tasks_stalled_total";
    /// Counter: stalled tasks queued again (`queue`).
    pub const TASKS_REQUEUED: &str = "pgflow_tasks_requeued_total";
    /// Counter: messages a claim removed with no queued task behind them (`queue`).
    pub const STALE_MESSAGES: &str = "pgflow_stale_messages_total";
    /// Histogram, seconds: one handler run (`queue`, `flow`, `step`).
    pub const HANDLER_DURATION: &str = "pgflow_handler_duration_seconds";
    /// Histogram, seconds: one claim's round trip, read and start (`queue`).
    pub const CLAIM_DURATION: &str = "pgflow_claim_duration_seconds";
    /// Histogram: results stored per call (`queue`, `kind`: `completions` or `failures`).
    pub const RESULT_BATCH_SIZE: &str = "pgflow_result_batch_size";
    /// Histogram, seconds: one result-storing call, retries included (`queue`, `kind`).
    pub const RESULT_STORE_DURATION: &str = "pgflow_result_store_duration_seconds";
    /// Counter: runs started by clients of this process (`flow`: the name started).
    pub const RUNS_STARTED: &str = "pgflow_runs_started_total";
    /// Counter: runs that a task of this worker failed for good (`queue`, `flow`).
    pub const RUNS_FAILED: &str = "pgflow_runs_failed_total";
    /// Gauge: handler slots in use on a worker (`queue`, `worker`: the worker id).
    pub const SLOTS_BUSY: &str = "pgflow_worker_slots_busy";
    /// Gauge, read from Postgres: messages visible or waiting in a queue (`queue`).
    pub const QUEUE_DEPTH: &str = "pgflow_queue_depth";
    /// Gauge, read from Postgres: age of a queue's oldest message in seconds (`queue`).
    pub const QUEUE_OLDEST_AGE: &str = "pgflow_queue_oldest_message_age_seconds";
    /// Gauge, read from Postgres: tasks claimed and not finished on a queue (`queue`).
    pub const TASKS_IN_FLIGHT: &str = "pgflow_tasks_in_flight";
    /// Gauge, read from Postgres: live workers polling a queue (`queue`).
    pub const LIVE_WORKERS: &str = "pgflow_live_workers";
    /// Gauge, read from Postgres: a queue's cap of tasks running at once (`queue`; 0 without
    /// one), to read beside [`TASKS_IN_FLIGHT`].
    pub const QUEUE_CONCURRENCY: &str = "pgflow_queue_concurrency";
    /// Gauge, read from Postgres: steps waiting (`flow`, `reason`: `signal` for a step waiting
    /// for a signal by run id, `event` for one an event reaches by key, `sleep` for one that
    /// sleeps, `subflow` for one waiting for its child runs).
    pub const WAITING_STEPS: &str = "pgflow_waiting_steps";
    /// Gauge, read from Postgres: runs with a step waiting (`flow`, `reason`, as
    /// [`WAITING_STEPS`]; and `turn` for runs waiting in a singleton key's line, which have no
    /// step yet); a run waiting for two reasons counts under both.
    pub const WAITING_RUNS: &str = "pgflow_waiting_runs";
    /// Gauge, read from Postgres: tasks held back (`flow`, `step`, `reason`: `concurrency` for
    /// tasks waiting for a slot of their step's cap, `rate` for tasks waiting for a token of
    /// their step's rate limit).
    pub const HELD_TASKS: &str = "pgflow_held_tasks";
    /// Gauge, read from Postgres: tasks holding a slot of their step's concurrency cap (`flow`,
    /// `step`).
    pub const CAPPED_RUNNING: &str = "pgflow_capped_tasks_running";
}

/// The labels of a task's metrics.
pub(crate) fn task_labels(queue: &str, flow: &str, step: &str) -> [(&'static str, String); 3] {
    [
        ("queue", queue.to_owned()),
        ("flow", flow.to_owned()),
        ("step", step.to_owned()),
    ]
}

/// Counts one event of `name` for a task.
pub(crate) fn count_task(name: &'static str, queue: &str, flow: &str, step: &str) {
    metrics::counter!(name, &task_labels(queue, flow, step)).increment(1);
}

/// Records how long a handler ran.
pub(crate) fn handler_duration(queue: &str, flow: &str, step: &str, took: Duration) {
    metrics::histogram!(names::HANDLER_DURATION, &task_labels(queue, flow, step))
        .record(took.as_secs_f64());
}

/// Records a claim's round trip.
pub(crate) fn claim_duration(queue: &str, took: Duration) {
    metrics::histogram!(names::CLAIM_DURATION, "queue" => queue.to_owned())
        .record(took.as_secs_f64());
}

/// Records one result-storing call of `kind` (`completions` or `failures`).
pub(crate) fn result_store(queue: &str, kind: &'static str, batch: usize, took: Duration) {
    let labels = [("queue", queue.to_owned()), ("kind", kind.to_owned())];
    metrics::histogram!(names::RESULT_BATCH_SIZE, &labels).record(batch as f64);
    metrics::histogram!(names::RESULT_STORE_DURATION, &labels).record(took.as_secs_f64());
}

/// Counts `count` events of a per-queue counter.
pub(crate) fn count_queue(name: &'static str, queue: &str, count: u64) {
    metrics::counter!(name, "queue" => queue.to_owned()).increment(count);
}

/// Counts runs of `flow` this worker's results ended (`name`: completed or failed; a cancel
/// ends a run from outside, and is not counted here).
pub(crate) fn count_runs(name: &'static str, queue: &str, flow: &str, count: u64) {
    metrics::counter!(name, "queue" => queue.to_owned(), "flow" => flow.to_owned())
        .increment(count);
}

/// Counts runs started by a client.
pub(crate) fn runs_started(flow: &str, count: usize) {
    metrics::counter!(names::RUNS_STARTED, "flow" => flow.to_owned()).increment(count as u64);
}

/// Sets a worker's busy-slot gauge.
pub(crate) fn slots_busy(queue: &str, worker: &str, busy: usize) {
    metrics::gauge!(names::SLOTS_BUSY, "queue" => queue.to_owned(), "worker" => worker.to_owned())
        .set(busy as f64);
}

/// Reads the gauges only Postgres knows (queue depth, oldest message age, tasks in flight, live
/// workers per queue; waiting steps per flow; held and capped tasks per step) and sets them on the installed recorder. Whoever serves metrics calls it
/// before each scrape (`serve_prometheus` does); it reads `pgflow.queue_overview()`, which an
/// operator login may (`pgflow_operator`).
pub async fn record_database_gauges(db: &Db) -> Result<(), EngineError> {
    for queue in crate::admin::inspect::queues(db).await? {
        let label = [("queue", queue.queue_name)];
        metrics::gauge!(names::QUEUE_DEPTH, &label).set(queue.depth as f64);
        metrics::gauge!(names::QUEUE_OLDEST_AGE, &label)
            .set(f64::from(queue.oldest_message_age_seconds.unwrap_or(0)));
        metrics::gauge!(names::TASKS_IN_FLIGHT, &label).set(queue.in_flight_tasks as f64);
        metrics::gauge!(names::LIVE_WORKERS, &label).set(queue.live_workers as f64);
        metrics::gauge!(names::QUEUE_CONCURRENCY, &label)
            .set(f64::from(queue.concurrency.unwrap_or(0)));
    }
    for waiting in crate::admin::inspect::waiting_steps(db).await? {
        let labels = [("flow", waiting.flow_slug), ("reason", waiting.reason)];
        metrics::gauge!(names::WAITING_STEPS, &labels).set(waiting.steps as f64);
        metrics::gauge!(names::WAITING_RUNS, &labels).set(waiting.runs as f64);
    }
    for capped in crate::admin::inspect::held_tasks(db).await? {
        let step = [("flow", capped.flow_slug), ("step", capped.step_slug)];
        metrics::gauge!(names::CAPPED_RUNNING, &step).set(capped.running as f64);
        let held = [
            step[0].clone(),
            step[1].clone(),
            ("reason", "concurrency".to_owned()),
        ];
        metrics::gauge!(names::HELD_TASKS, &held).set(capped.held as f64);
    }
    for limited in crate::admin::inspect::rate_waiting(db).await? {
        let held = [
            ("flow", limited.flow_slug),
            ("step", limited.step_slug),
            ("reason", "rate".to_owned()),
        ];
        metrics::gauge!(names::HELD_TASKS, &held).set(limited.waiting as f64);
    }
    Ok(())
}

#[cfg(feature = "prometheus")]
mod prometheus;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use prometheus::{PrometheusServer, prometheus_router, serve_prometheus};
