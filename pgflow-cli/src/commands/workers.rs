//! `pgflow workers list|deprecate`.

use comfy_table::Cell;
use pgflow_runtime::admin::inspect::{self, WorkerFilter};
use serde_json::json;

use crate::failure::Failure;
use crate::output::Output;
use pgflow_runtime::admin::human;

/// The first 8 hex digits of a worker id: enough to tell a handful of workers apart.
pub(super) fn short_id(id: uuid::Uuid) -> String {
    id.simple().to_string()[..8].to_owned()
}

/// Workers that have not stopped (every worker with `all`), with one liveness rule.
pub(super) async fn list(pool: &pgflow::Db, out: &Output, all: bool) -> Result<(), Failure> {
    let filter = if all {
        WorkerFilter::All
    } else {
        WorkerFilter::NotStopped
    };
    let rows = inspect::workers(pool, filter).await?;
    out.print(
        json!(
            rows.iter()
                .map(|w| {
                    let mut value = json!(w);
                    value["state"] = json!(w.liveness().as_str());
                    value
                })
                .collect::<Vec<_>>()
        ),
        || {
            if rows.is_empty() {
                return if all {
                    "no workers have registered yet".to_owned()
                } else {
                    "no workers running (`pgflow workers list --all` includes stopped ones)"
                        .to_owned()
                };
            }
            let mut table =
                out.table(&["worker", "queue", "function", "state", "heartbeat", "flows"]);
            for w in &rows {
                table.add_row(vec![
                    Cell::new(short_id(w.worker_id)),
                    Cell::new(&w.queue_name),
                    Cell::new(&w.function_name),
                    out.status(w.liveness().as_str()),
                    Cell::new(human::age_seconds(w.heartbeat_age_seconds)),
                    Cell::new(w.flow_slugs.join(",")),
                ]);
            }
            crate::output::render(&table)
        },
    );
    Ok(())
}

/// Asks every live worker of a function to drain and stop.
pub(super) async fn deprecate(
    pool: &pgflow::Db,
    out: &Output,
    function: &str,
) -> Result<(), Failure> {
    let count = pgflow::engine::deprecate_workers(pool, function).await?;
    out.print(
        json!({ "function_name": function, "deprecated": count }),
        || {
            format!(
                "{} of `{function}` asked to drain and stop",
                crate::output::count(count, "live worker", "live workers")
            )
        },
    );
    Ok(())
}

/// Pauses a queue: no worker claims from it until it is resumed.
pub(super) async fn pause_queue(
    pool: &pgflow::Db,
    out: &Output,
    queue: &str,
    reason: Option<&str>,
) -> Result<(), Failure> {
    let paused = pgflow::engine::pause_queue(pool, queue, reason).await?;
    out.print(
        json!({ "queue_name": queue, "paused": true, "changed": paused }),
        || {
            if paused {
                format!(
                    "paused `{queue}`: no worker claims from it until `pgflow queue resume {queue}`"
                )
            } else {
                format!("`{queue}` was already paused")
            }
        },
    );
    Ok(())
}

/// Sets (or resets) a queue's priority aging limit.
pub(super) async fn set_priority_aging(
    pool: &pgflow::Db,
    out: &Output,
    queue: &str,
    limit: crate::args::Aging,
) -> Result<(), Failure> {
    let seconds = match limit {
        crate::args::Aging::Default => None,
        crate::args::Aging::Seconds(seconds) => Some(seconds),
    };
    pgflow::engine::set_priority_aging(pool, queue, seconds).await?;
    let shown = seconds.unwrap_or(60);
    out.print(
        json!({ "queue_name": queue, "aging_seconds": shown, "default": seconds.is_none() }),
        || {
            format!(
                "`{queue}`: tasks waiting longer than {shown} s on its priority lanes get up to \
                 a quarter of each claim, whatever their priority{}",
                if seconds.is_none() {
                    " (the default)"
                } else {
                    ""
                }
            )
        },
    );
    Ok(())
}

/// Caps a queue's running tasks, or lifts its cap.
pub(super) async fn set_queue_cap(
    pool: &pgflow::Db,
    out: &Output,
    queue: &str,
    cap: crate::args::QueueCap,
) -> Result<(), Failure> {
    let concurrency = match cap {
        crate::args::QueueCap::None => None,
        crate::args::QueueCap::AtMost(n) => Some(n),
    };
    let before = pgflow::engine::set_queue_concurrency(pool, queue, concurrency).await?;
    let shown =
        |cap: Option<u32>| cap.map_or_else(|| "no cap".to_owned(), |n| format!("{n} at once"));
    out.print(
        json!({ "queue_name": queue, "concurrency": concurrency, "before": before }),
        || {
            format!(
                "`{queue}`: {} (was {}) across every worker",
                shown(concurrency),
                shown(before)
            )
        },
    );
    Ok(())
}

/// Resumes a paused queue.
pub(super) async fn resume_queue(
    pool: &pgflow::Db,
    out: &Output,
    queue: &str,
) -> Result<(), Failure> {
    let resumed = pgflow::engine::resume_queue(pool, queue).await?;
    out.print(
        json!({ "queue_name": queue, "paused": false, "changed": resumed }),
        || {
            if resumed {
                format!("resumed `{queue}`: its workers claim from it again")
            } else {
                format!("`{queue}` was not paused")
            }
        },
    );
    Ok(())
}

/// Pauses a flow (a concrete slug, or each version of an alias): no worker runs its tasks until
/// it is resumed.
pub(super) async fn pause_flow(
    pool: &pgflow::Db,
    out: &Output,
    name: &str,
    reason: Option<&str>,
) -> Result<(), Failure> {
    let paused = pgflow::engine::pause_flow(pool, name, reason).await?;
    out.print(
        json!({ "flow": name, "paused": true, "changed": paused }),
        || {
            if paused {
                format!(
                    "paused `{name}`: workers park its tasks until `pgflow flow resume {name}`; \
                 its runs keep starting"
                )
            } else {
                format!("`{name}` was already paused")
            }
        },
    );
    Ok(())
}

/// Resumes a paused flow.
pub(super) async fn resume_flow(
    pool: &pgflow::Db,
    out: &Output,
    name: &str,
) -> Result<(), Failure> {
    let resumed = pgflow::engine::resume_flow(pool, name).await?;
    out.print(
        json!({ "flow": name, "paused": false, "changed": resumed }),
        || {
            if resumed {
                format!("resumed `{name}`: its parked tasks are queued again")
            } else {
                format!("`{name}` was not paused")
            }
        },
    );
    Ok(())
}
