//! `pgflow prune`.

use std::time::Duration;

use serde_json::json;

use crate::failure::Failure;
use crate::output::Output;

/// Deletes what ended before `older_than` ago, `batch` runs per transaction.
pub(super) async fn prune(
    pool: &pgflow::Db,
    out: &Output,
    older_than: Duration,
    batch: i32,
) -> Result<(), Failure> {
    let pruned = pgflow::engine::prune_all(pool, older_than, batch).await?;
    out.print(
        json!({
            "busy": pruned.busy, "runs": pruned.runs, "step_states": pruned.step_states,
            "tasks": pruned.tasks, "archived_messages": pruned.archived_messages,
            "workers": pruned.workers,
        }),
        || {
            let summary = format!(
                "pruned {} run(s) ({} step state(s), {} task(s)), {} archived message(s) and {} \
                 stopped worker(s) older than {}",
                pruned.runs,
                pruned.step_states,
                pruned.tasks,
                pruned.archived_messages,
                pruned.workers,
                humantime::format_duration(older_than)
            );
            if pruned.busy {
                format!("{summary}; another prune was running, so some may be left")
            } else {
                summary
            }
        },
    );
    Ok(())
}
