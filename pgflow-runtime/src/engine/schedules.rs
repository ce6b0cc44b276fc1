//! Cron schedules in the SQL core: declaring them, what workers fire, and operators' controls.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{FromRow, PgExecutor};

use crate::engine::Run;
use crate::error::EngineError;
use crate::schedule::{Schedule, ScheduleError};

/// A schedule as stored, with its state.
#[derive(Debug, Clone, PartialEq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct ScheduleRow {
    /// Its name.
    pub schedule_name: String,
    /// The alias or concrete flow it starts.
    pub flow_name: String,
    /// Its cron expression (with seconds).
    pub cron: String,
    /// The IANA zone the expression reads local time in.
    pub time_zone: String,
    /// The input of its runs.
    pub input: Value,
    /// `skip` or `catch_up`.
    pub missed: String,
    /// With `catch_up`: how many missed ticks at most.
    pub catch_up_limit: i32,
    /// How late a tick may be seen and still be on time.
    pub grace_seconds: i32,
    /// Paused: starts nothing.
    pub paused: bool,
    /// Ticks after this time are due.
    pub ticks_after: DateTime<Utc>,
    /// When it is next due.
    pub next_fire_at: DateTime<Utc>,
    /// When a tick last started a run.
    pub last_fired_at: Option<DateTime<Utc>>,
    /// Runs it started in all.
    pub runs_started: i64,
    /// Why its last ticks started nothing (its flow could not be started), if so.
    pub last_error: Option<String>,
    /// When it was first declared.
    pub created_at: DateTime<Utc>,
    /// When its definition last changed.
    pub updated_at: DateTime<Utc>,
}

/// A schedule a worker may fire, with the database's time.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
#[non_exhaustive]
pub struct ScheduleToFire {
    /// Its name.
    pub schedule_name: String,
    /// Its cron expression.
    pub cron: String,
    /// Its time zone.
    pub time_zone: String,
    /// `skip` or `catch_up`.
    pub missed: String,
    /// With `catch_up`: how many missed ticks at most.
    pub catch_up_limit: i32,
    /// How late a tick may be seen and still be on time.
    pub grace_seconds: i32,
    /// Ticks after this time are due.
    pub ticks_after: DateTime<Utc>,
    /// When it is next due.
    pub next_fire_at: DateTime<Utc>,
    /// The database's time of the read.
    pub now: DateTime<Utc>,
}

/// Creates or updates `schedule` as code declares it (`pgflow.define_schedule`): a new one, or
/// one whose cron or zone changed, fires the ticks after now; an unchanged one keeps its state
/// (paused or not). Returns whether the definition changed.
pub async fn define_schedule(
    executor: impl PgExecutor<'_>,
    schedule: &Schedule,
) -> Result<bool, EngineError> {
    let stored = schedule
        .stored()
        .map_err(|e: ScheduleError| EngineError::InvalidArguments(e.to_string()))?;
    let changed =
        sqlx::query_scalar("select pgflow.define_schedule($1, $2, $3, $4, $5, $6, $7, $8)")
            .bind(stored.name)
            .bind(stored.flow)
            .bind(stored.cron)
            .bind(stored.time_zone)
            .bind(&stored.input)
            .bind(stored.missed)
            .bind(stored.catch_up_limit)
            .bind(stored.grace_seconds)
            .fetch_one(executor)
            .await?;
    Ok(changed)
}

/// The schedules that are not paused, soonest first (`pgflow.schedules_to_fire`).
pub async fn schedules_to_fire(
    executor: impl PgExecutor<'_>,
) -> Result<Vec<ScheduleToFire>, EngineError> {
    let rows = sqlx::query_as("select * from pgflow.schedules_to_fire()")
        .fetch_all(executor)
        .await?;
    Ok(rows)
}

/// Starts one run per tick and moves the schedule on (`pgflow.fire_schedule`), unless another
/// worker fired it since it was read at `ticks_after` (or it was paused or deleted): then
/// `None`. Returns how many runs started.
pub async fn fire_schedule(
    executor: impl PgExecutor<'_>,
    schedule_name: &str,
    ticks_after: DateTime<Utc>,
    ticks: &[DateTime<Utc>],
    ticks_after_now: DateTime<Utc>,
    next_fire_at: DateTime<Utc>,
) -> Result<Option<i32>, EngineError> {
    let started = sqlx::query_scalar("select pgflow.fire_schedule($1, $2, $3, $4, $5)")
        .bind(schedule_name)
        .bind(ticks_after)
        .bind(ticks)
        .bind(ticks_after_now)
        .bind(next_fire_at)
        .fetch_one(executor)
        .await?;
    Ok(started)
}

/// Every schedule with its state, by name (`pgflow.schedule_list`).
pub async fn schedule_list(executor: impl PgExecutor<'_>) -> Result<Vec<ScheduleRow>, EngineError> {
    let rows = sqlx::query_as("select * from pgflow.schedule_list()")
        .fetch_all(executor)
        .await?;
    Ok(rows)
}

/// Pauses a schedule, or resumes it (`paused: false`; the ticks it missed while paused are not
/// caught up). [`EngineError::UnknownSchedule`] when there is none of that name.
pub async fn pause_schedule(
    executor: impl PgExecutor<'_>,
    schedule_name: &str,
    paused: bool,
) -> Result<(), EngineError> {
    let found: bool = sqlx::query_scalar("select pgflow.pause_schedule($1, $2)")
        .bind(schedule_name)
        .bind(paused)
        .fetch_one(executor)
        .await?;
    found
        .then_some(())
        .ok_or_else(|| EngineError::UnknownSchedule {
            schedule_name: schedule_name.to_owned(),
        })
}

/// Deletes a schedule (its runs stay). [`EngineError::UnknownSchedule`] when there is none.
pub async fn delete_schedule(
    executor: impl PgExecutor<'_>,
    schedule_name: &str,
) -> Result<(), EngineError> {
    let found: bool = sqlx::query_scalar("select pgflow.delete_schedule($1)")
        .bind(schedule_name)
        .fetch_one(executor)
        .await?;
    found
        .then_some(())
        .ok_or_else(|| EngineError::UnknownSchedule {
            schedule_name: schedule_name.to_owned(),
        })
}

/// Starts one run of the schedule now, outside its ticks (`pgflow.trigger_schedule`).
pub async fn trigger_schedule(
    executor: impl PgExecutor<'_>,
    schedule_name: &str,
) -> Result<Run, EngineError> {
    let run = sqlx::query_as::<_, Run>("select * from pgflow.trigger_schedule($1)")
        .bind(schedule_name)
        .fetch_one(executor)
        .await?;
    Ok(run)
}
