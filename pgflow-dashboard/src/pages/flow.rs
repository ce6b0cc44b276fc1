//! The flow page: a concrete flow's graph, its steps' queue routes and dependencies, the other
//! versions of its alias and the workers that carry it.

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use maud::{PreEscaped, html};
use pgflow_runtime::admin::browse;
use pgflow_runtime::admin::inspect::{self, FlowName, WorkerFilter};

use super::{badge, frame, short_id, time};
use crate::dag;
use crate::error::PageError;
use crate::state::AppState;

/// A flow's page.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/flows/{flow_slug}", get(page))
}

/// `GET /flows/{flow_slug}`; an alias redirects to its active version.
pub(crate) async fn page(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, PageError> {
    let db = app.reads();
    let flow_slug = match inspect::resolve_flow_name(db, &name).await? {
        None => {
            return Err(PageError::NotFound(format!(
                "no flow or alias named `{name}`"
            )));
        }
        Some(FlowName::Alias { flow_slug, .. }) => {
            return Ok(Redirect::to(&format!("/flows/{flow_slug}")).into_response());
        }
        Some(FlowName::Concrete(flow_slug)) => flow_slug,
    };
    let alias = inspect::flow_alias(db, &flow_slug)
        .await?
        .unwrap_or_default();
    let versions = browse::flow_summaries(db, Some(&alias)).await?;
    let graph = inspect::flow_graph(db, &flow_slug).await?;
    let workers: Vec<_> = inspect::workers(db, WorkerFilter::NotStopped)
        .await?
        .into_iter()
        .filter(|w| w.flow_slugs.contains(&flow_slug))
        .collect();
    let this = versions.iter().find(|v| v.flow_slug == flow_slug);

    let content = html! {
        h1 { "Flow " (flow_slug) }
        dl.facts {
            dt { "Alias" } dd { (alias) }
            @if let Some(this) = this {
                dt { "Version" } dd { (this.version) @if this.active { " (active)" } }
                dt { "Defined" } dd { (time(this.created_at)) }
            }
            dt { "Runs" } dd {
                a href=(format!("/runs?flow={flow_slug}")) { "all" } " · "
                a href=(format!("/runs?flow={flow_slug}&status=started")) { "going" } " · "
                a href=(format!("/runs?flow={flow_slug}&status=failed")) { "failed" }
            }
        }
        section {
            h2 { "Graph" }
            div.dag { (PreEscaped(dag::render(&graph, None))) }
            table #routes {
                thead { tr { th { "Step" } th { "Type" } th { "Queue" } th { "Depends on" } } }
                tbody { @for step in &graph.steps {
                    @let deps: Vec<&str> = graph.edges.iter()
                        .filter(|(_, to)| *to == step.step_slug).map(|(from, _)| from.as_str()).collect();
                    tr data-step=(step.step_slug) {
                        td { (step.step_slug) } td { (step.step_type) } td { (step.queue_name) }
                        td { (deps.join(", ")) }
                    }
                } }
            }
        }
        section {
            h2 { "Versions of " (alias) }
            table {
                thead { tr { th { "Flow" } th.num { "Version" } th { "Active" } th.num { "Runs going" } th { "Defined" } } }
                tbody { @for v in &versions {
                    tr {
                        td { a href=(format!("/flows/{}", v.flow_slug)) { (v.flow_slug) } }
                        td.num { (v.version) } td { @if v.active { "active" } }
                        td.num { (v.started_runs) } td { (time(v.created_at)) }
                    }
                } }
            }
        }
        section {
            h2 { "Workers carrying it" }
            @if workers.is_empty() { p.empty { "None running." } }
            @else {
                table {
                    thead { tr { th { "Worker" } th { "Queue" } th { "Function" } th { "Liveness" } } }
                    tbody { @for w in &workers {
                        tr { td.mono title=(w.worker_id) { (short_id(w.worker_id)) } td { (w.queue_name) }
                             td { (w.function_name) } td { (badge(w.liveness().as_str())) } }
                    } }
                }
            }
        }
    };
    let title = format!("Flow {flow_slug}");
    Ok(Html(frame(&app, &title, content).into_string()).into_response())
}
