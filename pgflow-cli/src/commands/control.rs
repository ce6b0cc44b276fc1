//! `pgflow cancel`, `pgflow retry`, `pgflow resume` and `pgflow delete-flow`: run control from
//! the command line.
//! The first three take run ids, or a filter (`--flow`, `--older-than`, `--limit`) with `--dry-run`.

use serde_json::json;
use uuid::Uuid;

use super::parse_run_id;
use crate::args::FilterArgs;
use crate::failure::Failure;
use crate::output::Output;

/// Cancels the given runs, or those the filter names.
pub(super) async fn cancel(
    db: &pgflow::Db,
    out: &Output,
    run_ids: &[String],
    filter: &FilterArgs,
    reason: Option<&str>,
) -> Result<(), Failure> {
    if run_ids.is_empty() {
        let runs = run_filter(filter, "cancel")?;
        let count = pgflow::engine::cancel_matching(db, &runs, reason, filter.dry_run).await?;
        print_count(out, filter.dry_run, count, "cancelled", "still going");
        return Ok(());
    }
    let ids = parse_ids(run_ids)?;
    let outcomes = pgflow::engine::cancel_runs(db, &ids, reason).await?;
    let found: Vec<_> = outcomes.iter().map(|o| o.run_id).collect();
    require_found(&ids, &found)?;
    print_outcomes(
        out,
        outcomes
            .iter()
            .map(|o| (o.run_id, o.status, o.cancelled))
            .collect(),
        "cancelled",
        "cancelled",
        |status| format!("had already ended ({status}); left as it is"),
    );
    Ok(())
}

/// Retries the given failed runs, or those the filter names.
pub(super) async fn retry(
    db: &pgflow::Db,
    out: &Output,
    run_ids: &[String],
    filter: &FilterArgs,
) -> Result<(), Failure> {
    if run_ids.is_empty() {
        let runs = run_filter(filter, "retry")?;
        let count = pgflow::engine::retry_matching(db, &runs, filter.dry_run).await?;
        print_count(out, filter.dry_run, count, "retried", "failed");
        return Ok(());
    }
    let ids = parse_ids(run_ids)?;
    let outcomes = pgflow::engine::retry_runs(db, &ids).await?;
    let found: Vec<_> = outcomes.iter().map(|o| o.run_id).collect();
    require_found(&ids, &found)?;
    print_outcomes(
        out,
        outcomes
            .iter()
            .map(|o| (o.run_id, o.status, o.retried))
            .collect(),
        "retried",
        "retried",
        |status| format!("is {status}, not failed; left as it is"),
    );
    Ok(())
}

/// Resumes the given ended runs from `step`, or those the filter names.
pub(super) async fn resume(
    db: &pgflow::Db,
    out: &Output,
    run_ids: &[String],
    step: &str,
    statuses: &[pgflow::RunStatus],
    filter: &FilterArgs,
) -> Result<(), Failure> {
    if run_ids.is_empty() {
        let runs = run_filter(filter, "resume")?;
        let count =
            pgflow::engine::resume_matching(db, &runs, step, statuses, filter.dry_run).await?;
        print_count(out, filter.dry_run, count, "resumed", "ended");
        return Ok(());
    }
    let mut resumed = Vec::new();
    for id in parse_ids(run_ids)? {
        let run = pgflow::engine::resume_run(db, id, step).await?;
        resumed.push((id, run));
    }
    out.print(
        json!(
            resumed
                .iter()
                .map(|(old, run)| json!({
                    "resumed_from": old,
                    "run_id": run.run_id,
                    "flow_slug": run.flow_slug,
                    "status": run.status.as_str(),
                }))
                .collect::<Vec<_>>()
        ),
        || {
            resumed
                .iter()
                .map(|(old, run)| {
                    format!(
                        "run {old} resumed from `{step}` as run {}\n  follow it:  pgflow run {}",
                        run.run_id, run.run_id
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        },
    );
    Ok(())
}

fn parse_ids(run_ids: &[String]) -> Result<Vec<Uuid>, Failure> {
    run_ids.iter().map(|id| parse_run_id(id)).collect()
}

/// Fails naming the first of `asked` that is not among `found`.
fn require_found(asked: &[Uuid], found: &[Uuid]) -> Result<(), Failure> {
    match asked.iter().find(|id| !found.contains(id)) {
        Some(id) => Err(Failure::usage(format!(
            "no run {id} exists; nothing was done to it"
        ))),
        None => Ok(()),
    }
}

/// The filter of a bulk command, which must name something.
fn run_filter(filter: &FilterArgs, verb: &str) -> Result<pgflow::engine::RunFilter, Failure> {
    if filter.flow.is_none() && filter.older_than.is_none() {
        return Err(Failure::usage(format!(
            "name the runs to {verb}: run ids, or a filter (--flow and/or --older-than)"
        )));
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
    Ok(runs)
}

/// A bulk command's answer: how many runs it changed (or would change).
fn print_count(out: &Output, dry_run: bool, count: i64, done: &str, eligible: &str) {
    out.print(json!({ "dry_run": dry_run, "runs": count }), || {
        match (dry_run, count) {
            (true, n) => {
                format!("{n} run(s) would be {done} (dry run: nothing changed)")
            }
            (false, 0) => format!("no {eligible} run matches; none {done}"),
            (false, n) => format!("{done} {n} run(s)"),
        }
    });
}

/// Per-run answers: `(run, status after, whether this call changed it)`.
fn print_outcomes(
    out: &Output,
    outcomes: Vec<(Uuid, pgflow::RunStatus, bool)>,
    field: &str,
    done: &str,
    unchanged: impl Fn(&str) -> String,
) {
    out.print(
        json!(
            outcomes
                .iter()
                .map(|(run_id, status, changed)| json!({
                    "run_id": run_id,
                    "status": status.as_str(),
                    field: changed,
                }))
                .collect::<Vec<_>>()
        ),
        || {
            outcomes
                .iter()
                .map(|(run_id, status, changed)| {
                    if *changed {
                        format!("{done} run {run_id}")
                    } else {
                        format!("run {run_id} {}", unchanged(status.as_str()))
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        },
    );
}

/// Deletes a concrete flow and everything of it.
pub(super) async fn delete_flow(
    db: &pgflow::Db,
    out: &Output,
    flow: &str,
    force: bool,
) -> Result<(), Failure> {
    let deleted = pgflow::engine::delete_flow(db, flow, force).await?;
    out.print(
        json!({
            "flow_slug": flow,
            "runs": deleted.runs,
            "tasks": deleted.tasks,
            "messages": deleted.messages,
        }),
        || {
            format!(
                "deleted flow `{flow}` with {} run(s), {} task(s) and {} queued message(s)",
                deleted.runs, deleted.tasks, deleted.messages
            )
        },
    );
    Ok(())
}
