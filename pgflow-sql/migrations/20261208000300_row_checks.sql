-- The row invariants of runs, step_states and step_tasks as one CHECK per table, each calling
-- an immutable function that states them all, instead of 26 CHECK expressions.
--
-- Why: Postgres rebuilds every check constraint of a table from its stored expression tree for
-- each statement that writes the table, and these three tables are written by every start,
-- claim and completion. Their 26 expressions were 35 kB of stored tree, read again for every
-- start: 12% of the server's CPU in a profile of starts (BENCHMARKS.md, issue 21). A function
-- call is a small tree, and plpgsql keeps the function's compiled expression for the session.
-- The invariants are the same ones (a CHECK fails when one of them is false, as the conjunction
-- does); only the constraint a violation names changes.
--
-- The new constraints are added NOT VALID: existing rows met the same invariants under the old
-- constraints, and validating would scan the tables under this migration's lock. New and
-- updated rows are checked as before.

alter table pgflow.runs
  drop constraint runs_cancelled_fields,
  drop constraint runs_idempotency_key_length,
  drop constraint runs_idempotency_scoped,
  drop constraint runs_remaining_steps_non_negative,
  drop constraint runs_resumed_fields,
  drop constraint runs_retry_count_non_negative,
  drop constraint runs_status_domain,
  drop constraint runs_status_timestamps,
  drop constraint runs_trace_context_length;

alter table pgflow.step_states
  drop constraint step_states_cancelled_fields,
  drop constraint step_states_initial_tasks_non_negative,
  drop constraint step_states_remaining_deps_non_negative,
  drop constraint step_states_remaining_tasks_non_negative,
  drop constraint step_states_remaining_within_initial,
  drop constraint step_states_skip_reason_domain,
  drop constraint step_states_skipped_fields,
  drop constraint step_states_status_domain,
  drop constraint step_states_status_timestamps;

alter table pgflow.step_tasks
  drop constraint step_tasks_attempts_base_within,
  drop constraint step_tasks_attempts_non_negative,
  drop constraint step_tasks_cancelled_fields,
  drop constraint step_tasks_requeue_count_non_negative,
  drop constraint step_tasks_skipped_fields,
  drop constraint step_tasks_status_domain,
  drop constraint step_tasks_status_timestamps,
  drop constraint step_tasks_task_index_non_negative;

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

alter table pgflow.runs add constraint runs_row_valid check (pgflow.run_row_valid(
  status, remaining_steps, retry_count, output is not null, completed_at, failed_at, cancelled_at,
  cancel_reason, idempotency_key, idempotency_scope, resumed_from, resumed_at_step, trace_context))
  not valid;

alter table pgflow.step_states
  add constraint step_states_row_valid check (pgflow.step_state_row_valid(
  status, remaining_deps, initial_tasks, remaining_tasks, output is not null, skip_reason,
  started_at, completed_at, failed_at, skipped_at, cancelled_at))
  not valid;

alter table pgflow.step_tasks
  add constraint step_tasks_row_valid check (pgflow.step_task_row_valid(
  status, task_index, attempts_count, attempts_base, requeue_count, output is not null,
  started_at, completed_at, failed_at, skipped_at, cancelled_at))
  not valid;
