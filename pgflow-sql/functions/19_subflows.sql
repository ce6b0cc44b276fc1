-- Subflows: a step that runs another flow (steps.subflow). Its handler returns the child's
-- input, one per task; once its tasks are done (store_completions), start_children starts a
-- child run for each and the step is 'waiting' for them, with a wait of kind 'subflow'. When a
-- child ends, settle_parents gives the parent's step the children's outputs (and the parent's
-- run goes on) or fails it with the child's error. Cancelling a run cancels its children.
--
-- Lock order: a child's run before its parent's (a child that ends settles its parent while
-- it holds its own lock). The one path the other way, a parent's cancel reaching its children,
-- takes only the children nobody holds (SKIP LOCKED) and notes the others in
-- pgflow.children_to_cancel; settle_subflows, which every process with a running worker calls
-- each second, cancels those.

-- start_children: starts the children of steps (parallel arrays: run, step) that run a
-- subflow, are 'waiting' and have their tasks done: for each task, a run of the step's flow
-- (an alias resolves to its active version) with the task's output as its input, recording
-- its parent run, step and task, under the idempotency key `subflow:<run>/<step>/<task>`.
-- A task that has a child already keeps it, so a retry of the parent reruns nothing that
-- completed: a completed child settles its task at once, a failed one is retried, one still
-- going is waited for, and a cancelled one is resumed (the new run takes its place under the
-- parent; the cancelled one stays, linked from it by resumed_from). A resumed run
-- (runs.resumed_from) first takes over the children of the run it resumed that completed or
-- failed with the same input, likewise. A child that cannot start (no such flow, an input that
-- does not fit the flow's recorded schema, or a handler type that is not the flow's recorded
-- input type) fails the step and its run, naming why.
-- Locks: the steps' runs (held by the caller), then the children taken over, then as
-- start_flows and retry_runs for the children, then as settle_parents.
create or replace function pgflow.start_children(p_run_ids uuid[], p_step_slugs text[])
returns void
language plpgsql
as $$
declare
  v_group record;
  v_flow pgflow.flows;
  v_children uuid[];
  v_message text;
  v_failed_runs uuid[];
  v_retry uuid[];
  v_ended uuid[];
  v_cancelled record;
  v_resumed pgflow.runs;
