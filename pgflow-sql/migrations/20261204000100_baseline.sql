-- pgflow baseline: the schema objects of pgflow (tables, columns, types, indexes, constraints,
-- storage options), squashed from the migrations 20261202000100 to 20261203000500. Functions,
-- views and triggers are not here: they are in `pgflow-sql/functions/`, applied after the
-- migrations in the same transaction (see `functions/README.md`).
--
-- Definitions (flows, steps, deps), aliases, run state (runs, step_states, step_tasks), workers
-- and rollouts.
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
-- These two are the only functions in the baseline: the CHECK constraints below call them, so
-- they must exist before the tables, and a new body would change constraints that stored rows
-- were checked against. Changing one takes a versioned migration.
--
-- A slug (flow, step, alias) is an identifier: a letter or underscore, then letters, digits or
-- underscores, at most 47 bytes (so that a lowercased flow slug is always a valid queue name).
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

------------------------------------------------------------------------------------------------
-- Definitions and aliases
------------------------------------------------------------------------------------------------

-- One concrete flow: an immutable DAG. Options are defaults for its steps.
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
-- A null option means "use the flow's option".
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

-- One execution of a concrete flow. It never changes flow.
create table pgflow.runs (
  run_id uuid primary key default gen_random_uuid(),
  flow_slug text not null references pgflow.flows (flow_slug),
  status text not null default 'started'
    constraint runs_status_domain check (status in ('started', 'completed', 'failed')),
  input jsonb not null,
  output jsonb,
  remaining_steps integer not null
    constraint runs_remaining_steps_non_negative check (remaining_steps >= 0),
  started_at timestamptz not null default now(),
  completed_at timestamptz,
  failed_at timestamptz,
  constraint runs_status_timestamps check (
    (status = 'started' and completed_at is null and failed_at is null and output is null)
    or (status = 'completed' and completed_at is not null and failed_at is null
        and output is not null and remaining_steps = 0)
    or (status = 'failed' and failed_at is not null and completed_at is null)
  )
) with (fillfactor = 60);

-- Live runs by flow (drain status). Only started runs are indexed: the index stays as small as
-- the work in flight, and completing or failing a run adds no entry to it.
create index runs_started_by_flow_idx on pgflow.runs (flow_slug) where status = 'started';

-- The state of one step within one run.
create table pgflow.step_states (
  run_id uuid not null,
  step_slug text not null,
  flow_slug text not null,
  status text not null default 'created'
    constraint step_states_status_domain
      check (status in ('created', 'started', 'completed', 'failed')),
  remaining_deps integer not null
    constraint step_states_remaining_deps_non_negative check (remaining_deps >= 0),
  initial_tasks integer
    constraint step_states_initial_tasks_non_negative check (initial_tasks >= 0),
  remaining_tasks integer
    constraint step_states_remaining_tasks_non_negative check (remaining_tasks >= 0),
  output jsonb,
  error_message text,
  created_at timestamptz not null default now(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  primary key (run_id, step_slug),
  constraint step_states_remaining_within_initial check (remaining_tasks <= initial_tasks),
  constraint step_states_status_timestamps check (
    (status = 'created' and started_at is null and completed_at is null and failed_at is null
        and initial_tasks is null and remaining_tasks is null and output is null)
    or (status = 'started' and started_at is not null and completed_at is null
        and failed_at is null and remaining_tasks is not null and output is null)
    or (status = 'completed' and completed_at is not null and failed_at is null
        and remaining_tasks = 0 and output is not null)
    or (status = 'failed' and failed_at is not null and completed_at is null)
  )
) with (fillfactor = 60);

-- One unit of work: a single step has one task (index 0), a map step one task per element.
-- `queue_name` is the queue snapshot taken when the task was created; it never changes.
-- `flow_slug` and `queue_name` are copied from the step's row (which checks both) when the task
-- is created; the table does not check them again: they are on every insert and update of the
-- busiest table, and the parent check (`functions/02_integrity.sql`) ties a task to its run and step.
create table pgflow.step_tasks (
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null
    constraint step_tasks_task_index_non_negative check (task_index >= 0),
  flow_slug text not null,
  queue_name text not null,
  message_id bigint not null,
  status text not null default 'queued'
    constraint step_tasks_status_domain
      check (status in ('queued', 'started', 'completed', 'failed')),
  attempts_count integer not null default 0
    constraint step_tasks_attempts_non_negative check (attempts_count >= 0),
  requeue_count integer not null default 0
    constraint step_tasks_requeue_count_non_negative check (requeue_count >= 0),
  output jsonb,
  error_message text,
  last_worker_id uuid,
  queued_at timestamptz not null default now(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  primary key (run_id, step_slug, task_index),
  constraint step_tasks_status_timestamps check (
    (status = 'queued' and completed_at is null and failed_at is null and output is null)
    or (status = 'started' and started_at is not null and completed_at is null
        and failed_at is null and output is null)
    or (status = 'completed' and completed_at is not null and failed_at is null
        and output is not null)
    or (status = 'failed' and failed_at is not null and completed_at is null)
  )
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

-- A step that was just started, sized, as enqueue_step_tasks takes it.
create type pgflow.started_step as (
  run_id uuid,
  step_slug text,
  flow_slug text,
  task_count integer,
  queue_name text,
  start_delay integer
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
  constraint workers_stopped_after_start check (stopped_at is null or stopped_at >= started_at)
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
