//! Typed reads for browsing the engine's state page by page: lists of runs with filters and
//! keyset pagination, payload previews, map-step progress and the flows of an alias. The
//! dashboard shows these; any tool may. They only read; none takes a lock.
//!
//! Every listing is a short walk of an index however many ended runs the tables hold
//! (`runs_flow_started_idx`, `runs_unsuccessful_idx`): a page of every flow's runs walks the
//! per-flow index once per flow and merges.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor, Postgres, QueryBuilder};
use uuid::Uuid;

use crate::engine::{RUN_WAITING, RunStatus};
use crate::error::EngineError;

/// Where a page of runs ends: the next page starts after this run (runs are listed newest
/// first, by start time, then id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunCursor {
    /// The last listed run's start time.
    pub started_at: DateTime<Utc>,
    /// The last listed run.
    pub run_id: Uuid,
}

impl fmt::Display for RunCursor {
    /// `<microseconds since the epoch>.<run id>`: opaque to users, safe in a URL.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.started_at.timestamp_micros(), self.run_id)
    }
}

/// A page cursor that is not one this module wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a page cursor (expected `<microseconds>.<run id>`, as a page links it)")]
pub struct InvalidCursor(pub String);

impl FromStr for RunCursor {
    type Err = InvalidCursor;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidCursor(text.to_owned());
        let (micros, run_id) = text.split_once('.').ok_or_else(invalid)?;
        let micros: i64 = micros.parse().map_err(|_| invalid())?;
        Ok(Self {
            started_at: DateTime::from_timestamp_micros(micros).ok_or_else(invalid)?,
            run_id: run_id.parse().map_err(|_| invalid())?,
        })
    }
}

/// Which runs a page lists. Every filter is optional; the default lists every run, newest
/// first, 50 at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunListing {
    /// A concrete flow, or an alias (then: runs of every version of it).
    pub flow: Option<String>,
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs that wait (see [`Run::waiting`](crate::engine::Run::waiting)): going, with a
    /// step that waits and none running or queued.
    pub waiting: bool,
    /// Only runs started at or after this time.
    pub started_from: Option<DateTime<Utc>>,
    /// Only runs started before this time.
    pub started_before: Option<DateTime<Utc>>,
    /// Continue after this run (the previous page's [`RunPage::next`]).
    pub after: Option<RunCursor>,
    /// Runs per page, 1 to 500.
    pub limit: i64,
}

impl Default for RunListing {
    fn default() -> Self {
        Self {
            flow: None,
            status: None,
            waiting: false,
            started_from: None,
            started_before: None,
            after: None,
            limit: 50,
        }
    }
}

/// A run as a listing shows it: no payloads.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct RunSummary {
    /// The run.
    pub run_id: Uuid,
    /// Its concrete flow.
    pub flow_slug: String,
    /// Its state.
    pub status: RunStatus,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it completed, failed or was cancelled.
    pub ended_at: Option<DateTime<Utc>>,
    /// The later time it was started for, if any.
    pub scheduled_for: Option<DateTime<Utc>>,
    /// Steps not completed yet.
    pub remaining_steps: i32,
    /// How often it was retried after failing.
    pub retry_count: i32,
    /// Whether it waits (see [`Run::waiting`](crate::engine::Run::waiting)).
    pub waiting: bool,
}

impl RunSummary {
    /// Its state as people are shown it: `scheduled` while it waits for its time, `waiting`
    /// while it waits (see [`crate::engine::shown_status`]).
    pub fn shown_status(&self) -> &'static str {
        crate::engine::shown_status(self.status, self.scheduled_for, self.waiting, Utc::now())
    }

    /// When it began: its start, or the later time it was started for.
    pub fn began_at(&self) -> DateTime<Utc> {
        self.scheduled_for
            .map_or(self.started_at, |at| at.max(self.started_at))
    }
}

/// One page of runs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunPage {
    /// The runs, newest first.
    pub runs: Vec<RunSummary>,
    /// Where the next page starts, when there may be one.
    #[serde(skip)]
    pub next: Option<RunCursor>,
}

