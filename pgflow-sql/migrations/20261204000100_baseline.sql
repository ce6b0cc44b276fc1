-- pgflow baseline: the whole schema of pgflow's first release (tables, columns, types, indexes,
-- constraints, storage options), squashed from the pre-release migrations. Functions, views and
-- triggers are not here: they are in `pgflow-sql/functions/`, applied after the migrations in
-- the same transaction (see `functions/README.md`). The only functions here are the ones CHECK
-- constraints call (the name rules and the row invariants), which must exist before the tables.
--
-- Definitions (flows, steps, deps), aliases, run state (runs, step_states, step_tasks, the
-- attempt history), workers and rollouts, cron schedules and event subscriptions.
--
-- Invariants are enforced by constraints so that no function bug can store an impossible state:
-- status domains, non-negative counters, exactly one terminal timestamp per terminal status,
-- valid slugs and queue names, one queued task per PGMQ message, and parents for every row.
-- Parents of the run-state rows that are created per task (a step state's run and step, a
-- task's step state) are checked once per inserting statement, over all its rows, rather than
-- by row-by-row foreign keys: those cost a trigger query and a row lock on the parent for
-- every row, 8 % of the engine's CPU per task for single-step runs and 17 % for chains
-- (measured with the engine benchmark). Their keys never change after insert. The statement
-- triggers that check them are in `functions/02_integrity.sql`.

create schema if not exists pgflow;

-- Name rules. The Rust validators in `pgflow_runtime::names` implement the same rules; a test
-- feeds both the same table of good and bad names.
--
-- The CHECK constraints below call these, so they must exist before the tables, and a new body
-- would change constraints that stored rows were checked against. Changing one takes a
-- versioned migration (`create or replace function`, same arguments).
--
-- A slug (flow, step, alias, schedule) is an identifier: a letter or underscore, then letters,
-- digits or underscores, at most 47 bytes (so that a lowercased flow slug is always a valid
-- queue name).
create function pgflow.is_valid_slug(slug text)
returns boolean
language sql
immutable
parallel safe
as $$
  select slug is not null and slug ~ '^[A-Za-z_][A-Za-z0-9_]{0,46}$'
$$;

-- A queue name follows PGMQ's limits, restricted to lowercase: `[a-z0-9_]`, 1 to 47 bytes.
create function pgflow.is_valid_queue_name(queue_name text)
returns boolean
language sql
immutable
parallel safe
as $$
  select queue_name is not null and queue_name ~ '^[a-z0-9_]{1,47}$'
$$;

-- Row invariants of the three run-state tables. Each of `runs`, `step_states` and `step_tasks`
-- has a single CHECK (`*_row_valid`) that calls one of these functions with the row's columns,
-- instead of one CHECK expression per invariant.
--
-- Why: for every statement that writes a table, Postgres rebuilds each of the table's check
-- constraints from its stored expression tree, and these three tables are written by every
-- start, claim and completion. As 26 separate expressions they were 35 kB of stored tree, read
-- again for every start: 12 % of the server's CPU in a profile of starts (benches/HISTORY.md,
-- issue 21). A function call is a small tree, and plpgsql keeps the function's compiled
-- expression for the session. A CHECK fails when any one invariant is false, as a conjunction
-- of separate constraints would; a violation names the table's `*_row_valid` constraint.
--
-- A run: counters are not negative; each status has exactly its own terminal timestamp (and
-- an output only when completed); the cancel fields belong to cancelled runs; an idempotency
-- key is 1 to 255 characters and comes with its scope; a resumed run names both the run and
-- the step it was resumed from; a trace context is at most 1024 characters.
create function pgflow.run_row_valid(
  status text, remaining_steps integer, retry_count integer, has_output boolean,
  completed_at timestamptz, failed_at timestamptz, cancelled_at timestamptz, cancel_reason text,
  idempotency_key text, idempotency_scope text, resumed_from uuid, resumed_at_step text,
  trace_context text)
