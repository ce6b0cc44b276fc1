//! `pgflow runs`, `pgflow run <id>` and `pgflow start`.

use std::io::Read;
use std::path::Path;

use comfy_table::Cell;
use pgflow_runtime::admin::inspect;
use serde_json::json;

use super::{resolve_flow, resolve_run_id};
use crate::args::StatusArg;
use crate::failure::Failure;
use crate::output::Output;
use crate::payload;
use pgflow_runtime::admin::human;

/// How many troubled tasks `pgflow run` lists at most.
const TASKS_SHOWN: i64 = 50;

/// How many failed attempts `pgflow run` lists at most.
const ATTEMPTS_SHOWN: i64 = 100;

/// What else a run's header says: its schedule, retries, origin, key and cancellation.
fn run_notes(run: &pgflow::Run) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(at) = run.scheduled_for {
        notes.push(format!("scheduled for {}", human::timestamp(at)));
    }
    if run.retry_count > 0 {
        notes.push(format!(
            "retried {}",
            crate::output::count(run.retry_count, "time", "times")
        ));
    }
    if let (Some(from), Some(step)) = (run.resumed_from, &run.resumed_at_step) {
        notes.push(format!("resumed from run {from} at step `{step}`"));
    }
    if let (Some(parent), Some(step), Some(task)) = (
        run.parent_run_id,
        &run.parent_step_slug,
        run.parent_task_index,
    ) {
        notes.push(format!(
            "child of run {parent} (step `{step}`, task {task})"
        ));
    }
    if let Some(key) = &run.idempotency_key {
        notes.push(format!("idempotency key `{key}`"));
    }
    if run.priority() != pgflow::Priority::Normal {
        notes.push(format!("priority {}", run.priority()));
    }
    if run.cancelled_at.is_some() {
        let reason = run.cancel_reason.as_deref().unwrap_or("no reason given");
        notes.push(format!("cancelled: {reason}"));
    }
    notes
}

/// The newest runs, of one flow or alias and in one status if given.
pub(super) async fn list(
    pool: &pgflow::Db,
    out: &Output,
    flow: Option<&str>,
    status: Option<StatusArg>,
    limit: i64,
) -> Result<(), Failure> {
    if let Some(name) = flow {
        // An unknown name is a mistake to report, not an empty table.
        resolve_flow(pool, name).await?;
    }
    let rows = inspect::recent_runs(pool, flow, status.map(StatusArg::state), limit).await?;
    out.print(
        json!(
            rows.iter()
                .map(|r| json!({
                    "run_id": r.run_id, "flow_slug": r.flow_slug, "status": r.shown_status(),
                    "started_at": r.started_at, "scheduled_for": r.scheduled_for,
                    "completed_at": r.completed_at, "failed_at": r.failed_at,
                    "cancelled_at": r.cancelled_at,
                }))
                .collect::<Vec<_>>()
        ),
        || {
            if rows.is_empty() {
                return match (flow, status) {
                    (None, None) => "no runs yet (`pgflow start <flow>` starts one)".to_owned(),
                    _ => "no runs match".to_owned(),
                };
            }
            let mut table = out.table(&["run", "flow", "status", "started", "took"]);
            for r in &rows {
                table.add_row(vec![
                    Cell::new(r.run_id),
                    Cell::new(&r.flow_slug),
                    out.status(r.shown_status()),
                    Cell::new(human::ago(r.started_at)),
                    Cell::new(r.took().map_or_else(
                        || "-".to_owned(),
                        |took| human::between(r.started_at, r.started_at + took),
                    )),
                ]);
            }
            crate::output::render(&table)
        },
    );
    Ok(())
}

