//! `pgflow alias set|list` and `pgflow drain-status`.

use pgflow_runtime::admin::inspect;
use serde_json::json;

use super::{alias_note, resolve_flow};
use crate::failure::Failure;
use crate::output::Output;
use pgflow_runtime::admin::human;

/// Points an alias at one of its concrete flows.
pub(super) async fn set(
    pool: &pgflow::Db,
    out: &Output,
    alias: &str,
    flow: &str,
) -> Result<(), Failure> {
    let previous = pgflow::engine::set_alias(pool, alias, flow).await?;
    out.print(
        json!({ "alias": alias, "flow_slug": flow, "previous_flow_slug": previous }),
        || match previous.as_deref() {
            Some(p) if p == flow => {
                format!("alias `{alias}` already points at `{flow}`; nothing changed")
            }
            Some(p) => format!(
                "alias `{alias}` now points at `{flow}` (was `{p}`); new runs start on `{flow}`"
            ),
            None => format!("alias `{alias}` now points at `{flow}` (it had no active version)"),
        },
    );
    Ok(())
}

/// Every alias and its active flow.
pub(super) async fn list(pool: &pgflow::Db, out: &Output) -> Result<(), Failure> {
    let rows = inspect::aliases(pool).await?;
    out.print(json!(rows), || {
        if rows.is_empty() {
            return "no aliases yet: a worker creates its flows' aliases when it starts".to_owned();
        }
        let mut table = out.table(&["alias", "active flow", "version", "activated"]);
        for row in &rows {
            table.add_row(vec![
                row.alias.clone(),
                row.flow_slug.clone(),
                row.version.to_string(),
                human::ago(row.activated_at),
            ]);
        }
        crate::output::render(&table)
    });
    Ok(())
}

/// Whether a concrete flow (or an alias's active flow) can leave the registries of a queue.
pub(super) async fn drain_status(
    pool: &pgflow::Db,
    out: &Output,
    name: &str,
    queue: Option<&str>,
) -> Result<(), Failure> {
    let resolved = resolve_flow(pool, name).await?;
    let flow = resolved.flow_slug();
    let status = pgflow::engine::drain_status(pool, flow, queue).await?;
    let value = serde_json::to_value(&status).unwrap_or_default();
    out.print(value, || {
        let scope = queue.map_or_else(|| "every queue".to_owned(), |q| format!("queue `{q}`"));
        let verdict = if status.safe_to_remove {
            format!("safe to remove `{flow}` from the registries of {scope}")
        } else {
            format!("not yet safe to remove `{flow}` from the registries of {scope}")
        };
        let mut text = alias_note(&resolved).map_or_else(String::new, |note| note + "\n");
        text.push_str(&format!(
            "{verdict}\n  active alias target   {}\n  started runs          {}\n  queued tasks          {}\n  started tasks         {}",
            if status.active { "yes (new runs start on it)" } else { "no" },
            status.started_runs,
            status.queued_tasks,
            status.started_tasks,
        ));
        if !status.pending_steps.is_empty() {
            text.push_str(&format!("\n  steps still to run    {}", status.pending_steps.join(", ")));
        }
        text
    });
    Ok(())
}
