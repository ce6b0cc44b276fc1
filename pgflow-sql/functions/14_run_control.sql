-- Run control: what operators do to runs from outside (cancel; retry and resume come here too).

-- The runs a filter names, for the bulk forms: runs (live or archived) of a concrete flow or of
-- any version of an alias (p_name; null for every flow), with one of p_statuses (null for any),
-- started before p_started_before (null for any time). Oldest first, at most p_limit.
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
  from pgflow.all_runs r
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
  v_children uuid[];
  v_queues text[];
  v_messages bigint[];
begin
  -- The runs' locks in a statement of their own: the update below then reads with a snapshot
  -- taken after them, so a run a worker's completion changed meanwhile is seen as it is now.
  -- (Locked and updated in one statement, that run's new version is invisible to the update,
  -- which then silently changed nothing.)
  perform pgflow.lock_runs(p_run_ids);
  with locked as (
    select r.ctid as row_ctid from pgflow.runs r
    where r.run_id = any(p_run_ids) and r.status = 'started'
    order by r.run_id
    for no key update
  ),
  changed as (
    update pgflow.runs r
    set status = 'cancelled', cancelled_at = pgflow.clock(),
        cancel_reason = pgflow.bounded_error(p_reason)
    from locked
    where r.ctid = locked.row_ctid
    returning r.run_id, r.parent_run_id
  )
  select coalesce(array_agg(c.run_id), array[]::uuid[]),
         array_agg(c.run_id) filter (where c.parent_run_id is not null)
  into v_cancelled, v_children
  from changed c;

  if cardinality(v_cancelled) > 0 then
    select array_agg(pgflow.lane_name(t.queue_name, t.priority)), array_agg(t.message_id)
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
    set status = 'cancelled', cancelled_at = pgflow.clock()
    from live
    where t.ctid = live.row_ctid and t.status in ('queued', 'started');

    with open_steps as (
      select ss.ctid as row_ctid from pgflow.step_states ss
      where ss.run_id = any(v_cancelled) and ss.status in ('created', 'waiting', 'started')
      order by ss.run_id, ss.step_slug
      for no key update
    )
    update pgflow.step_states ss
    set status = 'cancelled', cancelled_at = pgflow.clock()
    from open_steps
    where ss.ctid = open_steps.row_ctid;
    delete from pgflow.waits w where w.run_id = any(v_cancelled);
    -- Their children go too; cancelled children fail the steps of parents that wait for them.
    perform pgflow.cancel_children(v_cancelled);
    if v_children is not null then
      perform pgflow.settle_parents(v_children);
    end if;
  end if;

  -- (Archived runs ended long ago: they are reported as they are.)
  return query
  select r.run_id, r.status, r.run_id = any(v_cancelled)
  from pgflow.all_runs r
  where r.run_id = any(p_run_ids)
  order by r.run_id;
end;
$$;

-- cancel_matching: cancels the runs still going that the filter names (see runs_matching), at
-- most p_limit; with p_dry_run, cancels nothing. Returns the runs it cancelled (with p_dry_run:
-- those it would cancel), oldest first.
-- Locks: none to match the runs (reads only), then as cancel_runs, for the runs it matches
-- (nothing with p_dry_run).
create or replace function pgflow.cancel_matching(
  p_name text,
  p_started_before timestamptz,
  p_reason text,
  p_limit integer,
  p_dry_run boolean
)
returns setof uuid
language plpgsql
as $$
declare
  v_run_ids uuid[];
begin
  v_run_ids := array(select pgflow.runs_matching(p_name, array['started'], p_started_before,
                                                 p_limit));
  if p_dry_run then
    return query select u.id from unnest(v_run_ids) with ordinality u(id, n) order by u.n;
    return;
  end if;
  return query
  select u.id
  from unnest(v_run_ids) with ordinality u(id, n)
  join pgflow.cancel_runs(v_run_ids, p_reason) c on c.run_id = u.id and c.cancelled
  order by u.n;
end;
$$;

