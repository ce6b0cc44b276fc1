-- Run history partitioned by the day runs ended (issue 39, point 4). A run that ended is moved,
-- with its step states, tasks and attempts, from the live tables into these once it has been
-- over for a while (pgflow.archive_runs, done by each process's maintenance). Retention then
-- drops a whole day of history at once (pgflow.prune): no row is deleted, no dead row is left
-- behind, and a day of a million runs goes in milliseconds.
--
-- Why the live tables are not partitioned themselves: every claim and completion would pay for
-- it. Measured with benches/pgbench on this schema with the four tables ranged on a
-- time-ordered run id (today, two days ahead and a default partition), a cycle of one start,
-- one claim and one completion took 30-70 % longer than on plain tables, and 75-115 % with
-- sixteen partitions: Postgres 15 locks every partition of a table for each statement of a
-- cached plan, and some of the engine's statements (joins from arrays of ids, lookups by row
-- address) cannot prune at all. The live tables hold only what runs and what ended lately, so
-- they stay small; the hot path is as it was.
--
-- Each history table has the columns of its live table, in the same order, then `run_ended_at`:
-- when the run ended (completed, failed or cancelled), the partition key. A step state, task or
-- attempt carries its run's end, so that a day's partitions of the four tables hold exactly the
-- runs that ended that day and go together. Partitions are named `<table>_pYYYYMMDD` (the day
-- in UTC) and made by the archiving as it needs them. A column added to a live table must be
-- added to its history table as well, and to the views over both (functions/24_history.sql).
create table pgflow.runs_history (like pgflow.runs, run_ended_at timestamptz not null)
  partition by range (run_ended_at);
alter table pgflow.runs_history add primary key (run_id, run_ended_at);
-- Listings of runs read both tables the same way (see runs_flow_started_idx and
-- runs_unsuccessful_idx on pgflow.runs).
create index runs_history_flow_started_idx on pgflow.runs_history (flow_slug, started_at, run_id);
create index runs_history_unsuccessful_idx
  on pgflow.runs_history (flow_slug, status, started_at, run_id)
  where status in ('failed', 'cancelled');
-- Retrying or resuming a run brings back its children from the history too.
create index runs_history_parent_idx on pgflow.runs_history (parent_run_id)
  where parent_run_id is not null;

create table pgflow.step_states_history (like pgflow.step_states, run_ended_at timestamptz not null)
  partition by range (run_ended_at);
alter table pgflow.step_states_history add primary key (run_id, step_slug, run_ended_at);

create table pgflow.step_tasks_history (like pgflow.step_tasks, run_ended_at timestamptz not null)
  partition by range (run_ended_at);
alter table pgflow.step_tasks_history
  add primary key (run_id, step_slug, task_index, run_ended_at);

create table pgflow.task_attempts_history
  (like pgflow.task_attempts, run_ended_at timestamptz not null)
  partition by range (run_ended_at);
alter table pgflow.task_attempts_history
  add primary key (run_id, step_slug, task_index, attempt, run_ended_at);

-- The idempotency keys of archived runs. A key is unique within its scope across live and
-- archived runs, and a unique index cannot span the partitions of a table ranged on another
-- column: the live runs keep their unique index, and a start looks here for the others (one
-- probe of a small table, not one per partition). A key goes with its run's day at prune.
create table pgflow.archived_keys (
  idempotency_scope text not null,
  idempotency_key text not null,
  run_id uuid not null,
  run_ended_at timestamptz not null,
  primary key (idempotency_scope, idempotency_key)
);
create index archived_keys_ended_idx on pgflow.archived_keys (run_ended_at);

-- The archiving finds the runs that ended a while ago by their end: completed and failed runs
-- through runs_ended_idx, cancelled ones through this index. A run enters it when it is
-- cancelled (an update that was never heap-only: status is in the other partial indexes).
create index runs_cancelled_idx on pgflow.runs (cancelled_at) where status = 'cancelled';

-- What each day of history holds, counted as the archiving moves runs in (and restoring moves
-- them out): prune reports what it dropped without counting millions of rows.
create table pgflow.history_days (
  day date primary key,
  runs bigint not null,
  step_states bigint not null,
  tasks bigint not null
);
