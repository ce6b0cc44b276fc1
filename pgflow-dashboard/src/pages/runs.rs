//! The runs page: filtered by flow or alias, status and start time, newest first, a page at a
//! time.

use std::collections::BTreeSet;

use axum::Router;
use axum::extract::{Query, State};
use axum::response::Html;
use axum::routing::get;
use chrono::{DateTime, NaiveDateTime, Utc};
use maud::html;
use pgflow_runtime::admin::browse::{self, RunCursor, RunListing};
use pgflow_runtime::engine::RunStatus;
use serde::{Deserialize, Serialize};

use super::{badge, frame, run_duration, short_id, time};
use crate::error::PageError;
use crate::state::AppState;

/// Runs per page.
const PAGE_SIZE: i64 = 50;

/// The filters as the form sends them (an empty field is no filter).
#[derive(Debug, Default, Deserialize, Serialize)]
pub(crate) struct RunsQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    flow: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    before: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    after: Option<String>,
}

fn given(field: &Option<String>) -> Option<&str> {
    field.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// A time as a `datetime-local` field sends it (`2026-12-05T14:30`, read as UTC) or in RFC 3339.
fn parse_time(field: &str, text: &str) -> Result<DateTime<Utc>, PageError> {
    for format in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"] {
        if let Ok(naive) = NaiveDateTime::parse_from_str(text, format) {
            return Ok(naive.and_utc());
        }
    }
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            PageError::BadRequest(format!(
                "`{field}` is `{text}`, not a time: use 2026-12-05T14:30 (UTC) or RFC 3339"
            ))
        })
}

impl RunsQuery {
    fn listing(&self) -> Result<RunListing, PageError> {
        // `waiting` is the started runs that only wait.
        let waiting = given(&self.status) == Some("waiting");
        let status = given(&self.status)
            .map(|text| {
                let text = if waiting { "started" } else { text };
                RunStatus::parse(text).ok_or_else(|| {
                    PageError::BadRequest(format!(
                        "`status` is `{text}`; use one of started, waiting, completed, failed, \
                         cancelled"
                    ))
                })
            })
            .transpose()?;
        let after = given(&self.after)
            .map(|text| {
                text.parse::<RunCursor>()
                    .map_err(|e| PageError::BadRequest(e.to_string()))
            })
            .transpose()?;
        Ok(RunListing {
            flow: given(&self.flow).map(str::to_owned),
            status,
            waiting,
            started_from: given(&self.from)
                .map(|t| parse_time("from", t))
                .transpose()?,
            started_before: given(&self.before)
                .map(|t| parse_time("before", t))
                .transpose()?,
            after,
            limit: PAGE_SIZE,
        })
    }

    /// This query's link to the page after `cursor`.
    fn next_link(&self, cursor: RunCursor) -> String {
        let keep = |field: &Option<String>| given(field).map(str::to_owned);
        let next = Self {
            flow: keep(&self.flow),
            status: keep(&self.status),
            from: keep(&self.from),
            before: keep(&self.before),
            after: Some(cursor.to_string()),
        };
        format!(
            "/runs?{}",
            serde_urlencoded::to_string(&next).unwrap_or_default()
        )
    }
}

/// The runs page's route.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/runs", get(page))
}