-- retry_runs: retries the failed runs among p_run_ids. Each goes back to 'started' (its
-- retry_count counts up); its failed steps, and only they, run again: their failed tasks are
-- queued again with a fresh budget of attempts (see attempts_base) and a new message each, a
-- map step's completed elements keep their outputs, and a step that failed before it started
-- (a map over a non-array, an unmet condition that fails) is decided again. Completed and
-- skipped steps keep their outputs and do not run again; dependents then proceed as usual. A
-- late result of an attempt from before the retry never matches (attempt numbers keep
-- growing). Runs that are not failed are left as they are.
-- A run started with a singleton key (singleton_runs) goes on holding it, or takes it back when
-- the run that took it meanwhile has ended and no run waits in its line; otherwise the retry
-- raises PF018, naming the run that holds the key (or heads its line), and retries nothing.
-- Returns a row per run found: its status after the call and whether this call retried it.
-- Locks: runs (run_id order), then the singleton keys' start_guards rows of the retried runs
-- ((scope, key) order), then the failed tasks (order), then step_states (order), then as
-- start_ready_steps.
create or replace function pgflow.retry_runs(p_run_ids uuid[])
returns table (run_id uuid, status text, retried boolean)
language plpgsql
as $$
declare
  v_retried uuid[];
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
  v_held_runs uuid[];
  v_held_steps text[];
  v_held_indexes integer[];
  v_parent_runs uuid[];
  v_parent_steps text[];
  v_single record;
  v_holder uuid;
