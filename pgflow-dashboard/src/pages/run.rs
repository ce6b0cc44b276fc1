//! The run page: the run's facts, its DAG with each step's state, its steps' tasks, attempts,
//! durations, errors and output sizes, its failed attempts and its payloads. While the run is
//! going, the page's script follows its events and swaps in a fresh body (`GET
//! /runs/{id}/body`) after each.

use std::collections::HashMap;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::Html;
use axum::routing::get;
use maud::{Markup, PreEscaped, html};
use pgflow_runtime::Db;
use pgflow_runtime::admin::browse::{self, PayloadPreview};
use pgflow_runtime::admin::human;
use pgflow_runtime::admin::inspect;
use pgflow_runtime::engine::{self, RunStatus};
use uuid::Uuid;

use super::{badge, duration, frame, maybe_time, run_duration, run_id_of, time};
use crate::dag;
use crate::error::PageError;
use crate::state::AppState;

/// The longest error text a table cell shows.
const ERROR_CHARS: usize = 600;
/// Failed attempts listed.
const ATTEMPTS_SHOWN: i64 = 50;

/// A run's page and its live-refreshed body.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/runs/{run_id}", get(page))
        .route("/runs/{run_id}/body", get(body))
}

/// `GET /runs/{run_id}`.
pub(crate) async fn page(
    State(app): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Html<String>, PageError> {
    let run_id = run_id_of(&run_id)?;
    let body = run_body(&app, app.reads(), run_id).await?;
    let title = format!("Run {}", super::short_id(run_id));
    Ok(Html(frame(&app, &title, body).into_string()))
}

/// `GET /runs/{run_id}/body`: the page's body alone, for the live redraw.
pub(crate) async fn body(
    State(app): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Html<String>, PageError> {
    let run_id = run_id_of(&run_id)?;
    // Fetched after each of the run's events, which come from the primary: read there, or a
    // replica behind it could draw the run as it was before the event.
    Ok(Html(run_body(&app, app.db(), run_id).await?.into_string()))
}

fn truncate(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

async fn run_body(app: &AppState, db: &Db, run_id: Uuid) -> Result<Markup, PageError> {
    let run = engine::run(db, run_id).await?;
    let steps = inspect::run_steps(db, run_id).await?;
    let waits = inspect::run_waits(db, run_id).await?;
    let holds = inspect::run_holds(db, run_id).await?;
    let rate_waits = inspect::run_rate_waits(db, run_id).await?;
    let turn = inspect::run_turn(db, run_id).await?;
    let children = engine::run_children(db, run_id).await?;
    let graph = inspect::flow_graph(db, &run.flow_slug).await?;
    let counts = browse::step_task_counts(db, run_id).await?;
    let attempts = inspect::failed_attempts(db, run_id, ATTEMPTS_SHOWN).await?;
    let payloads = if app.config.hide_payloads {
        None
    } else {
        Some(browse::run_payloads(db, run_id, i32::from(app.config.payload_preview_chars)).await?)
    };

    let states: HashMap<String, String> = steps
        .iter()
        .map(|s| (s.step_slug.clone(), s.status.clone()))
        .collect();
    let map_steps: Vec<&str> = graph
        .steps
        .iter()
        .filter(|s| s.step_type == "map")
        .map(|s| s.step_slug.as_str())
        .collect();
    let live = run.status == RunStatus::Started;
    let ended_at = run.ended_at();
    let began_at = run
        .scheduled_for
        .map_or(run.started_at, |at| at.max(run.started_at));
    let actions = app.config.actions_enabled();

    Ok(html! {
        div #run-body data-run=(run_id) data-live=(live) data-status=(run.status.as_str()) {
            h1 { "Run " span.mono { (run_id) } " " (badge(run.shown_status())) }
            dl.facts {
                dt { "Flow" } dd { a href=(format!("/flows/{}", run.flow_slug)) { (run.flow_slug) } }
                dt { "Started" } dd { (time(run.started_at)) }
                dt { "Ended" } dd { (maybe_time(ended_at)) }
                dt { "Duration" } dd { (run_duration(began_at, ended_at, run.status)) }
                dt { "Steps left" } dd { (run.remaining_steps) }
                @if run.retry_count > 0 { dt { "Retries" } dd { (run.retry_count) } }
                @if let Some(reason) = &run.cancel_reason { dt { "Cancel reason" } dd { (reason) } }
                @if let Some(from) = run.resumed_from {
                    dt { "Resumed from" }
                    dd { a href=(format!("/runs/{from}")) { (from) }
                         @if let Some(step) = &run.resumed_at_step { " at " (step) } }
                }
                @if let (Some(parent), Some(step), Some(task)) =
                    (run.parent_run_id, &run.parent_step_slug, run.parent_task_index) {
                    dt { "Child of" }
                    dd { a #parent href=(format!("/runs/{parent}")) { (parent) }
                         " (step " (step) ", task " (task) ")" }
                }
                @if let Some(at) = run.scheduled_for { dt { "Scheduled for" } dd { (time(at)) } }
                @if let Some(key) = &run.idempotency_key { dt { "Idempotency key" } dd.mono { (key) } }
                @if run.priority() != engine::Priority::Normal {
                    dt { "Priority" } dd #priority { (run.priority()) }
                }
            }
            @if actions && (run.status == RunStatus::Started || run.status == RunStatus::Failed) {
                p.actions {
                    @if run.status == RunStatus::Started {
                        a.button.danger #cancel href=(format!("/runs/{run_id}/cancel")) { "Cancel run…" }
                    }
                    @if run.status == RunStatus::Failed {
                        a.button #retry href=(format!("/runs/{run_id}/retry")) { "Retry failed steps…" }
                    }
                }
            }
            @if live { p.live { "Live: this page follows the run as it goes." } }
            section {
                h2 { "Steps" }
                div.dag { (PreEscaped(dag::render(&graph, Some(&states)))) }
                table #steps {
                    thead { tr {
                        th { "Step" } th { "Status" } th { "Queue" } th { "Tasks" }
                        th.num { "Attempts" } th { "Started" } th.num { "Duration" }
                        th.num { "Output" } th { "Error" }
                    } }
                    tbody { @for step in &steps {
                        @let count = counts.iter().find(|c| c.step_slug == step.step_slug);
                        tr data-step=(step.step_slug) data-status=(step.status) {
                            td { (step.step_slug) }
                            td { (badge(step.shown_status()))
                                 @if let Some(reason) = &step.skip_reason { " (" (reason) ")" } }
                            td { (step.queue_name) }
                            td { @match (count, map_steps.contains(&step.step_slug.as_str())) {
                                (Some(c), true) => {
                                    (c.completed) " of " (c.total) " done"
                                    @if c.failed > 0 { ", " span.failed { (c.failed) " failed" } }
                                    @if c.started > 0 { ", " (c.started) " running" }
                                }
                                (Some(c), false) => { (c.total) }
                                (None, _) => { @match step.tasks { Some(0) => { "0 (empty map)" } _ => { "–" } } }
                            } }
                            td.num { (step.max_attempt.map(|a| a.to_string()).unwrap_or_else(|| "–".into())) }
                            td { (maybe_time(step.started_at)) }
                            td.num { (duration(step.started_at, step.ended_at)) }
                            td.num { (step.output_bytes.map(|b| human::bytes(i64::from(b))).unwrap_or_else(|| "–".into())) }
                            td.error { @if let Some(error) = &step.error { (truncate(error, ERROR_CHARS)) } }
                        }
                    } }
                }
            }
            @if !children.is_empty() {
                section #children {
                    h2 { "Child runs" }
                    table {
                        thead { tr { th { "Step" } th.num { "Task" } th { "Run" } th { "Flow" } th { "Status" } } }
                        tbody { @for child in &children {
                            tr {
                                td { (child.parent_step_slug) }
                                td.num { (child.parent_task_index) }
                                td.mono { a href=(format!("/runs/{}", child.run_id)) { (child.run_id) } }
                                td { (child.flow_slug) }
                                td { (badge(&child.status)) }
                            }
                        } }
                    }
                }
            }
            @if !waits.is_empty() {
                section #waits {
                    h2 { "Waiting" }
                    table {
                        thead { tr {
                            th { "Step" } th { "Waits for" } th { "Key" } th { "Since" }
                            th { "Until" } @if actions { th {} }
                        } }
                        tbody { @for wait in &waits {
                            tr data-signal=[wait.signal_name.as_deref()] data-reason=(wait.reason) {
                                td { (wait.step_slug) }
                                td.mono { (wait.reason) @if let Some(name) = &wait.signal_name { " " (name) } }
                                td.mono { (wait.signal_key.as_deref().unwrap_or("–")) }
                                td { (time(wait.waiting_since)) }
                                td { @match wait.deadline {
                                    Some(at) if wait.sleeps() => { "wakes " (time(at)) }
                                    Some(at) => { "times out " (time(at)) }
                                    None => { "no time-out" }
                                } }
                                @if actions {
                                    td { @if let Some(name) = &wait.signal_name {
                                        a.button id=(format!("signal-{name}"))
                                          href=(format!("/runs/{run_id}/signal/{name}")) {
                                            "Send signal…" }
                                    } }
                                }
                            }
                        } }
                    }
                }
            }
            @if let Some(turn) = &turn {
                section #turn {
                    h2 { "Waiting its turn" }
                    p {
                        "In line for singleton key " code { (turn.key) } ", place " (turn.place)
                        @if let Some(holder) = turn.holder_run_id {
                            ", behind run " a href=(format!("/runs/{holder}")) { (holder) }
                        }
                        "; it begins once the runs before it have ended."
                    }
                }
            }
            @if !holds.is_empty() || !rate_waits.is_empty() {
                section #held {
                    h2 { "Held back" }
                    table {
                        thead { tr { th { "Step" } th.num { "Tasks" } th { "Why" } } }
                        tbody {
                            @for hold in &holds {
                                tr data-step=(hold.step_slug) {
                                    td { (hold.step_slug) }
                                    td.num { (hold.held) }
                                    td { "held: " (hold.reason()) }
                                }
                            }
                            @for wait in &rate_waits {
                                tr data-step=(wait.step_slug) data-reason="rate" {
                                    td { (wait.step_slug) }
                                    td.num { (wait.waiting) }
                                    td { "held: " (wait.reason()) "; next due "
                                         (maybe_time(wait.next_due_at)) }
                                }
                            }
                        }
                    }
                }
            }
            @if !attempts.is_empty() {
                section {
                    h2 { "Failed attempts" }
                    table #attempts {
                        thead { tr {
                            th { "Step" } th.num { "Task" } th.num { "Attempt" } th { "Outcome" }
                            th { "Ended" } th { "Error" }
                        } }
                        tbody { @for a in &attempts {
                            tr {
                                td { (a.step_slug) } td.num { (a.task_index) } td.num { (a.attempt) }
                                td { (a.outcome) } td { (time(a.ended_at)) }
                                td.error { (truncate(&a.error, ERROR_CHARS)) }
                            }
                        } }
                    }
                }
            }
            section #payloads {
                h2 { "Payloads" }
                @match &payloads {
                    None => { p.empty { "Hidden (the dashboard was started with --hide-payloads)." } }
                    Some(payloads) => {
                        @if let Some(input) = &payloads.input { (preview("Input", input)) }
                        @if let Some(output) = &payloads.output { (preview("Output", output)) }
                        @for (step, output) in &payloads.steps { (preview(&format!("Output of {step}"), output)) }
                    }
                }
            }
        }
    })
}

fn preview(label: &str, payload: &PayloadPreview) -> Markup {
    html! {
        details.payload {
            summary { (label) " · " (human::bytes(i64::from(payload.bytes)))
                      @if payload.truncated { " · truncated" } }
            pre { (payload.text) @if payload.truncated { "…" } }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_text_is_cut_at_a_character() {
        assert_eq!(super::truncate("héllo", 2), "hé…");
        assert_eq!(super::truncate("hé", 2), "hé");
    }
}