/// `GET /runs`.
pub(crate) async fn page(
    State(app): State<AppState>,
    Query(query): Query<RunsQuery>,
) -> Result<Html<String>, PageError> {
    let listing = query.listing()?;
    if let Some(flow) = &listing.flow
        && pgflow_runtime::admin::inspect::resolve_flow_name(app.reads(), flow)
            .await?
            .is_none()
    {
        return Err(PageError::NotFound(format!(
            "no flow or alias named `{flow}`"
        )));
    }
    let page = browse::list_runs(app.reads(), &listing).await?;
    let flows = browse::flow_summaries(app.reads(), None).await?;
    let aliases: BTreeSet<&str> = flows.iter().map(|f| f.alias.as_str()).collect();
    let chosen_flow = listing.flow.as_deref().unwrap_or("");
    let chosen_status = if listing.waiting {
        "waiting"
    } else {
        listing.status.map(RunStatus::as_str).unwrap_or("")
    };

    let content = html! {
        h1 { "Runs" }
        form.filters method="get" action="/runs" {
            label { "Flow or alias "
                select name="flow" {
                    option value="" selected[chosen_flow.is_empty()] { "any" }
                    optgroup label="Aliases" {
                        @for alias in &aliases {
                            option value=(alias) selected[*alias == chosen_flow] { (alias) }
                        }
                    }
                    optgroup label="Versions" {
                        @for f in &flows {
                            option value=(f.flow_slug) selected[f.flow_slug == chosen_flow] { (f.flow_slug) }
                        }
                    }
                }
            }
            label { "Status "
                select name="status" {
                    option value="" selected[chosen_status.is_empty()] { "any" }
                    @for status in RunStatus::ALL {
                        option value=(status.as_str()) selected[status.as_str() == chosen_status] { (status.as_str()) }
                        @if status == RunStatus::Started {
                            option value="waiting" selected[chosen_status == "waiting"] { "waiting" }
                        }
                    }
                }
            }
            label { "Started from (UTC) "
                input type="datetime-local" name="from" value=(given(&query.from).unwrap_or("")); }
            label { "before "
                input type="datetime-local" name="before" value=(given(&query.before).unwrap_or("")); }
            button type="submit" { "Filter" }
            " " a href="/runs" { "clear" }
        }
        @if page.runs.is_empty() { p.empty { "No run matches." } }
        @else {
            table #runs {
                thead { tr {
                    th { "Run" } th { "Flow" } th { "Status" } th { "Started" }
                    th.num { "Duration" } th.num { "Steps left" } th.num { "Retries" }
                } }
                tbody { @for r in &page.runs {
                    tr data-run=(r.run_id) {
                        td.mono { a href=(format!("/runs/{}", r.run_id)) title=(r.run_id) { (short_id(r.run_id)) } }
                        td { a href=(format!("/flows/{}", r.flow_slug)) { (r.flow_slug) } }
                        td { (badge(r.shown_status())) }
                        td { (time(r.started_at)) }
                        td.num { (run_duration(r.began_at(), r.ended_at, r.status)) }
                        td.num { (r.remaining_steps) }
                        td.num { (r.retry_count) }
                    }
                } }
            }
        }
        @if let Some(cursor) = page.next {
            p.pager { a #next-page href=(query.next_link(cursor)) { "Older runs →" } }
        }
    };
    Ok(Html(frame(&app, "Runs", content).into_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_read_and_bad_ones_named() {
        let query = RunsQuery {
            flow: Some("triage".into()),
            status: Some("failed".into()),
            from: Some("2026-12-05T14:30".into()),
            before: Some(String::new()),
            after: None,
        };
        let listing = query.listing().unwrap();
        assert_eq!(listing.flow.as_deref(), Some("triage"));
        assert_eq!(listing.status, Some(RunStatus::Failed));
        assert_eq!(
            listing.started_from.unwrap().to_rfc3339(),
            "2026-12-05T14:30:00+00:00"
        );
        assert_eq!(listing.started_before, None);

        let bad_status = RunsQuery {
            status: Some("done".into()),
            ..RunsQuery::default()
        };
        assert!(
            bad_status
                .listing()
                .unwrap_err()
                .to_string()
                .contains("`status` is `done`")
        );
        let bad_time = RunsQuery {
            before: Some("yesterday".into()),
            ..RunsQuery::default()
        };
        assert!(
            bad_time
                .listing()
                .unwrap_err()
                .to_string()
                .contains("`before` is `yesterday`")
        );
    }

    #[test]
    fn the_next_link_keeps_the_filters() {
        let query = RunsQuery {
            flow: Some("triage".into()),
            from: Some("2026-12-05T14:30".into()),
            ..RunsQuery::default()
        };
        let cursor: RunCursor = "1765000000000000.00000000-0000-0000-0000-000000000001"
            .parse()
            .unwrap();
        assert_eq!(
            query.next_link(cursor),
            format!("/runs?flow=triage&from=2026-12-05T14%3A30&after={cursor}")
        );
    }
}
