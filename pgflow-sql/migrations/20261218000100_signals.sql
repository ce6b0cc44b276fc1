-- Signals (issue 37): a step may wait for a named signal before it runs. The step records the
-- signal's name, the Rust type its payload decodes into (and, for flows that check what comes
-- in, that type's JSON Schema), how long it may wait and what running out of time does.
--
-- A step whose dependencies are done but whose signal has not arrived is 'waiting': it holds no
-- task, no message and no worker, only a row in pgflow.waits (with its deadline, when it has
-- one). A signal is stored in pgflow.signals, once per (run, name), whether or not its step
-- waits yet; the step's handler reads its payload from there.

alter table pgflow.steps
  add column signal_name text
    constraint steps_signal_name_valid
      check (signal_name is null or pgflow.is_valid_slug(signal_name)),
  add column signal_type text,
  add column signal_schema jsonb,
  add column wait_timeout integer
    constraint steps_wait_timeout_positive check (wait_timeout >= 1),
  add column when_timed_out text not null default 'fail'
    constraint steps_when_timed_out_domain check (when_timed_out in ('fail', 'skip', 'skip_cascade'));

-- One step per signal name in a flow: a name says which step a signal is for.
create unique index steps_signal_name_key on pgflow.steps (flow_slug, signal_name)
  where signal_name is not null;

-- The signals runs received, kept for as long as their run (a retry of the run reuses them).
create table pgflow.signals (
  run_id uuid not null,
  signal_name text not null,
  payload jsonb not null,
  sent_at timestamptz not null default now(),
  primary key (run_id, signal_name)
);

-- The steps that wait: one row while a step is 'waiting', removed when its signal starts it,
-- its deadline passes or its run is cancelled.
create table pgflow.waits (
  run_id uuid not null,
  step_slug text not null,
  flow_slug text not null,
  signal_name text not null,
  waiting_since timestamptz not null default now(),
  deadline timestamptz,
  primary key (run_id, step_slug)
);
create index waits_deadline_idx on pgflow.waits (deadline) where deadline is not null;

-- 'waiting' is a step that has not started, as 'created' is; 'timed_out' is the skip of a wait
-- whose deadline passed (when_timed_out = skip or skip_cascade).
create or replace function pgflow.step_state_row_valid(
  status text, remaining_deps integer, initial_tasks integer, remaining_tasks integer,
  has_output boolean, skip_reason text, started_at timestamptz, completed_at timestamptz,
  failed_at timestamptz, skipped_at timestamptz, cancelled_at timestamptz)
returns boolean language plpgsql immutable as $$
begin
  return remaining_deps >= 0
    and coalesce(initial_tasks >= 0, true) and coalesce(remaining_tasks >= 0, true)
    and coalesce(remaining_tasks <= initial_tasks, true)
    and coalesce(skip_reason in ('condition_unmet', 'handler_failed', 'dependency_skipped',
                                 'timed_out'), true)
    and (status = 'skipped') = (skipped_at is not null)
    and (status = 'skipped') = (skip_reason is not null)
    and (status = 'cancelled') = (cancelled_at is not null)
    and ((status = 'created' and started_at is null and completed_at is null and failed_at is null
          and initial_tasks is null and remaining_tasks is null and not has_output)
      or (status = 'waiting' and remaining_deps = 0 and started_at is null
          and completed_at is null and failed_at is null and initial_tasks is null
          and remaining_tasks is null and not has_output)
      or (status = 'started' and started_at is not null and completed_at is null
          and failed_at is null and remaining_tasks is not null and not has_output)
      or (status = 'completed' and completed_at is not null and failed_at is null
          and remaining_tasks = 0 and has_output)
      or (status = 'failed' and failed_at is not null and completed_at is null)
      or (status in ('skipped', 'cancelled') and completed_at is null and failed_at is null
          and not has_output));
end $$;