begin
  -- Archived runs, and the archived children of these, come back first.
  perform pgflow.restore_runs(p_run_ids, true);
  -- The runs' locks first, in a statement of their own (see cancel_runs).
  perform pgflow.lock_runs(p_run_ids);
  with locked as (
    select r.ctid as row_ctid from pgflow.runs r
    where r.run_id = any(p_run_ids) and r.status = 'failed'
    order by r.run_id
    for no key update
  ),
  changed as (
    update pgflow.runs r
    set status = 'started', failed_at = null, retry_count = r.retry_count + 1
    from locked
    where r.ctid = locked.row_ctid
    returning r.run_id
  )
  select coalesce(array_agg(c.run_id), array[]::uuid[]) into v_retried from changed c;

  -- Singleton keys: each retried run holds its key again, if nobody else does.
  for v_single in
    select s.run_id, s.scope, s.key from pgflow.singleton_runs s
    where s.run_id = any(v_retried)
    order by s.scope, s.key, s.run_id
  loop
    -- A key whose row prune deleted (its run ended long ago) is free: this run takes it.
    insert into pgflow.start_guards (scope, kind, key, run_id)
    values (v_single.scope, 'singleton', v_single.key, v_single.run_id)
    on conflict do nothing;
    continue when found;
    perform 1 from pgflow.start_guards g
    where g.scope = v_single.scope and g.kind = 'singleton' and g.key = v_single.key
    for update;
    -- (A statement of its own: it sees what a start that held the row committed.)
    select coalesce(
             (select g.run_id from pgflow.start_guards g
              join pgflow.runs r on r.run_id = g.run_id and r.status = 'started'
              where g.scope = v_single.scope and g.kind = 'singleton' and g.key = v_single.key
                and g.run_id <> v_single.run_id),
             pgflow.singleton_line_head(v_single.scope, v_single.key))
    into v_holder;
    if v_holder is not null then
      raise exception 'run % held singleton key `%` of `%`, which run % holds (or waits for) '
        'now; nothing was retried', v_single.run_id, v_single.key, v_single.scope, v_holder
        using errcode = 'PF018',
              detail = jsonb_build_object('key', v_single.key, 'scope', v_single.scope,
                                          'run_id', v_holder)::text,
              hint = 'retry it once that run and the runs in the key''s line have ended, or '
                     'cancel them';
    end if;
    update pgflow.start_guards g set run_id = v_single.run_id, taken_at = pgflow.clock()
    where g.scope = v_single.scope and g.kind = 'singleton' and g.key = v_single.key
      and g.run_id <> v_single.run_id;
  end loop;

  if cardinality(v_retried) > 0 then
    with failed as (
      select t.ctid as row_ctid from pgflow.step_tasks t
      where t.run_id = any(v_retried) and t.status = 'failed'
      order by t.run_id, t.step_slug, t.task_index
      for no key update
    ),
    requeued as (
      update pgflow.step_tasks t
      set status = 'queued', failed_at = null, attempts_base = t.attempts_count,
          requeue_count = 0
      from failed
      where t.ctid = failed.row_ctid
      returning t.run_id, t.step_slug, t.task_index
    )
    select array_agg(q.run_id), array_agg(q.step_slug), array_agg(q.task_index)
    into v_runs, v_steps, v_indexes
    from requeued q;

    -- Steps with tasks run again with what is left of them; a step that failed before it
    -- started (or was left waiting for a signal when its run failed) is 'created' again
    -- (nothing left to wait for), for start_ready_steps, which starts it or lets it wait
    -- again with a new deadline. A step that runs a subflow with its tasks done waits for
    -- its children again (start_children reuses those that completed and retries those that
    -- failed).
    with open_steps as (
      select ss.ctid as row_ctid, ss.run_id, ss.step_slug, ss.initial_tasks, s.subflow,
             (select count(*) from pgflow.step_tasks t
              where t.run_id = ss.run_id and t.step_slug = ss.step_slug
                and t.status <> 'completed')::integer as left_tasks
      from pgflow.step_states ss
      join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
      where ss.run_id = any(v_retried) and ss.status in ('failed', 'waiting', 'started')
      order by ss.run_id, ss.step_slug
      for no key update of ss
    ),
    reopened as (
      update pgflow.step_states ss
      set status = case when o.initial_tasks is null then 'created'
                        when o.subflow is not null and o.left_tasks = 0 then 'waiting'
                        else 'started' end,
          failed_at = null,
          error_message = null,
          started_at = case when o.initial_tasks is null then null else ss.started_at end,
          remaining_tasks = case when o.initial_tasks is null then null else o.left_tasks end
      from open_steps o
      where ss.ctid = o.row_ctid
      returning ss.run_id, ss.step_slug, ss.status
    )
    select array_agg(x.run_id), array_agg(x.step_slug)
    into v_parent_runs, v_parent_steps
    from reopened x where x.status = 'waiting';
    if v_parent_runs is not null then
      perform pgflow.start_children(v_parent_runs, v_parent_steps);
    end if;

    -- The requeued tasks get a message each, or, those of a capped step, are held again.
    if v_runs is not null then
      with requeued as (
        select q.run_id, q.step_slug, q.task_index, s.concurrency_limit is not null as capped
        from unnest(v_runs, v_steps, v_indexes) as q(run_id, step_slug, task_index)
        join pgflow.runs r on r.run_id = q.run_id
        join pgflow.steps s on s.flow_slug = r.flow_slug and s.step_slug = q.step_slug
      )
      select array_agg(q.run_id) filter (where not q.capped),
             array_agg(q.step_slug) filter (where not q.capped),
             array_agg(q.task_index) filter (where not q.capped),
             array_agg(q.run_id) filter (where q.capped),
             array_agg(q.step_slug) filter (where q.capped),
             array_agg(q.task_index) filter (where q.capped)
      into v_runs, v_steps, v_indexes, v_held_runs, v_held_steps, v_held_indexes
      from requeued q;
    end if;
    if v_runs is not null then
      perform pgflow.send_task_messages(v_runs, v_steps, v_indexes,
                                        array_fill(0, array[cardinality(v_runs)]));
    end if;
    if v_held_runs is not null then
      perform pgflow.hold_tasks(v_held_runs, v_held_steps, v_held_indexes);
    end if;
    perform pgflow.start_ready_steps(v_retried);
  end if;

  return query
  select r.run_id, r.status, r.run_id = any(v_retried)
  from pgflow.runs r
  where r.run_id = any(p_run_ids)
  order by r.run_id;
end;
$$;

-- retry_matching: retries the failed runs the filter names (see runs_matching), at most
-- p_limit; with p_dry_run, retries nothing. Returns the runs it retried (with p_dry_run: those
-- it would retry), oldest first.
-- Locks: none to match the runs (reads only), then as retry_runs, for the runs it matches
-- (nothing with p_dry_run).
create or replace function pgflow.retry_matching(
  p_name text,
  p_started_before timestamptz,
  p_limit integer,
  p_dry_run boolean
)
returns setof uuid
language plpgsql
as $$
declare
  v_run_ids uuid[];