returns boolean language plpgsql immutable as $$
begin
  return remaining_steps >= 0 and retry_count >= 0
    and ((status = 'started' and completed_at is null and failed_at is null and not has_output)
      or (status = 'completed' and completed_at is not null and failed_at is null and has_output
          and remaining_steps = 0)
      or (status = 'failed' and failed_at is not null and completed_at is null)
      or (status = 'cancelled' and completed_at is null and failed_at is null and not has_output))
    and (status = 'cancelled') = (cancelled_at is not null)
    and (cancel_reason is null or status = 'cancelled')
    and coalesce(length(idempotency_key) between 1 and 255, true)
    and (idempotency_key is null) = (idempotency_scope is null)
    and (resumed_from is null) = (resumed_at_step is null)
    and coalesce(length(trace_context) <= 1024, true);
end $$;

-- A step state: counters are not negative and no more tasks remain than there were; a skipped
-- step has its time and a known reason, a cancelled one its time; each status has exactly its
-- own timestamps and sizes. A step is skipped before it starts (its condition, or a skipped
-- dependency upstream) or while it runs (a task out of attempts): either way, like a cancelled
-- step, it has no output.
create function pgflow.step_state_row_valid(
  status text, remaining_deps integer, initial_tasks integer, remaining_tasks integer,
  has_output boolean, skip_reason text, started_at timestamptz, completed_at timestamptz,
  failed_at timestamptz, skipped_at timestamptz, cancelled_at timestamptz)
returns boolean language plpgsql immutable as $$
begin
  return remaining_deps >= 0
    and coalesce(initial_tasks >= 0, true) and coalesce(remaining_tasks >= 0, true)
    and coalesce(remaining_tasks <= initial_tasks, true)
    and coalesce(skip_reason in ('condition_unmet', 'handler_failed', 'dependency_skipped'), true)
    and (status = 'skipped') = (skipped_at is not null)
    and (status = 'skipped') = (skip_reason is not null)
    and (status = 'cancelled') = (cancelled_at is not null)
    and ((status = 'created' and started_at is null and completed_at is null and failed_at is null
          and initial_tasks is null and remaining_tasks is null and not has_output)
      or (status = 'started' and started_at is not null and completed_at is null
          and failed_at is null and remaining_tasks is not null and not has_output)
      or (status = 'completed' and completed_at is not null and failed_at is null
          and remaining_tasks = 0 and has_output)
      or (status = 'failed' and failed_at is not null and completed_at is null)
      or (status in ('skipped', 'cancelled') and completed_at is null and failed_at is null
          and not has_output));
end $$;

-- A task: index and counters are not negative, the attempts before a retry are at most the
-- attempts made; a cancelled or skipped task has its time; each status has exactly its own
-- timestamps, and only a completed task an output.
create function pgflow.step_task_row_valid(
  status text, task_index integer, attempts_count integer, attempts_base integer,
  requeue_count integer, has_output boolean, started_at timestamptz, completed_at timestamptz,
  failed_at timestamptz, skipped_at timestamptz, cancelled_at timestamptz)
returns boolean language plpgsql immutable as $$
begin
  return task_index >= 0 and attempts_count >= 0 and requeue_count >= 0
    and attempts_base between 0 and attempts_count
    and (status = 'cancelled') = (cancelled_at is not null)
    and (status = 'skipped') = (skipped_at is not null)
    and ((status = 'queued' and completed_at is null and failed_at is null and not has_output)
      or (status = 'started' and started_at is not null and completed_at is null
          and failed_at is null and not has_output)
      or (status = 'completed' and completed_at is not null and failed_at is null and has_output)
      or (status = 'failed' and failed_at is not null and completed_at is null)
      or (status in ('skipped', 'cancelled') and completed_at is null and failed_at is null
          and not has_output));
end $$;

------------------------------------------------------------------------------------------------
-- Definitions and aliases
------------------------------------------------------------------------------------------------