/// One run: its input and output, its steps with their timing and outputs, and the tasks that
/// needed retries. Payloads are cut to a bound in text unless `full`; `--json` has them whole.
pub(super) async fn show(
    pool: &pgflow::Db,
    out: &Output,
    run_id: &str,
    full: bool,
) -> Result<(), Failure> {
    let run_id = resolve_run_id(pool, run_id).await?;
    let run = pgflow::engine::run(pool, run_id).await?;
    let steps = inspect::run_steps(pool, run_id).await?;
    let waits = inspect::run_waits(pool, run_id).await?;
    let holds = inspect::run_holds(pool, run_id).await?;
    let rate_waits = inspect::run_rate_waits(pool, run_id).await?;
    let turn = inspect::run_turn(pool, run_id).await?;
    let children = pgflow::engine::run_children(pool, run_id).await?;
    let tasks = inspect::troubled_tasks(pool, run_id, TASKS_SHOWN).await?;
    let mut attempts = inspect::failed_attempts(pool, run_id, ATTEMPTS_SHOWN + 1).await?;
    let more_attempts = attempts.len() > ATTEMPTS_SHOWN as usize;
    attempts.truncate(ATTEMPTS_SHOWN as usize);
    let status = run.shown_status();
    out.print(
        json!({
            "run_id": run.run_id, "flow_slug": run.flow_slug, "status": status,
            "started_at": run.started_at, "completed_at": run.completed_at, "failed_at": run.failed_at,
            "cancelled_at": run.cancelled_at, "cancel_reason": run.cancel_reason,
            "scheduled_for": run.scheduled_for, "retry_count": run.retry_count,
            "resumed_from": run.resumed_from, "resumed_at_step": run.resumed_at_step,
            "parent_run_id": run.parent_run_id, "parent_step_slug": run.parent_step_slug,
            "parent_task_index": run.parent_task_index, "children": children,
            "idempotency_key": run.idempotency_key, "priority": run.priority(),
            "input": run.input, "output": run.output,
            "steps": steps, "waits": waits, "held": holds, "rate_waits": rate_waits, "in_line": turn, "retried_tasks": tasks, "failed_attempts": attempts,
        }),
        || {
            let now = chrono::Utc::now();
            let took = match (run.took(), run.ended_at(), run.scheduled_for) {
                (Some(took), _, _) => {
                    format!("took {}", human::between(run.started_at, run.started_at + took))
                }
                (None, Some(_), _) => "ended before it began".to_owned(),
                (None, None, Some(at)) if at > now => {
                    format!("begins in {}", human::between(now, at))
                }
                (None, None, at) => {
                    let began = at.map_or(run.started_at, |at| at.max(run.started_at));
                    format!("running for {}", human::between(began, now))
                }
            };
            let mut text = format!(
                "run {} of `{}`: {status}, started {} ({}), {took}\n",
                run.run_id,
                run.flow_slug,
                human::timestamp(run.started_at),
                human::ago(run.started_at),
            );
            for line in run_notes(&run) {
                text.push_str(&format!("  {line}\n"));
            }
            if let Some(turn) = &turn {
                let holder = turn
                    .holder_run_id
                    .map_or_else(String::new, |id| format!(", held by run {id}"));
                text.push_str(&format!(
                    "  in line for singleton key `{}`{holder}: place {}, waiting since {}\n",
                    turn.key,
                    turn.place,
                    human::ago(turn.waiting_since)
                ));
            }
            text.push('\n');
            text.push_str(&payload::block("input", &run.input, 0, full));
            if let Some(output) = &run.output {
                text.push_str(&payload::block("output", output, 0, full));
            }
            text.push('\n');
            let mut table = out.table(&[
                "step", "status", "queue", "tasks", "attempts", "took", "ended", "output", "error",
            ]);
            for s in &steps {
                let dash = || "-".to_owned();
                table.add_row(vec![
                    Cell::new(&s.step_slug),
                    match &s.skip_reason {
                        Some(reason) => out.coloured(&format!("{} ({reason})", s.status), &s.status),
                        None => out.status(s.shown_status()),
                    },
                    Cell::new(&s.queue_name),
                    Cell::new(s.tasks.map_or_else(dash, |t| t.to_string())),
                    Cell::new(s.max_attempt.map_or_else(dash, |a| a.to_string())),
                    Cell::new(match (s.started_at, s.ended_at) {
                        (Some(start), Some(end)) => human::between(start, end),
                        _ => dash(),
                    }),
                    Cell::new(s.ended_at.map_or_else(dash, human::timestamp)),
                    // Sized as `payload` sizes it (compact JSON), not as Postgres prints it.
                    Cell::new(s.output.as_ref().map_or_else(dash, |output| {
                        human::bytes(output.to_string().len() as i64)
                    })),
                    Cell::new(s.error.as_deref().unwrap_or("")),
                ]);
            }
            text.push_str(&crate::output::render(&table));
            if !waits.is_empty() {
                text.push_str(
                    "\n\nwaiting steps (`pgflow signal <run> <name>` sends a signal)\n",
                );
                let mut table = out.table(&["step", "waits for", "key", "since", "until"]);
                for w in &waits {
                    let until = |verb: &str, at| {
                        format!("{verb} {} (in {})", human::timestamp(at), human::between(now, at))
                    };
                    table.add_row(vec![
                        Cell::new(&w.step_slug),
                        Cell::new(match &w.signal_name {
                            Some(name) => format!("{} `{name}`", w.reason),
                            None => w.reason.clone(),
                        }),
                        Cell::new(w.signal_key.as_deref().unwrap_or("-")),
                        Cell::new(human::ago(w.waiting_since)),
                        Cell::new(match w.deadline {
                            Some(at) if w.sleeps() => until("wakes", at),
                            Some(at) => until("times out", at),
                            None => "no time-out".to_owned(),
                        }),
                    ]);
                }
                text.push_str(&crate::output::render(&table));
            }
            if !holds.is_empty() {
                text.push_str("\n\nheld back (tasks waiting for a slot of their step's cap)\n");
                let mut table = out.table(&["step", "tasks", "why"]);
                for h in &holds {
                    table.add_row(vec![
                        Cell::new(&h.step_slug),
                        Cell::new(h.held),
                        Cell::new(format!("held: {}", h.reason())),
                    ]);
                }
                text.push_str(&crate::output::render(&table));
            }
            if !rate_waits.is_empty() {
                text.push_str("\n\nheld back (tasks waiting for a token of their step's rate limit)\n");
                let mut table = out.table(&["step", "tasks", "why", "next due"]);
                for w in &rate_waits {
                    table.add_row(vec![
                        Cell::new(&w.step_slug),
                        Cell::new(w.waiting),
                        Cell::new(format!("held: {}", w.reason())),
                        Cell::new(match w.next_due_at {
                            Some(at) if at > now => format!("in {}", human::between(now, at)),
                            Some(_) => "now".to_owned(),
                            None => "in line".to_owned(),
                        }),
                    ]);
                }
                text.push_str(&crate::output::render(&table));
            }
            if !children.is_empty() {
                text.push_str("\n\nchild runs (`pgflow run <id>` shows one)\n");
                let mut table = out.table(&["step", "task", "run", "flow", "status"]);
                for c in &children {
                    table.add_row(vec![
                        Cell::new(&c.parent_step_slug),
                        Cell::new(c.parent_task_index),
                        Cell::new(c.run_id),
                        Cell::new(&c.flow_slug),
                        out.status(&c.status),
                    ]);
                }
                text.push_str(&crate::output::render(&table));
            }
            let outputs: Vec<_> = steps
                .iter()
                .filter_map(|s| Some((&s.step_slug, s.output.as_ref()?)))
                .collect();
            if !outputs.is_empty() {
                text.push_str("\n\nstep outputs\n");
                for (step, output) in outputs {
                    text.push_str(&payload::block(step, output, 2, full));
                }
                text.pop();
            }
            if !tasks.is_empty() {
                text.push_str("\n\ntasks that were retried, requeued or failed\n");
                let mut table = out.table(&[
                    "step", "task", "status", "attempts", "requeues", "last error",
                ]);
                for t in &tasks {
                    table.add_row(vec![
                        Cell::new(&t.step_slug),
                        Cell::new(t.task_index),
                        out.status(&t.status),
                        Cell::new(t.attempts),
                        Cell::new(t.requeues),
                        Cell::new(t.last_error.as_deref().unwrap_or("")),
                    ]);
                }
                text.push_str(&crate::output::render(&table));
            }
            if !attempts.is_empty() {
                text.push_str("\n\nattempts that did not succeed\n");
                text.push_str(&attempt_table(out, &attempts));
                if more_attempts {
                    text.push_str(&format!(
                        "\n(the first {ATTEMPTS_SHOWN}; `pgflow run {run_id} --json` has the same)"
                    ));
                }
            }
            text
        },
    );
    Ok(())
}

