//! `pgflow rollout begin|finish|status`: the fence over worker functions.

use std::time::Duration;

use serde_json::json;

use crate::failure::Failure;
use crate::output::Output;

/// Disables worker functions, deprecates their workers and (unless `no_wait`) waits until
/// they have stopped.
pub(super) async fn begin(
    pool: &pgflow::Db,
    out: &Output,
    functions: Vec<String>,
    queues: Vec<String>,
    timeout: Duration,
    no_wait: bool,
) -> Result<(), Failure> {
    let mut functions = functions;
    if !queues.is_empty() {
        let serving = pgflow::engine::functions_serving_queues(pool, &queues).await?;
        if serving.is_empty() && functions.is_empty() {
            return Err(Failure::runtime(format!(
                "no live worker serves {}; name the worker functions to fence instead",
                queues.join(", ")
            )));
        }
        functions.extend(serving);
        functions.sort();
        functions.dedup();
    }
    if functions.is_empty() {
        return Err(Failure::usage(
            "name the worker functions to fence (or --queue q for every function serving q)",
        ));
    }
    let rollout_id = pgflow::rollout::begin(pool, &functions).await?;
    if !out.json {
        println!(
            "rollout {rollout_id} begun: {} disabled, their workers deprecated",
            functions.join(", ")
        );
    }
    if !no_wait {
        let json = out.json;
        let mut last = usize::MAX;
        pgflow::rollout::wait_for_workers(pool, rollout_id, timeout, |remaining| {
            if !json && remaining.len() != last {
                last = remaining.len();
                println!(
                    "  waiting for {} to stop",
                    crate::output::count(remaining.len() as i64, "worker", "workers")
                );
            }
        })
        .await
        .map_err(|e| Failure::runtime(e.to_string()))?;
    }
    out.print(
        json!({ "rollout_id": rollout_id, "functions": functions, "workers_stopped": !no_wait }),
        || {
            format!(
                "all their workers have stopped{}; deploy the new workers now (they wait while \
                 disabled), then run `pgflow rollout finish {rollout_id}`",
                if no_wait { " (not waited for)" } else { "" }
            )
        },
    );
    Ok(())
}

/// Enables again exactly the functions that were enabled when the rollout began.
pub(super) async fn finish(
    pool: &pgflow::Db,
    out: &Output,
    rollout_id: i64,
) -> Result<(), Failure> {
    let enabled = pgflow::rollout::finish(pool, rollout_id).await?;
    out.print(json!({ "rollout_id": rollout_id, "enabled": enabled }), || {
        if enabled.is_empty() {
            format!("rollout {rollout_id} finished; no function was enabled before it, none enabled now")
        } else {
            format!("rollout {rollout_id} finished; enabled again: {}", enabled.join(", "))
        }
    });
    Ok(())
}

/// Open rollouts (every rollout with `all`) and how many of their workers still run.
pub(super) async fn status(pool: &pgflow::Db, out: &Output, all: bool) -> Result<(), Failure> {
    let rollouts = pgflow::engine::rollouts(pool, !all).await?;
    let mut rows = Vec::new();
    for rollout in &rollouts {
        let remaining = if rollout.status == "open" {
            pgflow::engine::rollout_progress(pool, rollout.rollout_id)
                .await?
                .len()
        } else {
            0
        };
        rows.push((rollout, remaining));
    }
    out.print(
        json!(
            rows.iter()
                .map(|(r, remaining)| json!({ "rollout": r, "workers_running": remaining }))
                .collect::<Vec<_>>()
        ),
        || {
            if rows.is_empty() {
                return if all {
                    "no rollouts".to_owned()
                } else {
                    "no open rollouts".to_owned()
                };
            }
            let mut table = out.table(&["id", "status", "functions", "enabled before", "running"]);
            for (r, remaining) in &rows {
                table.add_row(vec![
                    comfy_table::Cell::new(r.rollout_id),
                    out.status(&r.status),
                    comfy_table::Cell::new(r.function_names.join(",")),
                    comfy_table::Cell::new(r.enabled_before.join(",")),
                    comfy_table::Cell::new(remaining),
                ]);
            }
            crate::output::render(&table)
        },
    );
    Ok(())
}
