-- Aliases and versions, version draining, and the rollout fence over worker functions: which
-- concrete flow new runs of an alias start on, when an old version can be removed, and how a
-- rollout keeps the workers of old code stopped until it finishes.

------------------------------------------------------------------------------------------------
-- Aliases
------------------------------------------------------------------------------------------------

-- activate_flow: moves the flow's alias to it when its version is above the alias's high-water
-- mark (the highest version the alias ever pointed at), or when the alias has no target yet.
-- Never moves an alias backwards, and never undoes an operator's rollback (`set_alias`).
-- Returns 'activated' (moved now), 'active' (already the target) or 'inactive'.
-- Concurrent calls for one alias serialize and agree.
-- Locks: advisory (namespace, hashtext('alias:' || alias)), then the alias row.
create or replace function pgflow.activate_flow(p_flow_slug text)
returns text
language plpgsql
as $$
declare
  v_flow pgflow.flows;
  v_alias pgflow.aliases;
begin
  select * into v_flow from pgflow.flows where flow_slug = p_flow_slug;
  if not found then
    raise exception 'flow `%` is not defined; compile it before activating it', p_flow_slug
      using errcode = 'PF004', detail = jsonb_build_object('flow_slug', p_flow_slug)::text;
  end if;
  perform pg_advisory_xact_lock(pgflow.lock_namespace(), hashtext('alias:' || v_flow.alias));

  select * into v_alias from pgflow.aliases where alias = v_flow.alias;
  if not found then
    insert into pgflow.aliases (alias, flow_slug, high_water_version)
    values (v_flow.alias, p_flow_slug, v_flow.version);
  elsif v_alias.flow_slug = p_flow_slug then
    return 'active';
  elsif v_flow.version <= v_alias.high_water_version then
    return 'inactive';
  else
    update pgflow.aliases
    set flow_slug = p_flow_slug, high_water_version = v_flow.version, activated_at = pgflow.clock()
    where alias = v_flow.alias;
  end if;
  insert into pgflow.alias_history (alias, from_flow_slug, to_flow_slug, reason)
  values (v_flow.alias, v_alias.flow_slug, p_flow_slug, 'activated');
  return 'activated';
end;
$$;

-- alias_state: 'active' when the flow is its alias's target, else 'inactive'.
-- Locks: none (reads only).
create or replace function pgflow.alias_state(p_flow_slug text)
returns text
language sql
stable
as $$
  select case when exists (select 1 from pgflow.aliases where flow_slug = p_flow_slug)
              then 'active' else 'inactive' end
$$;

-- set_alias: the operator's explicit move of an alias to any of its concrete flows (a rollback
-- included; workers will not move it forward again past the high-water mark, only a newer
-- version or another set_alias does). Returns the previous target (null when it had none).
-- Raises PF004 for an unknown flow and PF006 for a flow of another alias.
-- Locks: advisory (namespace, hashtext('alias:' || alias)), then the alias row (inserted or
-- updated; its foreign key takes key share on the flow row).
create or replace function pgflow.set_alias(p_alias text, p_flow_slug text)
returns text
language plpgsql
as $$
declare
  v_flow pgflow.flows;
  v_previous text;
begin
  select * into v_flow from pgflow.flows where flow_slug = p_flow_slug;
  if not found then
    raise exception 'flow `%` is not defined', p_flow_slug
      using errcode = 'PF004', detail = jsonb_build_object('flow_slug', p_flow_slug)::text;
  end if;
  if v_flow.alias <> p_alias then
    raise exception 'flow `%` belongs to alias `%`, not `%`; an alias can only point at its own '
      'versions', p_flow_slug, v_flow.alias, p_alias
      using errcode = 'PF006';
  end if;
  perform pg_advisory_xact_lock(pgflow.lock_namespace(), hashtext('alias:' || p_alias));
  select flow_slug into v_previous from pgflow.aliases where alias = p_alias;
  insert into pgflow.aliases (alias, flow_slug, high_water_version)
  values (p_alias, p_flow_slug, v_flow.version)
  on conflict (alias) do update
    set flow_slug = excluded.flow_slug,
        high_water_version = greatest(pgflow.aliases.high_water_version,
                                      excluded.high_water_version),
        activated_at = pgflow.clock();
  if v_previous is distinct from p_flow_slug then
    insert into pgflow.alias_history (alias, from_flow_slug, to_flow_slug, reason)
    values (p_alias, v_previous, p_flow_slug, 'set');
  end if;
  return v_previous;
