//! The overview's trends: runs that completed and failed per flow, each queue's depth and
//! oldest message, and each step's handler durations (p50, p95), over the last hour a minute a
//! point or over the last day ten minutes a point, from the samples the processes' maintenance
//! writes (`pgflow_runtime::admin::trends`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use maud::{Markup, html};
use pgflow_runtime::admin::trends::{QueueSample, RunSample, TaskSample, Trends};

use crate::charts::{self, Point, Series};
use crate::error::PageError;

/// How far back the trends look, as `?trends=` chooses it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum TrendSpan {
    /// The last hour, a point a minute.
    #[default]
    Hour,
    /// The last day, a point every ten minutes.
    Day,
}

impl TrendSpan {
    /// The span named by the `trends` query parameter (none: the last hour).
    pub(crate) fn parse(text: Option<&str>) -> Result<Self, PageError> {
        match text.map(str::trim).unwrap_or("") {
            "" | "hour" => Ok(Self::Hour),
            "day" => Ok(Self::Day),
            other => Err(PageError::BadRequest(format!(
                "`trends` is `{other}`; use `hour` (the last hour) or `day` (the last day)"
            ))),
        }
    }

    /// How far back it looks.
    pub(crate) fn span(self) -> Duration {
        match self {
            Self::Hour => Duration::from_secs(3_600),
            Self::Day => Duration::from_secs(86_400),
        }
    }

    /// How long each point of its charts is.
    pub(crate) fn period(self) -> Duration {
        match self {
            Self::Hour => Duration::from_secs(60),
            Self::Day => Duration::from_secs(600),
        }
    }

    fn param(self) -> &'static str {
        match self {
            Self::Hour => "hour",
            Self::Day => "day",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Hour => "Last hour",
            Self::Day => "Last day",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Self::Hour => "the last hour",
            Self::Day => "the last day",
        }
    }

    fn note(self) -> &'static str {
        match self {
            Self::Hour => "A point a minute, sampled once a minute; the latest minute is not over.",
            Self::Day => {
                "A point every ten minutes: runs per minute on average over them, each queue's \
                 highest sample, and the percentiles of all the handlers that ran in them."
            }
        }
    }
}

