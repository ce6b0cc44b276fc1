-- Recovery: started tasks whose worker died or lost the database are requeued, or failed for
-- good after too many requeues.

-- requeue_stalled_tasks: finds 'started' tasks whose step timeout plus p_grace_seconds has
-- passed (their worker died or lost its connection) and puts them back: status 'queued' and
-- a new message visible now, at most p_max_requeues times per task; a task stalled more often
-- fails for good (with its run). The attempt the stalled worker consumed stays counted.
-- Returns the tasks handled, each with its message id as it now stands.
-- One caller at a time per database (a transaction advisory try-lock; others return nothing).
-- Safe to call from every worker on an interval; no pg_cron needed.
-- Locks: advisory (namespace, 0), runs of the candidates, then step_tasks with SKIP LOCKED.
create or replace function pgflow.requeue_stalled_tasks(
  p_grace_seconds integer default 30,
  p_max_requeues integer default 3
)
returns table (run_id uuid, step_slug text, task_index integer, queue_name text,
               message_id bigint, requeued boolean)
language plpgsql
as $$
#variable_conflict use_column
declare
  v_candidate_runs uuid[];
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
  v_queues text[];
  v_requeue boolean[];
begin
  if not pg_try_advisory_xact_lock(pgflow.lock_namespace(), 0) then
    return;
  end if;

  select array_agg(distinct t.run_id) into v_candidate_runs
  from pgflow.step_tasks t
  join pgflow.step_options o on o.flow_slug = t.flow_slug and o.step_slug = t.step_slug
  where t.status = 'started'
    and t.started_at < pgflow.clock() - make_interval(secs => o.timeout + p_grace_seconds);

  if v_candidate_runs is null then
    return;
  end if;

  perform pgflow.lock_runs(v_candidate_runs);

  with stalled as (
    select t.run_id, t.step_slug, t.task_index, t.queue_name,
           t.requeue_count < p_max_requeues as requeue
    from pgflow.step_tasks t
    join pgflow.step_options o on o.flow_slug = t.flow_slug and o.step_slug = t.step_slug
    where t.run_id = any(v_candidate_runs)
      and t.status = 'started'
      and t.started_at < pgflow.clock() - make_interval(secs => o.timeout + p_grace_seconds)
    order by t.run_id, t.step_slug, t.task_index
    for no key update of t skip locked
  )
  select array_agg(s.run_id), array_agg(s.step_slug), array_agg(s.task_index),
         array_agg(s.queue_name), array_agg(s.requeue)
  into v_runs, v_steps, v_indexes, v_queues, v_requeue
  from stalled s;

  if v_runs is null then
    return;
  end if;

  -- Each stalled attempt's history row, before the task is requeued or failed.
  insert into pgflow.task_attempts
    (run_id, step_slug, task_index, attempt, outcome, worker_id, started_at, error_message)
  select t.run_id, t.step_slug, t.task_index, greatest(t.attempts_count, 1), 'stalled',
         t.last_worker_id, t.started_at,
         format('no result within the step''s timeout of %s s (plus %s s grace): its worker '
                'stopped or lost the database while running it', o.timeout, p_grace_seconds)
  from unnest(v_runs, v_steps, v_indexes) as s(run_id, step_slug, task_index)
  join pgflow.step_tasks t
    on t.run_id = s.run_id and t.step_slug = s.step_slug and t.task_index = s.task_index
  join pgflow.step_options o on o.flow_slug = t.flow_slug and o.step_slug = t.step_slug
  on conflict do nothing;

  if true = any(v_requeue) then
    update pgflow.step_tasks t
    set status = 'queued', requeue_count = t.requeue_count + 1
    from unnest(v_runs, v_steps, v_indexes, v_requeue) as s(run_id, step_slug, task_index, requeue)
    where s.requeue
      and t.run_id = s.run_id and t.step_slug = s.step_slug and t.task_index = s.task_index;

    perform pgflow.send_task_messages(array_agg(s.run_id), array_agg(s.step_slug),
                                      array_agg(s.task_index), array_agg(0))
    from unnest(v_runs, v_steps, v_indexes, v_requeue)
      as s(run_id, step_slug, task_index, requeue)
    where s.requeue;
  end if;

  if false = any(v_requeue) then
    perform pgflow.fail_tasks_permanently(
      array_agg(s.run_id), array_agg(s.step_slug), array_agg(s.task_index),
      array_agg(format('task stalled %s times (its worker stopped or lost the database while '
                       'running it)', p_max_requeues + 1)))
    from unnest(v_runs, v_steps, v_indexes, v_requeue) as s(run_id, step_slug, task_index, requeue)
    where not s.requeue;
  end if;

  -- The task's message as it stands: a requeued task's new one.
  return query
  select s.run_id, s.step_slug, s.task_index, s.queue_name, t.message_id, s.requeue
  from unnest(v_runs, v_steps, v_indexes, v_queues, v_requeue)
    as s(run_id, step_slug, task_index, queue_name, requeue)
  join pgflow.step_tasks t
    on t.run_id = s.run_id and t.step_slug = s.step_slug and t.task_index = s.task_index
  order by s.run_id, s.step_slug, s.task_index;
end;
$$;