end;
$$;

------------------------------------------------------------------------------------------------
-- Draining
------------------------------------------------------------------------------------------------

-- drain_status: whether a concrete flow can be removed from the registries of `p_queue_name`
-- (or of every queue when null): no started run of it can still reach the queue, no task of it
-- is queued or started there, and it is not an alias's active target (new runs would start
-- on it). Steps lists the flow's not-yet-completed steps of started runs that route there.
-- Raises PF004 for an unknown flow and PF005 for a queue the flow routes no step to (a
-- misspelt queue would otherwise read as "safe to remove").
-- Locks: none (reads only).
create or replace function pgflow.drain_status(p_flow_slug text, p_queue_name text default null)
returns table (
  flow_slug text,
  queue_name text,
  active boolean,
  started_runs bigint,
  queued_tasks bigint,
  started_tasks bigint,
  pending_steps text[],
  safe_to_remove boolean
)
language plpgsql
stable
as $$
#variable_conflict use_column
begin
  if not exists (select 1 from pgflow.flows f where f.flow_slug = p_flow_slug) then
    raise exception 'flow `%` is not defined', p_flow_slug
      using errcode = 'PF004', detail = jsonb_build_object('flow_slug', p_flow_slug)::text;
  end if;
  if p_queue_name is not null and not exists (
       select 1 from pgflow.steps s
       where s.flow_slug = p_flow_slug and s.queue_name = p_queue_name) then
    raise exception 'flow `%` routes no step to queue `%`; its queues are %', p_flow_slug,
      p_queue_name,
      (select string_agg(format('`%s`', q.queue_name), ', ' order by q.queue_name)
       from (select distinct s.queue_name from pgflow.steps s
             where s.flow_slug = p_flow_slug) q)
      using errcode = 'PF005';
  end if;
  return query
  with active as (
    select exists (select 1 from pgflow.aliases a where a.flow_slug = p_flow_slug) as active
  ),
  runs as (
    select count(distinct r.run_id) as started_runs,
           coalesce(array_agg(distinct ss.step_slug order by ss.step_slug)
                      filter (where ss.step_slug is not null), array[]::text[]) as pending_steps
    from pgflow.runs r
    left join pgflow.step_states ss
      on ss.run_id = r.run_id and ss.status in ('created', 'waiting', 'started')
      and exists (select 1 from pgflow.steps s
                  where s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
                    and (p_queue_name is null or s.queue_name = p_queue_name))
    where r.flow_slug = p_flow_slug and r.status = 'started'
      and (p_queue_name is null or ss.step_slug is not null
           -- A run not begun yet (a debounce's window, a singleton's turn) will run its
           -- steps on each of the flow's queues.
           or not exists (select 1 from pgflow.step_states x where x.run_id = r.run_id))
  ),
  tasks as (
    select count(*) filter (where t.status = 'queued') as queued_tasks,
           count(*) filter (where t.status = 'started') as started_tasks
    from pgflow.step_tasks t
    where t.flow_slug = p_flow_slug and t.status in ('queued', 'started')
      and (p_queue_name is null or t.queue_name = p_queue_name)
  )
  select p_flow_slug, p_queue_name, active.active, runs.started_runs, tasks.queued_tasks,
         tasks.started_tasks, runs.pending_steps,
         not active.active and runs.started_runs = 0 and tasks.queued_tasks = 0
           and tasks.started_tasks = 0
  from active, runs, tasks;
end;
$$;