/// One page of the runs `listing` selects, newest first.
pub async fn list_runs(
    executor: impl PgExecutor<'_>,
    listing: &RunListing,
) -> Result<RunPage, EngineError> {
    let limit = listing.limit.clamp(1, 500);
    // The statement is built from the filters given, so that each combination gets a plan of
    // its own: a status filter is a literal (of a closed set), which lets the planner prove the
    // partial index of failed and cancelled runs.
    let mut sql = QueryBuilder::<Postgres>::new(format!(
        "select r.run_id, r.flow_slug, r.status, r.started_at,
                coalesce(r.completed_at, r.failed_at, r.cancelled_at) as ended_at,
                r.scheduled_for, r.remaining_steps, r.retry_count, {RUN_WAITING} as waiting
         from pgflow.flows f
         cross join lateral (
           select * from pgflow.all_runs r where r.flow_slug = f.flow_slug"
    ));
    if let Some(status) = listing.status {
        sql.push(format_args!(" and r.status = '{}'", status.as_str()));
    }
    if listing.waiting {
        sql.push(format_args!(" and {RUN_WAITING}"));
    }
    if let Some(from) = listing.started_from {
        sql.push(" and r.started_at >= ").push_bind(from);
    }
    if let Some(before) = listing.started_before {
        sql.push(" and r.started_at < ").push_bind(before);
    }
    if let Some(after) = listing.after {
        sql.push(" and (r.started_at, r.run_id) < (")
            .push_bind(after.started_at)
            .push(", ")
            .push_bind(after.run_id)
            .push(")");
    }
    sql.push(" order by r.started_at desc, r.run_id desc limit ")
        .push_bind(limit)
        .push(") r");
    if let Some(flow) = &listing.flow {
        sql.push(" where f.flow_slug = ")
            .push_bind(flow)
            .push(" or f.alias = ")
            .push_bind(flow);
    }
    sql.push(" order by r.started_at desc, r.run_id desc limit ")
        .push_bind(limit);
    let runs: Vec<RunSummary> = sql.build_query_as().fetch_all(executor).await?;
    let next = (runs.len() as i64 == limit)
        .then(|| runs.last())
        .flatten()
        .map(|last| RunCursor {
            started_at: last.started_at,
            run_id: last.run_id,
        });
    Ok(RunPage { runs, next })
}

/// The start of a JSON payload, as text, and its whole size.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
pub struct PayloadPreview {
    /// Its first characters as JSON text (at most the number asked for).
    pub text: String,
    /// Its whole size as JSON text, in bytes.
    pub bytes: i32,
    /// Whether `text` is only its start.
    pub truncated: bool,
}

/// Previews of a run's payloads: its input, its output and each completed step's output.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunPayloads {
    /// The run's input.
    pub input: Option<PayloadPreview>,
    /// The run's output (once it completed).
    pub output: Option<PayloadPreview>,
    /// Each step's output that exists, by step slug, in step order.
    pub steps: Vec<(String, PayloadPreview)>,
}

#[derive(FromRow)]
struct PayloadRow {
    part: String,
    step_slug: Option<String>,
    text: String,
    bytes: i32,
    truncated: bool,
}

/// The first `max_chars` characters of a run's input, output and step outputs (nothing when
/// the run does not exist). Only the previews leave the database.
pub async fn run_payloads(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
    max_chars: i32,
) -> Result<RunPayloads, EngineError> {
    let rows: Vec<PayloadRow> = sqlx::query_as(
        "with parts as (
           select 'input' as part, null::text as step_slug, r.input as body, 0 as ord
           from pgflow.all_runs r where r.run_id = $1
           union all
           select 'output', null, r.output, 1
           from pgflow.all_runs r where r.run_id = $1 and r.output is not null
           union all
           select 'step', ss.step_slug, ss.output, 2 + s.step_index
           from pgflow.all_step_states ss
           join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
           where ss.run_id = $1 and ss.output is not null
         )
         select part, step_slug, left(body::text, $2) as text,
                octet_length(body::text) as bytes, length(body::text) > $2 as truncated
         from parts order by ord",
    )
    .bind(run_id)
    .bind(max_chars.max(0))
    .fetch_all(executor)
    .await?;
    let mut payloads = RunPayloads::default();
    for row in rows {
        let preview = PayloadPreview {
            text: row.text,
            bytes: row.bytes,
            truncated: row.truncated,
        };
        match (row.part.as_str(), row.step_slug) {
            ("input", _) => payloads.input = Some(preview),
            ("output", _) => payloads.output = Some(preview),
            (_, Some(step_slug)) => payloads.steps.push((step_slug, preview)),
            _ => {}
        }
    }
    Ok(payloads)
}