-- One concrete flow: an immutable DAG. Options are defaults for its steps.
--
-- Retry policy: the delay before a retry grows exponentially from `opt_base_delay` (seconds);
-- `opt_max_delay` caps it (null: no cap; without one, a base delay of 1 s exceeds an hour by
-- the 13th attempt). `opt_jitter` shortens each delay by a random part of up to that
-- percentage, so tasks that failed together (say, during an outage of the service they call)
-- do not all come back at the same moment.
--
-- `input_type` and `output_type` are the Rust types the flow takes and produces, as its
-- worker's code names them (`std::any::type_name`), recorded when a worker compiles or verifies
-- the flow. A typed start through an alias (`start_alias_typed`) checks them against the
-- caller's, so a caller never decodes a version it was not built for. They are not part of the
-- flow's shape; null means never recorded (for example a flow defined in SQL).
create table pgflow.flows (
  flow_slug text primary key
    constraint flows_flow_slug_valid check (pgflow.is_valid_slug(flow_slug)),
  alias text not null
    constraint flows_alias_valid check (pgflow.is_valid_slug(alias)),
  version integer not null
    constraint flows_version_positive check (version >= 1),
  opt_max_attempts integer not null default 3
    constraint flows_max_attempts_positive check (opt_max_attempts >= 1),
  opt_base_delay integer not null default 1
    constraint flows_base_delay_non_negative check (opt_base_delay >= 0),
  opt_timeout integer not null default 60
    constraint flows_timeout_positive check (opt_timeout >= 1),
  created_at timestamptz not null default now(),
  opt_max_delay integer
    constraint flows_max_delay_positive check (opt_max_delay >= 1),
  opt_jitter integer not null default 0
    constraint flows_jitter_percent check (opt_jitter between 0 and 100),
  input_type text,
  output_type text,
  constraint flows_alias_version_key unique (alias, version)
);

-- Aliases: the stable names callers start. Each points at exactly one concrete flow of the
-- alias (its active version). Workers only ever activate a version above the alias's high-water
-- mark (the highest version it ever pointed at), so activation never moves backwards and an
-- operator's explicit rollback is not undone by the next worker restart. A concrete flow
-- belongs to one alias for life (`flows.alias`).
create table pgflow.aliases (
  alias text primary key
    constraint aliases_alias_valid check (pgflow.is_valid_slug(alias)),
  flow_slug text not null references pgflow.flows (flow_slug),
  high_water_version integer not null
    constraint aliases_high_water_positive check (high_water_version >= 1),
  activated_at timestamptz not null default now()
);

-- Every move of an alias, for operators.
create table pgflow.alias_history (
  change_id bigint generated always as identity primary key,
  alias text not null references pgflow.aliases (alias),
  from_flow_slug text references pgflow.flows (flow_slug),
  to_flow_slug text not null references pgflow.flows (flow_slug),
  reason text not null
    constraint alias_history_reason_domain check (reason in ('activated', 'set')),
  changed_at timestamptz not null default now()
);

