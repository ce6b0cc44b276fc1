//! `pgflow cancel`, `pgflow retry`, `pgflow resume` and `pgflow delete-flow`: run control from
//! the command line.
//! The first three take run ids, or a filter (`--flow`, `--older-than`, `--limit`) with `--dry-run`.

use pgflow_runtime::admin::inspect;
use serde_json::json;
use uuid::Uuid;

use super::resolve_run_ids;
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
        let ids = pgflow::engine::cancel_matching(db, &runs, reason, filter.dry_run).await?;
        print_matched(out, filter.dry_run, &ids, "cancelled", "still going");
        return Ok(());
    }
    let ids = resolve_run_ids(db, run_ids).await?;
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
        let ids = pgflow::engine::retry_matching(db, &runs, filter.dry_run).await?;
        print_matched(out, filter.dry_run, &ids, "retried", "failed");
        return Ok(());
    }
    let ids = resolve_run_ids(db, run_ids).await?;
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
        let resumed =
            pgflow::engine::resume_matching(db, &runs, step, statuses, filter.dry_run).await?;
        if filter.dry_run {
            let ids: Vec<Uuid> = resumed.iter().map(|r| r.run_id).collect();
            print_matched(out, true, &ids, "resumed", "ended");
        } else {
            print_resumed_matching(out, &resumed, step);
        }
        return Ok(());
    }
    let mut resumed = Vec::new();
    for id in resolve_run_ids(db, run_ids).await? {
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

/// Fails naming the first of `asked` that is not among `found`.
fn require_found(asked: &[Uuid], found: &[Uuid]) -> Result<(), Failure> {
    match asked.iter().find(|id| !found.contains(id)) {
        Some(id) => Err(Failure::runtime(format!(
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

/// A bulk command's answer: the runs it changed (or, in a dry run, would change), one id a
/// line after the count.
fn print_matched(out: &Output, dry_run: bool, ids: &[Uuid], done: &str, eligible: &str) {
    out.print(
        json!({ "dry_run": dry_run, "count": ids.len(), "run_ids": ids }),
        || {
            let runs = crate::output::count(ids.len() as i64, "run", "runs");
            let head = match (dry_run, ids.len()) {
                (_, 0) => format!("no {eligible} run matches; none {done}"),
                (true, _) => format!("{runs} would be {done} (dry run: nothing changed):"),
                (false, _) => format!("{done} {runs}:"),
            };
            std::iter::once(head)
                .chain(ids.iter().map(|id| format!("  {id}")))
                .collect::<Vec<_>>()
                .join("\n")
        },
    );
}

/// A bulk resume's answer: each run resumed and the new run it was resumed as.
fn print_resumed_matching(out: &Output, resumed: &[pgflow::engine::Resumed], step: &str) {
    out.print(
        json!({
            "dry_run": false,
            "count": resumed.len(),
            "runs": resumed
                .iter()
                .map(|r| json!({ "resumed_from": r.run_id, "run_id": r.resumed_as }))
                .collect::<Vec<_>>(),
        }),
        || {
            if resumed.is_empty() {
                return "no ended run matches; none resumed".to_owned();
            }
            let head = format!(
                "resumed {} from `{step}`:",
                crate::output::count(resumed.len() as i64, "run", "runs")
            );
            std::iter::once(head)
                .chain(resumed.iter().map(|r| match r.resumed_as {
                    Some(new) => format!("  {} as {new}", r.run_id),
                    None => format!("  {}", r.run_id),
                }))
                .collect::<Vec<_>>()
                .join("\n")
        },
    );
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
    if let Some(inspect::FlowName::Alias { alias, flow_slug }) =
        inspect::resolve_flow_name(db, flow).await?
    {
        return Err(Failure::runtime(format!(
            "`{alias}` is an alias, not a concrete flow: delete-flow deletes one version; name it \
             (`pgflow delete-flow {flow_slug}` for the active one; `pgflow alias list` shows the \
             others)"
        )));
    }
    let deleted = pgflow::engine::delete_flow(db, flow, force).await?;
    out.print(
        json!({
            "flow_slug": flow,
            "runs": deleted.runs,
            "tasks": deleted.tasks,
            "messages": deleted.messages,
        }),
        || {
            use crate::output::count;
            format!(
                "deleted flow `{flow}` with {}, {} and {}",
                count(deleted.runs, "run", "runs"),
                count(deleted.tasks, "task", "tasks"),
                count(deleted.messages, "queued message", "queued messages")
            )
        },
    );
    Ok(())
}
