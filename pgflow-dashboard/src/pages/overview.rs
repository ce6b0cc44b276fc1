//! The overview: queues, workers, aliases and flows, open rollouts and the drain status of
//! flows being retired.

use axum::Router;
use axum::extract::{Query, State};
use axum::response::Html;
use axum::routing::get;
use maud::{Markup, html};
use pgflow_runtime::admin::browse::{self, FlowSummary};
use pgflow_runtime::admin::inspect::{self, WorkerFilter};
use pgflow_runtime::admin::trends;
use pgflow_runtime::engine::{self, DrainStatus};

use super::trends::{self as trend_section, TrendSpan};
use super::{badge, frame, maybe_time, short_id, time};
use crate::error::PageError;
use crate::state::AppState;

/// The overview's route.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/", get(page))
}

/// Keys of capped (and of rate-limited) steps shown, those with the most tasks held back first.
const CAP_KEYS_SHOWN: i64 = 20;

/// The overview's query: `trends=hour` (the default) or `trends=day`.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct OverviewQuery {
    trends: Option<String>,
}

/// `GET /`.
pub(crate) async fn page(
    State(app): State<AppState>,
    Query(query): Query<OverviewQuery>,
) -> Result<Html<String>, PageError> {
    let span = TrendSpan::parse(query.trends.as_deref())?;
    let db = app.reads();
    let queues = inspect::queues(db).await?;
    app.throughput.record(&queues);
    let workers = inspect::workers(db, WorkerFilter::NotStopped).await?;
    let aliases = inspect::aliases(db).await?;
    let flows = browse::flow_summaries(db, None).await?;
    let rollouts = engine::rollouts(db, true).await?;
    let caps = inspect::cap_use(db, CAP_KEYS_SHOWN).await?;
    let rates = inspect::rate_use(db, CAP_KEYS_SHOWN).await?;
    let lines = inspect::singleton_lines(db, CAP_KEYS_SHOWN).await?;
    let paused_flows = inspect::paused_flows(db).await?;
    let trends = trends::trends(db, span.span(), span.period()).await?;
    let actions = app.config.actions_enabled();
    // A version no longer active that runs still use or workers still carry is being drained.
    let mut drains = Vec::new();
    for flow in flows.iter().filter(|f| !f.active) {
        let carried = workers
            .iter()
            .any(|w| w.flow_slugs.contains(&flow.flow_slug));
        if carried || flow.started_runs > 0 {
            drains.push(engine::drain_status(db, &flow.flow_slug, None).await?);
        }
    }

    let content = html! {
        div #overview data-refresh-ms="5000" {
        h1 { "Overview" }
        section #queues {
            h2 { "Queues" }
            @if queues.is_empty() { p.empty { "No queues yet: start a worker." } }
            @else {
                table {
                    thead { tr {
                        th { "Queue" } th.num { "Depth" } th.num { "Oldest message" }
                        th.num { "In flight" } th.num { "Sent/s (last minute)" }
                        th.num { "Live workers" } @if actions { th {} }
                    } }
                    tbody {
                        @for q in &queues {
                            tr data-queue=(q.queue_name) data-paused=(q.paused) {
                                td { (q.queue_name) @if q.paused { " " (badge("paused")) } }
                                td.num { (q.depth) }
                                td.num { @match q.oldest_message_age_seconds {
                                    Some(age) => { (age) " s" }
                                    None => { "–" }
                                } }
                                td.num {
                                    (q.in_flight_tasks)
                                    @if let Some(cap) = q.concurrency {
                                        " " span.cap data-cap=(cap) { "(cap " (cap) ")" }
                                    }
                                }
                                td.num { @match app.throughput.per_second(&q.queue_name) {
                                    Some(rate) => { (format!("{rate:.1}")) }
                                    None => { "–" }
                                } }
                                td.num.(if q.live_workers == 0 && q.depth > 0 { "alert" } else { "" }) {
                                    (q.live_workers)
                                }
                                @if actions { td { (pause_link("queues", &q.queue_name, q.paused)) } }
                            }
                        }
                    }
                }
            }
        }
        (trend_section::section(&trends, span))
        @if !caps.is_empty() {
            section #caps {
                h2 { "Concurrency caps in use" }
                table {
                    thead { tr {
                        th { "Step" } th { "Key" } th.num { "Cap" } th.num { "Running" }
                        th.num { "Held back" } th { "Waiting since" }
                    } }
                    tbody {
                        @for c in &caps {
                            tr data-step=(format!("{}/{}", c.flow_slug, c.step_slug))
                               data-key=(c.cap_key) {
                                td { a href=(format!("/flows/{}", c.flow_slug)) { (c.flow_slug) }
                                     "/" (c.step_slug) }
                                td.mono { @if c.keyed { (c.cap_key) } @else { "–" } }
                                td.num { (c.cap) }
                                td.num { (c.running) }
                                td.num { (c.held) }
                                td { (maybe_time(c.oldest_held_at)) }
                            }
                        }
                    }
                }
            }
        }
        @if !rates.is_empty() {
            section #rates {
                h2 { "Rate limits in use" }
                table {
                    thead { tr {
                        th { "Step" } th { "Key" } th { "Limit" }
                        th.num { "Started (last period)" } th.num { "Waiting" }
                        th { "Waiting since" }
                    } }
                    tbody {
                        @for r in &rates {
                            tr data-step=(format!("{}/{}", r.scope, r.step_slug))
                               data-key=(r.rate_key) {
                                td { (r.scope) "/" (r.step_slug) }
                                td.mono { @if r.keyed { (r.rate_key) } @else { "–" } }
                                td { (r.rate_limit) " per " (inspect::period_text(r.period_ms)) }
                                td.num { (r.started) }
                                td.num { (r.waiting) }
                                td { (maybe_time(r.oldest_waiting_since)) }
                            }
                        }
                    }
                }
            }
        }
        @if !lines.is_empty() {
            section #turns {
                h2 { "Runs waiting their turn" }
                table {
                    thead { tr {
                        th { "Key" } th { "Held by run" } th.num { "Waiting" }
                        th { "Waiting since" }
                    } }
                    tbody {
                        @for l in &lines {
                            tr data-scope=(l.scope) data-key=(l.key) {
                                td { (l.scope) "/" code { (l.key) } }
                                td.mono { @match l.holder_run_id {
                                    Some(id) => { a href=(format!("/runs/{id}")) { (id) } }
                                    None => { "– (the next begins)" }
                                } }
                                td.num { (l.waiting) }
                                td { (time(l.oldest_waiting_since)) }
                            }
                        }
                    }
                }
            }
        }
        section #workers {
            h2 { "Workers" }
            @if workers.is_empty() { p.empty { "No worker is running." } }
            @else {
                table {
                    thead { tr {
                        th { "Worker" } th { "Queue" } th { "Function" } th { "Flows" }
                        th { "Liveness" } th.num { "Last heartbeat" }
                    } }
                    tbody {
                        @for w in &workers {
                            tr data-worker=(w.worker_id) {
                                td.mono title=(w.worker_id) { (short_id(w.worker_id)) }
                                td { (w.queue_name) }
                                td { (w.function_name) }
                                td { @for (i, slug) in w.flow_slugs.iter().enumerate() {
                                    @if i > 0 { ", " }
                                    a href=(format!("/flows/{slug}")) { (slug) }
                                } }
                                td { (badge(w.liveness().as_str())) }
                                td.num { (format!("{:.0} s ago", w.heartbeat_age_seconds)) }
                            }
                        }
                    }
                }
            }
        }
        section #flows {
            h2 { "Aliases and flows" }
            @if flows.is_empty() { p.empty { "No flow is defined yet." } }
            @else { (flow_table(&flows, &aliases, &paused_flows, actions)) }
        }
        section #rollouts {
            h2 { "Open rollouts" }
            @if rollouts.is_empty() { p.empty { "None." } }
            @else {
                table {
                    thead { tr { th.num { "Rollout" } th { "Disabled functions" } th { "Begun" } } }
                    tbody { @for r in &rollouts {
                        tr { td.num { (r.rollout_id) } td { (r.function_names.join(", ")) }
                             td { (time(r.begun_at)) } }
                    } }
                }
            }
        }
        section #drains {
            h2 { "Draining versions" }
            @if drains.is_empty() { p.empty { "No retired version is still in use." } }
            @else { (drain_table(&drains)) }
        }
        }
    };
    Ok(Html(frame(&app, "Overview", content).into_string()))
}

