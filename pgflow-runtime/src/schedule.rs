//! Cron schedules: a [`Schedule`] declared in code (given to a worker with
//! `WorkerConfig::schedule`) starts runs of a flow or alias on a cron expression with seconds,
//! in a time zone. Workers fire them (no pg_cron): every live worker looks for due schedules,
//! and the SQL core lets exactly one of them start each tick's run.
//!
//! Cron expressions are parsed by the `cron` crate: six or seven fields, `sec min hour
//! day-of-month month day-of-week [year]`, e.g. `0 */5 * * * *` (every five minutes) or
//! `0 0 3 * * Mon-Fri` (03:00 on weekdays). Time zones are IANA names (`Europe/Paris`), read by
//! `chrono-tz`; daylight saving time moves a local-time schedule with the clock.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde_json::Value;

/// What a schedule does with ticks that were missed (older than its grace when a worker saw
/// them: no worker ran, or all were stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissedTicks {
    /// Start nothing for them.
    Skip,
    /// Start a run for each of the newest `n` of them (at most 1000), oldest first.
    CatchUp(u32),
}

/// Why a schedule cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The name is not a slug.
    #[error(
        "schedule name `{name}` is not valid: use a letter or underscore, then letters, digits \
         or underscores (at most 63)"
    )]
    InvalidName {
        /// The name given.
        name: String,
    },
    /// The cron expression does not parse.
    #[error(
        "schedule `{name}`: `{cron}` is not a cron expression with seconds ({reason}); write six \
         or seven fields, `sec min hour day-of-month month day-of-week [year]`, e.g. `0 */5 * * * *`"
    )]
    InvalidCron {
        /// The schedule.
        name: String,
        /// The expression.
        cron: String,
        /// The parser's reason.
        reason: String,
    },
    /// The time zone is not an IANA name.
    #[error(
        "schedule `{name}`: `{time_zone}` is not an IANA time zone; write one like UTC, \
         Europe/Paris or America/New_York"
    )]
    InvalidTimeZone {
        /// The schedule.
        name: String,
        /// The zone given.
        time_zone: String,
    },
    /// The input does not encode as JSON.
    #[error("schedule `{name}`: its input does not encode as JSON: {reason}")]
    InvalidInput {
        /// The schedule.
        name: String,
        /// serde's reason.
        reason: String,
    },
    /// The catch-up bound is out of range.
    #[error("schedule `{name}`: catch up between 1 and 1000 missed ticks, not {n}")]
    InvalidCatchUp {
        /// The schedule.
        name: String,
        /// The bound given.
        n: u32,
    },
}

/// A cron schedule that starts runs of a flow or alias.
///
/// ```
/// use std::time::Duration;
/// use pgflow::schedule::Schedule;
///
/// let nightly = Schedule::new("nightly_report", "report", "0 0 3 * * *")
///     .time_zone("Europe/Paris")
///     .input(&serde_json::json!({"kind": "daily"}))
///     .catch_up(1)
///     .grace(Duration::from_secs(60));
/// assert!(nightly.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    name: String,
    flow: String,
    cron: String,
    time_zone: String,
    input: Result<Value, String>,
    missed: MissedTicks,
    grace: Duration,
}

