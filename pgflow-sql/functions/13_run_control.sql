-- Run control: what operators do to runs from outside (cancel; retry and resume come here too).

-- The runs a filter names, for the bulk forms: runs of a concrete flow or of any version of an
-- alias (p_name; null for every flow), with one of p_statuses (null for any), started before
-- p_started_before (null for any time). Oldest first, at most p_limit.
create or replace function pgflow.runs_matching(
  p_name text,
  p_statuses text[],
  p_started_before timestamptz,
  p_limit integer
)
returns setof uuid
language sql
stable
as $$
  select r.run_id
  from pgflow.runs r
  where (p_name is null
         or r.flow_slug = p_name
         or r.flow_slug in (select f.flow_slug from pgflow.flows f where f.alias = p_name))
    and (p_statuses is null or r.status = any(p_statuses))
    and (p_started_before is null or r.started_at < p_started_before)
  order by r.started_at, r.run_id
  limit p_limit
$$;

-- cancel_runs: cancels the runs among p_run_ids that are still going ('started'). Each becomes
-- 'cancelled' with the time and p_reason (cut as errors are); its steps not yet ended and its
-- live tasks become 'cancelled': queued tasks' messages are archived, so no handler gets them,
-- and a running task's result is discarded when it arrives (its completion finds the task no
-- longer started). Its worker learns of it at its next heartbeat and fires the handler's
-- cancellation. No further attempt runs and no step starts. Ended runs are left as they are.
-- Returns a row per run found: its status after the call and whether this call cancelled it.
-- Locks: runs (run_id order), then the queued tasks' messages (a claim in flight holds its
-- messages before its tasks, so waiting for them first cannot deadlock with it), then the live
-- tasks (order), then step_states (order).
create or replace function pgflow.cancel_runs(p_run_ids uuid[], p_reason text default null)
returns table (run_id uuid, status text, cancelled boolean)
language plpgsql
as $$
declare
  v_cancelled uuid[];
  v_queues text[];
  v_messages bigint[];
begin
  with locked as (
    select r.ctid as row_ctid from pgflow.runs r
    where r.run_id = any(p_run_ids) and r.status = 'started'
    order by r.run_id
    for no key update
  ),
  changed as (
    update pgflow.runs r
    set status = 'cancelled', cancelled_at = now(),
        cancel_reason = pgflow.bounded_error(p_reason)
    from locked
    where r.ctid = locked.row_ctid
    returning r.run_id
  )
  select coalesce(array_agg(c.run_id), array[]::uuid[]) into v_cancelled from changed c;

  if cardinality(v_cancelled) > 0 then
    select array_agg(t.queue_name), array_agg(t.message_id)
    into v_queues, v_messages
    from pgflow.step_tasks t
    where t.run_id = any(v_cancelled) and t.status = 'queued';
    if v_queues is not null then
      perform pgflow.archive_messages(v_queues, v_messages);
    end if;

    with live as (
      select t.ctid as row_ctid from pgflow.step_tasks t
      where t.run_id = any(v_cancelled) and t.status in ('queued', 'started')
      order by t.run_id, t.step_slug, t.task_index
      for no key update
    )
    update pgflow.step_tasks t
    set status = 'cancelled', cancelled_at = now()
    from live
    where t.ctid = live.row_ctid and t.status in ('queued', 'started');

    with open_steps as (
      select ss.ctid as row_ctid from pgflow.step_states ss
      where ss.run_id = any(v_cancelled) and ss.status in ('created', 'started')
      order by ss.run_id, ss.step_slug
      for no key update
    )
    update pgflow.step_states ss
    set status = 'cancelled', cancelled_at = now()
    from open_steps
    where ss.ctid = open_steps.row_ctid;
  end if;

  return query
  select r.run_id, r.status, r.run_id = any(v_cancelled)
  from pgflow.runs r
  where r.run_id = any(p_run_ids)
  order by r.run_id;
end;
$$;

-- cancel_matching: cancels the runs still going that the filter names (see runs_matching), at
-- most p_limit; with p_dry_run, cancels nothing. Returns how many runs were (or would be)
-- cancelled.
create or replace function pgflow.cancel_matching(
  p_name text,
  p_started_before timestamptz,
  p_reason text,
  p_limit integer,
  p_dry_run boolean
)
returns bigint
language plpgsql
as $$
declare
  v_run_ids uuid[];
begin
  v_run_ids := array(select pgflow.runs_matching(p_name, array['started'], p_started_before,
                                                 p_limit));
  if p_dry_run then
    return cardinality(v_run_ids);
  end if;
  return (select count(*) from pgflow.cancel_runs(v_run_ids, p_reason) c where c.cancelled);
end;
$$;