begin
  v_run_ids := array(select pgflow.runs_matching(p_name, array['failed'], p_started_before,
                                                 p_limit));
  if p_dry_run then
    return query select u.id from unnest(v_run_ids) with ordinality u(id, n) order by u.n;
    return;
  end if;
  return query
  select u.id
  from unnest(v_run_ids) with ordinality u(id, n)
  join pgflow.retry_runs(v_run_ids) r on r.run_id = u.id and r.retried
  order by u.n;
end;
$$;

-- resume_run: runs an ended run (failed, completed or cancelled) again from the step
-- p_step_slug, as a new run of the same concrete flow with the same input, linked to the old
-- one (resumed_from, resumed_at_step). That step, everything downstream of it, and every step
-- the old run did not complete (or skip), with what is downstream of those, run again; the
-- other steps keep the old run's outputs (or skips) and do not run. The old run is left as it
-- was: its outputs, errors and attempts stay its history. Returns the new run as it stands.
-- Raises PF011 when the run does not exist, PF010 when it is still going or its flow has no
-- such step.
-- Locks: the old run (key share), then the new run's rows, then as start_ready_steps.
create or replace function pgflow.resume_run(p_run_id uuid, p_step_slug text)
returns pgflow.runs
language plpgsql
as $$
declare
  v_old pgflow.runs;
  v_new_id uuid := gen_random_uuid();
  v_rerun text[];
  v_new pgflow.runs;
begin
  -- An archived run, and the archived children of the run, come back first (the new run takes
  -- over the old one's children).
  perform pgflow.restore_runs(array[p_run_id], true);
  select * into v_old from pgflow.runs r where r.run_id = p_run_id for key share;
  if not found then
    raise exception 'no run % exists', p_run_id
      using errcode = 'PF011', detail = jsonb_build_object('run_id', p_run_id)::text;
  end if;
  if v_old.status = 'started' then
    raise exception 'run % is still going; resume it once it ended (cancel it first to '
      'stop it now)', p_run_id
      using errcode = 'PF010', detail = jsonb_build_object('run_id', p_run_id)::text;
  end if;
  if not exists (select 1 from pgflow.step_states ss where ss.run_id = p_run_id) then
    raise exception 'run % ended before it began (cancelled while it waited for its debounce '
      'window or its turn); start the flow again instead of resuming it', p_run_id
      using errcode = 'PF010', detail = jsonb_build_object('run_id', p_run_id)::text;
  end if;
  if not exists (select 1 from pgflow.steps s
                 where s.flow_slug = v_old.flow_slug and s.step_slug = p_step_slug) then
    raise exception 'flow `%` has no step `%`; its steps: %', v_old.flow_slug, p_step_slug,
      (select string_agg(s.step_slug, ', ' order by s.step_index) from pgflow.steps s
       where s.flow_slug = v_old.flow_slug)
      using errcode = 'PF010', detail = jsonb_build_object('run_id', p_run_id)::text;
  end if;

  with recursive seeds as (
    select p_step_slug as step_slug
    union
    select ss.step_slug from pgflow.step_states ss
    where ss.run_id = p_run_id and ss.status not in ('completed', 'skipped')
  ),
  rerun(step_slug) as (
    select step_slug from seeds
    union
    select d.step_slug from rerun
    join pgflow.deps d on d.flow_slug = v_old.flow_slug and d.dep_slug = rerun.step_slug
  )
  select array_agg(step_slug) into v_rerun from rerun;

  perform pgflow.ensure_lanes(v_old.flow_slug, v_old.priority);
  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, resumed_from,
                           resumed_at_step, priority)
  values (v_new_id, v_old.flow_slug, v_old.input, cardinality(v_rerun), p_run_id, p_step_slug,
          v_old.priority);

  -- The kept steps, as the old run left them; the others wait for what they depend on.
  insert into pgflow.step_states (run_id, step_slug, flow_slug, status, remaining_deps,
                                  initial_tasks, remaining_tasks, output, error_message,
                                  started_at, completed_at, skipped_at, skip_reason)
  select v_new_id, ss.step_slug, ss.flow_slug, ss.status, 0, ss.initial_tasks,
         ss.remaining_tasks, ss.output, ss.error_message, ss.started_at, ss.completed_at,
         ss.skipped_at, ss.skip_reason
  from pgflow.step_states ss
  where ss.run_id = p_run_id and not (ss.step_slug = any(v_rerun));

  insert into pgflow.step_states (run_id, step_slug, flow_slug, remaining_deps)
  select v_new_id, s.step_slug, s.flow_slug,
         (select count(*) from pgflow.deps d
          where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug
            and d.dep_slug = any(v_rerun))
  from pgflow.steps s
  where s.flow_slug = v_old.flow_slug and s.step_slug = any(v_rerun);

  perform pgflow.notify_new_runs(array[v_new_id]);
  perform pgflow.start_ready_steps(array[v_new_id]);

  select * into v_new from pgflow.runs r where r.run_id = v_new_id;
  return v_new;