begin
  insert into pgflow.waits (run_id, step_slug, flow_slug, kind, deadline)
  select ss.run_id, ss.step_slug, ss.flow_slug, 'subflow',
         pgflow.clock() + make_interval(secs => s.wait_timeout)
  from unnest(p_run_ids, p_step_slugs) as u(run_id, step_slug)
  join pgflow.step_states ss on ss.run_id = u.run_id and ss.step_slug = u.step_slug
  join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
  where ss.status = 'waiting'
  on conflict (run_id, step_slug) do nothing;

  -- A resumed run takes over the ended children of the run it resumed that ran the same input.
  update pgflow.runs c
  set parent_run_id = t.run_id
  from unnest(p_run_ids, p_step_slugs) as u(run_id, step_slug)
  join pgflow.runs r on r.run_id = u.run_id and r.resumed_from is not null
  join pgflow.step_tasks t on t.run_id = u.run_id and t.step_slug = u.step_slug
  where c.parent_run_id = r.resumed_from and c.parent_step_slug = t.step_slug
    and c.parent_task_index = t.task_index and c.status in ('completed', 'failed')
    and c.input = coalesce(t.output, 'null'::jsonb)
    and not exists (select 1 from pgflow.runs x
                    where x.parent_run_id = t.run_id and x.parent_step_slug = t.step_slug
                      and x.parent_task_index = t.task_index);

  -- The tasks without a child yet, by the flow they run and their run's priority (which the
  -- children take).
  for v_group in
    select s.subflow, s.subflow_input_type, r.priority,
           array_agg(t.run_id order by t.run_id, t.step_slug, t.task_index) as parent_runs,
           array_agg(t.step_slug order by t.run_id, t.step_slug, t.task_index) as parent_steps,
           array_agg(t.task_index order by t.run_id, t.step_slug, t.task_index) as parent_tasks,
           array_agg(coalesce(t.output, 'null'::jsonb)
                     order by t.run_id, t.step_slug, t.task_index) as inputs,
           array_agg(format('subflow:%s/%s/%s', t.run_id, t.step_slug, t.task_index)
                     order by t.run_id, t.step_slug, t.task_index) as keys
    from unnest(p_run_ids, p_step_slugs) as u(run_id, step_slug)
    join pgflow.step_states ss
      on ss.run_id = u.run_id and ss.step_slug = u.step_slug and ss.status = 'waiting'
    join pgflow.runs r on r.run_id = ss.run_id and r.status = 'started'
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    join pgflow.step_tasks t on t.run_id = ss.run_id and t.step_slug = ss.step_slug
    where s.subflow is not null
      and not exists (select 1 from pgflow.runs c
                      where c.parent_run_id = t.run_id and c.parent_step_slug = t.step_slug
                        and c.parent_task_index = t.task_index)
    group by s.subflow, s.subflow_input_type, r.priority
  loop
    begin
      select f.* into v_flow from pgflow.flows f
      where f.flow_slug = coalesce((select a.flow_slug from pgflow.aliases a
                                    where a.alias = v_group.subflow), v_group.subflow);
      if found and v_group.subflow_input_type is not null and v_flow.input_type is not null
         and v_flow.input_type <> v_group.subflow_input_type then
        raise exception 'flow `%` (version `%`) takes `%`, but the handler returns `%`',
          v_group.subflow, v_flow.flow_slug, v_flow.input_type, v_group.subflow_input_type
          using errcode = '22023';
      end if;
      v_children := array(select c.run_id
                          from pgflow.start_flows(v_group.subflow, v_group.inputs, null, true,
                                                  v_group.keys,
                                                  p_priority => v_group.priority) c);
    exception when others then
      get stacked diagnostics v_message = message_text;
      with failing as (
        update pgflow.step_states ss
        set status = 'failed', failed_at = pgflow.clock(),
            error_message = pgflow.bounded_error(format(
              'step `%s` could not start its child run of flow `%s`: %s',
              ss.step_slug, v_group.subflow, v_message))
        from (select distinct p.run_id, p.step_slug
              from unnest(v_group.parent_runs, v_group.parent_steps) as p(run_id, step_slug)) p
        where ss.run_id = p.run_id and ss.step_slug = p.step_slug and ss.status = 'waiting'
        returning ss.run_id
      )
      select array_agg(distinct f.run_id) into v_failed_runs from failing f;
      if v_failed_runs is not null then
        perform pgflow.fail_runs(v_failed_runs, 'run failed: a step could not start its child run');
      end if;
      continue;
    end;

    update pgflow.runs c
    set parent_run_id = p.run_id, parent_step_slug = p.step_slug, parent_task_index = p.task_index
    from unnest(v_children, v_group.parent_runs, v_group.parent_steps, v_group.parent_tasks)
      as p(child_id, run_id, step_slug, task_index)
    where c.run_id = p.child_id and c.parent_run_id is null;
  end loop;

  -- A cancelled child kept by a step still waiting (its parent is retried) is resumed from its
  -- first step it did not complete; the new run takes its place.
  for v_cancelled in
    select c.run_id, c.parent_run_id, c.parent_step_slug, c.parent_task_index,
           (select cs.step_slug from pgflow.step_states cs
            join pgflow.steps s on s.flow_slug = cs.flow_slug and s.step_slug = cs.step_slug
            where cs.run_id = c.run_id and cs.status not in ('completed', 'skipped')
            order by s.step_index limit 1) as from_step
    from unnest(p_run_ids, p_step_slugs) as u(run_id, step_slug)
    join pgflow.step_states ss
      on ss.run_id = u.run_id and ss.step_slug = u.step_slug and ss.status = 'waiting'
    join pgflow.runs c on c.parent_run_id = u.run_id and c.parent_step_slug = u.step_slug
    where c.status = 'cancelled'
    order by c.run_id
  loop
    continue when v_cancelled.from_step is null;
    update pgflow.runs c
    set parent_run_id = null, parent_step_slug = null, parent_task_index = null
    where c.run_id = v_cancelled.run_id;
    v_resumed := pgflow.resume_run(v_cancelled.run_id, v_cancelled.from_step);
    update pgflow.runs c
    set parent_run_id = v_cancelled.parent_run_id,
        parent_step_slug = v_cancelled.parent_step_slug,
        parent_task_index = v_cancelled.parent_task_index
    where c.run_id = v_resumed.run_id;
  end loop;

  -- Children of steps still waiting that ended already (kept, taken over, or ended as they
  -- started): a failed one runs again; the others settle their tasks now.
  v_retry := array(select c.run_id
                   from unnest(p_run_ids, p_step_slugs) as u(run_id, step_slug)
                   join pgflow.step_states ss
                     on ss.run_id = u.run_id and ss.step_slug = u.step_slug
                    and ss.status = 'waiting'
                   join pgflow.runs c
                     on c.parent_run_id = u.run_id and c.parent_step_slug = u.step_slug
                   where c.status = 'failed');
  if cardinality(v_retry) > 0 then
    perform pgflow.retry_runs(v_retry);
  end if;
  v_ended := array(select c.run_id
                   from unnest(p_run_ids, p_step_slugs) as u(run_id, step_slug)
                   join pgflow.runs c
                     on c.parent_run_id = u.run_id and c.parent_step_slug = u.step_slug
                   where c.status <> 'started');
  if cardinality(v_ended) > 0 then
    perform pgflow.settle_parents(v_ended);
  end if;
