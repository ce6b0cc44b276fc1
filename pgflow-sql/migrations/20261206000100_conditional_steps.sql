-- Conditional steps and skips.
--
-- * A step may carry a condition: `condition_when` (run only when its input contains this JSON
--   pattern, `@>`) and/or `condition_unless` (run only when it does not). A root step's input
--   is the flow input; any other step's is the object of its dependencies' outputs, keyed by
--   step slug. `when_unmet` says what an unmet condition does: skip the step (its dependents
--   see null), skip it and every step downstream, or fail the run.
-- * `when_exhausted` says what a task out of attempts does: fail the run (as before), skip the
--   step, or skip it and everything downstream.
-- * Step states and tasks gain the status `skipped`, with the time and (on step states) the
--   reason. A skipped step counts as done for its run.

alter table pgflow.steps
  add column condition_when jsonb,
  add column condition_unless jsonb,
  add column when_unmet text not null default 'skip'
    constraint steps_when_unmet_domain check (when_unmet in ('skip', 'skip_cascade', 'fail')),
  add column when_exhausted text not null default 'fail'
    constraint steps_when_exhausted_domain
      check (when_exhausted in ('fail', 'skip', 'skip_cascade'));

alter table pgflow.step_states
  drop constraint step_states_status_domain,
  add constraint step_states_status_domain
    check (status in ('created', 'started', 'completed', 'failed', 'skipped')),
  add column skipped_at timestamptz,
  add column skip_reason text
    constraint step_states_skip_reason_domain
      check (skip_reason in ('condition_unmet', 'handler_failed', 'dependency_skipped')),
  -- A step is skipped before it starts (its condition, or a skipped dependency upstream) or
  -- while it runs (a task out of attempts): either way it has no output.
  drop constraint step_states_status_timestamps,
  add constraint step_states_status_timestamps check (
    (status = 'created' and started_at is null and completed_at is null and failed_at is null
        and initial_tasks is null and remaining_tasks is null and output is null)
    or (status = 'started' and started_at is not null and completed_at is null
        and failed_at is null and remaining_tasks is not null and output is null)
    or (status = 'completed' and completed_at is not null and failed_at is null
        and remaining_tasks = 0 and output is not null)
    or (status = 'failed' and failed_at is not null and completed_at is null)
    or (status = 'skipped' and completed_at is null and failed_at is null and output is null)
  ),
  add constraint step_states_skipped_fields check (
    (status = 'skipped') = (skipped_at is not null)
    and (status = 'skipped') = (skip_reason is not null)
  );

alter table pgflow.step_tasks
  drop constraint step_tasks_status_domain,
  add constraint step_tasks_status_domain
    check (status in ('queued', 'started', 'completed', 'failed', 'skipped')),
  add column skipped_at timestamptz,
  drop constraint step_tasks_status_timestamps,
  add constraint step_tasks_status_timestamps check (
    (status = 'queued' and completed_at is null and failed_at is null and output is null)
    or (status = 'started' and started_at is not null and completed_at is null
        and failed_at is null and output is null)
    or (status = 'completed' and completed_at is not null and failed_at is null
        and output is not null)
    or (status = 'failed' and failed_at is not null and completed_at is null)
    or (status = 'skipped' and completed_at is null and failed_at is null and output is null)
  ),
  add constraint step_tasks_skipped_fields check ((status = 'skipped') = (skipped_at is not null));