end;
$$;

-- resume_matching: resumes, from p_step_slug, the ended runs (of p_statuses, by default failed
-- ones) the filter names (see runs_matching), at most p_limit; with p_dry_run, resumes
-- nothing. Returns each run it resumed (with p_dry_run: each it would resume), oldest first,
-- with the new run it was resumed as (null with p_dry_run).
-- Locks: none to match the runs (reads only), then as resume_run, for each run it matches
-- in turn, oldest first, each held to the end of the transaction (nothing with
-- p_dry_run).
create or replace function pgflow.resume_matching(
  p_name text,
  p_step_slug text,
  p_statuses text[],
  p_started_before timestamptz,
  p_limit integer,
  p_dry_run boolean
)
returns table (run_id uuid, resumed_as uuid)
language plpgsql
as $$
declare
  v_run_ids uuid[];
begin
  if exists (select 1 from unnest(coalesce(p_statuses, array['failed'])) s(status)
             where s.status not in ('failed', 'completed', 'cancelled')) then
    raise exception 'resume_matching: only ended runs resume (failed, completed, cancelled)'
      using errcode = 'PF005';
  end if;
  v_run_ids := array(select pgflow.runs_matching(p_name, coalesce(p_statuses, array['failed']),
                                                 p_started_before, p_limit));
  foreach run_id in array v_run_ids loop
    resumed_as := case when not p_dry_run
                       then (pgflow.resume_run(run_id, p_step_slug)).run_id end;
    return next;
  end loop;
end;
$$;

-- delete_flow: deletes the concrete flow p_flow_slug with its runs (live and archived), step
-- states, tasks, attempt history and queued messages (its queues stay: other flows may use them). Refused (PF012)
-- while its alias points at it and the alias has other versions (move the alias first), and,
-- unless p_force, while live workers (worker_is_live; a stale one is not asked for) carry it
-- or runs of it are going. A flow that is its
-- alias's only version takes the alias (and its history) with it. Returns what was deleted.
-- Locks: the flow's row (so no run of it starts meanwhile), the queued tasks' messages (as a
-- claim takes them), its runs, then their step states and tasks, then its archived rows.
create or replace function pgflow.delete_flow(p_flow_slug text, p_force boolean default false)
returns table (runs bigint, tasks bigint, messages bigint)
language plpgsql
as $$
#variable_conflict use_column
declare
  v_flow pgflow.flows;
  v_workers text;
  v_going bigint;
  v_queue record;
  v_messages bigint := 0;
  v_runs bigint;
  v_tasks bigint;
  v_archived bigint;
