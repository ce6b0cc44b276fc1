//! `pgflow cancel`: run control from the command line.

use serde_json::json;

use super::parse_run_id;
use crate::failure::Failure;
use crate::output::Output;

/// Which runs `pgflow cancel` takes when no run ids are given.
pub struct CancelFilter {
    /// A flow or alias.
    pub flow: Option<String>,
    /// Only runs started longer ago than this.
    pub older_than: Option<std::time::Duration>,
    /// At most this many.
    pub limit: i32,
    /// Count only.
    pub dry_run: bool,
}

/// Cancels the given runs, or those the filter names.
pub async fn cancel(
    db: &pgflow::Db,
    out: &Output,
    run_ids: &[String],
    filter: &CancelFilter,
    reason: Option<&str>,
) -> Result<(), Failure> {
    if run_ids.is_empty() {
        return cancel_matching(db, out, filter, reason).await;
    }
    let ids = run_ids
        .iter()
        .map(|id| parse_run_id(id))
        .collect::<Result<Vec<_>, _>>()?;
    let outcomes = pgflow::engine::cancel_runs(db, &ids, reason).await?;
    let unknown: Vec<_> = ids
        .iter()
        .filter(|id| !outcomes.iter().any(|o| o.run_id == **id))
        .collect();
    if let Some(id) = unknown.first() {
        return Err(Failure::usage(format!(
            "no run {id} exists (nothing was cancelled by this command for it)"
        )));
    }
    out.print(
        json!(
            outcomes
                .iter()
                .map(|o| json!({
                    "run_id": o.run_id,
                    "status": o.status.as_str(),
                    "cancelled": o.cancelled,
                }))
                .collect::<Vec<_>>()
        ),
        || {
            outcomes
                .iter()
                .map(|o| {
                    if o.cancelled {
                        format!("cancelled run {}", o.run_id)
                    } else {
                        format!(
                            "run {} had already ended ({}); left as it is",
                            o.run_id,
                            o.status.as_str()
                        )
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        },
    );
    Ok(())
}

async fn cancel_matching(
    db: &pgflow::Db,
    out: &Output,
    filter: &CancelFilter,
    reason: Option<&str>,
) -> Result<(), Failure> {
    if filter.flow.is_none() && filter.older_than.is_none() {
        return Err(Failure::usage(
            "name the runs to cancel: run ids, or a filter (--flow and/or --older-than)",
        ));
    }
    let mut runs = pgflow::engine::RunFilter::all().limit(filter.limit);
    if let Some(flow) = &filter.flow {
        runs = runs.flow(flow.clone());
    }
    if let Some(age) = filter.older_than {
        let age = chrono::Duration::from_std(age)
            .map_err(|_| Failure::usage("--older-than is too long"))?;
        runs = runs.started_before(chrono::Utc::now() - age);
    }
    let count = pgflow::engine::cancel_matching(db, &runs, reason, filter.dry_run).await?;
    out.print(
        json!({ "dry_run": filter.dry_run, "runs": count }),
        || match (filter.dry_run, count) {
            (true, n) => format!("{n} run(s) would be cancelled (dry run: nothing changed)"),
            (false, 0) => "no run still going matches; nothing cancelled".to_owned(),
            (false, n) => format!("cancelled {n} run(s)"),
        },
    );
    Ok(())
}
