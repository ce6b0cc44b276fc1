//! `pgflow schedules list|pause|resume|trigger|delete`.

use comfy_table::Cell;
use serde_json::json;

use crate::failure::Failure;
use crate::output::Output;
use pgflow_runtime::admin::human;

/// Every schedule with its state.
pub(super) async fn list(db: &pgflow::Db, out: &Output) -> Result<(), Failure> {
    let rows = pgflow::engine::schedule_list(db).await?;
    out.print(json!(rows), || {
        if rows.is_empty() {
            return "no schedules (workers declare them with WorkerConfig::schedule)".to_owned();
        }
        let mut table = out.table(&[
            "schedule",
            "flow",
            "cron",
            "zone",
            "missed",
            "state",
            "next",
            "last fired",
            "runs",
            "error",
        ]);
        for s in &rows {
            let missed = match s.missed.as_str() {
                "catch_up" => format!("catch up {}", s.catch_up_limit),
                other => other.to_owned(),
            };
            let state = if s.paused { "paused" } else { "active" };
            table.add_row(vec![
                Cell::new(&s.schedule_name),
                Cell::new(&s.flow_name),
                Cell::new(&s.cron),
                Cell::new(&s.time_zone),
                Cell::new(missed),
                out.status(state),
                Cell::new(if s.paused {
                    "-".to_owned()
                } else {
                    human::timestamp(s.next_fire_at)
                }),
                Cell::new(
                    s.last_fired_at
                        .map_or_else(|| "never".to_owned(), human::ago),
                ),
                Cell::new(s.runs_started),
                Cell::new(s.last_error.as_deref().unwrap_or("")),
            ]);
        }
        crate::output::render(&table)
    });
    Ok(())
}

/// Pauses (`paused`) or resumes a schedule.
pub(super) async fn pause(
    db: &pgflow::Db,
    out: &Output,
    name: &str,
    paused: bool,
) -> Result<(), Failure> {
    pgflow::engine::pause_schedule(db, name, paused).await?;
    out.print(json!({ "schedule_name": name, "paused": paused }), || {
        if paused {
            format!("paused schedule `{name}`: it starts nothing until resumed")
        } else {
            format!(
                "resumed schedule `{name}`: it fires from now on (missed ticks are not caught up)"
            )
        }
    });
    Ok(())
}

/// Starts one run of a schedule now.
pub(super) async fn trigger(db: &pgflow::Db, out: &Output, name: &str) -> Result<(), Failure> {
    let run = pgflow::engine::trigger_schedule(db, name).await?;
    out.print(
        json!({ "schedule_name": name, "run_id": run.run_id, "flow_slug": run.flow_slug }),
        || {
            format!(
                "started run {} of `{}` for schedule `{name}`\n  follow it:  pgflow run {}",
                run.run_id, run.flow_slug, run.run_id
            )
        },
    );
    Ok(())
}

/// Deletes a schedule.
pub(super) async fn delete(db: &pgflow::Db, out: &Output, name: &str) -> Result<(), Failure> {
    pgflow::engine::delete_schedule(db, name).await?;
    out.print(json!({ "schedule_name": name, "deleted": true }), || {
        format!("deleted schedule `{name}` (its runs stay)")
    });
    Ok(())
}
