-- A straight completion path, and one type for a claimed task's row.
--
-- pgflow.claimed_task is the row every claim returns (claim_tasks, start_tasks,
-- read_and_start_tasks, started_task_rows, and complete_and_claim_tasks for what it claims),
-- named once instead of spelled out in each function's result.
--
-- The progression now hands the tasks it claimed at release back up to its caller
-- (enqueue_step_tasks and finish_completed_steps return them) instead of the caller finding
-- them again; fail_tasks answers each input in input order; read_and_start_tasks loses the
-- visibility timeout it no longer used. Each of these changes a return type or an argument
-- list, so the old functions are dropped here and the function files create the new ones.

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

drop function if exists pgflow.started_task_rows(tid[]);
drop function if exists pgflow.claim_tasks(text, bigint[], uuid, text[], text[]);
drop function if exists pgflow.start_tasks(text, bigint[], uuid, text[], text[]);
drop function if exists pgflow.read_and_start_tasks(text, uuid, text[], text[], integer, integer);
drop function if exists pgflow.complete_and_claim_tasks(
  uuid[], text[], integer[], integer[], jsonb[], text, text[], text[], uuid[]);
drop function if exists pgflow.enqueue_step_tasks(pgflow.started_step[], pgflow.task_claimer);
drop function if exists pgflow.finish_completed_steps(uuid[], text[], text[], pgflow.task_claimer);
drop function if exists pgflow.fail_tasks(uuid[], text[], integer[], integer[], text[], boolean[]);
drop function if exists pgflow.complete_tasks(
  uuid[], text[], integer[], integer[], jsonb[], pgflow.task_claimer);