/// The attempt history: one row per attempt that failed or stalled.
fn attempt_table(out: &Output, attempts: &[inspect::FailedAttempt]) -> String {
    let mut table = out.table(&[
        "step", "task", "attempt", "outcome", "worker", "started", "took", "error",
    ]);
    for a in attempts {
        table.add_row(vec![
            Cell::new(&a.step_slug),
            Cell::new(a.task_index),
            Cell::new(a.attempt),
            out.status(&a.outcome),
            Cell::new(
                a.worker_id
                    .map_or_else(|| "-".to_owned(), super::workers::short_id),
            ),
            Cell::new(
                a.started_at
                    .map_or_else(|| "-".to_owned(), human::timestamp),
            ),
            Cell::new(
                a.started_at
                    .map_or_else(|| "-".to_owned(), |start| human::between(start, a.ended_at)),
            ),
            Cell::new(&a.error),
        ]);
    }
    crate::output::render(&table)
}

/// A JSON argument of the command line: its flag (`--input`, with `--input-file` beside it)
/// and what it holds, as errors name it.
#[derive(Clone, Copy)]
pub(super) struct JsonArg {
    flag: &'static str,
    what: &'static str,
}

impl JsonArg {
    /// `pgflow start`'s `--input`.
    pub(super) const INPUT: Self = Self {
        flag: "input",
        what: "input",
    };
    /// `pgflow signal`'s `--payload`.
    pub(super) const PAYLOAD: Self = Self {
        flag: "payload",
        what: "payload",
    };
}

