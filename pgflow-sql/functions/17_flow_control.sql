-- Flow control: what holds work back. A paused queue is claimed from by no one (read_and_start_tasks,
-- start_tasks and the claims of complete_and_claim_tasks check pgflow.paused_queues); its
-- messages stay, runs keep starting and tasks keep being queued on it, and resuming picks them
-- all up. A paused flow's tasks are parked by the claims that meet them (claim_tasks) and
-- claimed at release by none (complete_and_claim_tasks); resuming it gives them new messages.
-- Operators pause and resume.

-- require_routed_queue: raises PF015, naming the queue, unless a flow routes to queue
-- p_queue_name (for the calls that act on a queue by its name).
-- Locks: none (reads only).
create or replace function pgflow.require_routed_queue(p_queue_name text)
returns void
language plpgsql
stable
as $$
begin
  if not exists (select 1 from pgflow.steps s where s.queue_name = p_queue_name) then
    raise exception 'no flow routes to a queue `%`; `pgflow status` lists the queues',
      coalesce(p_queue_name, '<null>')
      using errcode = 'PF015',
            detail = jsonb_build_object('queue_name', p_queue_name)::text;
  end if;
end;
$$;

-- pause_queue: pauses the queue p_queue_name, which a flow must route to. Claims that began
-- before the pause committed finish; none begins after. Returns false when it was already
-- paused (its time and reason are kept). Raises PF015 for a queue no flow routes to.
-- Locks: the queue's row of paused_queues.
create or replace function pgflow.pause_queue(p_queue_name text, p_reason text default null)
returns boolean
language plpgsql
as $$
declare
  v_paused boolean;
begin
  perform pgflow.require_routed_queue(p_queue_name);
  insert into pgflow.paused_queues (queue_name, reason)
  values (p_queue_name, pgflow.bounded_error(p_reason))
  on conflict (queue_name) do nothing;
  get diagnostics v_paused = row_count;
  return v_paused;
end;
$$;

-- resume_queue: lets workers claim from p_queue_name again and wakes the idle ones. Returns
-- false when it was not paused.
-- Locks: the queue's row of paused_queues.
create or replace function pgflow.resume_queue(p_queue_name text)
returns boolean
language plpgsql
as $$
declare
  v_resumed boolean;
begin
  delete from pgflow.paused_queues q where q.queue_name = p_queue_name;
  get diagnostics v_resumed = row_count;
  if v_resumed then
    perform pgflow.notify_queue(p_queue_name);
  end if;
  return v_resumed;
end;
$$;

-- flows_named: the concrete flows a name stands for: the flow of that slug, or every version of
-- the alias of that name. Raises PF004 when there is none.
create or replace function pgflow.flows_named(p_name text)
returns text[]
language plpgsql
stable
as $$
declare
  v_flows text[];
begin
  select array_agg(f.flow_slug order by f.flow_slug) into v_flows
  from pgflow.flows f
  where f.flow_slug = p_name or f.alias = p_name;
  if v_flows is null then
    raise exception 'no flow or alias is named `%`; `pgflow status` lists the aliases',
      coalesce(p_name, '<null>')
      using errcode = 'PF004',
            detail = jsonb_build_object('flow_slug', p_name)::text;
  end if;
  return v_flows;
end;
$$;

-- pause_flow: pauses the flow p_name (a concrete slug, or an alias: each of its versions).
-- Claims that began before the pause committed finish; after it, a worker that meets a task of
-- the flow parks it (queued, no message) and no completion claims one. Runs keep starting, and
-- its tasks keep being queued. Returns false when every flow named was already paused (their
-- times and reasons are kept). Raises PF004 for a name that is no flow or alias.
-- Locks: the flows' rows of paused_flows.
create or replace function pgflow.pause_flow(p_name text, p_reason text default null)
returns boolean
language plpgsql
as $$
declare
  v_paused integer;
begin
  insert into pgflow.paused_flows (flow_slug, reason)
  select f, pgflow.bounded_error(p_reason) from unnest(pgflow.flows_named(p_name)) f
  on conflict (flow_slug) do nothing;
  get diagnostics v_paused = row_count;
  return v_paused > 0;
end;
$$;

-- resume_flow: resumes the flow p_name (as pause_flow names it): the tasks parked meanwhile
-- get a new message each (visible at once, which wakes their queues' idle workers). Returns
-- false when no flow named was paused. Raises PF004 for a name that is no flow or alias.
-- Locks: the flows' rows of paused_flows (waiting for claims that are parking tasks of them),
-- then the parked tasks.
create or replace function pgflow.resume_flow(p_name text)
returns boolean
language plpgsql
as $$
declare
  v_flows text[];
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
begin
  with resumed as (
    delete from pgflow.paused_flows p
    where p.flow_slug = any(pgflow.flows_named(p_name))
    returning p.flow_slug
  )
  select array_agg(flow_slug) into v_flows from resumed;
  if v_flows is null then
    return false;
  end if;

  with parked as (
    delete from pgflow.parked_tasks p
    where p.flow_slug = any(v_flows)
    returning p.run_id, p.step_slug, p.task_index
  )
  select array_agg(run_id), array_agg(step_slug), array_agg(task_index)
  into v_runs, v_steps, v_indexes
  from parked;
  if v_runs is not null then
    perform pgflow.requeue_messageless_tasks(v_runs, v_steps, v_indexes);
  end if;
  return true;
end;
$$;

-- set_priority_aging: how long a message may wait, visible, in the lanes of queue
-- p_queue_name before it counts as aged (aged messages get up to a quarter of each claim,
-- whatever their priority; see read_and_start_tasks):
-- p_seconds (at least 1), or the default of 60 s when null. Raises PF015 for a queue no flow
-- routes to, PF005 for fewer than 1 second.
-- Locks: the queue's row of queue_aging.
create or replace function pgflow.set_priority_aging(p_queue_name text, p_seconds integer)
returns void
language plpgsql
as $$
begin
  perform pgflow.require_routed_queue(p_queue_name);
  if p_seconds is null then
    delete from pgflow.queue_aging a where a.queue_name = p_queue_name;
  elsif p_seconds < 1 then
    raise exception 'set_priority_aging: an aging limit of % s is too short; give at least 1 s '
      '(or null for the default of 60 s)', p_seconds
      using errcode = 'PF005';
  else
    insert into pgflow.queue_aging (queue_name, aging_seconds)
    values (p_queue_name, p_seconds)
    on conflict (queue_name) do update set aging_seconds = excluded.aging_seconds;
  end if;
end;
$$;