------------------------------------------------------------------------------------------------
-- The rollout fence
------------------------------------------------------------------------------------------------

-- begin_rollout: records which of the functions are enabled, disables them all and deprecates
-- their live workers (which drain and stop). Unknown functions are created disabled and
-- counted as enabled before (a worker of them would have started). Returns the rollout id.
-- Locks: the worker_functions rows (key order), then the workers rows.
create or replace function pgflow.begin_rollout(p_function_names text[])
returns bigint
language plpgsql
as $$
declare
  v_names text[];
  v_enabled text[];
  v_id bigint;
begin
  select array_agg(distinct n order by n) into v_names
  from unnest(p_function_names) n where length(trim(n)) > 0;
  if v_names is null then
    raise exception 'begin_rollout: name at least one worker function' using errcode = 'PF005';
  end if;

  insert into pgflow.worker_functions (function_name)
  select n from unnest(v_names) n
  on conflict (function_name) do nothing;

  with locked as (
    select function_name, enabled from pgflow.worker_functions
    where function_name = any(v_names)
    order by function_name
    for update
  )
  select coalesce(array_agg(function_name order by function_name) filter (where enabled),
                  array[]::text[])
  into v_enabled from locked;

  update pgflow.worker_functions
  set enabled = false, updated_at = pgflow.clock()
  where function_name = any(v_names);

  update pgflow.workers
  set deprecated_at = coalesce(deprecated_at, pgflow.clock())
  where function_name = any(v_names) and stopped_at is null;

  insert into pgflow.rollouts (function_names, enabled_before)
  values (v_names, v_enabled)
  returning rollout_id into v_id;
  return v_id;
end;
$$;

-- functions_serving_queues: the functions with live workers (worker_is_live) on any of the
-- queues.
-- Locks: none (reads only).
create or replace function pgflow.functions_serving_queues(p_queue_names text[])
returns text[]
language sql
stable
as $$
  select coalesce(array_agg(distinct function_name order by function_name), array[]::text[])
  from pgflow.workers
  where queue_name = any(p_queue_names) and pgflow.worker_is_live(stopped_at, last_heartbeat_at)
$$;

-- rollout_progress: the workers of a rollout's functions still running: live (worker_is_live;
-- a stale one died without saying so and counts as gone).
-- Locks: none (reads only).
create or replace function pgflow.rollout_progress(p_rollout_id bigint)
returns table (worker_id uuid, function_name text, queue_name text, last_heartbeat_at timestamptz)
language sql
stable
as $$
  select w.worker_id, w.function_name, w.queue_name, w.last_heartbeat_at
  from pgflow.workers w
  join pgflow.rollouts r on w.function_name = any(r.function_names)
  where r.rollout_id = p_rollout_id
    and pgflow.worker_is_live(w.stopped_at, w.last_heartbeat_at)
  order by w.function_name, w.worker_id
$$;

-- finish_rollout: enables exactly the functions that were enabled when the rollout began.
-- Returns them. Raises PF007 for an unknown or already finished rollout.
-- Locks: its rollouts row (for update), then the worker_functions rows it enables (update).
create or replace function pgflow.finish_rollout(p_rollout_id bigint)
returns text[]
language plpgsql
as $$
declare
  v_rollout pgflow.rollouts;
begin
  select * into v_rollout from pgflow.rollouts where rollout_id = p_rollout_id for update;
  if not found then
    raise exception 'rollout % does not exist; `pgflow rollout status` lists open rollouts',
      p_rollout_id using errcode = 'PF007';
  end if;
  if v_rollout.status = 'finished' then
    raise exception 'rollout % already finished at %', p_rollout_id, v_rollout.finished_at
      using errcode = 'PF007';
  end if;
  update pgflow.worker_functions
  set enabled = true, updated_at = pgflow.clock()
  where function_name = any(v_rollout.enabled_before);
  update pgflow.rollouts set status = 'finished', finished_at = pgflow.clock()
  where rollout_id = p_rollout_id;
  return v_rollout.enabled_before;
end;
$$;