-- The steps of a concrete flow, in topological order (`step_index`), with their queue route.
-- A null option means "use the flow's option" (so a null `opt_jitter` is the flow's jitter).
--
-- Conditions: a step runs only when its input contains `condition_when` (JSON containment,
-- `@>`) and does not contain `condition_unless`. A root step's input is the flow input; any
-- other step's is the object of its dependencies' outputs, keyed by step slug. `when_unmet`
-- says what an unmet condition does: skip the step (its dependents see null), skip it and
-- every step downstream, or fail the run. `when_exhausted` says what a task out of attempts
-- does: fail the run, skip the step, or skip it and every step downstream.
create table pgflow.steps (
  flow_slug text not null references pgflow.flows (flow_slug),
  step_slug text not null
    constraint steps_step_slug_valid check (pgflow.is_valid_slug(step_slug)),
  step_index integer not null
    constraint steps_step_index_non_negative check (step_index >= 0),
  step_type text not null
    constraint steps_step_type_domain check (step_type in ('single', 'map')),
  deps_count integer not null
    constraint steps_deps_count_non_negative check (deps_count >= 0),
  queue_name text not null
    constraint steps_queue_name_valid check (pgflow.is_valid_queue_name(queue_name)),
  opt_max_attempts integer
    constraint steps_max_attempts_positive check (opt_max_attempts >= 1),
  opt_base_delay integer
    constraint steps_base_delay_non_negative check (opt_base_delay >= 0),
  opt_timeout integer
    constraint steps_timeout_positive check (opt_timeout >= 1),
  opt_start_delay integer
    constraint steps_start_delay_non_negative check (opt_start_delay >= 0),
  created_at timestamptz not null default now(),
  opt_max_delay integer
    constraint steps_max_delay_positive check (opt_max_delay >= 1),
  opt_jitter integer
    constraint steps_jitter_percent check (opt_jitter between 0 and 100),
  condition_when jsonb,
  condition_unless jsonb,
  when_unmet text not null default 'skip'
    constraint steps_when_unmet_domain check (when_unmet in ('skip', 'skip_cascade', 'fail')),
  when_exhausted text not null default 'fail'
    constraint steps_when_exhausted_domain
      check (when_exhausted in ('fail', 'skip', 'skip_cascade')),
  primary key (flow_slug, step_slug),
  constraint steps_flow_step_index_key unique (flow_slug, step_index),
  -- a map step maps over the flow input (no dependency) or over its single dependency
  constraint steps_map_has_at_most_one_dep check (step_type = 'single' or deps_count <= 1)
);

create index steps_queue_name_idx on pgflow.steps (queue_name);

-- Dependency edges: `step_slug` depends on `dep_slug` (both of `flow_slug`).
create table pgflow.deps (
  flow_slug text not null,
  dep_slug text not null,
  step_slug text not null,
  primary key (flow_slug, step_slug, dep_slug),
  foreign key (flow_slug, dep_slug) references pgflow.steps (flow_slug, step_slug),
  foreign key (flow_slug, step_slug) references pgflow.steps (flow_slug, step_slug),
  constraint deps_not_self check (dep_slug <> step_slug)
);

create index deps_dep_idx on pgflow.deps (flow_slug, dep_slug);

------------------------------------------------------------------------------------------------
-- Run state
------------------------------------------------------------------------------------------------

-- One execution of a concrete flow. It never changes flow. Its invariants are the single
-- check `runs_row_valid` (see `pgflow.run_row_valid` above).
--
-- * Idempotent starts: a run started with a caller's key records the key together with the
--   name it was started by (an alias or a concrete flow: `idempotency_scope`). A second start
--   with the same key and name returns this run instead of starting another, for as long as
--   the run is kept.
-- * A cancelled run records when, and optionally why (`cancel_reason`).
-- * `retry_count`: how many times the failed run was retried.
-- * A run resumed from a step is a new run linked to the old one (`resumed_from`,
--   `resumed_at_step`); the old run keeps its history as it was. No foreign key: retention may
--   remove the old run.
-- * `scheduled_for`: the time a delayed start was asked for (its first tasks' messages become
--   visible then), or the tick of the schedule that started the run.
-- * `trace_context`: the W3C trace context of the span that started the run (`traceparent`,
--   then `tracestate` after a newline when there is one), handed to workers with every claim
--   so that the run's tasks continue the caller's trace. At most 1024 characters.
create table pgflow.runs (
  run_id uuid primary key default gen_random_uuid(),
  flow_slug text not null references pgflow.flows (flow_slug),
  status text not null default 'started', -- started, completed, failed or cancelled
  input jsonb not null,
  output jsonb,
  remaining_steps integer not null,
  started_at timestamptz not null default now(),
  completed_at timestamptz,
  failed_at timestamptz,
  idempotency_scope text,
  idempotency_key text,
  cancelled_at timestamptz,
  cancel_reason text,
  retry_count integer not null default 0,
  resumed_from uuid,
  resumed_at_step text,
  scheduled_for timestamptz,
  trace_context text,
  constraint runs_row_valid check (pgflow.run_row_valid(
    status, remaining_steps, retry_count, output is not null, completed_at, failed_at,
    cancelled_at, cancel_reason, idempotency_key, idempotency_scope, resumed_from,
    resumed_at_step, trace_context))
) with (fillfactor = 60);

-- Live runs by flow (drain status). Only started runs are indexed: the index stays as small as
-- the work in flight, and completing or failing a run adds no entry to it.
create index runs_started_by_flow_idx on pgflow.runs (flow_slug) where status = 'started';

-- An idempotency key is unique within its scope.
create unique index runs_idempotency_key_idx on pgflow.runs (idempotency_scope, idempotency_key)
  where idempotency_key is not null;

-- Listings of runs (the dashboard, and any tool that lists runs): a page of runs, newest
-- first, of one flow, of every flow, of one status or within a time range stays a short index
-- walk however many ended runs the tables hold. A page of every flow's runs walks this index
-- once per flow and merges the walks (flows are few, runs are many), so one index serves both
-- listings. Neither indexed column ever changes, so status updates stay heap-only.
create index runs_flow_started_idx on pgflow.runs (flow_slug, started_at, run_id);

-- Failed and cancelled runs are few among many completed ones: filtering the listing above by
-- status would walk every completed run. A run enters this index only when it fails or is
-- cancelled, so starting and completing runs pay nothing for it.
create index runs_unsuccessful_idx on pgflow.runs (flow_slug, status, started_at, run_id)
  where status in ('failed', 'cancelled');

-- The state of one step within one run. Its invariants are the single check
-- `step_states_row_valid` (see `pgflow.step_state_row_valid` above). A skipped step counts as
-- done for its run; `skip_reason` is `condition_unmet`, `handler_failed` (a task out of
-- attempts with `when_exhausted` skipping) or `dependency_skipped`.
create table pgflow.step_states (
  run_id uuid not null,
  step_slug text not null,
  flow_slug text not null,
  -- created, started, completed, failed, skipped or cancelled
  status text not null default 'created',
  remaining_deps integer not null,
  initial_tasks integer,
  remaining_tasks integer,
  output jsonb,
  error_message text,
  created_at timestamptz not null default now(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  skipped_at timestamptz,
  skip_reason text,
  cancelled_at timestamptz,
  primary key (run_id, step_slug),
  constraint step_states_row_valid check (pgflow.step_state_row_valid(
    status, remaining_deps, initial_tasks, remaining_tasks, output is not null, skip_reason,
    started_at, completed_at, failed_at, skipped_at, cancelled_at))
) with (fillfactor = 60);

-- One unit of work: a single step has one task (index 0), a map step one task per element.
-- Its invariants are the single check `step_tasks_row_valid` (see `pgflow.step_task_row_valid`
-- above).
-- `queue_name` is the queue snapshot taken when the task was created; it never changes.
-- `flow_slug` and `queue_name` are copied from the step's row (which checks both) when the task
-- is created; the table does not check them again: they are on every insert and update of the
-- busiest table, and the parent check (`functions/02_integrity.sql`) ties a task to its run and step.
--
-- `message_id` is the task's PGMQ message, and may be null: a task claimed at release (by the
-- completion that released it, on the completing worker's own queue) is created 'started' and
-- never has a message. A queued task always gets one, in the transaction that queues it; no
-- check can say so, because a retry or a requeue marks the task queued before it sends the new
-- message.
--
-- `attempts_base`: the attempts the task had spent before its run was last retried. A retry
-- queues failed tasks again with a fresh budget of attempts without renumbering them: attempt
-- numbers keep growing (so a late result of an attempt from before the retry never matches a
-- new attempt), and `attempts_count - attempts_base` is what counts against `max_attempts`.
create table pgflow.step_tasks (
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null,
  flow_slug text not null,
  queue_name text not null,
  message_id bigint,
  -- queued, started, completed, failed, skipped or cancelled
  status text not null default 'queued',
  attempts_count integer not null default 0,
  requeue_count integer not null default 0,
  output jsonb,
  error_message text,
  last_worker_id uuid,
  queued_at timestamptz not null default now(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  skipped_at timestamptz,
  cancelled_at timestamptz,
  attempts_base integer not null default 0,
  primary key (run_id, step_slug, task_index),
  constraint step_tasks_row_valid check (pgflow.step_task_row_valid(
    status, task_index, attempts_count, attempts_base, requeue_count, output is not null,
    started_at, completed_at, failed_at, skipped_at, cancelled_at))
);

-- A claim finds queued tasks by their message. Only queued tasks are indexed (a message id
-- is unique in its queue, so at most one queued task has it): claiming, completing or
-- failing a task adds no entry here, and the index stays as small as the backlog. The message
-- id leads, so that the only way to use the index is one descent per message claimed: led by
-- the queue name, a plan made while the backlog was small walks every queued task.
create unique index step_tasks_queued_message_idx on pgflow.step_tasks (message_id, queue_name)
  where status = 'queued';
-- Stalled-task recovery scans started tasks by start time.
create index step_tasks_started_idx on pgflow.step_tasks (started_at) where status = 'started';
-- Failing a run finds its live tasks through the primary key (run_id leads it): no extra index
-- to maintain on every claim and completion.

-- The history of a task's attempts that did not succeed, one row per attempt: the error its
-- handler returned (`failed`), a failure the handler declared final (`permanent`: the task
-- fails at once, whatever attempts remain), or the note that no result came back in time
-- (`stalled`: its worker stopped or lost the database). `step_tasks` keeps only the latest
-- error; this table is what `pgflow run <id>` shows as a task's attempt history.
--
-- Rows are written by `fail_tasks` and `requeue_stalled_tasks` from the task's own row, and
-- deleted with their run by `prune`. An attempt has the number the claim that started it gave
-- it (`step_tasks.attempts_count`), so a task has at most one row per attempt. A successful
-- attempt writes nothing here: the task's row says when it completed.
create table pgflow.task_attempts (
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null,
  attempt integer not null
    constraint task_attempts_attempt_positive check (attempt >= 1),
  outcome text not null
    constraint task_attempts_outcome_domain
      check (outcome in ('failed', 'permanent', 'stalled')),
  worker_id uuid,
  started_at timestamptz,
  ended_at timestamptz not null default now(),
  error_message text not null,
  primary key (run_id, step_slug, task_index, attempt)
);

-- A step that was just started, sized, as enqueue_step_tasks takes it.
create type pgflow.started_step as (
  run_id uuid,
  step_slug text,
  flow_slug text,
  task_count integer,
  queue_name text,
  start_delay integer
);

-- Who may claim, at release, the tasks a completion releases: the queue, the (flow, step)
-- pairs its workers run (parallel arrays), and one entry per free slot naming the worker it
-- belongs to (the n-th task claimed goes to the n-th slot's worker). The workers of one
-- process on one queue share their completion calls, so one claimer speaks for all of them.
create type pgflow.task_claimer as (
  queue_name text,
  flow_slugs text[],
  step_slugs text[],
  slots uuid[]
);

-- The row every claim returns (claim_tasks, start_tasks, read_and_start_tasks,
-- started_task_rows, and complete_and_claim_tasks for the tasks it claims), named once instead
-- of spelled out in each function's result.
create type pgflow.claimed_task as (
  flow_slug text,
  step_slug text,
  run_id uuid,
  task_index integer,
  message_id bigint,
  queue_name text,
  attempt integer,
  timeout_seconds integer,
  input jsonb,
  trace_context text
);

------------------------------------------------------------------------------------------------
-- Workers and rollouts
------------------------------------------------------------------------------------------------

-- Workers: one row per worker instance, subscribed to exactly one queue, carrying any number
-- of concrete flows. Worker functions group the workers of one deployable unit (a service or
-- binary); the rollout fence enables and disables them.
create table pgflow.worker_functions (
  function_name text primary key
    constraint worker_functions_name_not_blank check (length(trim(function_name)) > 0),
  enabled boolean not null default true,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

-- A worker that stops sending heartbeats without stopping (SIGKILL, a lost host) is declared
-- lost by the workers' maintenance sweep (`mark_lost_workers`) once it has been silent for ten
-- of its heartbeat intervals (`heartbeat_interval_ms`), and at least 60 s. A lost worker is
-- also stopped and deprecated: nothing counts it as live any more, it is told to drain and stop
-- if it comes back, and retention prunes it like a stopped one.
create table pgflow.workers (
  worker_id uuid primary key,
  queue_name text not null
    constraint workers_queue_name_valid check (pgflow.is_valid_queue_name(queue_name)),
  function_name text not null references pgflow.worker_functions (function_name),
  flow_slugs text[] not null,
  started_at timestamptz not null default now(),
  last_heartbeat_at timestamptz not null default now(),
  deprecated_at timestamptz,
  stopped_at timestamptz,
  heartbeat_interval_ms integer
    constraint workers_heartbeat_interval_positive check (heartbeat_interval_ms >= 1),
  lost_at timestamptz,
  constraint workers_stopped_after_start check (stopped_at is null or stopped_at >= started_at),
  constraint workers_lost_is_stopped check (lost_at is null or stopped_at is not null)
);

create index workers_live_by_queue_idx on pgflow.workers (queue_name) where stopped_at is null;
create index workers_live_by_function_idx on pgflow.workers (function_name)
  where stopped_at is null;

-- One fenced rollout: the functions it disabled and which of them were enabled before (only
-- those are enabled again when it finishes).
create table pgflow.rollouts (
  rollout_id bigint generated always as identity primary key,
  function_names text[] not null,
  enabled_before text[] not null,
  status text not null default 'open'
    constraint rollouts_status_domain check (status in ('open', 'finished')),
  begun_at timestamptz not null default now(),
  finished_at timestamptz,
  constraint rollouts_finished_at check ((status = 'finished') = (finished_at is not null))
);

------------------------------------------------------------------------------------------------
-- Schedules and event subscriptions
------------------------------------------------------------------------------------------------

-- A cron schedule, fired by workers (no pg_cron). It names an alias or a concrete flow
-- (`flow_name`), a cron expression with seconds, an IANA time zone, the input of its runs, and
-- what to do with ticks missed while no worker ran: skip them, or catch up at most
-- `catch_up_limit` of them. A tick counts as missed when it is older than `grace_seconds` by
-- the time a worker sees it.
--
-- The ticks after `ticks_after` are due; `next_fire_at` is the first of them, as a worker
-- computed it (workers parse the cron; the database only compares times). A worker fires a
-- schedule by moving `ticks_after` on from the value it read (compare and set, under the row
-- lock), so each tick starts exactly one run however many workers race for it.
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

-- Leases of the clients that follow a flow's live events. A notification serializes its
-- transaction's commit with every other notifying commit of the server (Postgres holds one
-- lock from a notifying commit's pre-commit to its end), which cost starts about 15 % of their
-- throughput even with nobody listening. So the event triggers notify a flow's channel only
-- while some subscriber holds a live lease on it (`expires_at` in the future); followers renew
-- their leases.
create table pgflow.event_subscribers (
  subscriber_id uuid not null,
  flow_slug text not null,
  expires_at timestamptz not null,
  primary key (subscriber_id, flow_slug)
);

-- The event triggers look for a live lease on a flow.
create index event_subscribers_flow_idx on pgflow.event_subscribers (flow_slug, expires_at);