end;
$$;

-- settle_parents: what the end of child runs p_child_ids does to their parents' steps that
-- wait for them (in started runs): a step whose children all completed completes, its output
-- the child's output (a map step's: its children's outputs in task order), and its run goes
-- on; a step with a child that failed or was cancelled fails, naming the child and its error,
-- and so does its run (its other children go on: a retry of the parent reuses what they
-- produce). Children of runs that no longer wait for them change nothing.
-- Locks: the parents' runs (order), then their steps, then as fail_runs and
-- finish_completed_steps. (A child that ends holds its own run's lock first.)
create or replace function pgflow.settle_parents(p_child_ids uuid[])
returns void
language plpgsql
as $$
declare
  v_parents uuid[];
  v_runs uuid[];
  v_steps text[];
  v_flows text[];
  v_failed_runs uuid[];
begin
  select array_agg(distinct c.parent_run_id) into v_parents
  from pgflow.runs c
  where c.run_id = any(p_child_ids) and c.parent_run_id is not null;
  if v_parents is null then
    return;
  end if;
  perform pgflow.lock_runs(v_parents);

  with parent_steps as (
    select distinct c.parent_run_id as run_id, c.parent_step_slug as step_slug
    from pgflow.runs c
    where c.run_id = any(p_child_ids) and c.parent_run_id is not null
  ),
  state as (
    select ss.ctid as row_ctid, ss.run_id, ss.step_slug, s.step_type, ss.initial_tasks,
           k.completed, k.failed_child
    from parent_steps p
    join pgflow.step_states ss on ss.run_id = p.run_id and ss.step_slug = p.step_slug
    join pgflow.runs r on r.run_id = ss.run_id and r.status = 'started'
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    cross join lateral (
      select count(*) filter (where c.status = 'completed') as completed,
             (array_agg(c.run_id order by c.parent_task_index)
                filter (where c.status in ('failed', 'cancelled')))[1] as failed_child
      from pgflow.runs c
      where c.parent_run_id = ss.run_id and c.parent_step_slug = ss.step_slug
    ) k
    where ss.status = 'waiting' and s.subflow is not null
    order by ss.run_id, ss.step_slug
    for no key update of ss
  ),
  completed as (
    update pgflow.step_states ss
    set status = 'completed', completed_at = pgflow.clock(),
        output = (select case when st.step_type = 'single' then (array_agg(c.output))[1]
                              else coalesce(jsonb_agg(c.output order by c.parent_task_index),
                                            '[]'::jsonb) end
                  from pgflow.runs c
                  where c.parent_run_id = st.run_id and c.parent_step_slug = st.step_slug)
    from state st
    where ss.ctid = st.row_ctid and st.failed_child is null
      and st.completed = st.initial_tasks
    returning ss.run_id, ss.step_slug, ss.flow_slug
  ),
  failed as (
    update pgflow.step_states ss
    set status = 'failed', failed_at = pgflow.clock(),
        error_message = pgflow.bounded_error(format(
          'child run %s of flow `%s` %s: %s', c.run_id, c.flow_slug, c.status,
          coalesce((select cs.error_message from pgflow.step_states cs
                    where cs.run_id = c.run_id and cs.status = 'failed'
                    order by cs.failed_at limit 1),
                   c.cancel_reason, 'no error recorded')))
    from state st
    join pgflow.runs c on c.run_id = st.failed_child
    where ss.ctid = st.row_ctid
    returning ss.run_id, ss.step_slug
  ),
  settled as (
    delete from pgflow.waits w
    using (select run_id, step_slug from completed
           union all select run_id, step_slug from failed) x
    where w.run_id = x.run_id and w.step_slug = x.step_slug
  )
  select (select array_agg(run_id) from completed), (select array_agg(step_slug) from completed),
         (select array_agg(flow_slug) from completed),
         (select array_agg(distinct run_id) from failed)
  into v_runs, v_steps, v_flows, v_failed_runs;

  if v_failed_runs is not null then
    perform pgflow.fail_runs(v_failed_runs, 'run failed: a child run failed');
  end if;
  if v_runs is not null then
    perform pgflow.finish_completed_steps(v_runs, v_steps, v_flows);
  end if;
end;
$$;

-- cancel_children: cancels the children still going of runs p_run_ids (that were just
-- cancelled), with the reason `its parent run was cancelled`, and theirs in turn; with
-- p_step_slugs (parallel to p_run_ids), only the children of those steps, with p_reason. A
-- child another transaction holds at that moment is noted in pgflow.children_to_cancel, for
-- settle_subflows.
-- Locks: the children's runs that nobody holds (SKIP LOCKED), then as cancel_runs.
create or replace function pgflow.cancel_children(
  p_run_ids uuid[],
  p_step_slugs text[] default null,
  p_reason text default 'its parent run was cancelled'
)
returns void
language plpgsql
as $$
declare
  v_live uuid[];
  v_children uuid[];
begin
  if p_step_slugs is null then
    select array_agg(c.run_id) into v_live
    from pgflow.runs c
    where c.parent_run_id = any(p_run_ids) and c.status = 'started';
  else
    select array_agg(c.run_id) into v_live
    from unnest(p_run_ids, p_step_slugs) as u(run_id, step_slug)
    join pgflow.runs c on c.parent_run_id = u.run_id and c.parent_step_slug = u.step_slug
    where c.status = 'started';
  end if;
  if v_live is null then
    return;
  end if;
  select array_agg(c.run_id) into v_children
  from (select c.run_id from pgflow.runs c
        where c.run_id = any(v_live)
        order by c.run_id
        for no key update skip locked) c;
  insert into pgflow.children_to_cancel (run_id, parent_run_id, reason)
  select c.run_id, c.parent_run_id, p_reason from pgflow.runs c
  where c.run_id = any(v_live) and not (c.run_id = any(coalesce(v_children, array[]::uuid[])))
  on conflict do nothing;
  if v_children is not null then
    perform pgflow.cancel_runs(v_children, p_reason);
  end if;
end;
$$;

-- settle_subflows: cancels the children a parent's cancel could not take at that moment
-- (pgflow.children_to_cancel), at most p_limit, those nobody holds now; the rest stay noted
-- for the next call. Returns how many it cancelled. Any number of processes may call it at
-- once. (Nothing else is left over: a child that ends settles its parent in the same
-- transaction.)
-- Locks: the noted runs nobody holds (SKIP LOCKED), then as cancel_runs.
create or replace function pgflow.settle_subflows(p_limit integer default 1000)
returns integer
language plpgsql
as $$
declare
  v_noted uuid[];
  v_taken uuid[];
  v_reason record;
  v_cancelled integer := 0;
begin
  select array_agg(n.run_id) into v_noted
  from (select n.run_id from pgflow.children_to_cancel n order by n.run_id limit p_limit) n;
  if v_noted is null then
    return 0;
  end if;
  select array_agg(c.run_id) into v_taken
  from (select c.run_id from pgflow.runs c
        where c.run_id = any(v_noted)
        order by c.run_id
        for no key update skip locked) c;
  if v_taken is null then
    return 0;
  end if;
  for v_reason in
    select n.reason, array_agg(n.run_id order by n.run_id) as run_ids
    from pgflow.children_to_cancel n
    where n.run_id = any(v_taken)
    group by n.reason
  loop
    v_cancelled := v_cancelled + (select count(*) filter (where x.cancelled)::integer
                                  from pgflow.cancel_runs(v_reason.run_ids, v_reason.reason) x);
  end loop;
  delete from pgflow.children_to_cancel n where n.run_id = any(v_taken);
  return v_cancelled;
end;
$$;
