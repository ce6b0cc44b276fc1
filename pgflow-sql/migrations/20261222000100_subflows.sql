-- Subflows (issue 37): a step may run another flow. Its handler returns the child flow's input
-- (one child per task: a map step starts one child per element); once its tasks are done, the
-- step starts a child run of flow `subflow` (an alias or a concrete slug) for each and is
-- 'waiting' until they end, with a wait of kind 'subflow'. A child that completes gives its
-- output to the step (a map step's outputs in task order); one that fails or is cancelled
-- fails the step and its run. The child records its parent run, step and task; cancelling the
-- parent cancels its children.

alter table pgflow.steps
  add column subflow text
    constraint steps_subflow_valid check (subflow is null or pgflow.is_valid_slug(subflow)),
  -- The Rust type the handler returns (the child's input), when known: checked against the
  -- input type the child flow records when the child starts.
  add column subflow_input_type text,
  drop constraint steps_waits_one_way,
  add constraint steps_waits_one_way
    check (num_nonnulls(sleep_seconds, sleep_until_path, signal_name, subflow) <= 1);

alter table pgflow.runs
  add column parent_run_id uuid,
  add column parent_step_slug text,
  add column parent_task_index integer,
  add constraint runs_parent_whole
    check (num_nulls(parent_run_id, parent_step_slug, parent_task_index) in (0, 3));
-- One child per task of a step that runs a subflow; the children of a run, by parent.
create unique index runs_parent_task_key
  on pgflow.runs (parent_run_id, parent_step_slug, parent_task_index)
  where parent_run_id is not null;
-- Children a parent's cancel (or its step's timeout) could not take at that moment (another
-- transaction held them), for settle_subflows to cancel, with the reason to give. (An index on
-- children by status would do, but a column in an index predicate makes every update of it,
-- every run's end, a non-HOT update.)
create table pgflow.children_to_cancel (
  run_id uuid primary key,
  parent_run_id uuid not null,
  reason text not null
);

alter table pgflow.waits
  drop constraint waits_kind_domain,
  add constraint waits_kind_domain check (kind in ('signal', 'sleep', 'subflow'));

-- A step that waits for its children has started (its tasks are done): 'waiting' then keeps its
-- start and its task counts.
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
      or (status = 'waiting' and remaining_deps = 0 and started_at is not null
          and completed_at is null and failed_at is null and remaining_tasks = 0
          and not has_output)
      or (status = 'started' and started_at is not null and completed_at is null
          and failed_at is null and remaining_tasks is not null and not has_output)
      or (status = 'completed' and completed_at is not null and failed_at is null
          and remaining_tasks = 0 and has_output)
      or (status = 'failed' and failed_at is not null and completed_at is null)
      or (status in ('skipped', 'cancelled') and completed_at is null and failed_at is null
          and not has_output));
end $$;