/// A link to the confirmation form that pauses (or, when paused, resumes) a queue or a flow.
fn pause_link(kind: &str, name: &str, paused: bool) -> Markup {
    let verb = if paused { "resume" } else { "pause" };
    html! {
        a.button id=(format!("{verb}-{kind}-{name}")) href=(format!("/{kind}/{name}/{verb}")) {
            @if paused { "Resume…" } @else { "Pause…" }
        }
    }
}

fn flow_table(
    flows: &[FlowSummary],
    aliases: &[inspect::AliasTarget],
    paused: &[inspect::PausedFlow],
    actions: bool,
) -> Markup {
    html! {
        table {
            thead { tr {
                th { "Alias" } th { "Flow" } th.num { "Version" } th { "Active" }
                th.num { "Steps" } th.num { "Runs going" } th { "Defined" }
                @if actions { th {} }
            } }
            tbody { @for f in flows {
                @let pause = paused.iter().find(|p| p.flow_slug == f.flow_slug);
                tr data-flow=(f.flow_slug) data-paused=(pause.is_some()) {
                    td { a href=(format!("/runs?flow={}", f.alias)) { (f.alias) } }
                    td { a href=(format!("/flows/{}", f.flow_slug)) { (f.flow_slug) }
                         @if let Some(p) = pause {
                             " " span title=(p.reason.as_deref().unwrap_or("")) { (badge("paused")) }
                             @if p.parked_tasks > 0 { " " (p.parked_tasks) " tasks parked" }
                         } }
                    td.num { (f.version) }
                    td { @if f.active {
                        @let since = aliases.iter().find(|a| a.flow_slug == f.flow_slug);
                        "active"
                        @if let Some(a) = since { " since " (time(a.activated_at)) }
                    } }
                    td.num { (f.steps) }
                    td.num { a href=(format!("/runs?flow={}&status=started", f.flow_slug)) { (f.started_runs) } }
                    td { (time(f.created_at)) }
                    @if actions { td { (pause_link("flows", &f.flow_slug, pause.is_some())) } }
                }
            } }
        }
    }
}

fn drain_table(drains: &[DrainStatus]) -> Markup {
    html! {
        table {
            thead { tr {
                th { "Flow" } th.num { "Runs going" } th.num { "Queued tasks" }
                th.num { "Started tasks" } th { "Pending steps" } th { "Safe to remove" }
            } }
            tbody { @for d in drains {
                tr {
                    td { a href=(format!("/flows/{}", d.flow_slug)) { (d.flow_slug) } }
                    td.num { (d.started_runs) } td.num { (d.queued_tasks) }
                    td.num { (d.started_tasks) } td { (d.pending_steps.join(", ")) }
                    td { @if d.safe_to_remove { "yes" } @else { "not yet" } }
                }
            } }
        }
    }
}
