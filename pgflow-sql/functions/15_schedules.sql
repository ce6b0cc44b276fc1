-- Cron schedules, fired by workers (no pg_cron). Workers parse the cron expressions and compute
-- the ticks; the database keeps each schedule's state and makes each tick start one run.

-- define_schedule: creates or updates a schedule as code declares it (a worker does at startup).
-- A new schedule, or one whose cron or time zone changed, fires the ticks after now; an
-- unchanged one keeps its state (so restarts neither repeat nor lose ticks), and whether it
-- is paused is the operators' to say. Returns whether the definition changed.
-- Locks: the schedule's row (for update, then updated when changed), or a new row (insert).
create or replace function pgflow.define_schedule(
  p_schedule_name text,
  p_flow_name text,
  p_cron text,
  p_time_zone text,
  p_input jsonb,
  p_missed text,
  p_catch_up_limit integer,
  p_grace_seconds integer
)
returns boolean
language plpgsql
as $$
declare
  v_old pgflow.schedules;
begin
  select * into v_old from pgflow.schedules s
  where s.schedule_name = p_schedule_name for update;
  if not found then
    insert into pgflow.schedules (schedule_name, flow_name, cron, time_zone, input, missed,
                                  catch_up_limit, grace_seconds)
    values (p_schedule_name, p_flow_name, p_cron, p_time_zone, p_input, p_missed,
            p_catch_up_limit, p_grace_seconds)
    on conflict (schedule_name) do nothing;
    return true;
  end if;
  if (v_old.flow_name, v_old.cron, v_old.time_zone, v_old.input, v_old.missed,
      v_old.catch_up_limit, v_old.grace_seconds)
     is not distinct from (p_flow_name, p_cron, p_time_zone, p_input, p_missed,
                           p_catch_up_limit, p_grace_seconds) then
    return false;
  end if;
  update pgflow.schedules s
  set flow_name = p_flow_name, input = p_input, missed = p_missed,
      catch_up_limit = p_catch_up_limit, grace_seconds = p_grace_seconds,
      cron = p_cron, time_zone = p_time_zone,
      ticks_after = case when (v_old.cron, v_old.time_zone) is distinct from (p_cron, p_time_zone)
                         then pgflow.clock() else s.ticks_after end,
      next_fire_at = case when (v_old.cron, v_old.time_zone) is distinct from (p_cron, p_time_zone)
                          then pgflow.clock() else s.next_fire_at end,
      updated_at = pgflow.clock()
  where s.schedule_name = p_schedule_name;
  return true;
end;
$$;

-- schedules_to_fire: the schedules that are not paused, soonest first, with what a worker needs
-- to compute their ticks.
-- Locks: none (reads only).
create or replace function pgflow.schedules_to_fire()
returns table (schedule_name text, cron text, time_zone text, missed text,
               catch_up_limit integer, grace_seconds integer, ticks_after timestamptz,
               next_fire_at timestamptz, now timestamptz)
language sql
stable
as $$
  select s.schedule_name, s.cron, s.time_zone, s.missed, s.catch_up_limit, s.grace_seconds,
         s.ticks_after, s.next_fire_at, pgflow.clock()
  from pgflow.schedules s
  where not s.paused
  order by s.next_fire_at, s.schedule_name
$$;

