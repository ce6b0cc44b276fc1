//! Firing cron schedules: the worker reads the schedules that are not paused, computes the
//! due ticks of each (the database's time, so machines' clocks do not matter), and asks the SQL
//! core to start their runs; the core lets one firer move each schedule on, so every tick
//! starts one run however many workers race. It sleeps until the soonest schedule is due, at
//! most [`SCHEDULE_POLL`].

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::{self, ScheduleToFire};
use crate::error::EngineError;
use crate::schedule::{MissedTicks, plan_firing};
use crate::worker::runtime::Runtime;

/// The longest a worker goes without looking at the schedules (a schedule changed, paused or
/// added by another worker is seen this soon).
const SCHEDULE_POLL: Duration = Duration::from_secs(1);

/// Fires due schedules until the worker stops.
pub async fn fire_schedules(rt: Arc<Runtime>) {
    let mut reported = HashSet::new();
    loop {
        let wait = match fire_due(&rt, &mut reported).await {
            Ok(wait) => wait,
            Err(error) => {
                tracing::warn!(queue = rt.started.queue.as_str(), %error, "firing schedules failed; retrying");
                SCHEDULE_POLL
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = rt.shutdown.cancelled() => return,
        }
    }
}

/// Fires every due schedule once; returns how long to wait before looking again.
async fn fire_due(
    rt: &Runtime,
    reported: &mut HashSet<(String, String, String)>,
) -> Result<Duration, EngineError> {
    let pool = &rt.started.pool;
    let mut wait = SCHEDULE_POLL;
    for schedule in engine::schedules_to_fire(pool).await? {
        let until_due = (schedule.next_fire_at - schedule.now)
            .to_std()
            .unwrap_or_default();
        if !until_due.is_zero() {
            wait = wait.min(until_due);
            continue;
        }
        let firing = match plan(&schedule) {
            Ok(firing) => firing,
            Err(error) => {
                // Stored by hand or by another release: say so once per definition.
                let key = (
                    schedule.schedule_name.clone(),
                    schedule.cron.clone(),
                    schedule.time_zone.clone(),
                );
                if reported.insert(key) {
                    tracing::error!(schedule = schedule.schedule_name.as_str(), %error, "schedule cannot be fired");
                }
                continue;
            }
        };
        let started = engine::fire_schedule(
            pool,
            &schedule.schedule_name,
            schedule.ticks_after,
            &firing.ticks,
            schedule.now,
            firing.next,
        )
        .await?;
        match started {
            Some(runs) if runs > 0 => tracing::info!(
                schedule = schedule.schedule_name.as_str(),
                runs,
                "schedule fired"
            ),
            Some(_) if !firing.ticks.is_empty() => tracing::warn!(
                schedule = schedule.schedule_name.as_str(),
                "schedule due but its flow could not be started (see `pgflow schedules list`)"
            ),
            _ => {}
        }
        let until_next = (firing.next - schedule.now).to_std().unwrap_or_default();
        wait = wait.min(until_next);
    }
    Ok(wait.max(Duration::from_millis(10)))
}

fn plan(schedule: &ScheduleToFire) -> Result<crate::schedule::Firing, crate::ScheduleError> {
    let missed = match schedule.missed.as_str() {
        "catch_up" => MissedTicks::CatchUp(u32::try_from(schedule.catch_up_limit).unwrap_or(1)),
        _ => MissedTicks::Skip,
    };
    plan_firing(
        &schedule.schedule_name,
        &schedule.cron,
        &schedule.time_zone,
        missed,
        Duration::from_secs(u64::try_from(schedule.grace_seconds).unwrap_or(0)),
        schedule.ticks_after,
        schedule.now,
    )
}