/// The trends section (nothing until the first sample).
pub(crate) fn section(trends: &Trends, span: TrendSpan) -> Markup {
    if trends.counted_from.is_none() && trends.queues.is_empty() {
        return html! {};
    }
    let chart_span = span.span().as_secs_f64();
    let ago = |at: DateTime<Utc>| (trends.read_at - at).num_milliseconds() as f64 / 1000.0;
    let periods = periods(trends, span);
    let per_minute = span.period().as_secs_f64() / 60.0;
    html! {
        section #trends data-span=(span.param()) {
            h2 { "Trends over " (span.title()) }
            nav.span {
                @for choice in [TrendSpan::Hour, TrendSpan::Day] {
                    a href=(format!("/?trends={}", choice.param()))
                        aria-current=(choice == span) { (choice.label()) }
                    " "
                }
            }
            p.note { (span.note()) }
            @if !trends.runs.is_empty() {
                h3 { "Runs ended, per minute" }
                table #run-trends {
                    thead { tr { th { "Flow" } th { "Completed" } th { "Failed" } } }
                    tbody {
                        @for flow in trends.runs.chunk_by(|a, b| a.flow_slug == b.flow_slug) {
                            @let completed = run_series(flow, &periods, per_minute, &ago, |s| s.completed);
                            @let failed = run_series(flow, &periods, per_minute, &ago, |s| s.failed);
                            tr data-flow=(flow[0].flow_slug) {
                                td { a href=(format!("/flows/{}", flow[0].flow_slug)) { (flow[0].flow_slug) } }
                                td { (charts::line("runs-completed", "Completed runs per minute", "/min", &completed, chart_span)) }
                                td { (charts::line("runs-failed", "Failed runs per minute", "/min", &failed, chart_span)) }
                            }
                        }
                    }
                }
            }
            @if !trends.queues.is_empty() {
                h3 { "Queues" }
                table #queue-trends {
                    thead { tr { th { "Queue" } th { "Depth" } th { "Oldest message" } } }
                    tbody {
                        @for queue in trends.queues.chunk_by(|a, b| a.queue_name == b.queue_name) {
                            @let at = |s: &QueueSample| s.sampled_at;
                            @let depth = series(queue, &ago, at, |s| s.depth as f64);
                            @let oldest = series(queue, &ago, at, |s| {
                                f64::from(s.oldest_message_age_seconds.unwrap_or(0))
                            });
                            tr data-queue=(queue[0].queue_name) {
                                td { (queue[0].queue_name) }
                                td { (charts::line("queue-depth", "Depth", "", &depth, chart_span)) }
                                td { (charts::line("queue-oldest", "Oldest message", " s", &oldest, chart_span)) }
                            }
                        }
                    }
                }
            }
            @if !trends.tasks.is_empty() {
                h3 { "Handler durations of the tasks that completed" }
                table #task-trends {
                    thead { tr { th { "Step" } th { "p50 and p95" } th.num { "Completed" } } }
                    tbody {
                        @for step in trends.tasks.chunk_by(|a, b| {
                            (&a.flow_slug, &a.step_slug) == (&b.flow_slug, &b.step_slug)
                        }) {
                            @let at = |s: &TaskSample| s.period;
                            @let p50 = series(step, &ago, at, |s| s.p50_ms);
                            @let p95 = series(step, &ago, at, |s| s.p95_ms);
                            @let series = [Series { name: "p50", points: &p50 }, Series { name: "p95", points: &p95 }];
                            tr data-step=(format!("{}/{}", step[0].flow_slug, step[0].step_slug)) {
                                td { (step[0].flow_slug) "/" (step[0].step_slug) }
                                td { (charts::lines("task-duration", "Task duration", " ms", &series, chart_span)) }
                                td.num { (step.iter().map(|s| s.completed).sum::<i64>()) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The starts of the periods the run counts cover: from the first minute sampled (or the
/// span's start) to now. A period among them without a sample of a flow had none of its runs
/// end.
fn periods(trends: &Trends, span: TrendSpan) -> Vec<DateTime<Utc>> {
    let Some(counted_from) = trends.counted_from else {
        return Vec::new();
    };
    let length = i64::try_from(span.period().as_secs()).unwrap_or(60);
    let span_start = trends.read_at.timestamp() - i64::try_from(span.span().as_secs()).unwrap_or(0);
    let first = counted_from.timestamp().max(span_start).div_euclid(length) * length;
    let last = trends.read_at.timestamp().div_euclid(length) * length;
    (first..=last)
        .step_by(usize::try_from(length).unwrap_or(60))
        .filter_map(|second| DateTime::from_timestamp(second, 0))
        .collect()
}

/// A flow's runs per minute in every period, zero where none ended.
fn run_series(
    samples: &[RunSample],
    periods: &[DateTime<Utc>],
    per_minute: f64,
    ago: &impl Fn(DateTime<Utc>) -> f64,
    count: impl Fn(&RunSample) -> i64,
) -> Vec<Point> {
    periods
        .iter()
        .map(|period| {
            let ended = samples
                .iter()
                .find(|s| s.period == *period)
                .map_or(0, &count);
            Point {
                ago_seconds: ago(*period),
                value: ended as f64 / per_minute,
            }
        })
        .collect()
}

/// A point per sample: when `at` says it was, and what `value` reads from it.
fn series<S>(
    samples: &[S],
    ago: &impl Fn(DateTime<Utc>) -> f64,
    at: impl Fn(&S) -> DateTime<Utc>,
    value: impl Fn(&S) -> f64,
) -> Vec<Point> {
    samples
        .iter()
        .map(|s| Point {
            ago_seconds: ago(at(s)),
            value: value(s),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn trends(counted_from: &str, runs: Vec<RunSample>) -> Trends {
        Trends {
            read_at: at("2026-12-07T12:00:30Z"),
            counted_from: Some(at(counted_from)),
            queues: Vec::new(),
            runs,
            tasks: Vec::new(),
        }
    }

    #[test]
    fn minutes_without_a_sample_count_as_none_from_the_first_minute_counted() {
        let samples = vec![RunSample {
            period: at("2026-12-07T11:58:00Z"),
            flow_slug: "f".into(),
            completed: 4,
            failed: 2,
        }];
        let trends = trends("2026-12-07T11:57:10Z", samples);
        let periods = periods(&trends, TrendSpan::Hour);
        assert_eq!(
            periods,
            ["11:57", "11:58", "11:59", "12:00"]
                .map(|m| at(&format!("2026-12-07T{m}:00Z")))
                .to_vec()
        );
        let ago = |t: DateTime<Utc>| (trends.read_at - t).num_seconds() as f64;
        let failed = run_series(&trends.runs, &periods, 1.0, &ago, |s| s.failed);
        let values: Vec<f64> = failed.iter().map(|p| p.value).collect();
        assert_eq!(values, [0.0, 2.0, 0.0, 0.0]);
        assert_eq!(failed[0].ago_seconds, 210.0);
    }

    #[test]
    fn a_day_is_ten_minute_periods_from_the_span_start_and_counts_per_minute() {
        let samples = vec![RunSample {
            period: at("2026-12-07T11:50:00Z"),
            flow_slug: "f".into(),
            completed: 30,
            failed: 0,
        }];
        let trends = trends("2026-12-01T00:00:00Z", samples);
        let periods = periods(&trends, TrendSpan::Day);
        assert_eq!(
            periods.len(),
            145,
            "a day of ten-minute periods and the current one"
        );
        assert_eq!(periods[0], at("2026-12-06T12:00:00Z"));
        let ago = |t: DateTime<Utc>| (trends.read_at - t).num_seconds() as f64;
        let completed = run_series(&trends.runs, &periods, 10.0, &ago, |s| s.completed);
        assert_eq!(completed[143].value, 3.0, "30 runs in ten minutes");
    }

    #[test]
    fn an_unknown_span_is_refused_with_the_ones_there_are() {
        assert_eq!(TrendSpan::parse(None).unwrap(), TrendSpan::Hour);
        assert_eq!(TrendSpan::parse(Some("day")).unwrap(), TrendSpan::Day);
        let refused = TrendSpan::parse(Some("week")).unwrap_err().to_string();
        assert!(
            refused.contains("`week`") && refused.contains("`day`"),
            "{refused}"
        );
    }
}
