//! The pages, rendered on the server, and what they share: the page frame, status badges,
//! times, durations and sizes.

pub(crate) mod actions;
pub(crate) mod flow;
pub(crate) mod overview;
pub(crate) mod pauses;
pub(crate) mod run;
pub(crate) mod runs;
pub(crate) mod trends;

use std::time::Duration;

use axum::http::Uri;
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};
use pgflow_runtime::admin::human;

use crate::error::PageError;
use crate::replica::Lag;
use crate::state::AppState;

/// A whole page: the frame around `content`, titled `title`.
pub(crate) fn frame(app: &AppState, title: &str, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · pgflow" }
                link rel="stylesheet" href="/assets/app.css";
                script src="/assets/app.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { "pgflow" }
                    nav {
                        a href="/" { "Overview" }
                        a href="/runs" { "Runs" }
                    }
                    span.mode {
                        @if app.config.actions_enabled() { "actions need the token" }
                        @else { "read-only" }
                        @if app.config.hide_payloads { " · payloads hidden" }
                    }
                    @if let Some(lag) = app.replica_lag() { (replica_note(lag)) }
                }
                main { (content) }
            }
        }
    }
}

/// Where the pages read from when it is a replica, and how far behind it is
/// (`data-replica`: `caught-up`, `behind` with `data-lag-seconds`, `not-replica`, `unknown`).
fn replica_note(lag: Lag) -> Markup {
    html! {
        @match lag {
            Lag::CaughtUp => {
                span.replica data-replica="caught-up" { "read from a replica, caught up" }
            }
            Lag::Behind { seconds } => {
                span.replica.alert data-replica="behind" data-lag-seconds=(format!("{seconds:.1}")) {
                    "read from a replica, " (format!("{seconds:.1}")) " s behind"
                }
            }
            Lag::NotReplica => {
                span.replica.alert data-replica="not-replica" {
                    "read from a second server that is not a replica (it was promoted?)"
                }
            }
            Lag::Unknown => {
                span.replica data-replica="unknown" { "read from a replica (lag not known yet)" }
            }
        }
    }
}

/// A status as a coloured badge (`data-status` carries it for scripts and tests).
pub(crate) fn badge(status: &str) -> Markup {
    html! { span.badge.(format!("status-{status}")) data-status=(status) { (status) } }
}

/// A time in UTC, to the second, with its exact value for machines.
pub(crate) fn time(at: DateTime<Utc>) -> Markup {
    html! { time datetime=(at.to_rfc3339()) { (human::timestamp(at)) } }
}

/// An optional time, or a dash.
pub(crate) fn maybe_time(at: Option<DateTime<Utc>>) -> Markup {
    match at {
        Some(at) => time(at),
        None => html! { "–" },
    }
}

/// How long from `start` to `end` (or to now, while it has not ended), to the millisecond.
pub(crate) fn duration(start: Option<DateTime<Utc>>, end: Option<DateTime<Utc>>) -> String {
    let Some(start) = start else {
        return "–".to_owned();
    };
    let end = end.unwrap_or_else(Utc::now);
    let millis = (end - start).num_milliseconds().max(0);
    let rounded = if millis >= 10_000 {
        Duration::from_secs((millis / 1000) as u64)
    } else {
        Duration::from_millis(millis as u64)
    };
    humantime::format_duration(rounded).to_string()
}

/// How long a run took from when it began (its start, or the later time it was started for):
/// a dash while it waits for its time or when it ended before it began (cancelled while
/// scheduled), the time so far while it goes.
pub(crate) fn run_duration(
    began: DateTime<Utc>,
    ended: Option<DateTime<Utc>>,
    status: pgflow_runtime::RunStatus,
) -> String {
    match ended {
        Some(end) if end < began => "–".to_owned(),
        Some(end) => duration(Some(began), Some(end)),
        None if status.is_ended() || began > Utc::now() => "–".to_owned(),
        None => duration(Some(began), None),
    }
}

/// The run a path names; a path that is no run id gets the same 404 page as an unknown run.
pub(crate) fn run_id_of(text: &str) -> Result<uuid::Uuid, PageError> {
    text.parse()
        .map_err(|_| PageError::NotFound(format!("`{text}` is not a run id (a UUID)")))
}

/// The first 8 characters of an id, for tables (the link carries the whole).
pub(crate) fn short_id(id: uuid::Uuid) -> String {
    id.simple().to_string()[..8].to_owned()
}

/// Any path the dashboard does not serve.
pub(crate) async fn not_found(uri: Uri) -> PageError {
    PageError::NotFound(format!("the dashboard has no page at {}", uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_read_well() {
        let start = DateTime::from_timestamp_millis(1_000_000).unwrap();
        let later = |ms: i64| Some(DateTime::from_timestamp_millis(1_000_000 + ms).unwrap());
        assert_eq!(duration(Some(start), later(1_234)), "1s 234ms");
        assert_eq!(duration(Some(start), later(75_400)), "1m 15s");
        assert_eq!(duration(None, later(1)), "–");
        assert_eq!(human::bytes(812), "812 B");
        assert_eq!(human::bytes(3_500), "3.4 KiB");
        assert_eq!(human::bytes(1_300_000), "1.2 MiB");
    }
}
