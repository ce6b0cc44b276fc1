-- Starts: creating runs (one or many, by alias or concrete flow, typed through an alias, with
-- idempotency keys, a start time and a trace context) and starting their root steps through
-- the progression functions (04_progression.sql).

-- begin_runs: begins runs just inserted (parallel arrays of ids and inputs, all of flow
-- p_flow_slug and of priority p_priority, null for the default): their step states, the root
-- steps started and sized, their waits and their first tasks, visible after p_delay seconds
-- beyond each root step's own start delay. p_waits says whether the flow has a step that waits
-- for a signal (the caller read it with the steps). start_flows calls it for the runs it
-- starts now, begin_deferred_runs for runs whose start was deferred (a debounce).
-- Locks: as start_ready_steps and enqueue_step_tasks.
create or replace function pgflow.begin_runs(
  p_flow_slug text, p_run_ids uuid[], p_inputs jsonb[], p_delay integer, p_priority smallint,
  p_waits boolean
)
returns void
language plpgsql
as $$
declare
  v_started pgflow.started_step[];
  v_slow_runs uuid[];
begin
  -- Every step state in one write, the root steps already started and sized: a single step
  -- gets one task, a root map step one per element of the run's input. A root step that
  -- waits for a signal (and has no condition) is 'waiting' at once, with its wait (a new run
  -- has received no signal yet). A root step with a condition or a sleep stays 'created' and
  -- is decided by start_ready_steps. A run whose input a root map step cannot map over (not an array)
  -- gets all its steps 'created' and is left to start_ready_steps, which fails it (unless
  -- the map step's condition skips it).
  with planned as (
    select r.run_id, s.step_slug, s.flow_slug, s.deps_count, s.queue_name,
           coalesce(s.opt_start_delay, 0) + p_delay as start_delay,
           case when s.deps_count > 0 or c.deferred or c.waits then null
                when s.step_type = 'single' then 1
                when jsonb_typeof(r.input) = 'array' then jsonb_array_length(r.input)
           end as task_count,
           s.deps_count = 0 and s.step_type = 'map' and not c.deferred and not c.waits
             and jsonb_typeof(r.input) is distinct from 'array' as bad,
           s.deps_count = 0 and c.deferred as decided_later,
           s.deps_count = 0 and c.waits and not c.deferred as waits_now
    from unnest(p_run_ids, p_inputs) as r(run_id, input)
    cross join pgflow.steps s
    cross join lateral (select s.condition_when is not null or s.condition_unless is not null
                                 or s.sleep_seconds is not null
                                 or s.sleep_until_path is not null
                                 or s.concurrency_limit is not null as deferred,
                               s.signal_name is not null as waits) c
    where s.flow_slug = p_flow_slug
  ),
  decided as materialized (
    select planned.*,
           planned.task_count is not null
             and not bool_or(planned.bad) over (partition by planned.run_id) as start,
           planned.waits_now
             and not bool_or(planned.bad) over (partition by planned.run_id) as wait
    from planned
  ),
  inserted as (
    insert into pgflow.step_states (run_id, step_slug, flow_slug, remaining_deps, status,
                                    started_at, initial_tasks, remaining_tasks)
    select d.run_id, d.step_slug, d.flow_slug, d.deps_count,
           case when d.start then 'started' when d.wait then 'waiting' else 'created' end,
           case when d.start then pgflow.clock() end,
           case when d.start then d.task_count end,
           case when d.start then d.task_count end
    from decided d
  )
  select array_agg((run_id, step_slug, flow_slug, task_count, queue_name, start_delay,
                    p_priority)::pgflow.started_step) filter (where start),
         array_agg(distinct run_id) filter (where bad or decided_later)
  into v_started, v_slow_runs
  from decided;

  -- The waits of the root steps that wait (a flow with none skips the statement).
  if p_waits then
    insert into pgflow.waits (run_id, step_slug, flow_slug, signal_name, deadline, signal_key)
    select ss.run_id, ss.step_slug, ss.flow_slug, s.signal_name,
           pgflow.clock() + make_interval(secs => s.wait_timeout),
           pgflow.signal_key_of(s.signal_key_path, ss.run_id, r.input)
    from pgflow.step_states ss
    join pgflow.runs r on r.run_id = ss.run_id
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    where ss.run_id = any(p_run_ids) and ss.status = 'waiting';
    -- A run begun late (a debounce's) may have been sent a signal while it waited: its steps
    -- that wait are decided again by start_ready_steps, which starts those whose signal came.
    if exists (select 1 from pgflow.signals sg where sg.run_id = any(p_run_ids)) then
      v_slow_runs := array(select distinct u
                           from unnest(coalesce(v_slow_runs, array[]::uuid[]) || p_run_ids) u);
    end if;
  end if;

  -- Their events (`started`), before anything moves them on; checked here first, since a
  -- call costs more than the look at the lease table that nearly always ends it.
  if exists (select 1 from pgflow.event_subscribers s where s.expires_at > pgflow.clock()) then
    perform pgflow.notify_new_runs(p_run_ids);
  end if;

  if v_slow_runs is not null then
    perform pgflow.start_ready_steps(v_slow_runs);
  end if;
  if v_started is not null then
    perform pgflow.enqueue_step_tasks(v_started);
  end if;
end;
$$;

-- singleton_line_head: the first run still going in the line of singleton key p_key of
-- p_scope (null when none waits): the next to take the key.
-- Locks: none (reads only).
create or replace function pgflow.singleton_line_head(p_scope text, p_key text)
returns uuid
language sql
stable
as $$
  select w.run_id
  from pgflow.singleton_waits w
  join pgflow.runs r on r.run_id = w.run_id and r.status = 'started'
  where w.scope = p_scope and w.key = p_key
  order by w.wait_seq
  limit 1
$$;

-- take_start_guards: takes, for runs about to start of flow p_flow_slug (p_run_ids and
-- p_inputs, one per input, in input order), the start guards p_guards names (see start_flows)
-- in scope p_scope: every singleton key, then every throttle key, then every debounce key,
-- input by input. A new key is the input's. Otherwise the key's row is locked (waiting for a
-- start that holds it), and decided in later statements, which see what that start committed:
-- - A singleton or throttle key is free when its singleton run has ended and no run waits in
--   its line, or its throttle window has ended or its run is gone; the row then names the
--   input's run. A key held by an earlier input of this call is not free. A key that is not
--   free raises PF018 (singleton without "wait") or PF017 (throttle without "drop"), naming
--   the key and the run that holds it (or heads its line); with "drop", the input is left out
--   and its result is that run; with "wait", the input's run is created without beginning and
--   joins the key's line (`in_line`: start_flows writes it to singleton_waits).
-- - A debounce key whose run has not begun (deferred_runs) and is of this flow folds the
--   input into that run: its input becomes this one and it begins a window from now; the
--   input is left out and its result is that run. A key of an earlier input of this call
--   gives way to this one (the last input wins). Otherwise the input's run is the key's and
--   starts deferred, beginning a window from now (`deferred_until`).
-- Windows count from the statement that starts the runs.
-- Returns each input's result id, whether it starts (its run is inserted), for a run that
-- starts deferred, when it begins, and for a run with a singleton key, the key and whether
-- the run joins its line.
-- Locks: the guards' rows, in input order per kind; for a debounce, then the pending run's
-- deferred_runs row (waiting for a begin in flight) and its runs row.
create or replace function pgflow.take_start_guards(p_scope text, p_flow_slug text,
                                                    p_guards jsonb, p_run_ids uuid[],
                                                    p_inputs jsonb[])
returns table (ordinality integer, result_id uuid, kept boolean, deferred_until timestamptz,
               singleton_key text, in_line boolean)
language plpgsql
as $$
declare
  v_kind text;
  v_keys text[];
  v_seconds integer;
  v_drop boolean;
  v_wait boolean;
  v_new boolean;
  v_holder record;
  v_head uuid;
  v_at timestamptz;
  v_until timestamptz;
  v_free boolean;
  v_j integer;
  v_results uuid[] := p_run_ids;
  v_kept boolean[] := array_fill(true, array[cardinality(p_run_ids)]);
  v_deferred timestamptz[] := array_fill(null::timestamptz, array[cardinality(p_run_ids)]);
  v_lines boolean[] := array_fill(false, array[cardinality(p_run_ids)]);
begin
  if jsonb_typeof(p_guards) <> 'object'
     or exists (select 1 from jsonb_object_keys(p_guards) k
                where k not in ('throttle', 'singleton', 'debounce')) then
    raise exception 'start_flows: the start guards must be a JSON object of `throttle`, '
      '`singleton` and `debounce`, got %', left(p_guards::text, 200)
      using errcode = 'PF005';
  end if;
  if p_guards ? 'debounce' and (p_guards ? 'throttle' or p_guards ? 'singleton') then
    raise exception 'start_flows: a debounce key does not go with a throttle or singleton key '
      'in one start; a debounce already makes one run of many starts'
      using errcode = 'PF005';
  end if;
  foreach v_kind in array array['singleton', 'throttle', 'debounce'] loop
    continue when not p_guards ? v_kind;
    v_keys := array(select k from jsonb_array_elements_text(
                      case when jsonb_typeof(p_guards -> v_kind -> 'keys') = 'array'
                           then p_guards -> v_kind -> 'keys' else '[]' end) k);
    if cardinality(v_keys) <> cardinality(p_run_ids) then
      raise exception 'start_flows: % % keys for % inputs; pass one per input (null for an '
        'input without one)', cardinality(v_keys), v_kind, cardinality(p_run_ids)
        using errcode = 'PF005';
    end if;
    if exists (select 1 from unnest(v_keys) k where length(k) not between 1 and 255) then
      raise exception 'start_flows: a % key must have 1 to 255 characters', v_kind
        using errcode = 'PF005';
    end if;
    v_wait := v_kind = 'singleton'
              and coalesce((p_guards -> v_kind ->> 'wait')::boolean, false);
    if v_kind in ('throttle', 'debounce') then
      v_seconds := (p_guards -> v_kind ->> 'seconds')::integer;
      v_drop := coalesce((p_guards -> v_kind ->> 'drop')::boolean, false);
      if v_seconds is null or v_seconds < 1 then
        raise exception 'start_flows: a % window is a whole number of seconds, at least 1; '
          'got %', v_kind, coalesce(p_guards -> v_kind ->> 'seconds', 'none')
          using errcode = 'PF005';
      end if;
    end if;
    for i in 1 .. cardinality(p_run_ids) loop
      continue when v_keys[i] is null or not v_kept[i];
      -- Windows count from this statement (not from the start of a long transaction), on the
      -- engine's clock.
      v_at := statement_timestamp() - now() + pgflow.clock();
      v_until := case when v_kind <> 'singleton'
                      then v_at + make_interval(secs => v_seconds) end;
      -- A new key is this input's. Else its row, locked (waiting for a start that holds it);
      -- the statements after this one see what that start committed, its run included. (A
      -- row that prune deleted between the two is a new key again.)
      v_new := false;
      loop
        insert into pgflow.start_guards (scope, kind, key, run_id, ends_at)
        values (p_scope, v_kind, v_keys[i], p_run_ids[i], v_until)
        on conflict do nothing;
        if found then
          v_new := true;
          exit;
        end if;
        select g.run_id, g.ends_at into v_holder
        from pgflow.start_guards g
        where g.scope = p_scope and g.kind = v_kind and g.key = v_keys[i]
        for update;
        exit when found;
      end loop;
      if v_new then
        if v_kind = 'debounce' then
          v_deferred[i] := v_until;
        end if;
        continue;
      end if;
      if v_kind = 'debounce' and v_holder.run_id = any(p_run_ids) then
        -- An earlier input of this call: this one replaces it (the last input wins).
        v_j := array_position(p_run_ids, v_holder.run_id);
        v_kept[v_j] := false;
        v_deferred[v_j] := null;
        v_results := array(select case when r = v_holder.run_id then p_run_ids[i] else r end
                           from unnest(v_results) with ordinality as u(r, n) order by u.n);
        v_free := true;
      elsif v_kind = 'debounce' then
        -- Its run, if it has not begun (and is of this start's version), takes this input.
        update pgflow.deferred_runs d
        set begins_at = v_until
        where d.run_id = v_holder.run_id
          and exists (select 1 from pgflow.runs r
                      where r.run_id = d.run_id and r.status = 'started'
                        and r.flow_slug = p_flow_slug);
        if found then
          update pgflow.runs r set input = p_inputs[i], scheduled_for = v_until
          where r.run_id = v_holder.run_id;
          update pgflow.start_guards g set ends_at = v_until
          where g.scope = p_scope and g.kind = v_kind and g.key = v_keys[i];
          v_kept[i] := false;
          v_results[i] := v_holder.run_id;
          continue;
        end if;
        v_free := true;
      elsif v_holder.run_id = any(p_run_ids) then
        -- An earlier input of this call holds it.
        v_free := false;
      elsif v_kind = 'throttle' then
        v_free := v_holder.ends_at <= v_at
                  or not exists (select 1 from pgflow.runs r where r.run_id = v_holder.run_id);
      elsif not exists (select 1 from pgflow.runs r
                        where r.run_id = v_holder.run_id and r.status = 'started') then
        -- Its run ended: free unless a run waits in its line, which takes the key before any
        -- start (and is named as the key's).
        v_head := pgflow.singleton_line_head(p_scope, v_keys[i]);
        v_free := v_head is null;
        v_holder.run_id := coalesce(v_head, v_holder.run_id);
      else
        v_free := false;
      end if;
      if v_free then
        update pgflow.start_guards g
        set run_id = p_run_ids[i], ends_at = v_until, taken_at = v_at
        where g.scope = p_scope and g.kind = v_kind and g.key = v_keys[i];
        if v_kind = 'debounce' then
          v_deferred[i] := v_until;
        end if;
        continue;
      end if;
      if v_wait then
        -- It waits its turn: its run is created and joins the key's line.
        v_lines[i] := true;
        continue;
      elsif v_kind = 'singleton' then
        raise exception 'singleton key `%` of `%` is held by run %, which is still going; '
          'nothing was started', v_keys[i], p_scope, v_holder.run_id
          using errcode = 'PF018',
                detail = jsonb_build_object('key', v_keys[i], 'scope', p_scope,
                                            'run_id', v_holder.run_id)::text,
                hint = 'start again once that run has ended, or cancel it';
      elsif not v_drop then
        raise exception 'throttle key `%` of `%` started run % in a window that ends at %; '
          'nothing was started', v_keys[i], p_scope, v_holder.run_id, v_holder.ends_at
          using errcode = 'PF017',
                detail = jsonb_build_object('key', v_keys[i], 'scope', p_scope,
                                            'run_id', v_holder.run_id,
                                            'until', v_holder.ends_at)::text,
                hint = 'start again after the window, or drop the start instead of refusing it';
      end if;
      v_kept[i] := false;
      v_results[i] := v_holder.run_id;
    end loop;
  end loop;
  return query
  select i, v_results[i], v_kept[i], v_deferred[i],
         case when v_kept[i] then p_guards -> 'singleton' -> 'keys' ->> (i - 1) end, v_lines[i]
  from generate_series(1, cardinality(p_run_ids)) i;
end;
$$;

-- begin_deferred_runs: begins the runs whose deferred start is due, at most p_limit: those
-- whose debounce window ended, oldest first, and those at the head of a singleton key's line
-- whose key is free (its run ended). The head takes the key, and its run begins (begin_runs);
-- a deferred run that ended meanwhile (a cancel) is only let go, and one in line leaves it for
-- the next. Every process with a worker calls it each second; several at once share the work
-- (a line whose key another holds locked is left to it). Returns how many runs it began.
-- Locks: the due deferred_runs rows (SKIP LOCKED); each line's start_guards row (SKIP
-- LOCKED), then its singleton_waits rows; then the runs (lock_runs), then as begin_runs.
create or replace function pgflow.begin_deferred_runs(p_limit integer default 1000)
returns integer
language plpgsql
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
declare
  v_ids uuid[];
  v_line record;
  v_head uuid;
  v_group record;
  v_begun integer := 0;
begin
  with due as (
    select d.run_id from pgflow.deferred_runs d
    where d.begins_at <= pgflow.clock()
    order by d.begins_at
    limit p_limit
    for update skip locked
  ),
  gone as (
    delete from pgflow.deferred_runs d using due where d.run_id = due.run_id
    returning d.run_id
  )
  select coalesce(array_agg(run_id), array[]::uuid[]) into v_ids from gone;
  -- The lines of singleton keys whose run has ended, longest waiting first: each gives its
  -- key to its first run still going (the runs ahead of it that ended leave the line).
  for v_line in
    select l.scope, l.key
    from (select distinct on (w.scope, w.key) w.scope, w.key, w.wait_seq
          from pgflow.singleton_waits w
          order by w.scope, w.key, w.wait_seq) l
    join pgflow.start_guards g
      on g.scope = l.scope and g.kind = 'singleton' and g.key = l.key
    where not exists (select 1 from pgflow.runs r
                      where r.run_id = g.run_id and r.status = 'started')
    order by l.wait_seq
    limit greatest(p_limit - cardinality(v_ids), 0)
  loop
    -- The key's row, then (a statement of its own, which sees what a start that held the row
    -- committed) whether its run has ended.
    perform 1 from pgflow.start_guards g
    where g.scope = v_line.scope and g.kind = 'singleton' and g.key = v_line.key
    for update skip locked;
    continue when not found;
    continue when exists (select 1 from pgflow.start_guards g
                          join pgflow.runs r on r.run_id = g.run_id and r.status = 'started'
                          where g.scope = v_line.scope and g.kind = 'singleton'
                            and g.key = v_line.key);
    delete from pgflow.singleton_waits w
    where w.scope = v_line.scope and w.key = v_line.key
      and not exists (select 1 from pgflow.runs r
                      where r.run_id = w.run_id and r.status = 'started');
    with head as (
      select w.wait_seq from pgflow.singleton_waits w
      where w.scope = v_line.scope and w.key = v_line.key
      order by w.wait_seq
      limit 1
    )
    delete from pgflow.singleton_waits w using head
    where w.scope = v_line.scope and w.key = v_line.key and w.wait_seq = head.wait_seq
    returning w.run_id into v_head;
    continue when v_head is null;
    update pgflow.start_guards g set run_id = v_head, taken_at = pgflow.clock()
    where g.scope = v_line.scope and g.kind = 'singleton' and g.key = v_line.key;
    v_ids := v_ids || v_head;
  end loop;
  if cardinality(v_ids) = 0 then
    return 0;
  end if;
  perform pgflow.lock_runs(v_ids);
  for v_group in
    select r.flow_slug, r.priority, array_agg(r.run_id order by r.run_id) as ids,
           array_agg(r.input order by r.run_id) as inputs,
           exists (select 1 from pgflow.steps s
                   where s.flow_slug = r.flow_slug and s.signal_name is not null) as waits
    from pgflow.runs r
    where r.run_id = any(v_ids) and r.status = 'started'
    group by r.flow_slug, r.priority
  loop
    perform pgflow.begin_runs(v_group.flow_slug, v_group.ids, v_group.inputs, 0,
                              v_group.priority, v_group.waits);
    v_begun := v_begun + cardinality(v_group.ids);
  end loop;
  return v_begun;
end;
$$;

-- waits_its_turn: whether run p_run_id waits in a singleton key's line. Volatile, so that a
-- statement that started runs reads the lines its start wrote.
-- Locks: none.
create or replace function pgflow.waits_its_turn(p_run_id uuid)
returns boolean
language sql
volatile
as $$
  select exists (select 1 from pgflow.singleton_waits w where w.run_id = p_run_id)
$$;

-- archived_key_runs: for each of p_keys in scope p_scope that belongs to an archived run
-- (archived_keys), that run's id, input and flow; nothing unless p_any (a start that found
-- none of its keys archived reads no history). plpgsql, so that the history tables stay out of
-- the plans of the statements that call it.
-- Locks: none (reads only).
create or replace function pgflow.archived_key_runs(p_scope text, p_keys text[], p_any boolean)
returns table (key text, run_id uuid, input jsonb, flow_slug text)
language plpgsql
stable
as $$
begin
  if not p_any then
    return;
  end if;
  return query
  select k.idempotency_key, h.run_id, h.input, h.flow_slug
  from pgflow.archived_keys k
  join pgflow.runs_history h on h.run_id = k.run_id and h.run_ended_at = k.run_ended_at
  where k.idempotency_scope = p_scope and k.idempotency_key = any(p_keys);
end;
$$;

-- start_flows: starts one run per input, in one transaction.
-- p_flow_slug names an alias (resolved to its active concrete flow now, unless
-- p_resolve_alias is false) or a concrete flow. The runs record the concrete flow and keep it.
-- p_run_ids optionally fixes the run ids (same length as p_inputs; null entries get new ids).
-- p_idempotency_keys optionally gives each input a key (same length; null entries have none).
-- A key is scoped by the alias of the flow started: the alias and every version of it share
-- one set of keys. The first start with a key creates its run; a later one with the same key
-- returns that run, as it stands, instead of starting another, while the run is kept (a caller
-- passing p_run_ids tells the two apart: a returned id other than its own means the run
-- already existed). Concurrent starts with one key wait for each other on the key's index
-- entry and create one run. PF009 names the key and its run, and nothing starts, when that
-- run was started with another input, or when the caller named a concrete version (not the
-- alias) and the key's run is of another version.
-- p_started_as is the name the caller started by, when it is not p_flow_slug (an alias start
-- that resolved its version itself, as start_alias_typed does).
-- p_check_input: when the flow recorded a JSON Schema of its input (#[flow(check_input)]),
-- each input must fit it (see input_misfit); the first that does not raises PF014 naming the
-- input, the field and what was expected there, and nothing starts. A caller whose inputs
-- come from the flow's own Rust type passes false.
-- p_trace_context optionally records the caller's W3C trace context on the runs (claims hand
-- it to workers, whose task spans continue that trace).
-- p_start_at optionally starts the runs for a later time: they exist at once (recording it as
-- scheduled_for) and their root steps' tasks become visible then (to the second, rounded up).
-- p_priority optionally starts the runs at a priority from 1 (highest) to 5 (lowest); null
-- and 3 are the default. Their tasks are claimed before the ready tasks of lower priority on
-- each queue (see read_and_start_tasks); the first start at a priority on a queue creates
-- the queue's lane for it (ensure_lanes). Another value raises PF005.
-- p_guards optionally holds start guards, each with one key per input (null: none), scoped
-- like idempotency keys: {"throttle": {"keys": [...], "seconds": n, "drop": bool}} starts at
-- most one run per key in each window of n seconds; an input whose key's window is open is
-- refused (PF017, nothing starts) or, with "drop", not started: its result is the window's
-- run. {"singleton": {"keys": [...]}} starts a run only while no run of its key is going
-- (PF018 otherwise, nothing starts); with "wait": true, a start whose key is held creates its
-- run, which waits in the key's line (no step begun, `waiting`) and begins once the runs
-- before it have ended (begin_deferred_runs); not with a start time (PF005).
-- {"debounce": {"keys": [...], "seconds": n}} makes one run of the starts of a key that come
-- less than n seconds apart: the first creates the run, deferred (`scheduled`, no step
-- begun), each later one replaces its input and defers it n seconds from then (its result is
-- that run), and the run begins n seconds after the last (begin_deferred_runs). See
-- take_start_guards. Not with idempotency keys (PF005).
-- Returns the runs in input order, as they stand after the first steps were started (a run
-- whose steps all complete at once, e.g. a map over [], is already 'completed').
-- Raises PF004 when the name is neither an alias with an active version nor a concrete flow.
-- Locks: the new runs' rows and key entries, then as start_ready_steps and enqueue_step_tasks.
create or replace function pgflow.start_flows(
  p_flow_slug text,
  p_inputs jsonb[],
  p_run_ids uuid[] default null,
  p_resolve_alias boolean default true,
  p_idempotency_keys text[] default null,
  p_started_as text default null,
  p_start_at timestamptz default null,
  p_trace_context text default null,
  p_check_input boolean default true,
  p_priority smallint default null,
  p_guards jsonb default null
)
returns setof pgflow.runs
language plpgsql
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
declare
  v_flow_slug text := p_flow_slug;
  v_flow pgflow.flows;
  v_scope text;
  v_named_version boolean;
  v_misfit record;
  -- Whole seconds until p_start_at (rounded up), added to the root steps' start delays.
  v_delay_seconds numeric := greatest(0, ceil(extract(epoch from p_start_at - pgflow.clock())));
  v_delay integer;
  v_step_count integer;
  v_waits boolean;
  v_run_ids uuid[];
  v_inputs jsonb[];
  v_result_ids uuid[];
  v_conflict record;
  -- The priority as runs and tasks store it: null for the default, 3.
  v_priority smallint := nullif(p_priority, 3);
  -- With guards: each input's result (its own run, or the run of the window that dropped it
  -- or of the debounce it was folded into), and the runs that start deferred.
  v_guarded_ids uuid[];
  v_deferred_ids uuid[];
  v_deferred_until timestamptz[];
  v_singleton_ids uuid[];
  v_singleton_keys text[];
  v_line_ids uuid[];
  -- Keyed starts: whether a key belongs to an archived run (archived_keys), and the runs this
  -- start inserted and took back because an archiving moved their key's run meanwhile.
  v_archived boolean := false;
  v_raced uuid[];