/// A JSON argument's value: `--<flag> JSON`, `--<flag> -` (stdin) or `--<flag>-file PATH`;
/// `null` without either.
pub(super) fn read_json(
    value: Option<&str>,
    file: Option<&Path>,
    arg: JsonArg,
) -> Result<serde_json::Value, Failure> {
    let JsonArg { flag, what } = arg;
    let (text, source) = match (value, file) {
        (_, Some(path)) => (
            std::fs::read_to_string(path).map_err(|e| {
                Failure::usage(format!("cannot read --{flag}-file {}: {e}", path.display()))
            })?,
            format!("--{flag}-file {}", path.display()),
        ),
        (Some("-"), None) => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| Failure::usage(format!("cannot read the {what} from stdin: {e}")))?;
            (text, format!("the {what} on stdin"))
        }
        (Some(text), None) => (text.to_owned(), format!("--{flag}")),
        (None, None) => return Ok(serde_json::Value::Null),
    };
    serde_json::from_str(&text)
        .map_err(|e| Failure::usage(format!("{source} is not valid JSON: {e}")))
}

/// Sends signal `name` with `payload` to run `run_id`.
pub(super) async fn signal(
    db: &pgflow::Db,
    out: &Output,
    run_id: uuid::Uuid,
    name: &str,
    payload: &serde_json::Value,
) -> Result<(), Failure> {
    let outcome = pgflow::engine::send_signal_value(db, run_id, name, payload).await?;
    out.print(
        json!({ "outcome": outcome.as_str(), "run_id": run_id, "signal": name }),
        || match outcome {
            pgflow::SignalOutcome::Delivered => {
                format!(
                    "signal `{name}` delivered to run {run_id}: the step that waited for it starts"
                )
            }
            pgflow::SignalOutcome::Kept => format!(
                "signal `{name}` kept for run {run_id}: the step that waits for it has not been \
                 reached yet, and will start without waiting"
            ),
            _ => format!(
                "run {run_id} already received signal `{name}` with this payload; nothing changed"
            ),
        },
    );
    Ok(())
}

