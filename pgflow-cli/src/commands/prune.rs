//! `pgflow prune`.

use std::time::Duration;

use serde_json::json;

use crate::failure::Failure;
use crate::output::{Output, count};

/// Deletes what ended before `older_than` ago, `batch` runs per transaction; with `dry_run`,
/// counts what it would delete and deletes nothing.
pub(super) async fn prune(
    pool: &pgflow::Db,
    out: &Output,
    older_than: Duration,
    batch: i32,
    dry_run: bool,
) -> Result<(), Failure> {
    let pruned = if dry_run {
        pgflow::engine::prune_preview(pool, older_than).await?
    } else {
        pgflow::engine::prune_all(pool, older_than, batch).await?
    };
    out.print(
        json!({
            "dry_run": dry_run,
            "busy": pruned.busy, "runs": pruned.runs, "step_states": pruned.step_states,
            "tasks": pruned.tasks, "archived_messages": pruned.archived_messages,
            "workers": pruned.workers,
        }),
        || {
            let what = format!(
                "{} ({}, {}), {} and {} older than {}",
                count(pruned.runs, "run", "runs"),
                count(pruned.step_states, "step state", "step states"),
                count(pruned.tasks, "task", "tasks"),
                count(
                    pruned.archived_messages,
                    "archived message",
                    "archived messages"
                ),
                count(pruned.workers, "stopped worker", "stopped workers"),
                humantime::format_duration(older_than)
            );
            if dry_run {
                format!("would prune {what} (dry run: nothing deleted)")
            } else if pruned.busy {
                format!("pruned {what}; another prune was running, so some may be left")
            } else {
                format!("pruned {what}")
            }
        },
    );
    Ok(())
}