begin
  if p_priority is not null and p_priority not between 1 and 5 then
    raise exception 'start_flows: priority % is out of range; a priority is 1 (highest) to 5 '
      '(lowest), 3 by default', p_priority
      using errcode = 'PF005';
  end if;
  if p_resolve_alias then
    select a.flow_slug into v_flow_slug from pgflow.aliases a where a.alias = p_flow_slug;
    v_flow_slug := coalesce(v_flow_slug, p_flow_slug);
  end if;
  select f.* into v_flow from pgflow.flows f where f.flow_slug = v_flow_slug;
  select count(*), coalesce(bool_or(signal_name is not null), false)
  into v_step_count, v_waits
  from pgflow.steps where flow_slug = v_flow_slug;
  if v_step_count = 0 then
    raise exception 'no concrete flow or active alias is named `%`; compile the flow first (a '
      'worker carrying it does so at startup, and activates its alias)', p_flow_slug
      using errcode = 'PF004', detail = jsonb_build_object('flow_slug', p_flow_slug)::text;
  end if;
  if p_inputs is null or array_position(p_inputs, null) is not null then
    raise exception 'start_flows: every input must be a JSON value (use JSON null, not SQL NULL)'
      using errcode = 'PF005';
  end if;
  if p_check_input and v_flow.input_schema is not null then
    select i.ordinality, m.misfit ->> 'path' as path, m.misfit ->> 'problem' as problem
    into v_misfit
    from unnest(p_inputs) with ordinality as i(input, ordinality)
    cross join lateral (select pgflow.input_misfit(v_flow.input_schema, i.input) as misfit) m
    where m.misfit is not null
    order by i.ordinality
    limit 1;
    if found then
      raise exception '% of flow `%`% does not fit %: %; nothing was started',
        case when cardinality(p_inputs) = 1 then 'the input'
             else format('input %s of %s', v_misfit.ordinality, cardinality(p_inputs)) end,
        v_flow_slug,
        coalesce(format(' (type `%s`)', v_flow.input_type), ''),
        case when v_misfit.path = '' then 'as a whole' else format('at `%s`', v_misfit.path) end,
        v_misfit.problem
        using errcode = 'PF014',
              detail = jsonb_build_object('flow_slug', v_flow_slug,
                                          'input_type', v_flow.input_type,
                                          'input', v_misfit.ordinality,
                                          'path', v_misfit.path,
                                          'problem', v_misfit.problem)::text,
              hint = 'the flow''s JSON Schema of its input is pgflow.flows.input_schema';
    end if;
  end if;
  if p_run_ids is not null and cardinality(p_run_ids) <> cardinality(p_inputs) then
    raise exception 'start_flows: % run ids for % inputs; pass one per input or none',
      cardinality(p_run_ids), cardinality(p_inputs)
      using errcode = 'PF005';
  end if;
  if v_delay_seconds > 2000000000 then
    raise exception 'start_flows: % is too far ahead; start a run at most 63 years from now',
      p_start_at using errcode = 'PF005';
  end if;
  v_delay := coalesce(v_delay_seconds, 0)::integer;
  if v_priority is not null then
    perform pgflow.ensure_lanes(v_flow_slug, v_priority);
  end if;
  v_scope := coalesce(v_flow.alias, v_flow_slug);
  v_named_version := coalesce(p_started_as, p_flow_slug) <> v_scope;
  if p_idempotency_keys is not null then
    if cardinality(p_idempotency_keys) <> cardinality(p_inputs) then
      raise exception 'start_flows: % idempotency keys for % inputs; pass one per input (null '
        'for an input without a key) or none', cardinality(p_idempotency_keys),
        cardinality(p_inputs)
        using errcode = 'PF005';
    end if;
    if exists (select 1 from unnest(p_idempotency_keys) k(key)
               where length(k.key) not between 1 and 255) then
      raise exception 'start_flows: an idempotency key must have 1 to 255 characters'
        using errcode = 'PF005';
    end if;
  end if;

  if p_guards is not null then
    if p_guards ? 'debounce' and p_start_at is not null then
      raise exception 'start_flows: a debounced start begins a window after the last start '
        'of its key; it takes no start time'
        using errcode = 'PF005';
    end if;
    if coalesce((p_guards -> 'singleton' ->> 'wait')::boolean, false)
       and p_start_at is not null then
      raise exception 'start_flows: a singleton start that waits its turn begins when its key '
        'frees; it takes no start time'
        using errcode = 'PF005';
    end if;
    if p_idempotency_keys is not null then
      raise exception 'start_flows: start guards (throttle, singleton, debounce) do not go '
        'with idempotency keys yet; start with one or the other'
        using errcode = 'PF005';
    end if;
    v_guarded_ids := array(select coalesce(p_run_ids[i], gen_random_uuid())
                           from generate_series(1, cardinality(p_inputs)) i order by i);
    select array_agg(g.result_id order by g.ordinality),
           coalesce(array_agg(p_inputs[g.ordinality] order by g.ordinality)
                      filter (where g.kept), array[]::jsonb[]),
           array_agg(v_guarded_ids[g.ordinality] order by g.ordinality) filter (where g.kept),
           array_agg(g.result_id order by g.ordinality)
             filter (where g.kept and g.deferred_until is not null),
           array_agg(g.deferred_until order by g.ordinality)
             filter (where g.kept and g.deferred_until is not null),
           array_agg(g.result_id order by g.ordinality)
             filter (where g.kept and g.singleton_key is not null),
           array_agg(g.singleton_key order by g.ordinality)
             filter (where g.kept and g.singleton_key is not null),
           array_agg(g.result_id order by g.ordinality) filter (where g.kept and g.in_line)
    into v_guarded_ids, p_inputs, p_run_ids, v_deferred_ids, v_deferred_until, v_singleton_ids,
         v_singleton_keys, v_line_ids
    from pgflow.take_start_guards(v_scope, v_flow_slug, p_guards, v_guarded_ids, p_inputs) g;
  end if;

  if p_idempotency_keys is null and cardinality(p_inputs) = 1 then
    -- One run (an application's request starting its run): a plain insert of one row, without
    -- the batch statement's unnest, ordering and aggregates (a fifth of its time).
    v_run_ids := array[coalesce(p_run_ids[1], gen_random_uuid())];
    v_inputs := p_inputs;
    insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, scheduled_for,
                             trace_context, priority)
    values (v_run_ids[1], v_flow_slug, p_inputs[1], v_step_count, p_start_at, p_trace_context,
            v_priority);
    v_result_ids := v_run_ids;
  elsif p_idempotency_keys is null then
    with inserted as (
      insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, scheduled_for,
                               trace_context, priority)
      select coalesce(p_run_ids[i.ordinality], gen_random_uuid()), v_flow_slug, i.input,
             v_step_count, p_start_at, p_trace_context, v_priority
      from unnest(p_inputs) with ordinality as i(input, ordinality)
      order by i.ordinality
      returning run_id, input
    )
    select array_agg(run_id), array_agg(input) into v_run_ids, v_inputs from inserted;
    v_result_ids := v_run_ids;
  else
    -- Every input's would-be id first, so that each input finds its run afterwards: its own
    -- when it was inserted, the key's run when the key was taken (by an earlier start, a
    -- concurrent one that committed first, or an earlier input of this call).
    with wanted as materialized (
      select coalesce(p_run_ids[i.ordinality], gen_random_uuid()) as run_id, i.input,
             p_idempotency_keys[i.ordinality] as key, i.ordinality
      from unnest(p_inputs) with ordinality as i(input, ordinality)
    ),
    inserted as (
      insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, idempotency_scope,
                               idempotency_key, scheduled_for, trace_context, priority)
      select w.run_id, v_flow_slug, w.input, v_step_count,
             case when w.key is not null then v_scope end, w.key, p_start_at, p_trace_context,
             v_priority
      from wanted w
      where w.key is null
         or not exists (select 1 from pgflow.archived_keys k
                        where k.idempotency_scope = v_scope and k.idempotency_key = w.key)
      order by w.ordinality
      on conflict (idempotency_scope, idempotency_key) where idempotency_key is not null
      do nothing
      returning run_id, input
    )
    select array_agg(n.run_id order by w.ordinality) filter (where n.run_id is not null),
           array_agg(n.input order by w.ordinality) filter (where n.run_id is not null),
           array_agg(w.run_id order by w.ordinality)
    into v_run_ids, v_inputs, v_result_ids
    from wanted w
    left join inserted n on n.run_id = w.run_id;

    -- A key whose run an archiving moved out of the live tables while this start waited on
    -- it: the insert found the key free once the archiving committed. (A new statement, so it
    -- sees that archiving's keys.) The run inserted for it goes again; nothing refers to it yet.
    with raced as (
      delete from pgflow.runs r
      using pgflow.archived_keys k
      where r.run_id = any(coalesce(v_run_ids, array[]::uuid[])) and r.idempotency_key is not null
        and k.idempotency_scope = v_scope and k.idempotency_key = r.idempotency_key
      returning r.run_id
    )
    select array_agg(x.run_id) into v_raced from raced x;
    if v_raced is not null then
      select array_agg(u.run_id order by u.n), array_agg(u.input order by u.n)
      into v_run_ids, v_inputs
      from unnest(v_run_ids, v_inputs) with ordinality as u(run_id, input, n)
      where u.run_id <> all(v_raced);
    end if;
    v_archived := exists (select 1 from pgflow.archived_keys k
                          where k.idempotency_scope = v_scope
                            and k.idempotency_key = any(p_idempotency_keys));

    -- The inputs whose key was taken: their run, live or archived, which must have been
    -- started with the same input (and, when the caller named a version, of that version).
    -- (A new statement, so it sees the runs of starts that committed meanwhile.)
    with resolved as (
      select u.ordinality, u.key, u.input,
             coalesce(e.run_id, a.run_id) as existing_id,
             case when e.run_id is not null then e.input else a.input end as existing_input,
             coalesce(e.flow_slug, a.flow_slug) as existing_flow
      from unnest(v_result_ids, p_inputs, p_idempotency_keys) with ordinality
        as u(run_id, input, key, ordinality)
      left join pgflow.runs e
        on e.idempotency_scope = v_scope and e.idempotency_key = u.key
      left join pgflow.archived_key_runs(v_scope, p_idempotency_keys, v_archived) a
        on a.key = u.key
      where u.key is not null and not (u.run_id = any(coalesce(v_run_ids, array[]::uuid[])))
    )
    select * into v_conflict from resolved
    where existing_id is null or existing_input is distinct from input
       or (v_named_version and existing_flow <> v_flow_slug)
    order by ordinality limit 1;
    if found and v_conflict.existing_id is null then
      raise exception 'start_flows: the run of idempotency key `%` was removed while this start '
        'waited for it; start again', v_conflict.key
        using errcode = 'PF009',
              detail = jsonb_build_object('key', v_conflict.key, 'scope', v_scope)::text;
    elsif found and v_conflict.existing_input is not distinct from v_conflict.input then
      raise exception 'idempotency key `%` of alias `%` belongs to run %, of version `%`; this '
        'start names version `%`: start through the alias `%` to get that run back, or use a '
        'new key', v_conflict.key, v_scope, v_conflict.existing_id, v_conflict.existing_flow,
        v_flow_slug, v_scope
        using errcode = 'PF009',
              detail = jsonb_build_object('key', v_conflict.key, 'scope', v_scope,
                                          'run_id', v_conflict.existing_id)::text;
    elsif found then
      raise exception 'idempotency key `%` of `%` belongs to run %, which was started with '
        'another input; use a new key for a new input', v_conflict.key, v_scope,
        v_conflict.existing_id
        using errcode = 'PF009',
              detail = jsonb_build_object('key', v_conflict.key, 'scope', v_scope,
                                          'run_id', v_conflict.existing_id)::text;
    end if;

    select array_agg(coalesce(e.run_id, a.run_id, u.run_id) order by u.ordinality)
    into v_result_ids
    from unnest(v_result_ids, p_idempotency_keys) with ordinality as u(run_id, key, ordinality)
    left join pgflow.runs e
      on u.key is not null and not (u.run_id = any(coalesce(v_run_ids, array[]::uuid[])))
         and e.idempotency_scope = v_scope and e.idempotency_key = u.key
    left join pgflow.archived_key_runs(v_scope, p_idempotency_keys, v_archived) a
      on u.key is not null and not (u.run_id = any(coalesce(v_run_ids, array[]::uuid[])))
         and e.run_id is null and a.key = u.key;
  end if;

  -- Runs whose start a debounce deferred exist now, and begin later (begin_deferred_runs).
  if v_deferred_ids is not null then
    insert into pgflow.deferred_runs (run_id, begins_at)
    select * from unnest(v_deferred_ids, v_deferred_until);
    update pgflow.runs r set scheduled_for = d.begins_at
    from unnest(v_deferred_ids, v_deferred_until) as d(run_id, begins_at)
    where r.run_id = d.run_id;
  end if;
  -- The runs of singleton keys are recorded with their key (see retry_runs); those whose key
  -- is held wait in its line, and begin in turn (begin_deferred_runs).
  if v_singleton_ids is not null then
    insert into pgflow.singleton_runs (run_id, scope, key)
    select u.run_id, v_scope, u.key from unnest(v_singleton_ids, v_singleton_keys) u(run_id, key);
  end if;
  if v_line_ids is not null then
    insert into pgflow.singleton_waits (scope, key, run_id)
    select v_scope, s.key, s.run_id
    from unnest(v_singleton_ids, v_singleton_keys) with ordinality as s(run_id, key, n)
    where s.run_id = any(v_line_ids)
    order by s.n;
  end if;
  -- Those two kinds begin later; the others now.
  if v_deferred_ids is not null or v_line_ids is not null then
    select array_agg(u.run_id order by u.n), array_agg(u.input order by u.n)
    into v_run_ids, v_inputs
    from unnest(v_run_ids, v_inputs) with ordinality as u(run_id, input, n)
    where u.run_id <> all(coalesce(v_deferred_ids, array[]::uuid[])
                          || coalesce(v_line_ids, array[]::uuid[]));
  end if;
  if v_run_ids is not null then
    perform pgflow.begin_runs(v_flow_slug, v_run_ids, v_inputs, v_delay, v_priority, v_waits);
  end if;

  if v_guarded_ids is not null then
    v_result_ids := v_guarded_ids;
  end if;
  -- One key lookup per run (`offset 0` keeps the lookup apart from the join): a plan made
  -- for a batch of runs may otherwise hash-join against a scan of every run. Runs of archived
  -- keys are read from the history too (a statement of its own: the other starts' plans
  -- touch no history table).
  if v_archived then
    return query
    select r.*
    from unnest(v_result_ids) with ordinality as ids(run_id, ordinality)
    cross join lateral (select * from pgflow.all_runs x where x.run_id = ids.run_id limit 1) r
    order by ids.ordinality;
    return;
  end if;
  return query
  select r.*
  from unnest(v_result_ids) with ordinality as ids(run_id, ordinality)
  cross join lateral (select * from pgflow.runs x where x.run_id = ids.run_id offset 0) r
  order by ids.ordinality;
end;
$$;

-- start_flow: starts one run, with an idempotency key when p_idempotency_key is not null and
-- for p_start_at when given. See start_flows.
-- Locks: as start_flows.
create or replace function pgflow.start_flow(
  p_flow_slug text,
  p_input jsonb,
  p_run_id uuid default null,
  p_resolve_alias boolean default true,
  p_idempotency_key text default null,
  p_start_at timestamptz default null,
  p_trace_context text default null,
  p_priority smallint default null
)
returns pgflow.runs
language sql
as $$
  select * from pgflow.start_flows(
    p_flow_slug, array[p_input], array[p_run_id], p_resolve_alias,
    case when p_idempotency_key is not null then array[p_idempotency_key] end, null, p_start_at,
    p_trace_context, p_priority => p_priority)
$$;

-- start_alias_typed: starts one run per input on an alias's active version, like start_flows,
-- for a caller that decodes inputs and outputs as Rust types: the version must record exactly
-- the input and output type names the caller gives (see define_flow). Otherwise raises PF008
-- naming the alias, the version and both pairs of types, and starts nothing; PF004 when the
-- alias has no active version. The runs start on the version that was checked. Idempotency
-- keys (see start_flows) are scoped by the alias; p_run_ids as for start_flows. The inputs are not checked against the
-- version's input schema: they come from the input type the caller checked.
-- Locks: none of its own (it reads the alias and its flow without locks), then as
-- start_flows.
create or replace function pgflow.start_alias_typed(
  p_alias text,
  p_inputs jsonb[],
  p_input_type text,
  p_output_type text,
  p_idempotency_keys text[] default null,
  p_start_at timestamptz default null,
  p_trace_context text default null,
  p_run_ids uuid[] default null,
  p_priority smallint default null,
  p_guards jsonb default null
)
returns setof pgflow.runs
language plpgsql
as $$
declare
  v_flow pgflow.flows;
begin
  select f.* into v_flow
  from pgflow.aliases a
  join pgflow.flows f on f.flow_slug = a.flow_slug
  where a.alias = p_alias;
  if not found then
    raise exception 'no alias `%` has an active version; a worker carrying one of its versions '
      'activates it at startup', p_alias
      using errcode = 'PF004', detail = jsonb_build_object('flow_slug', p_alias)::text;
  end if;
  if v_flow.input_type is distinct from p_input_type
     or v_flow.output_type is distinct from p_output_type then
    raise exception 'alias `%` is active at `%`, which takes `%` and produces `%`; this caller '
      'expects `%` and `%`', p_alias, v_flow.flow_slug,
      coalesce(v_flow.input_type, '(unrecorded)'), coalesce(v_flow.output_type, '(unrecorded)'),
      p_input_type, p_output_type
      using errcode = 'PF008',
            detail = jsonb_build_object('alias', p_alias, 'flow_slug', v_flow.flow_slug,
                                        'input_type', v_flow.input_type,
                                        'output_type', v_flow.output_type,
                                        'expected_input_type', p_input_type,
                                        'expected_output_type', p_output_type)::text,
            hint = 'give every version of the alias the same `input` and `output` types '
                   '(#[flow(input = T, output = U)]), or start the concrete flow';
  end if;
  return query select * from pgflow.start_flows(v_flow.flow_slug, p_inputs, p_run_ids, false,
                                                p_idempotency_keys, p_alias, p_start_at,
                                                p_trace_context, p_check_input => false,
                                                p_priority => p_priority,
                                                p_guards => p_guards);
end;
$$;