/// Delivers event `name` with `payload` to the runs waiting for it by `key`.
pub(super) async fn emit(
    db: &pgflow::Db,
    out: &Output,
    name: &str,
    key: &str,
    payload: serde_json::Value,
) -> Result<(), Failure> {
    let reached = pgflow::engine::emit_events(db, name, &[(key.to_owned(), payload)]).await?;
    out.print(
        json!({ "event": name, "key": key, "runs": reached }),
        || match reached.as_slice() {
            [] => format!("no run waits for event `{name}` with key `{key}`; nothing changed"),
            runs => {
                let mut text = format!(
                    "event `{name}` with key `{key}` reached {} run{}:",
                    runs.len(),
                    if runs.len() == 1 { "" } else { "s" }
                );
                for run in runs {
                    text.push_str(&format!("\n  {} (step {})", run.run_id, run.step_slug));
                }
                text
            }
        },
    );
    Ok(())
}

/// Starts a run of an alias or a concrete flow.
pub(super) async fn start(
    pool: &pgflow::Db,
    out: &Output,
    flow: &str,
    input: &serde_json::Value,
    how: &pgflow::engine::StartRuns,
) -> Result<(), Failure> {
    let mut runs =
        pgflow::engine::start_flows_with(pool, flow, std::slice::from_ref(input), how).await?;
    let started = runs
        .pop()
        .ok_or_else(|| Failure::runtime(format!("no run of `{flow}` was started")))?;
    let (run, outcome) = (started.run, started.outcome);
    out.print(
        json!({
            "outcome": outcome.as_str(),
            "run_id": run.run_id,
            "flow_slug": run.flow_slug,
            "status": run.status.as_str(),
            "idempotency_key": run.idempotency_key,
            "scheduled_for": run.scheduled_for,
            "priority": run.priority(),
        }),
        || {
            let head = match (outcome, &run.idempotency_key) {
                (pgflow::StartOutcome::Debounced, _) => format!(
                    "debounced: run {} of `{}` takes this input and begins a window from now",
                    run.run_id, run.flow_slug
                ),
                (pgflow::StartOutcome::InLine, _) => format!(
                    "in line: run {} of `{}` waits its turn, and begins once the runs of its \
                     singleton key before it have ended",
                    run.run_id, run.flow_slug
                ),
                (pgflow::StartOutcome::Dropped, _) => format!(
                    "dropped: run {} of `{}` holds the throttle window (status {}); nothing new \
                     was started",
                    run.run_id,
                    run.flow_slug,
                    run.status.as_str()
                ),
                (pgflow::StartOutcome::AlreadyExisted, Some(key)) => format!(
                    "already existed: run {} of `{}` holds key `{key}` (status {}); nothing \
                     new was started",
                    run.run_id,
                    run.flow_slug,
                    run.status.as_str()
                ),
                (_, Some(key)) => format!(
                    "started run {} of `{}` with key `{key}`",
                    run.run_id, run.flow_slug
                ),
                (_, None) => format!("started run {} of `{}`", run.run_id, run.flow_slug),
            };
            let head = match run.scheduled_for {
                Some(at) if at > chrono::Utc::now() => {
                    format!("{head}; its first tasks start at {}", at.to_rfc3339())
                }
                _ => head,
            };
            format!(
                "{head}\n  follow it:  pgflow run {}\n  its graph:  pgflow graph {} --run {}",
                run.run_id, run.flow_slug, run.run_id
            )
        },
    );
    Ok(())
}