/// How far the tasks of one step of a run have come (a map step has one per element).
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct StepTaskCounts {
    /// The step.
    pub step_slug: String,
    /// Its tasks.
    pub total: i64,
    /// Tasks waiting in the queue.
    pub queued: i64,
    /// Tasks a worker is running.
    pub started: i64,
    /// Tasks that completed.
    pub completed: i64,
    /// Tasks that failed for good.
    pub failed: i64,
    /// Tasks skipped or cancelled.
    pub other: i64,
}

/// Each started step's tasks of a run by state, in the flow's step order.
pub async fn step_task_counts(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
) -> Result<Vec<StepTaskCounts>, EngineError> {
    let rows = sqlx::query_as(
        "select t.step_slug, count(*) as total,
                count(*) filter (where t.status = 'queued') as queued,
                count(*) filter (where t.status = 'started') as started,
                count(*) filter (where t.status = 'completed') as completed,
                count(*) filter (where t.status = 'failed') as failed,
                count(*) filter (where t.status in ('skipped', 'cancelled')) as other
         from pgflow.all_step_tasks t
         join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
         where t.run_id = $1
         group by t.step_slug, s.step_index
         order by s.step_index",
    )
    .bind(run_id)
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// A stored concrete flow, as a list of flows shows it.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct FlowSummary {
    /// The concrete flow.
    pub flow_slug: String,
    /// The alias it belongs to.
    pub alias: String,
    /// Its version within the alias.
    pub version: i32,
    /// When it was defined.
    pub created_at: DateTime<Utc>,
    /// New runs of the alias start on it.
    pub active: bool,
    /// Its steps.
    pub steps: i64,
    /// Its runs still going.
    pub started_runs: i64,
}

/// Every stored flow, by alias and newest version first; of one alias only when `alias` is
/// given.
pub async fn flow_summaries(
    executor: impl PgExecutor<'_>,
    alias: Option<&str>,
) -> Result<Vec<FlowSummary>, EngineError> {
    let rows = sqlx::query_as(
        "select f.flow_slug, f.alias, f.version, f.created_at,
                exists (select 1 from pgflow.aliases a
                        where a.alias = f.alias and a.flow_slug = f.flow_slug) as active,
                (select count(*) from pgflow.steps s where s.flow_slug = f.flow_slug) as steps,
                (select count(*) from pgflow.runs r
                 where r.flow_slug = f.flow_slug and r.status = 'started') as started_runs
         from pgflow.flows f
         where $1::text is null or f.alias = $1
         order by f.alias, f.version desc",
    )
    .bind(alias)
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_wrote() {
        let cursor = RunCursor {
            started_at: DateTime::from_timestamp_micros(1_765_000_000_123_456).unwrap(),
            run_id: Uuid::from_u128(42),
        };
        assert_eq!(cursor.to_string().parse::<RunCursor>(), Ok(cursor));
    }

    #[test]
    fn a_foreign_cursor_is_refused_by_name() {
        for text in [
            "",
            "12",
            "x.00000000-0000-0000-0000-000000000000",
            "1.not-a-uuid",
        ] {
            let error = text.parse::<RunCursor>().unwrap_err();
            assert_eq!(error, InvalidCursor(text.to_owned()));
            assert!(error.to_string().contains("page cursor"));
        }
    }
}
