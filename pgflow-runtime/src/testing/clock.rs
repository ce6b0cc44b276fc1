//! The test clock: `pgflow.clock()`, which every time the engine records or compares reads, made
//! to add a lead that a test moves forward, and the SQL that moves it.
//!
//! In production `pgflow.clock()` is `now()`, inlined into every query (migration
//! `20261230000100_one_clock.sql`). [`install`] replaces it, in a test kit's throwaway
//! database only, with `now()` plus the lead kept in `pgflow_testing.clock`, written into the
//! function's body as a constant so that it is still inlined. PGMQ keeps its
//! visibility times (`vt`) on the server's clock, not the engine's, so [`advance`] moves them
//! back by the same amount: a message due in an hour is due at once. What the test's live
//! processes keep fresh (worker heartbeats, event subscriptions) moves along with the time,
//! as if they had gone on beating while it passed.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::types::PgInterval;

use crate::db::Db;
use crate::testing::TestError;

/// The test clock's schema: a table of one row (the lead), the replacement `pgflow.clock()`
/// and the two functions the kit calls. Run once, by the database's owner, after the install.
pub(crate) const TEST_CLOCK_SQL: &str = r#"
create schema pgflow_testing;
comment on schema pgflow_testing is
  'pgflow''s test clock: only ever in a test kit''s throwaway database';

create table pgflow_testing.clock (
  singleton boolean primary key default true check (singleton),
  lead interval not null default interval '0' check (lead >= interval '0')
);
insert into pgflow_testing.clock default values;

-- set_clock: makes pgflow.clock() now() plus the lead, written into its body as a constant, so
-- that Postgres still inlines it (a lead read from the table by a subquery would not be
-- inlined: every call would run a query of its own, and a start would take a hundred times
-- longer). Replacing the function makes every session plan its queries again.
create function pgflow_testing.set_clock()
returns void
language plpgsql
as $fn$
begin
  execute format(
    'create or replace function pgflow.clock() returns timestamptz language sql stable '
    'parallel safe as %L',
    format('select now() + %L::interval', (select c.lead from pgflow_testing.clock c)));
end;
$fn$;
select pgflow_testing.set_clock();

-- advance: moves the engine's time forward by p_by. Returns the new time.
create function pgflow_testing.advance(p_by interval)
returns timestamptz
language plpgsql
as $fn$
declare
  v_queue text;
begin
  if p_by < interval '0' then
    raise exception 'the test clock only moves forward (asked to move by %)', p_by;
  end if;
  update pgflow_testing.clock set lead = lead + p_by;
  perform pgflow_testing.set_clock();
  -- PGMQ's visibility times are on the server's clock: what was due within p_by is due now.
  for v_queue in select m.queue_name from pgmq.meta m loop
    execute format('update pgmq.%I set vt = vt - $1', 'q_' || v_queue) using p_by;
  end loop;
  -- Live workers and event subscribers would have kept these fresh while the time passed.
  update pgflow.workers set last_heartbeat_at = last_heartbeat_at + p_by
  where stopped_at is null;
  update pgflow.event_subscribers set expires_at = expires_at + p_by;
  return pgflow.clock();
end;
$fn$;