impl Schedule {
    /// A schedule named `name` that starts runs of `flow` (an alias, whose active version runs,
    /// or a concrete flow) on `cron` (with seconds), in UTC, with input `null`, skipping missed
    /// ticks, with a grace of 5 s.
    pub fn new(name: impl Into<String>, flow: impl Into<String>, cron: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            flow: flow.into(),
            cron: cron.into(),
            time_zone: "UTC".to_owned(),
            input: Ok(Value::Null),
            missed: MissedTicks::Skip,
            grace: Duration::from_secs(5),
        }
    }

    /// The cron expression reads local time in this IANA zone.
    #[must_use]
    pub fn time_zone(mut self, zone: impl Into<String>) -> Self {
        self.time_zone = zone.into();
        self
    }

    /// The input of every run it starts.
    #[must_use]
    pub fn input<T: serde::Serialize>(mut self, input: &T) -> Self {
        self.input = serde_json::to_value(input).map_err(|e| e.to_string());
        self
    }

    /// Start a run for each of the newest `n` missed ticks (1 to 1000).
    #[must_use]
    pub fn catch_up(mut self, n: u32) -> Self {
        self.missed = MissedTicks::CatchUp(n);
        self
    }

    /// Start nothing for missed ticks (the default).
    #[must_use]
    pub fn skip_missed(mut self) -> Self {
        self.missed = MissedTicks::Skip;
        self
    }

    /// How late a tick may be seen and still count as on time (default 5 s, whole seconds).
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks the name, cron expression, time zone, input and catch-up bound.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        if crate::names::FlowSlug::new(&self.name).is_err() {
            return Err(ScheduleError::InvalidName {
                name: self.name.clone(),
            });
        }
        parse_cron(&self.name, &self.cron)?;
        parse_zone(&self.name, &self.time_zone)?;
        if let Err(reason) = &self.input {
            return Err(ScheduleError::InvalidInput {
                name: self.name.clone(),
                reason: reason.clone(),
            });
        }
        if let MissedTicks::CatchUp(n) = self.missed
            && !(1..=1000).contains(&n)
        {
            return Err(ScheduleError::InvalidCatchUp {
                name: self.name.clone(),
                n,
            });
        }
        Ok(())
    }

    /// The stored form, once [`validate`](Self::validate)d.
    pub(crate) fn stored(&self) -> Result<StoredSchedule<'_>, ScheduleError> {
        self.validate()?;
        let (missed, catch_up_limit) = match self.missed {
            MissedTicks::Skip => ("skip", 1),
            MissedTicks::CatchUp(n) => ("catch_up", i32::try_from(n).unwrap_or(1000)),
        };
        Ok(StoredSchedule {
            name: &self.name,
            flow: &self.flow,
            cron: &self.cron,
            time_zone: &self.time_zone,
            input: self.input.clone().unwrap_or(Value::Null),
            missed,
            catch_up_limit,
            grace_seconds: i32::try_from(self.grace.as_secs()).unwrap_or(i32::MAX),
        })
    }
}

/// A schedule as `pgflow.define_schedule` takes it.
pub(crate) struct StoredSchedule<'a> {
    pub name: &'a str,
    pub flow: &'a str,
    pub cron: &'a str,
    pub time_zone: &'a str,
    pub input: Value,
    pub missed: &'static str,
    pub catch_up_limit: i32,
    pub grace_seconds: i32,
}

fn parse_cron(name: &str, cron: &str) -> Result<cron::Schedule, ScheduleError> {
    cron::Schedule::from_str(cron.trim()).map_err(|e| ScheduleError::InvalidCron {
        name: name.to_owned(),
        cron: cron.to_owned(),
        reason: e.to_string(),
    })
}

fn parse_zone(name: &str, zone: &str) -> Result<Tz, ScheduleError> {
    zone.parse::<Tz>()
        .map_err(|_| ScheduleError::InvalidTimeZone {
            name: name.to_owned(),
            time_zone: zone.to_owned(),
        })
}

/// What one firing of a schedule starts, and where it goes on from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Firing {
    /// The ticks to start a run for, oldest first.
    pub ticks: Vec<DateTime<Utc>>,
    /// The first tick after `now`: when the schedule is next due.
    pub next: DateTime<Utc>,
}

/// At most this many on-time ticks are started in one firing (a schedule every second seen
/// after a long grace).
const MAX_ON_TIME_TICKS: usize = 1000;

