-- Delayed starts and cron schedules.
--
-- * A run may be started for a later time: `scheduled_for` records it, and its first tasks'
--   messages become visible then. A run a schedule started records its tick there.
-- * `schedules`: cron schedules fired by workers (no pg_cron). Each names an alias or a
--   concrete flow, a cron expression with seconds, an IANA time zone, the input of its runs and
--   what to do with ticks missed while no worker ran (skip them, or catch up a bounded number of
--   them); a tick is missed when it is older than `grace_seconds` by the time a worker sees it.
--   Ticks after `ticks_after` are due to be fired; `next_fire_at` is the first of them, as a
--   worker computed it (workers parse the cron; the database only compares times). A worker
--   fires a schedule by moving `ticks_after` from the value it read (compare and set, under the
--   row lock), so each tick starts exactly one run however many workers race.
--
-- start_flows, start_flow and start_alias_typed gain p_start_at, so their signatures change.

alter table pgflow.runs
  add column scheduled_for timestamptz;

create table pgflow.schedules (
  schedule_name text primary key
    constraint schedules_name_valid check (pgflow.is_valid_slug(schedule_name)),
  flow_name text not null
    constraint schedules_flow_name_valid check (pgflow.is_valid_slug(flow_name)),
  cron text not null
    constraint schedules_cron_not_blank check (length(trim(cron)) > 0),
  time_zone text not null default 'UTC',
  input jsonb not null default 'null'::jsonb,
  missed text not null default 'skip'
    constraint schedules_missed_domain check (missed in ('skip', 'catch_up')),
  catch_up_limit integer not null default 1
    constraint schedules_catch_up_limit_range check (catch_up_limit between 1 and 1000),
  grace_seconds integer not null default 5
    constraint schedules_grace_non_negative check (grace_seconds >= 0),
  paused boolean not null default false,
  ticks_after timestamptz not null default now(),
  next_fire_at timestamptz not null default now(),
  last_fired_at timestamptz,
  runs_started bigint not null default 0,
  last_error text,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

create index schedules_due_idx on pgflow.schedules (next_fire_at) where not paused;

drop function if exists pgflow.start_flow(text, jsonb, uuid, boolean, text);
drop function if exists pgflow.start_flows(text, jsonb[], uuid[], boolean, text[], text);
drop function if exists pgflow.start_alias_typed(text, jsonb[], text, text, text[]);