begin
  select * into v_flow from pgflow.flows f where f.flow_slug = p_flow_slug for update;
  if not found then
    raise exception 'no concrete flow `%` exists', p_flow_slug
      using errcode = 'PF004', detail = jsonb_build_object('flow_slug', p_flow_slug)::text;
  end if;
  if exists (select 1 from pgflow.aliases a
             where a.flow_slug = p_flow_slug
               and exists (select 1 from pgflow.flows o
                           where o.alias = a.alias and o.flow_slug <> p_flow_slug)) then
    raise exception 'alias `%` points at `%`; move it to another version first (`pgflow alias '
      'set % <flow>`)', v_flow.alias, p_flow_slug, v_flow.alias
      using errcode = 'PF012';
  end if;
  if not p_force then
    select string_agg(format('%s on %s', w.worker_id, w.queue_name), ', ') into v_workers
    from pgflow.workers w
    where pgflow.worker_is_live(w.stopped_at, w.last_heartbeat_at)
      and p_flow_slug = any(w.flow_slugs);
    if v_workers is not null then
      raise exception 'live workers carry `%` (%); stop them or drop the flow from their '
        'registries first, or force (--force)', p_flow_slug, v_workers
        using errcode = 'PF012';
    end if;
    select count(*) into v_going from pgflow.runs r
    where r.flow_slug = p_flow_slug and r.status = 'started';
    if v_going > 0 then
      raise exception '% run(s) of `%` are still going; let them end or cancel them '
        '(`pgflow cancel --flow %`) first, or force (--force)', v_going, p_flow_slug, p_flow_slug
        using errcode = 'PF012';
    end if;
  end if;

  for v_queue in
    select pgflow.lane_name(t.queue_name, t.priority) as lane_name,
           array_agg(t.message_id) as ids
    from pgflow.step_tasks t
    where t.flow_slug = p_flow_slug and t.status = 'queued'
    group by pgflow.lane_name(t.queue_name, t.priority)
  loop
    v_messages := v_messages
      + (select count(*) from pgmq.delete(v_queue.lane_name, v_queue.ids));
  end loop;

  perform 1 from pgflow.runs r where r.flow_slug = p_flow_slug
  order by r.run_id for update;
  delete from pgflow.task_attempts a
  using pgflow.runs r
  where r.flow_slug = p_flow_slug and a.run_id = r.run_id;
  delete from pgflow.signals sg
  using pgflow.runs r
  where r.flow_slug = p_flow_slug and sg.run_id = r.run_id;
  delete from pgflow.waits w where w.flow_slug = p_flow_slug;
  delete from pgflow.step_tasks t where t.flow_slug = p_flow_slug;
  get diagnostics v_tasks = row_count;
  delete from pgflow.step_states ss where ss.flow_slug = p_flow_slug;
  -- In line order, the order in which begin_deferred_runs clears a line.
  delete from pgflow.singleton_waits w
  where w.ctid = any(array(select x.ctid from pgflow.singleton_waits x
                           join pgflow.runs r on r.run_id = x.run_id
                           where r.flow_slug = p_flow_slug
                           order by x.scope, x.key, x.wait_seq
                           for update of x));
  delete from pgflow.singleton_runs sr
  using pgflow.runs r
  where r.flow_slug = p_flow_slug and sr.run_id = r.run_id;
  delete from pgflow.runs r where r.flow_slug = p_flow_slug;
  get diagnostics v_runs = row_count;

  -- Its archived runs: rows deleted from the history (the days' counts and keys with them).
  perform pgflow.uncount_history(array(select h.run_id from pgflow.runs_history h
                                       where h.flow_slug = p_flow_slug));
  delete from pgflow.archived_keys k
  using pgflow.runs_history h
  where h.flow_slug = p_flow_slug and k.run_id = h.run_id;
  delete from pgflow.task_attempts_history a
  using pgflow.runs_history h
  where h.flow_slug = p_flow_slug and a.run_id = h.run_id and a.run_ended_at = h.run_ended_at;
  delete from pgflow.step_tasks_history t where t.flow_slug = p_flow_slug;
  get diagnostics v_archived = row_count;
  v_tasks := v_tasks + v_archived;
  delete from pgflow.step_states_history ss where ss.flow_slug = p_flow_slug;
  delete from pgflow.runs_history h where h.flow_slug = p_flow_slug;
  get diagnostics v_archived = row_count;
  v_runs := v_runs + v_archived;

  delete from pgflow.alias_history h
  where h.to_flow_slug = p_flow_slug or h.from_flow_slug = p_flow_slug
     or h.alias in (select a.alias from pgflow.aliases a where a.flow_slug = p_flow_slug);
  delete from pgflow.aliases a where a.flow_slug = p_flow_slug;
  delete from pgflow.deps d where d.flow_slug = p_flow_slug;
  delete from pgflow.steps s where s.flow_slug = p_flow_slug;
  delete from pgflow.flows f where f.flow_slug = p_flow_slug;

  return query select v_runs, v_tasks, v_messages;
end;
$$;