-- fire_schedule: starts one run of the schedule per tick in p_ticks (its flow, its input, each
-- run's scheduled_for the tick, each with the idempotency key `schedule:<name>:<tick>`), and
-- moves the schedule on: ticks after p_ticks_after_now are due next, the first at
-- p_next_fire_at. Does nothing and returns null when the schedule is paused, gone, locked by
-- another firer, or no longer at p_ticks_after (another worker fired it first): so each tick
-- starts one run. When the flow cannot be started (no such flow or alias, or an input that
-- does not fit the flow's input schema), the ticks are dropped and the error kept on the
-- schedule. Returns how many runs were started.
-- Locks: the schedule's row (skip locked), then as start_flows.
create or replace function pgflow.fire_schedule(
  p_schedule_name text,
  p_ticks_after timestamptz,
  p_ticks timestamptz[],
  p_ticks_after_now timestamptz,
  p_next_fire_at timestamptz
)
returns integer
language plpgsql
as $$
declare
  v_schedule pgflow.schedules;
  v_tick timestamptz;
  v_started integer := 0;
  v_error text;
begin
  select * into v_schedule from pgflow.schedules s
  where s.schedule_name = p_schedule_name
  for update skip locked;
  if not found or v_schedule.paused or v_schedule.ticks_after <> p_ticks_after then
    return null;
  end if;

  begin
    foreach v_tick in array coalesce(p_ticks, array[]::timestamptz[]) loop
      perform pgflow.start_flows(
        v_schedule.flow_name, array[v_schedule.input], null, true,
        array[format('schedule:%s:%s', p_schedule_name,
                     to_char(v_tick at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))],
        null, v_tick);
      v_started := v_started + 1;
    end loop;
  exception when sqlstate 'PF004' or sqlstate 'PF014' then
    get stacked diagnostics v_error = message_text;
    v_started := 0;
  end;

  update pgflow.schedules s
  set ticks_after = p_ticks_after_now,
      next_fire_at = p_next_fire_at,
      last_fired_at = case when v_started > 0 then pgflow.clock() else s.last_fired_at end,
      runs_started = s.runs_started + v_started,
      last_error = case when v_error is not null then v_error
                        when v_started > 0 then null else s.last_error end
  where s.schedule_name = p_schedule_name;
  return v_started;
end;
$$;

-- pause_schedule: pauses (p_paused) or resumes a schedule. A resumed schedule fires the ticks
-- after now: what it missed while paused is not caught up. Returns whether it exists.
-- Locks: the schedule's row (update).
create or replace function pgflow.pause_schedule(p_schedule_name text, p_paused boolean)
returns boolean
language plpgsql
as $$
begin
  update pgflow.schedules s
  set paused = p_paused,
      ticks_after = case when s.paused and not p_paused then pgflow.clock() else s.ticks_after end,
      next_fire_at = case when s.paused and not p_paused then pgflow.clock() else s.next_fire_at end,
      updated_at = pgflow.clock()
  where s.schedule_name = p_schedule_name;
  return found;
end;
$$;

-- delete_schedule: deletes a schedule (its runs stay). Returns whether it existed. A worker
-- that declares it again creates it again.
-- Locks: the schedule's row (delete).
create or replace function pgflow.delete_schedule(p_schedule_name text)
returns boolean
language plpgsql
as $$
begin
  delete from pgflow.schedules s where s.schedule_name = p_schedule_name;
  return found;
end;
$$;

-- trigger_schedule: starts one run of the schedule now, outside its ticks (paused or not).
-- Raises PF013 when it does not exist, PF004 when its flow cannot be started.
-- Locks: none on the schedule while it starts the run (as start_flow), then the schedule's
-- row (update).
create or replace function pgflow.trigger_schedule(p_schedule_name text)
returns pgflow.runs
language plpgsql
as $$
declare
  v_schedule pgflow.schedules;
  v_run pgflow.runs;
begin
  select * into v_schedule from pgflow.schedules s where s.schedule_name = p_schedule_name;
  if not found then
    raise exception 'no schedule `%` exists; `pgflow schedules list` lists them', p_schedule_name
      using errcode = 'PF013',
            detail = jsonb_build_object('schedule_name', p_schedule_name)::text;
  end if;
  select * into v_run from pgflow.start_flow(v_schedule.flow_name, v_schedule.input);
  update pgflow.schedules s
  set runs_started = s.runs_started + 1, last_fired_at = pgflow.clock()
  where s.schedule_name = p_schedule_name;
  return v_run;
end;
$$;

-- schedule_list: every schedule with its state, by name, for operators.
-- Locks: none (reads only).
create or replace function pgflow.schedule_list()
returns setof pgflow.schedules
language sql
stable
as $$
  select * from pgflow.schedules order by schedule_name
$$;
