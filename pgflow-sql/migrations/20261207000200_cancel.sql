-- Cancelling runs: a run still going can be cancelled, a new terminal status with its time and
-- an optional reason. Its steps not yet ended and its live tasks become 'cancelled' too: queued
-- tasks never reach a handler and a running task's result is discarded when it arrives.
--
-- heartbeat gains the runs the worker is running tasks of and returns those that ended (so a
-- worker cancels their handlers); its signature and return type change, so the old function is
-- dropped here and the functions file creates the new one.

alter table pgflow.runs
  drop constraint runs_status_domain,
  add constraint runs_status_domain
    check (status in ('started', 'completed', 'failed', 'cancelled')),
  add column cancelled_at timestamptz,
  add column cancel_reason text,
  drop constraint runs_status_timestamps,
  add constraint runs_status_timestamps check (
    (status = 'started' and completed_at is null and failed_at is null and output is null)
    or (status = 'completed' and completed_at is not null and failed_at is null
        and output is not null and remaining_steps = 0)
    or (status = 'failed' and failed_at is not null and completed_at is null)
    or (status = 'cancelled' and completed_at is null and failed_at is null and output is null)
  ),
  add constraint runs_cancelled_fields check (
    (status = 'cancelled') = (cancelled_at is not null)
    and (cancel_reason is null or status = 'cancelled')
  );

alter table pgflow.step_states
  drop constraint step_states_status_domain,
  add constraint step_states_status_domain
    check (status in ('created', 'started', 'completed', 'failed', 'skipped', 'cancelled')),
  add column cancelled_at timestamptz,
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
    or (status = 'cancelled' and completed_at is null and failed_at is null and output is null)
  ),
  add constraint step_states_cancelled_fields
    check ((status = 'cancelled') = (cancelled_at is not null));

alter table pgflow.step_tasks
  drop constraint step_tasks_status_domain,
  add constraint step_tasks_status_domain
    check (status in ('queued', 'started', 'completed', 'failed', 'skipped', 'cancelled')),
  add column cancelled_at timestamptz,
  drop constraint step_tasks_status_timestamps,
  add constraint step_tasks_status_timestamps check (
    (status = 'queued' and completed_at is null and failed_at is null and output is null)
    or (status = 'started' and started_at is not null and completed_at is null
        and failed_at is null and output is null)
    or (status = 'completed' and completed_at is not null and failed_at is null
        and output is not null)
    or (status = 'failed' and failed_at is not null and completed_at is null)
    or (status = 'skipped' and completed_at is null and failed_at is null and output is null)
    or (status = 'cancelled' and completed_at is null and failed_at is null and output is null)
  ),
  add constraint step_tasks_cancelled_fields
    check ((status = 'cancelled') = (cancelled_at is not null));

drop function if exists pgflow.heartbeat(uuid);