-- next_due: whether a task is started, whether a message is visible (work a worker can
-- claim now), and how long until the soonest thing the time brings: a message due later (a
-- retry, a delayed start or step, a rate limit's turn), a wait's deadline, a debounced run's
-- begin, a cron schedule's tick. due_in is null when the time brings nothing.
create function pgflow_testing.next_due(out started boolean, out visible boolean,
                                        out due_in interval)
language plpgsql
as $fn$
declare
  v_queue text;
  v_at timestamptz;
begin
  started := exists (select 1 from pgflow.step_tasks t where t.status = 'started');
  visible := false;
  for v_queue in select m.queue_name from pgmq.meta m loop
    execute format('select min(q.vt) from pgmq.%I q', 'q_' || v_queue) into v_at;
    if v_at <= clock_timestamp() then
      visible := true;
    else
      due_in := least(due_in, v_at - clock_timestamp());
    end if;
  end loop;
  due_in := least(
    due_in,
    (select min(w.deadline) from pgflow.waits w where w.deadline is not null) - pgflow.clock(),
    (select min(d.begins_at) from pgflow.deferred_runs d) - pgflow.clock(),
    (select min(s.next_fire_at) from pgflow.schedules s where not s.paused) - pgflow.clock());
  -- (greatest would turn a null, nothing due, into zero)
  if due_in < interval '0' then
    due_in := interval '0';
  end if;
end;
$fn$;

-- wake: wakes the idle workers of every queue a flow routes to.
create function pgflow_testing.wake()
returns void
language sql
as $fn$
  select pg_notify('pgflow.' || q.queue_name, '')
  from (select distinct s.queue_name from pgflow.steps s) q;
$fn$;
"#;

/// Replaces `pgflow.clock()` with the test clock in the database of `db` (installed, and
/// owned by the caller).
pub(crate) async fn install(db: &Db) -> Result<(), TestError> {
    sqlx::raw_sql(TEST_CLOCK_SQL)
        .execute(db.pool())
        .await
        .map_err(TestError::Clock)?;
    Ok(())
}

/// The engine's time.
pub(crate) async fn now(db: &Db) -> Result<DateTime<Utc>, TestError> {
    sqlx::query_scalar("select pgflow.clock()")
        .fetch_one(db.pool())
        .await
        .map_err(TestError::Clock)
}

/// Moves the engine's time forward by `by`; returns the new time.
pub(crate) async fn advance(db: &Db, by: Duration) -> Result<DateTime<Utc>, TestError> {
    sqlx::query_scalar("select pgflow_testing.advance($1)")
        .bind(interval(by)?)
        .fetch_one(db.pool())
        .await
        .map_err(TestError::Clock)
}

/// Wakes every queue's idle workers.
pub(crate) async fn wake(db: &Db) -> Result<(), TestError> {
    sqlx::query("select pgflow_testing.wake()")
        .execute(db.pool())
        .await
        .map_err(TestError::Clock)?;
    Ok(())
}

/// What runs now, and what the time brings next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Next {
    /// A task is started: a handler may be running.
    pub(crate) started: bool,
    /// A message is visible: a worker can claim it now.
    pub(crate) visible: bool,
    /// How long until the time brings something; `None`: it brings nothing (only a signal, an
    /// event or an operator moves on).
    pub(crate) due_in: Option<Duration>,
}

impl Next {
    /// Whether anything can run now.
    pub(crate) fn busy(&self) -> bool {
        self.started || self.visible
    }
}

/// What runs now, and how long until the time brings something.
pub(crate) async fn next_due(db: &Db) -> Result<Next, TestError> {
    let (started, visible, due_in): (bool, bool, Option<PgInterval>) =
        sqlx::query_as("select started, visible, due_in from pgflow_testing.next_due()")
            .fetch_one(db.pool())
            .await
            .map_err(TestError::Clock)?;
    Ok(Next {
        started,
        visible,
        due_in: due_in.as_ref().map(duration),
    })
}

/// `by` as a Postgres interval (microseconds).
fn interval(by: Duration) -> Result<PgInterval, TestError> {
    let microseconds = i64::try_from(by.as_micros()).map_err(|_| TestError::TooFar { by })?;
    Ok(PgInterval {
        months: 0,
        days: 0,
        microseconds,
    })
}

/// A non-negative interval of days and microseconds (what `next_due` computes) as a duration.
fn duration(interval: &PgInterval) -> Duration {
    let days = u64::try_from(interval.days).unwrap_or(0);
    let micros = u64::try_from(interval.microseconds).unwrap_or(0);
    Duration::from_secs(days * 86_400) + Duration::from_micros(micros)
}