/// The ticks of a stored schedule that are due at `now`, after `ticks_after` (exclusive): the
/// on-time ones (not older than `grace`) and, by `missed`, the newest missed ones.
pub(crate) fn plan_firing(
    name: &str,
    cron: &str,
    time_zone: &str,
    missed: MissedTicks,
    grace: Duration,
    ticks_after: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Firing, ScheduleError> {
    let schedule = parse_cron(name, cron)?;
    let zone = parse_zone(name, time_zone)?;
    let keep_missed = match missed {
        MissedTicks::Skip => 0,
        MissedTicks::CatchUp(n) => n as usize,
    };
    let grace = chrono::Duration::from_std(grace).unwrap_or(chrono::Duration::MAX);
    let on_time_from = now
        .checked_sub_signed(grace)
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    // Walk back from just after `now`, so that a tick at `now` itself counts.
    let anchor = zone.from_utc_datetime(&(now + chrono::Duration::milliseconds(1)).naive_utc());
    let mut on_time = Vec::new();
    let mut late = Vec::new();
    for tick in schedule.after(&anchor).rev() {
        let tick = tick.with_timezone(&Utc);
        if tick <= ticks_after {
            break;
        }
        if tick > now {
            continue;
        }
        if tick >= on_time_from {
            if on_time.len() < MAX_ON_TIME_TICKS {
                on_time.push(tick);
            }
        } else if late.len() < keep_missed {
            late.push(tick);
        } else {
            break;
        }
    }
    let next = schedule
        .after(&zone.from_utc_datetime(&now.naive_utc()))
        .next()
        .map(|tick| tick.with_timezone(&Utc))
        .unwrap_or_else(far_future);
    let ticks = late
        .into_iter()
        .rev()
        .chain(on_time.into_iter().rev())
        .collect();
    Ok(Firing { ticks, next })
}

/// When a schedule whose cron never fires again is next due.
fn far_future() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(9999, 12, 31, 0, 0, 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn plan(cron: &str, missed: MissedTicks, after: &str, now: &str) -> Firing {
        plan_firing(
            "s",
            cron,
            "UTC",
            missed,
            Duration::from_secs(1),
            at(after),
            at(now),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn on_time_ticks_fire_and_the_next_is_the_first_after_now() {
        let firing = plan(
            "* * * * * *",
            MissedTicks::Skip,
            "2026-01-01T00:00:09Z",
            "2026-01-01T00:00:10.5Z",
        );
        assert_eq!(firing.ticks, vec![at("2026-01-01T00:00:10Z")]);
        assert_eq!(firing.next, at("2026-01-01T00:00:11Z"));
        // A tick exactly at now counts.
        let firing = plan(
            "* * * * * *",
            MissedTicks::Skip,
            "2026-01-01T00:00:09Z",
            "2026-01-01T00:00:10Z",
        );
        assert_eq!(firing.ticks, vec![at("2026-01-01T00:00:10Z")]);
    }

    #[test]
    fn missed_ticks_are_skipped_or_the_newest_n_caught_up_oldest_first() {
        let after = "2026-01-01T00:00:00Z";
        let now = "2026-01-01T00:00:06Z";
        let skipped = plan("* * * * * *", MissedTicks::Skip, after, now);
        assert_eq!(
            skipped.ticks,
            vec![at("2026-01-01T00:00:05Z"), at("2026-01-01T00:00:06Z")]
        );
        let caught = plan("* * * * * *", MissedTicks::CatchUp(2), after, now);
        assert_eq!(
            caught.ticks,
            vec![
                at("2026-01-01T00:00:03Z"),
                at("2026-01-01T00:00:04Z"),
                at("2026-01-01T00:00:05Z"),
                at("2026-01-01T00:00:06Z"),
            ]
        );
    }

    #[test]
    fn a_time_zone_moves_local_ticks_with_daylight_saving() {
        // 03:00 in Paris is 02:00 UTC in winter and 01:00 UTC in summer.
        let winter = plan_firing(
            "s",
            "0 0 3 * * *",
            "Europe/Paris",
            MissedTicks::Skip,
            Duration::from_secs(1),
            at("2026-01-10T00:00:00Z"),
            at("2026-01-10T00:00:01Z"),
        )
        .unwrap();
        assert_eq!(winter.next, at("2026-01-10T02:00:00Z"));
        let summer = plan_firing(
            "s",
            "0 0 3 * * *",
            "Europe/Paris",
            MissedTicks::Skip,
            Duration::from_secs(1),
            at("2026-07-10T00:00:00Z"),
            at("2026-07-10T00:00:01Z"),
        )
        .unwrap();
        assert_eq!(summer.next, at("2026-07-10T01:00:00Z"));
    }

    #[test]
    fn bad_definitions_are_named() {
        let bad_cron = Schedule::new("s", "f", "every minute")
            .validate()
            .unwrap_err();
        assert!(
            bad_cron
                .to_string()
                .contains("`every minute` is not a cron expression"),
            "{bad_cron}"
        );
        let bad_zone = Schedule::new("s", "f", "* * * * * *")
            .time_zone("Mars/Olympus")
            .validate()
            .unwrap_err();
        assert!(bad_zone.to_string().contains("Mars/Olympus"), "{bad_zone}");
        let bad_name = Schedule::new("no spaces", "f", "* * * * * *")
            .validate()
            .unwrap_err();
        assert!(matches!(bad_name, ScheduleError::InvalidName { .. }));
        let bad_bound = Schedule::new("s", "f", "* * * * * *")
            .catch_up(0)
            .validate()
            .unwrap_err();
        assert!(matches!(
            bad_bound,
            ScheduleError::InvalidCatchUp { n: 0, .. }
        ));
    }
}
