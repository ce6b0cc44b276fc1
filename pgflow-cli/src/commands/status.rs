//! `pgflow status`: queues, workers, aliases and open rollouts at a glance.

use comfy_table::Cell;
use pgflow_runtime::admin::inspect::{self, WorkerEntry, WorkerFilter, WorkerLiveness};
use serde_json::json;

use crate::failure::Failure;
use crate::output::Output;
use pgflow_runtime::admin::human;

/// The workers of `queue` among `workers`.
fn on_queue<'a>(
    workers: &'a [WorkerEntry],
    queue: &'a str,
) -> impl Iterator<Item = &'a WorkerEntry> {
    workers.iter().filter(move |w| w.queue_name == queue)
}

/// How many of `workers` are in `state`.
fn count(workers: &[&WorkerEntry], state: WorkerLiveness) -> usize {
    workers.iter().filter(|w| w.liveness() == state).count()
}

/// Prints the overview.
/// Keys of capped (and of rate-limited) steps shown, those with the most tasks waiting first.
const CAP_KEYS_SHOWN: i64 = 10;

pub(super) async fn status(pool: &pgflow::Db, out: &Output) -> Result<(), Failure> {
    let queues = inspect::queues(pool).await?;
    let workers = inspect::workers(pool, WorkerFilter::NotStopped).await?;
    let aliases = inspect::aliases(pool).await?;
    let rollouts = pgflow::engine::rollouts(pool, true).await?;
    // The engine's plans rely on current statistics (docs/operations/database-upkeep.md).
    let autovacuum = inspect::autovacuum_enabled(pool).await?;
    let caps = inspect::cap_use(pool, CAP_KEYS_SHOWN).await?;
    let rates = inspect::rate_use(pool, CAP_KEYS_SHOWN).await?;
    let lines = inspect::singleton_lines(pool, CAP_KEYS_SHOWN).await?;
    let paused_flows = inspect::paused_flows(pool).await?;
    out.print(
        json!({
            "queues": queues.iter().map(|q| json!({
                "queue_name": q.queue_name, "depth": q.depth,
                "oldest_message_age_seconds": q.oldest_message_age_seconds,
                "in_flight_tasks": q.in_flight_tasks, "paused": q.paused,
                "concurrency": q.concurrency,
                "workers": on_queue(&workers, &q.queue_name).map(|w| json!({
                    "worker_id": w.worker_id,
                    "function_name": w.function_name, "flow_slugs": w.flow_slugs,
                    "deprecated": w.deprecated, "state": w.liveness().as_str(),
                    "heartbeat_age_seconds": w.heartbeat_age_seconds,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "aliases": aliases.iter().map(|a| json!({
                "alias": a.alias, "flow_slug": a.flow_slug, "version": a.version
            })).collect::<Vec<_>>(),
            "open_rollouts": rollouts,
            "autovacuum": autovacuum,
            "caps": caps,
            "rate_limits": rates,
            "singleton_lines": lines,
            "paused_flows": paused_flows,
        }),
        || {
            let mut text = String::new();
            if queues.is_empty() {
                text.push_str("no queues yet: a worker creates its flows' queues when it starts\n");
            } else {
                let mut table = out.table(&[
                    "queue",
                    "depth",
                    "oldest",
                    "in flight",
                    "workers",
                    "serving",
                ]);
                for q in &queues {
                    let here: Vec<&WorkerEntry> = on_queue(&workers, &q.queue_name).collect();
                    let alive = count(&here, WorkerLiveness::Alive);
                    // No worker at all is said in words, not only in red.
                    let mut counts = Vec::new();
                    counts.push(if alive == 0 {
                        "no live worker".to_owned()
                    } else {
                        format!("{alive} alive")
                    });
                    for state in [WorkerLiveness::Draining, WorkerLiveness::Stale] {
                        let n = count(&here, state);
                        if n > 0 {
                            counts.push(format!("{n} {}", state.as_str()));
                        }
                    }
                    let serving: Vec<String> = here
                        .iter()
                        .filter(|w| w.liveness() == WorkerLiveness::Alive)
                        .map(|w| format!("{}[{}]", w.function_name, w.flow_slugs.join(",")))
                        .collect();
                    // Work waits and nothing serves it: the line that matters, in red.
                    // A pause comes first: it is why nothing moves.
                    let text = if q.paused {
                        format!("paused; {}", counts.join(", "))
                    } else {
                        counts.join(", ")
                    };
                    let workers_cell = if q.paused {
                        out.coloured(&text, "paused")
                    } else if alive == 0 && q.depth > 0 {
                        out.coloured(&text, "stale")
                    } else {
                        Cell::new(text)
                    };
                    table.add_row(vec![
                        Cell::new(&q.queue_name),
                        Cell::new(q.depth),
                        Cell::new(
                            q.oldest_message_age_seconds
                                .map_or_else(|| "-".to_owned(), |a| human::compact(f64::from(a))),
                        ),
                        Cell::new(match q.concurrency {
                            Some(cap) => format!("{} (cap {cap})", q.in_flight_tasks),
                            None => q.in_flight_tasks.to_string(),
                        }),
                        workers_cell,
                        Cell::new(if serving.is_empty() {
                            "-".to_owned()
                        } else {
                            serving.join("; ")
                        }),
                    ]);
                }
                text.push_str(&crate::output::render(&table));
                text.push('\n');
            }
            if !caps.is_empty() {
                text.push_str("\nconcurrency caps in use (the keys with the most tasks waiting)\n");
                let mut table =
                    out.table(&["step", "key", "cap", "running", "held", "waiting since"]);
                for c in &caps {
                    table.add_row(vec![
                        Cell::new(format!("{}/{}", c.flow_slug, c.step_slug)),
                        Cell::new(if c.keyed { c.cap_key.as_str() } else { "-" }),
                        Cell::new(c.cap),
                        Cell::new(c.running),
                        if c.held > 0 && c.running == 0 {
                            // Waiting with nothing running: the sweep has not run (no worker).
                            out.coloured(&c.held.to_string(), "stale")
                        } else {
                            Cell::new(c.held)
                        },
                        Cell::new(c.oldest_held_at.map_or_else(|| "-".to_owned(), human::ago)),
                    ]);
                }
                text.push_str(&crate::output::render(&table));
                text.push('\n');
            }
            if !rates.is_empty() {
                text.push_str("\nrate limits in use (the keys with the most tasks waiting)\n");
                let mut table = out.table(&[
                    "step",
                    "key",
                    "limit",
                    "started (last period)",
                    "waiting",
                    "waiting since",
                ]);
                for r in &rates {
                    table.add_row(vec![
                        Cell::new(format!("{}/{}", r.scope, r.step_slug)),
                        Cell::new(if r.keyed { r.rate_key.as_str() } else { "-" }),
                        Cell::new(format!(
                            "{} per {}",
                            r.rate_limit,
                            inspect::period_text(r.period_ms)
                        )),
                        Cell::new(r.started),
                        Cell::new(r.waiting),
                        Cell::new(
                            r.oldest_waiting_since
                                .map_or_else(|| "-".to_owned(), human::ago),
                        ),
                    ]);
                }
                text.push_str(&crate::output::render(&table));
                text.push('\n');
            }
            if !lines.is_empty() {
                text.push_str(
                    "\nruns waiting their turn (singleton keys, the longest lines first)\n",
                );
                let mut table = out.table(&["key", "held by run", "waiting", "waiting since"]);
                for l in &lines {
                    table.add_row(vec![
                        Cell::new(format!("{}/{}", l.scope, l.key)),
                        Cell::new(
                            l.holder_run_id
                                .map_or_else(|| "- (next begins)".to_owned(), |id| id.to_string()),
                        ),
                        Cell::new(l.waiting),
                        Cell::new(human::ago(l.oldest_waiting_since)),
                    ]);
                }
                text.push_str(&crate::output::render(&table));
                text.push('\n');
            }
            if !paused_flows.is_empty() {
                let list: Vec<String> = paused_flows
                    .iter()
                    .map(|p| {
                        let mut line =
                            format!("{} (since {}", p.flow_slug, human::ago(p.paused_at));
                        if let Some(reason) = &p.reason {
                            line.push_str(&format!(": {reason}"));
                        }
                        line.push_str(&format!("; {} tasks parked)", p.parked_tasks));
                        line
                    })
                    .collect();
                text.push_str(&format!("\npaused flows: {}\n", list.join(", ")));
            }
            text.push_str("\naliases: ");
            if aliases.is_empty() {
                text.push_str("none");
            } else {
                let list: Vec<String> = aliases
                    .iter()
                    .map(|a| format!("{} -> {} (v{})", a.alias, a.flow_slug, a.version))
                    .collect();
                text.push_str(&list.join(", "));
            }
            text.push_str(&format!(
                "\nopen rollouts: {}",
                if rollouts.is_empty() {
                    "none".to_owned()
                } else {
                    rollouts
                        .iter()
                        .map(|r| format!("{} ({})", r.rollout_id, r.function_names.join(",")))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ));
            if !autovacuum {
                text.push_str(
                    "\n\nwarning: autovacuum is off on this server: running workers analyze \
                     and vacuum pgflow's tables and queues themselves; other tables get nothing \
                     (see docs/operations/database-upkeep.md, Statistics and vacuum)",
                );
            }
            text
        },
    );
    Ok(())
}
