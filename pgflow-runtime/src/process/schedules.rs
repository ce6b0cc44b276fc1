//! Firing cron schedules, once per client while its workers run: the process reads the schedules that are not paused, computes the
//! due ticks of each (the database's time, so machines' clocks do not matter), and asks the SQL
//! core to start their runs; the core lets one firer move each schedule on, so every tick
//! starts one run however many workers race. It sleeps until the soonest schedule is due, at
//! most [`SCHEDULE_POLL`].

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::db::Db;
use crate::engine::{self, ScheduleToFire};
use crate::error::EngineError;
use crate::process::Shared;
use crate::schedule::{MissedTicks, plan_firing};

/// The longest a process goes without looking at the schedules (a schedule changed, paused or
/// added by another worker is seen this soon).
const SCHEDULE_POLL: Duration = Duration::from_secs(1);

/// Fires due schedules until `stop`.
pub(super) async fn fire_schedules(shared: Arc<Shared>, stop: CancellationToken) {
    let mut reported = HashSet::new();
    loop {
        let fired = tokio::select! {
            fired = fire_due(&shared.db, &mut reported) => fired,
            () = stop.cancelled() => return,
        };
        let wait = fired.unwrap_or_else(|error| {
            tracing::warn!(%error, "firing schedules failed; retrying");
            SCHEDULE_POLL
        });
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Fires every due schedule once; returns how long to wait before looking again.
async fn fire_due(
    pool: &Db,
    reported: &mut HashSet<(String, String, String)>,
) -> Result<Duration, EngineError> {
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

/// Fires every due schedule once, now (the test kit's advance of the clock).
#[cfg(feature = "testing")]
pub(crate) async fn fire_due_schedules(db: &Db) -> Result<(), EngineError> {
    fire_due(db, &mut HashSet::new()).await.map(|_| ())
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
