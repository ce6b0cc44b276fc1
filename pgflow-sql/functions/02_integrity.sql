-- Integrity: the parent checks of the run-state rows created per task (a step state's run and
-- step, a task's step state), one query per inserting statement instead of row-by-row foreign
-- keys. Why: the top of `migrations/20261204000100_baseline.sql`.

-- Parent checks, one query per inserting statement (see the top of this file).
create or replace function pgflow.check_step_state_parents()
returns trigger
language plpgsql
as $$
declare
  v_orphan record;
begin
  -- Two anti-joins (not one with OR), so that each can look its parents up by key.
  select n.run_id, n.step_slug into v_orphan
  from inserted_rows n
  where not exists (select 1 from pgflow.runs r where r.run_id = n.run_id)
  limit 1;
  if found then
    raise exception 'step state (%, %) refers to run %, which does not exist',
      v_orphan.run_id, v_orphan.step_slug, v_orphan.run_id
      using errcode = 'foreign_key_violation';
  end if;
  select n.run_id, n.flow_slug, n.step_slug into v_orphan
  from inserted_rows n
  where not exists (select 1 from pgflow.steps s
                    where s.flow_slug = n.flow_slug and s.step_slug = n.step_slug)
  limit 1;
  if found then
    raise exception 'step state (%, %) refers to step %.%, which is not defined',
      v_orphan.run_id, v_orphan.step_slug, v_orphan.flow_slug, v_orphan.step_slug
      using errcode = 'foreign_key_violation';
  end if;
  return null;
end;
$$;

create or replace trigger step_states_parents
  after insert on pgflow.step_states
  referencing new table as inserted_rows
  for each statement execute function pgflow.check_step_state_parents();

create or replace function pgflow.check_step_task_parents()
returns trigger
language plpgsql
as $$
declare
  v_orphan record;
begin
  select n.run_id, n.step_slug, n.task_index
  into v_orphan
  from inserted_rows n
  where not exists (select 1 from pgflow.step_states ss
                    where ss.run_id = n.run_id and ss.step_slug = n.step_slug)
  limit 1;
  if found then
    raise exception 'task (%, %, %) refers to a step state that does not exist',
      v_orphan.run_id, v_orphan.step_slug, v_orphan.task_index
      using errcode = 'foreign_key_violation';
  end if;
  return null;
end;
$$;

create or replace trigger step_tasks_parents
  after insert on pgflow.step_tasks
  referencing new table as inserted_rows
  for each statement execute function pgflow.check_step_task_parents();

create or replace function pgflow.check_task_attempt_parents()
returns trigger
language plpgsql
as $$
declare
  v_orphan record;
begin
  select n.run_id, n.step_slug, n.task_index, n.attempt
  into v_orphan
  from inserted_rows n
  where not exists (select 1 from pgflow.step_tasks t
                    where t.run_id = n.run_id and t.step_slug = n.step_slug
                      and t.task_index = n.task_index)
  limit 1;
  if found then
    raise exception 'attempt % of task (%, %, %) refers to a task that does not exist',
      v_orphan.attempt, v_orphan.run_id, v_orphan.step_slug, v_orphan.task_index
      using errcode = 'foreign_key_violation';
  end if;
  return null;
end;
$$;

create or replace trigger task_attempts_parents
  after insert on pgflow.task_attempts
  referencing new table as inserted_rows
  for each statement execute function pgflow.check_task_attempt_parents();
