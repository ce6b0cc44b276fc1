-- A fresh install of pgflow schema version 20261204000100 (PGMQ included), made by dump.sh:
-- pg_dump --schema-only, then the rows of pgflow's and PGMQ's tables (the installers'
-- ledgers, and runs in flight). Do not edit.
--
-- PostgreSQL database dump
--


-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: pgflow; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA pgflow;


--
-- Name: pgmq; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA pgmq;


--
-- Name: claimed_task; Type: TYPE; Schema: pgflow; Owner: -
--

CREATE TYPE pgflow.claimed_task AS (
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


--
-- Name: started_step; Type: TYPE; Schema: pgflow; Owner: -
--

CREATE TYPE pgflow.started_step AS (
	run_id uuid,
	step_slug text,
	flow_slug text,
	task_count integer,
	queue_name text,
	start_delay integer
);


--
-- Name: task_claimer; Type: TYPE; Schema: pgflow; Owner: -
--

CREATE TYPE pgflow.task_claimer AS (
	queue_name text,
	flow_slugs text[],
	step_slugs text[],
	slots uuid[]
);


--
-- Name: message_record; Type: TYPE; Schema: pgmq; Owner: -
--

CREATE TYPE pgmq.message_record AS (
	msg_id bigint,
	read_ct integer,
	enqueued_at timestamp with time zone,
	last_read_at timestamp with time zone,
	vt timestamp with time zone,
	message jsonb,
	headers jsonb
);


--
-- Name: metrics_result; Type: TYPE; Schema: pgmq; Owner: -
--

CREATE TYPE pgmq.metrics_result AS (
	queue_name text,
	queue_length bigint,
	newest_msg_age_sec integer,
	oldest_msg_age_sec integer,
	total_messages bigint,
	scrape_time timestamp with time zone,
	queue_visible_length bigint
);


--
-- Name: queue_record; Type: TYPE; Schema: pgmq; Owner: -
--

CREATE TYPE pgmq.queue_record AS (
	queue_name character varying,
	is_partitioned boolean,
	is_unlogged boolean,
	created_at timestamp with time zone
);


--
-- Name: activate_flow(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.activate_flow(p_flow_slug text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
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
    set flow_slug = p_flow_slug, high_water_version = v_flow.version, activated_at = now()
    where alias = v_flow.alias;
  end if;
  insert into pgflow.alias_history (alias, from_flow_slug, to_flow_slug, reason)
  values (v_flow.alias, v_alias.flow_slug, p_flow_slug, 'activated');
  return 'activated';
end;
$$;


--
-- Name: alias_state(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.alias_state(p_flow_slug text) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  select case when exists (select 1 from pgflow.aliases where flow_slug = p_flow_slug)
              then 'active' else 'inactive' end
$$;


--
-- Name: archive_messages(text[], bigint[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.archive_messages(p_queue_names text[], p_message_ids bigint[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  perform pgmq.archive(g.queue_name, g.message_ids)
  from (select u.queue_name, array_agg(u.message_id) as message_ids
        from unnest(p_queue_names, p_message_ids) as u(queue_name, message_id)
        group by u.queue_name) g;
end;
$$;


--
-- Name: begin_rollout(text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.begin_rollout(p_function_names text[]) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
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
  set enabled = false, updated_at = now()
  where function_name = any(v_names);

  update pgflow.workers
  set deprecated_at = coalesce(deprecated_at, now())
  where function_name = any(v_names) and stopped_at is null;

  insert into pgflow.rollouts (function_names, enabled_before)
  values (v_names, v_enabled)
  returning rollout_id into v_id;
  return v_id;
end;
$$;


--
-- Name: bounded_error(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.bounded_error(p_text text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select case
    when length(p_text) <= 8192 then p_text
    else left(p_text, 8192 - length(format('… [truncated, %s bytes]', octet_length(p_text))))
         || format('… [truncated, %s bytes]', octet_length(p_text))
  end
$$;


--
-- Name: cancel_matching(text, timestamp with time zone, text, integer, boolean); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.cancel_matching(p_name text, p_started_before timestamp with time zone, p_reason text, p_limit integer, p_dry_run boolean) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
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


--
-- Name: cancel_runs(uuid[], text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.cancel_runs(p_run_ids uuid[], p_reason text DEFAULT NULL::text) RETURNS TABLE(run_id uuid, status text, cancelled boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
declare
  v_cancelled uuid[];
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


--
-- Name: check_step_state_parents(); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.check_step_state_parents() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: check_step_task_parents(); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.check_step_task_parents() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: check_supported_pairs(text, text[], text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.check_supported_pairs(p_caller text, p_flow_slugs text[], p_step_slugs text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  if cardinality(coalesce(p_flow_slugs, array[]::text[]))
     <> cardinality(coalesce(p_step_slugs, array[]::text[])) then
    raise exception '%: % flow slugs but % step slugs; supported pairs are given as two arrays '
      'of equal length', p_caller, cardinality(p_flow_slugs), cardinality(p_step_slugs)
      using errcode = 'PF005';
  end if;
end;
$$;


--
-- Name: check_task_attempt_parents(); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.check_task_attempt_parents() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: claim_tasks(text, bigint[], uuid, text[], text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.claim_tasks(p_queue_name text, p_message_ids bigint[], p_worker_id uuid, p_flow_slugs text[], p_step_slugs text[]) RETURNS SETOF pgflow.claimed_task
    LANGUAGE plpgsql
    AS $$
declare
  v_row_ctids tid[];
  v_started_ctids tid[];
  v_matched_ids bigint[];
  v_unsupported jsonb;
begin
  perform pgflow.check_supported_pairs('claim', p_flow_slugs, p_step_slugs);

  if coalesce(cardinality(p_message_ids), 0) = 0 then
    return;
  end if;

  -- Lock the queued tasks behind the messages (a task changed meanwhile by someone else is
  -- re-checked under its row lock and left out when no longer queued) and check, before any
  -- write, that the worker supports every pair met. Messages without a queued task are
  -- skipped.
  with matched as (
    select t.ctid as row_ctid, t.flow_slug, t.step_slug, t.message_id
    from pgflow.step_tasks t
    where t.queue_name = p_queue_name
      and t.message_id = any(p_message_ids)
      and t.status = 'queued'
    order by t.run_id, t.step_slug, t.task_index
    for no key update of t
  ),
  unsupported as (
    select m.flow_slug, m.step_slug, jsonb_agg(m.message_id order by m.message_id) as message_ids
    from matched m
    where not exists (
      select 1 from unnest(p_flow_slugs, p_step_slugs) as p(flow_slug, step_slug)
      where p.flow_slug = m.flow_slug and p.step_slug = m.step_slug)
    group by m.flow_slug, m.step_slug
  )
  select (select array_agg(row_ctid) from matched),
         (select array_agg(message_id) from matched),
         (select jsonb_agg(jsonb_build_object('flow_slug', u.flow_slug,
                                              'step_slug', u.step_slug,
                                              'message_ids', u.message_ids)
                           order by u.flow_slug, u.step_slug)
          from unsupported u)
  into v_row_ctids, v_matched_ids, v_unsupported;

  if v_unsupported is not null then
    raise exception 'queue `%`: the claimed batch has tasks this worker does not support: %; '
      'every worker of a queue must carry every concrete flow routed to it',
      p_queue_name,
      (select string_agg(format('%s.%s (message ids %s)', x ->> 'flow_slug', x ->> 'step_slug',
                                x -> 'message_ids'), ', ')
       from jsonb_array_elements(v_unsupported) x)
      using errcode = 'PF003',
            detail = jsonb_build_object('queue_name', p_queue_name,
                                        'message_ids', to_jsonb(p_message_ids),
                                        'unsupported', v_unsupported)::text,
            hint = 'add the missing concrete flows to this worker''s registry and restart it';
  end if;

  -- Claim the locked tasks (if any), found by row address: a task of a live run becomes
  -- 'started'; a task of a run that ended while it waited becomes 'failed' ('cancelled' when
  -- the run was cancelled) and is not returned.
  with changed as (
    update pgflow.step_tasks t
    set status = case when r.status = 'started' then 'started'
                      when r.status = 'cancelled' then 'cancelled' else 'failed' end,
        started_at = case when r.status = 'started' then now() else t.started_at end,
        attempts_count = t.attempts_count + case when r.status = 'started' then 1 else 0 end,
        last_worker_id = case when r.status = 'started' then p_worker_id
                              else t.last_worker_id end,
        failed_at = case when r.status in ('started', 'cancelled') then t.failed_at
                         else now() end,
        cancelled_at = case when r.status = 'cancelled' then now() end,
        error_message = case when r.status in ('started', 'cancelled') then t.error_message
                             else 'run failed before this task started' end
    from unnest(v_row_ctids) as l(row_ctid), pgflow.runs r
    where t.ctid = l.row_ctid and r.run_id = t.run_id
    returning t.ctid as row_ctid, t.status
  )
  select array_agg(row_ctid) filter (where status = 'started') into v_started_ctids
  from changed;

  return query select * from pgflow.started_task_rows(v_started_ctids);

  -- Stale messages: no queued task was behind them.
  return query
  select (jsonb_populate_record(null::pgflow.claimed_task,
                                jsonb_build_object('message_id', m.id,
                                                   'queue_name', p_queue_name))).*
  from unnest(p_message_ids) as m(id)
  where m.id <> all(coalesce(v_matched_ids, array[]::bigint[]))
  order by m.id;
end;
$$;


--
-- Name: claims_at_release(text, text[], text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.claims_at_release(p_queue_name text, p_flow_slugs text[], p_step_slugs text[]) RETURNS TABLE(flow_slug text, step_slug text, at_most integer)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  select p.flow_slug, p.step_slug,
         case when bool_or(dependent.step_type = 'map') then null else count(*)::integer end
  from unnest(p_flow_slugs, p_step_slugs) as p(flow_slug, step_slug)
  join pgflow.steps completed
    on completed.flow_slug = p.flow_slug and completed.step_slug = p.step_slug
  join pgflow.deps d on d.flow_slug = p.flow_slug and d.dep_slug = p.step_slug
  join pgflow.steps dependent
    on dependent.flow_slug = d.flow_slug and dependent.step_slug = d.step_slug
  where completed.step_type = 'single'
    and dependent.queue_name = p_queue_name
    and coalesce(dependent.opt_start_delay, 0) = 0
    and dependent.condition_when is null and dependent.condition_unless is null
    and exists (select 1 from unnest(p_flow_slugs, p_step_slugs) as s(flow_slug, step_slug)
                where s.flow_slug = dependent.flow_slug and s.step_slug = dependent.step_slug)
  group by p.flow_slug, p.step_slug
$$;


--
-- Name: complete_and_claim_tasks(uuid[], text[], integer[], integer[], jsonb[], text, text[], text[], uuid[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.complete_and_claim_tasks(p_run_ids uuid[], p_step_slugs text[], p_task_indexes integer[], p_attempts integer[], p_outputs jsonb[], p_queue_name text, p_flow_slugs text[], p_supported_step_slugs text[], p_slots uuid[]) RETURNS TABLE(completed integer, worker_id uuid, task pgflow.claimed_task)
    LANGUAGE plpgsql SECURITY DEFINER
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
declare
  v_stored record;
begin
  perform pgflow.check_supported_pairs('complete_and_claim_tasks', p_flow_slugs,
                                      p_supported_step_slugs);

  v_stored := pgflow.store_completions(
    p_run_ids, p_step_slugs, p_task_indexes, p_attempts, p_outputs,
    (p_queue_name, p_flow_slugs, p_supported_step_slugs, p_slots)::pgflow.task_claimer);

  if v_stored.claimed is null then
    return query select coalesce(v_stored.completed, 0), null::uuid, null::pgflow.claimed_task;
    return;
  end if;

  return query
  select coalesce(v_stored.completed, 0), t.last_worker_id, r
  from pgflow.started_task_rows(v_stored.claimed) r
  join pgflow.step_tasks t
    on t.run_id = r.run_id and t.step_slug = r.step_slug and t.task_index = r.task_index;
end;
$$;


--
-- Name: complete_steps(uuid[], text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.complete_steps(p_run_ids uuid[], p_step_slugs text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_runs uuid[];
  v_steps text[];
  v_flows text[];
begin
  with target as (
    select ss.ctid as row_ctid
    from pgflow.step_states ss
    join unnest(p_run_ids, p_step_slugs) as t(run_id, step_slug)
      on ss.run_id = t.run_id and ss.step_slug = t.step_slug
    where ss.status = 'started' and ss.remaining_tasks = 0
    order by ss.run_id, ss.step_slug
    for no key update of ss
  ),
  completed as (
    update pgflow.step_states ss
    set status = 'completed',
        completed_at = now(),
        output = pgflow.step_output(ss.run_id, ss.step_slug, s.step_type)
    from target, pgflow.steps s
    where ss.ctid = target.row_ctid
      and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    returning ss.run_id, ss.step_slug, ss.flow_slug
  )
  select coalesce(array_agg(run_id), array[]::uuid[]),
         coalesce(array_agg(step_slug), array[]::text[]),
         coalesce(array_agg(flow_slug), array[]::text[])
  into v_runs, v_steps, v_flows
  from completed;

  perform pgflow.finish_completed_steps(v_runs, v_steps, v_flows);
end;
$$;


--
-- Name: complete_tasks(uuid[], text[], integer[], integer[], jsonb[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.complete_tasks(p_run_ids uuid[], p_step_slugs text[], p_task_indexes integer[], p_attempts integer[], p_outputs jsonb[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
begin
  return (pgflow.store_completions(p_run_ids, p_step_slugs, p_task_indexes, p_attempts,
                                   p_outputs)).completed;
end;
$$;


--
-- Name: condition_pattern(text, text, jsonb, text, text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.condition_pattern(p_flow_slug text, p_step_slug text, p_step jsonb, p_key text, p_deps text[]) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE
    AS $$
declare
  v_pattern jsonb := p_step -> p_key;
  v_key text;
begin
  if v_pattern is null or v_pattern = 'null'::jsonb then
    return null;
  end if;
  if cardinality(p_deps) = 0 then
    return v_pattern;
  end if;
  if jsonb_typeof(v_pattern) <> 'object' then
    perform pgflow.raise_invalid_definition(p_flow_slug, format(
      'step `%s`: `%s` is matched against the object of its dependencies'' outputs, so it '
      || 'must be a JSON object keyed by dependency slugs (%s), got %s',
      p_step_slug, p_key, array_to_string(p_deps, ', '), v_pattern));
  end if;
  for v_key in select jsonb_object_keys(v_pattern) loop
    if not (v_key = any(p_deps)) then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s`: `%s` names `%s`, which is not one of its dependencies (%s)',
        p_step_slug, p_key, v_key, array_to_string(p_deps, ', ')));
    end if;
  end loop;
  return v_pattern;
end;
$$;


--
-- Name: define_flow(text, text, integer, jsonb, jsonb, text, text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.define_flow(p_flow_slug text, p_alias text, p_version integer, p_options jsonb, p_steps jsonb, p_input_type text DEFAULT NULL::text, p_output_type text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
declare
  v_step jsonb;
  v_dep jsonb;
  v_slug text;
  v_type text;
  v_queue text;
  v_seen text[] := array[]::text[];
  v_deps text[];
  v_shape jsonb := '[]'::jsonb;
  v_settings jsonb := '[]'::jsonb;
  v_existing pgflow.flows;
  v_stored_shape jsonb;
  v_differences text[] := array[]::text[];
  v_index integer;
  v_count integer;
  v_max_attempts integer;
  v_base_delay integer;
  v_max_delay integer;
  v_jitter integer;
  v_timeout integer;
  v_status text;
  v_when jsonb;
  v_unless jsonb;
  v_when_unmet text;
  v_when_exhausted text;
begin
  -- 1. Validate the definition completely before touching anything.
  if not pgflow.is_valid_slug(p_flow_slug) then
    perform pgflow.raise_invalid_definition(coalesce(p_flow_slug, '<null>'),
      'a flow slug must start with a letter or `_`, contain only letters, digits and `_`, '
      || 'and be at most 47 bytes');
  end if;
  if not pgflow.is_valid_slug(p_alias) then
    perform pgflow.raise_invalid_definition(p_flow_slug, format(
      'alias `%s` must start with a letter or `_`, contain only letters, digits and `_`, '
      || 'and be at most 47 bytes', coalesce(p_alias, '<null>')));
  end if;
  if p_version is null or p_version < 1 then
    perform pgflow.raise_invalid_definition(p_flow_slug, format(
      'version must be at least 1, got %s', coalesce(p_version::text, 'null')));
  end if;
  p_options := coalesce(p_options, '{}'::jsonb);
  if jsonb_typeof(p_options) <> 'object' then
    perform pgflow.raise_invalid_definition(p_flow_slug, 'options must be a JSON object');
  end if;
  v_max_attempts := pgflow.option_value(p_flow_slug, 'flow', p_options, 'max_attempts', 1, 3);
  v_base_delay := pgflow.option_value(p_flow_slug, 'flow', p_options, 'base_delay', 0, 1);
  v_max_delay := pgflow.option_value(p_flow_slug, 'flow', p_options, 'max_delay', 1, null);
  v_jitter := pgflow.percent_option(p_flow_slug, 'flow', p_options, 'jitter', 0);
  v_timeout := pgflow.option_value(p_flow_slug, 'flow', p_options, 'timeout', 1, 60);

  if p_steps is null or jsonb_typeof(p_steps) <> 'array' or jsonb_array_length(p_steps) = 0 then
    perform pgflow.raise_invalid_definition(p_flow_slug,
      'steps must be a non-empty JSON array in topological order');
  end if;

  for v_step in select value from jsonb_array_elements(p_steps) loop
    if jsonb_typeof(v_step) <> 'object' then
      perform pgflow.raise_invalid_definition(p_flow_slug, 'each step must be a JSON object');
    end if;
    v_slug := v_step ->> 'slug';
    if not pgflow.is_valid_slug(v_slug) then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step slug `%s` must start with a letter or `_`, contain only letters, digits and `_`, '
        || 'and be at most 47 bytes', coalesce(v_slug, '<missing>')));
    end if;
    if v_slug = any(v_seen) then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s` is defined twice; step slugs must be unique within a flow', v_slug));
    end if;
    v_type := coalesce(v_step ->> 'type', 'single');
    if v_type not in ('single', 'map') then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s` has type `%s`; use `single` or `map`', v_slug, v_type));
    end if;
    v_queue := coalesce(v_step ->> 'queue', lower(p_flow_slug));
    if not pgflow.is_valid_queue_name(v_queue) then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s` routes to queue `%s`; a queue name is 1 to 47 bytes of `a-z`, `0-9` and `_`',
        v_slug, v_queue));
    end if;
    if v_step ? 'deps' and jsonb_typeof(v_step -> 'deps') <> 'array' then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s`: deps must be a JSON array of step slugs', v_slug));
    end if;
    v_deps := array[]::text[];
    for v_dep in select value from jsonb_array_elements(coalesce(v_step -> 'deps', '[]'::jsonb)) loop
      if jsonb_typeof(v_dep) <> 'string' then
        perform pgflow.raise_invalid_definition(p_flow_slug, format(
          'step `%s`: deps must be a JSON array of step slugs', v_slug));
      end if;
      if v_dep #>> '{}' = v_slug then
        perform pgflow.raise_invalid_definition(p_flow_slug, format(
          'step `%s` depends on itself', v_slug));
      end if;
      if v_dep #>> '{}' = any(v_deps) then
        perform pgflow.raise_invalid_definition(p_flow_slug, format(
          'step `%s` lists dependency `%s` twice', v_slug, v_dep #>> '{}'));
      end if;
      if not (v_dep #>> '{}' = any(v_seen)) then
        perform pgflow.raise_invalid_definition(p_flow_slug, format(
          'step `%s` depends on `%s`, which is not a step defined before it '
          || '(steps must be listed in topological order, and cycles are not allowed)',
          v_slug, v_dep #>> '{}'));
      end if;
      v_deps := v_deps || (v_dep #>> '{}');
    end loop;
    if v_type = 'map' and cardinality(v_deps) > 1 then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'map step `%s` has %s dependencies; a map step maps over the flow input or over '
        || 'exactly one dependency', v_slug, cardinality(v_deps)));
    end if;

    v_when := pgflow.condition_pattern(p_flow_slug, v_slug, v_step, 'when', v_deps);
    v_unless := pgflow.condition_pattern(p_flow_slug, v_slug, v_step, 'unless', v_deps);
    if v_when is null and v_unless is null and v_step ? 'when_unmet'
       and v_step -> 'when_unmet' <> 'null'::jsonb then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s` sets `when_unmet` but has no condition; add `when` or `unless`, or drop it',
        v_slug));
    end if;
    v_when_unmet := pgflow.skip_mode_option(p_flow_slug, v_slug, v_step, 'when_unmet',
      array['skip', 'skip_cascade', 'fail'], 'skip');
    v_when_exhausted := pgflow.skip_mode_option(p_flow_slug, v_slug, v_step, 'when_exhausted',
      array['fail', 'skip', 'skip_cascade'], 'fail');

    v_seen := v_seen || v_slug;
    v_shape := v_shape || jsonb_build_array(jsonb_build_object(
      'slug', v_slug,
      'type', v_type,
      'deps', (select coalesce(jsonb_agg(d order by d), '[]'::jsonb) from unnest(v_deps) d),
      'queue', v_queue,
      'skip', jsonb_build_object('when', v_when, 'unless', v_unless,
                                 'when_unmet', v_when_unmet,
                                 'when_exhausted', v_when_exhausted)));
    v_settings := v_settings || jsonb_build_array(jsonb_build_object(
      'slug', v_slug,
      'deps', to_jsonb(v_deps),
      'max_attempts', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'max_attempts', 1, null),
      'base_delay', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'base_delay', 0, null),
      'max_delay', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'max_delay', 1, null),
      'jitter', pgflow.percent_option(p_flow_slug, format('step `%s`', v_slug), v_step, 'jitter', null),
      'timeout', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'timeout', 1, null),
      'start_delay', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'start_delay', 0, null)));
  end loop;

  -- 2. Serialize compile/verify of this flow slug.
  perform pg_advisory_xact_lock(pgflow.lock_namespace(), hashtext(p_flow_slug));

  select * into v_existing from pgflow.flows where flow_slug = p_flow_slug;

  if found then
    -- 3a. Verify: same alias, version and shape.
    if v_existing.alias <> p_alias or v_existing.version <> p_version then
      v_differences := v_differences || format(
        'alias/version: stored `%s` v%s, definition `%s` v%s',
        v_existing.alias, v_existing.version, p_alias, p_version);
    end if;
    v_stored_shape := pgflow.flow_shape(p_flow_slug);
    if jsonb_array_length(v_stored_shape) <> jsonb_array_length(v_shape) then
      v_differences := v_differences || format(
        'step count: stored %s, definition %s',
        jsonb_array_length(v_stored_shape), jsonb_array_length(v_shape));
    end if;
    v_count := least(jsonb_array_length(v_stored_shape), jsonb_array_length(v_shape));
    for v_index in 0 .. v_count - 1 loop
      if v_stored_shape -> v_index ->> 'slug' <> v_shape -> v_index ->> 'slug' then
        v_differences := v_differences || format(
          'step #%s: stored `%s`, definition `%s`', v_index + 1,
          v_stored_shape -> v_index ->> 'slug', v_shape -> v_index ->> 'slug');
        continue;
      end if;
      if v_stored_shape -> v_index ->> 'type' <> v_shape -> v_index ->> 'type' then
        v_differences := v_differences || format(
          'step `%s` type: stored `%s`, definition `%s`', v_shape -> v_index ->> 'slug',
          v_stored_shape -> v_index ->> 'type', v_shape -> v_index ->> 'type');
      end if;
      if v_stored_shape -> v_index -> 'deps' <> v_shape -> v_index -> 'deps' then
        v_differences := v_differences || format(
          'step `%s` dependencies: stored %s, definition %s', v_shape -> v_index ->> 'slug',
          v_stored_shape -> v_index -> 'deps', v_shape -> v_index -> 'deps');
      end if;
      if v_stored_shape -> v_index ->> 'queue' <> v_shape -> v_index ->> 'queue' then
        v_differences := v_differences || format(
          'step `%s` queue: stored `%s`, definition `%s`', v_shape -> v_index ->> 'slug',
          v_stored_shape -> v_index ->> 'queue', v_shape -> v_index ->> 'queue');
      end if;
      if v_stored_shape -> v_index -> 'skip' <> v_shape -> v_index -> 'skip' then
        v_differences := v_differences || format(
          'step `%s` condition and skip modes: stored %s, definition %s',
          v_shape -> v_index ->> 'slug',
          v_stored_shape -> v_index -> 'skip', v_shape -> v_index -> 'skip');
      end if;
    end loop;
    for v_index in v_count .. jsonb_array_length(v_stored_shape) - 1 loop
      v_differences := v_differences || format(
        'step `%s` is stored but not in the definition', v_stored_shape -> v_index ->> 'slug');
    end loop;
    for v_index in v_count .. jsonb_array_length(v_shape) - 1 loop
      v_differences := v_differences || format(
        'step `%s` is in the definition but not stored', v_shape -> v_index ->> 'slug');
    end loop;

    if cardinality(v_differences) > 0 then
      raise exception 'flow `%` is already defined with a different shape: %; a changed flow '
        'needs a new concrete slug (for example a new version under the same alias)',
        p_flow_slug, array_to_string(v_differences, '; ')
        using errcode = 'PF002',
              detail = jsonb_build_object('flow_slug', p_flow_slug,
                                          'differences', to_jsonb(v_differences))::text;
    end if;

    update pgflow.flows
    set opt_max_attempts = v_max_attempts,
        opt_base_delay = v_base_delay,
        opt_max_delay = v_max_delay,
        opt_jitter = v_jitter,
        opt_timeout = v_timeout,
        input_type = coalesce(p_input_type, input_type),
        output_type = coalesce(p_output_type, output_type)
    where flow_slug = p_flow_slug
      and (opt_max_attempts, opt_base_delay, opt_max_delay, opt_jitter, opt_timeout,
           input_type, output_type)
          is distinct from (v_max_attempts, v_base_delay, v_max_delay, v_jitter, v_timeout,
                            coalesce(p_input_type, input_type),
                            coalesce(p_output_type, output_type));

    update pgflow.steps s
    set opt_max_attempts = (x ->> 'max_attempts')::integer,
        opt_base_delay = (x ->> 'base_delay')::integer,
        opt_max_delay = (x ->> 'max_delay')::integer,
        opt_jitter = (x ->> 'jitter')::integer,
        opt_timeout = (x ->> 'timeout')::integer,
        opt_start_delay = (x ->> 'start_delay')::integer
    from jsonb_array_elements(v_settings) x
    where s.flow_slug = p_flow_slug
      and s.step_slug = x ->> 'slug'
      and (s.opt_max_attempts, s.opt_base_delay, s.opt_max_delay, s.opt_jitter, s.opt_timeout,
           s.opt_start_delay)
          is distinct from ((x ->> 'max_attempts')::integer, (x ->> 'base_delay')::integer,
                            (x ->> 'max_delay')::integer, (x ->> 'jitter')::integer,
                            (x ->> 'timeout')::integer, (x ->> 'start_delay')::integer);
    v_status := 'verified';
  else
    -- 3b. Compile.
    insert into pgflow.flows (flow_slug, alias, version, opt_max_attempts, opt_base_delay,
                              opt_max_delay, opt_jitter, opt_timeout, input_type, output_type)
    values (p_flow_slug, p_alias, p_version, v_max_attempts, v_base_delay, v_max_delay, v_jitter,
            v_timeout, p_input_type, p_output_type);

    insert into pgflow.steps (flow_slug, step_slug, step_index, step_type, deps_count, queue_name,
                              opt_max_attempts, opt_base_delay, opt_max_delay, opt_jitter,
                              opt_timeout, opt_start_delay, condition_when, condition_unless,
                              when_unmet, when_exhausted)
    select p_flow_slug,
           shape.value ->> 'slug',
           (shape.ordinality - 1)::integer,
           shape.value ->> 'type',
           jsonb_array_length(shape.value -> 'deps'),
           shape.value ->> 'queue',
           (settings ->> 'max_attempts')::integer,
           (settings ->> 'base_delay')::integer,
           (settings ->> 'max_delay')::integer,
           (settings ->> 'jitter')::integer,
           (settings ->> 'timeout')::integer,
           (settings ->> 'start_delay')::integer,
           nullif(shape.value -> 'skip' -> 'when', 'null'::jsonb),
           nullif(shape.value -> 'skip' -> 'unless', 'null'::jsonb),
           shape.value -> 'skip' ->> 'when_unmet',
           shape.value -> 'skip' ->> 'when_exhausted'
    from jsonb_array_elements(v_shape) with ordinality as shape(value, ordinality)
    join lateral (select v_settings -> (shape.ordinality::integer - 1) as settings) s on true;

    insert into pgflow.deps (flow_slug, dep_slug, step_slug)
    select p_flow_slug, dep.value, shape.value ->> 'slug'
    from jsonb_array_elements(v_shape) as shape(value)
    cross join lateral jsonb_array_elements_text(shape.value -> 'deps') as dep(value);
    v_status := 'compiled';
  end if;

  -- 4. Create the routed queues that do not exist yet (pgmq.create takes its own queue lock).
  perform pgmq.create(q.queue_name)
  from (select distinct queue_name from pgflow.steps where flow_slug = p_flow_slug) q
  where not exists (select 1 from pgmq.meta m where m.queue_name = q.queue_name);

  return v_status;
end;
$$;


--
-- Name: define_schedule(text, text, text, text, jsonb, text, integer, integer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.define_schedule(p_schedule_name text, p_flow_name text, p_cron text, p_time_zone text, p_input jsonb, p_missed text, p_catch_up_limit integer, p_grace_seconds integer) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
declare
  v_old pgflow.schedules;
begin
  select * into v_old from pgflow.schedules s
  where s.schedule_name = p_schedule_name for update;
  if not found then
    insert into pgflow.schedules (schedule_name, flow_name, cron, time_zone, input, missed,
                                  catch_up_limit, grace_seconds)
    values (p_schedule_name, p_flow_name, p_cron, p_time_zone, p_input, p_missed,
            p_catch_up_limit, p_grace_seconds)
    on conflict (schedule_name) do nothing;
    return true;
  end if;
  if (v_old.flow_name, v_old.cron, v_old.time_zone, v_old.input, v_old.missed,
      v_old.catch_up_limit, v_old.grace_seconds)
     is not distinct from (p_flow_name, p_cron, p_time_zone, p_input, p_missed,
                           p_catch_up_limit, p_grace_seconds) then
    return false;
  end if;
  update pgflow.schedules s
  set flow_name = p_flow_name, input = p_input, missed = p_missed,
      catch_up_limit = p_catch_up_limit, grace_seconds = p_grace_seconds,
      cron = p_cron, time_zone = p_time_zone,
      ticks_after = case when (v_old.cron, v_old.time_zone) is distinct from (p_cron, p_time_zone)
                         then now() else s.ticks_after end,
      next_fire_at = case when (v_old.cron, v_old.time_zone) is distinct from (p_cron, p_time_zone)
                          then now() else s.next_fire_at end,
      updated_at = now()
  where s.schedule_name = p_schedule_name;
  return true;
end;
$$;


--
-- Name: delete_flow(text, boolean); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.delete_flow(p_flow_slug text, p_force boolean DEFAULT false) RETURNS TABLE(runs bigint, tasks bigint, messages bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
#variable_conflict use_column
declare
  v_flow pgflow.flows;
  v_workers text;
  v_going bigint;
  v_queue record;
  v_messages bigint := 0;
  v_runs bigint;
  v_tasks bigint;
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
    where w.stopped_at is null and p_flow_slug = any(w.flow_slugs);
    if v_workers is not null then
      raise exception 'live workers carry `%` (%); stop them or drop the flow from their '
        'registries first, or force', p_flow_slug, v_workers
        using errcode = 'PF012';
    end if;
    select count(*) into v_going from pgflow.runs r
    where r.flow_slug = p_flow_slug and r.status = 'started';
    if v_going > 0 then
      raise exception '% run(s) of `%` are still going; let them end or cancel them '
        '(`pgflow cancel --flow %`) first, or force', v_going, p_flow_slug, p_flow_slug
        using errcode = 'PF012';
    end if;
  end if;

  for v_queue in
    select t.queue_name, array_agg(t.message_id) as ids
    from pgflow.step_tasks t
    where t.flow_slug = p_flow_slug and t.status = 'queued'
    group by t.queue_name
  loop
    v_messages := v_messages
      + (select count(*) from pgmq.delete(v_queue.queue_name, v_queue.ids));
  end loop;

  perform 1 from pgflow.runs r where r.flow_slug = p_flow_slug
  order by r.run_id for update;
  delete from pgflow.task_attempts a
  using pgflow.runs r
  where r.flow_slug = p_flow_slug and a.run_id = r.run_id;
  delete from pgflow.step_tasks t where t.flow_slug = p_flow_slug;
  get diagnostics v_tasks = row_count;
  delete from pgflow.step_states ss where ss.flow_slug = p_flow_slug;
  delete from pgflow.runs r where r.flow_slug = p_flow_slug;
  get diagnostics v_runs = row_count;

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


--
-- Name: delete_schedule(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.delete_schedule(p_schedule_name text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
begin
  delete from pgflow.schedules s where s.schedule_name = p_schedule_name;
  return found;
end;
$$;


--
-- Name: deprecate_workers(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.deprecate_workers(p_function_name text) RETURNS integer
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  with deprecated as (
    update pgflow.workers
    set deprecated_at = now()
    where function_name = p_function_name and stopped_at is null and deprecated_at is null
    returning 1
  )
  select count(*)::integer from deprecated
$$;


--
-- Name: drain_status(text, text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.drain_status(p_flow_slug text, p_queue_name text DEFAULT NULL::text) RETURNS TABLE(flow_slug text, queue_name text, active boolean, started_runs bigint, queued_tasks bigint, started_tasks bigint, pending_steps text[], safe_to_remove boolean)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
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
      on ss.run_id = r.run_id and ss.status in ('created', 'started')
      and exists (select 1 from pgflow.steps s
                  where s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
                    and (p_queue_name is null or s.queue_name = p_queue_name))
    where r.flow_slug = p_flow_slug and r.status = 'started'
      and (p_queue_name is null or ss.step_slug is not null)
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


--
-- Name: enqueue_step_tasks(pgflow.started_step[], pgflow.task_claimer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.enqueue_step_tasks(p_steps pgflow.started_step[], p_claimer pgflow.task_claimer DEFAULT NULL::pgflow.task_claimer) RETURNS tid[]
    LANGUAGE plpgsql
    AS $$
declare
  v_claimed tid[];
  v_group record;
  v_empty_runs uuid[];
  v_empty_steps text[];
  v_claimed_runs uuid[];
  v_claimed_steps text[];
  v_claimed_indexes integer[];
begin
  if cardinality(p_claimer.slots) > 0 then
    with claimable as (
      select u.run_id, u.step_slug, u.flow_slug, u.queue_name, i as task_index,
             row_number() over (order by u.run_id, u.step_slug, i) as slot
      from unnest(p_steps) as u
      cross join lateral generate_series(0, u.task_count - 1) as i
      where u.queue_name = p_claimer.queue_name and u.start_delay = 0
        and exists (select 1 from unnest(p_claimer.flow_slugs, p_claimer.step_slugs)
                      as p(flow_slug, step_slug)
                    where p.flow_slug = u.flow_slug and p.step_slug = u.step_slug)
      order by u.run_id, u.step_slug, i
      limit cardinality(p_claimer.slots)
    ),
    claimed as (
      insert into pgflow.step_tasks (run_id, step_slug, task_index, flow_slug, queue_name,
                                     status, attempts_count, started_at, last_worker_id)
      select c.run_id, c.step_slug, c.task_index, c.flow_slug, c.queue_name,
             'started', 1, now(), p_claimer.slots[c.slot]
      from claimable c
      returning ctid, run_id, step_slug, task_index
    )
    select array_agg(ctid), array_agg(run_id), array_agg(step_slug), array_agg(task_index)
    into v_claimed, v_claimed_runs, v_claimed_steps, v_claimed_indexes
    from claimed;
  end if;

  for v_group in
    select u.queue_name, u.start_delay,
           array_agg(u.flow_slug order by u.run_id, u.step_slug, i) as flow_slugs,
           array_agg(u.run_id order by u.run_id, u.step_slug, i) as run_ids,
           array_agg(u.step_slug order by u.run_id, u.step_slug, i) as step_slugs,
           array_agg(i order by u.run_id, u.step_slug, i) as task_indexes
    from unnest(p_steps) as u
    cross join lateral generate_series(0, u.task_count - 1) as i
    where u.task_count > 0
      and not exists (select 1
                      from unnest(v_claimed_runs, v_claimed_steps, v_claimed_indexes)
                        as c(run_id, step_slug, task_index)
                      where c.run_id = u.run_id and c.step_slug = u.step_slug
                        and c.task_index = i)
    group by u.queue_name, u.start_delay
  loop
    if cardinality(v_group.run_ids) = 1 then
      -- One task (a start of one run, most often): PGMQ's single send costs a good deal less
      -- than a batch of one.
      insert into pgflow.step_tasks (run_id, step_slug, task_index, flow_slug, queue_name,
                                     message_id)
      select v_group.run_ids[1], v_group.step_slugs[1], v_group.task_indexes[1],
             v_group.flow_slugs[1], v_group.queue_name, sent.msg_id
      from pgmq.send(
        v_group.queue_name,
        pgflow.task_message(v_group.flow_slugs[1], v_group.run_ids[1], v_group.step_slugs[1],
                            v_group.task_indexes[1]),
        null::jsonb,
        clock_timestamp() + make_interval(secs => v_group.start_delay)) as sent(msg_id);
    else
      with batch as (
        select b.flow_slug, b.run_id, b.step_slug, b.task_index, b.ordinality
        from unnest(v_group.flow_slugs, v_group.run_ids, v_group.step_slugs, v_group.task_indexes)
          with ordinality as b(flow_slug, run_id, step_slug, task_index, ordinality)
      ),
      sent as (
        -- PGMQ assigns increasing ids in insertion order; pair them with the batch by rank.
        select msg_id, row_number() over (order by msg_id) as ordinality
        from pgmq.send_batch(
          v_group.queue_name,
          (select array_agg(pgflow.task_message(flow_slug, run_id, step_slug, task_index)
                            order by ordinality)
           from batch),
          null::jsonb[],
          clock_timestamp() + make_interval(secs => v_group.start_delay)) as msg_id
      )
      insert into pgflow.step_tasks (run_id, step_slug, task_index, flow_slug, queue_name,
                                     message_id)
      select batch.run_id, batch.step_slug, batch.task_index, batch.flow_slug,
             v_group.queue_name, sent.msg_id
      from batch join sent on sent.ordinality = batch.ordinality;
    end if;

    -- Wake the queue's idle workers (delivered at commit, once per channel and transaction).
    if v_group.start_delay = 0 then
      perform pgflow.notify_queue(v_group.queue_name);
    end if;
  end loop;

  select array_agg(u.run_id), array_agg(u.step_slug)
  into v_empty_runs, v_empty_steps
  from unnest(p_steps) as u
  where u.task_count = 0;

  if v_empty_runs is not null then
    perform pgflow.complete_steps(v_empty_runs, v_empty_steps);
  end if;
  return v_claimed;
end;
$$;


--
-- Name: fail_runs(uuid[], text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.fail_runs(p_run_ids uuid[], p_reason text) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_failed uuid[];
  v_queues text[];
  v_messages bigint[];
begin
  with locked as (
    select ctid as row_ctid from pgflow.runs
    where run_id = any(p_run_ids) and status = 'started'
    order by run_id
    for no key update
  ),
  failed as (
    update pgflow.runs r
    set status = 'failed', failed_at = now()
    from locked
    where r.ctid = locked.row_ctid
    returning r.run_id
  )
  select coalesce(array_agg(run_id), array[]::uuid[]) into v_failed from failed;

  if cardinality(v_failed) = 0 then
    return;
  end if;

  with live as (
    select ctid as row_ctid from pgflow.step_tasks
    where run_id = any(v_failed) and status in ('queued', 'started')
    order by run_id, step_slug, task_index
    for no key update skip locked
  ),
  cancelled as (
    update pgflow.step_tasks t
    set status = 'failed',
        failed_at = now(),
        error_message = p_reason
    from live
    where t.ctid = live.row_ctid
    returning t.queue_name, t.message_id
  )
  select array_agg(queue_name), array_agg(message_id) into v_queues, v_messages from cancelled;

  if v_queues is not null then
    perform pgflow.archive_messages(v_queues, v_messages);
  end if;
end;
$$;


--
-- Name: fail_tasks(uuid[], text[], integer[], integer[], text[], boolean[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.fail_tasks(p_run_ids uuid[], p_step_slugs text[], p_task_indexes integer[], p_attempts integer[], p_error_messages text[], p_permanent boolean[] DEFAULT NULL::boolean[]) RETURNS TABLE(run_id uuid, step_slug text, task_index integer, will_retry boolean, retry_delay_seconds integer, step_skipped boolean, discarded boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
#variable_conflict use_column
declare
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
  v_errors text[];
  v_retry boolean[];
  v_delays integer[];
  v_outcomes text[];
begin
  if cardinality(p_run_ids) is distinct from cardinality(p_step_slugs)
     or cardinality(p_run_ids) is distinct from cardinality(p_task_indexes)
     or cardinality(p_run_ids) is distinct from cardinality(p_attempts)
     or cardinality(p_run_ids) is distinct from cardinality(p_error_messages)
     or (p_permanent is not null
         and cardinality(p_run_ids) is distinct from cardinality(p_permanent)) then
    raise exception 'fail_tasks: run ids, step slugs, task indexes, attempts, error messages '
      'and permanent flags must be arrays of equal length' using errcode = 'PF005';
  end if;
  p_permanent := coalesce(p_permanent, array_fill(false, array[cardinality(p_run_ids)]));

  perform pgflow.lock_runs(p_run_ids);

  with failing as (
    select t.run_id, t.step_slug, t.task_index, t.status,
           pgflow.bounded_error(coalesce(i.error_message, 'unknown error')) as error_message,
           r.status = 'started' and t.attempts_count - t.attempts_base < o.max_attempts
             and not coalesce(i.permanent, false) as will_retry,
           case when coalesce(i.permanent, false) then 'permanent' else 'failed' end as outcome,
           o.jitter,
           least(o.base_delay::bigint
                   * power(2, least(t.attempts_count - t.attempts_base - 1, 40))::bigint,
                 coalesce(o.max_delay, 2147483647))::integer as backoff
    from pgflow.step_tasks t
    join unnest(p_run_ids, p_step_slugs, p_task_indexes, p_attempts, p_error_messages,
                p_permanent)
      as i(run_id, step_slug, task_index, attempt, error_message, permanent)
      on i.run_id = t.run_id and i.step_slug = t.step_slug and i.task_index = t.task_index
        and i.attempt = t.attempts_count
    join pgflow.runs r on r.run_id = t.run_id
    join pgflow.step_options o on o.flow_slug = t.flow_slug and o.step_slug = t.step_slug
    order by t.run_id, t.step_slug, t.task_index
    for no key update of t
  )
  select array_agg(f.run_id), array_agg(f.step_slug), array_agg(f.task_index),
         array_agg(f.error_message), array_agg(f.will_retry), array_agg(f.outcome),
         array_agg(f.backoff - floor(f.backoff * f.jitter / 100.0 * random())::integer)
  into v_runs, v_steps, v_indexes, v_errors, v_retry, v_outcomes, v_delays
  from failing f
  where f.status = 'started';

  -- The attempt's history row, taken from the task before it is requeued or failed.
  insert into pgflow.task_attempts
    (run_id, step_slug, task_index, attempt, outcome, worker_id, started_at, error_message)
  select t.run_id, t.step_slug, t.task_index, t.attempts_count, f.outcome, t.last_worker_id,
         t.started_at, f.error_message
  from unnest(v_runs, v_steps, v_indexes, v_errors, v_outcomes)
    as f(run_id, step_slug, task_index, error_message, outcome)
  join pgflow.step_tasks t
    on t.run_id = f.run_id and t.step_slug = f.step_slug and t.task_index = f.task_index
  on conflict do nothing;

  -- Retries: back to queued, with a new message visible after the backoff.
  if true = any(v_retry) then
    update pgflow.step_tasks t
    set status = 'queued', error_message = f.error_message
    from unnest(v_runs, v_steps, v_indexes, v_errors, v_retry)
      as f(run_id, step_slug, task_index, error_message, will_retry)
    where f.will_retry
      and t.run_id = f.run_id and t.step_slug = f.step_slug and t.task_index = f.task_index;

    perform pgflow.send_task_messages(array_agg(f.run_id), array_agg(f.step_slug),
                                      array_agg(f.task_index), array_agg(f.delay))
    from unnest(v_runs, v_steps, v_indexes, v_delays, v_retry)
      as f(run_id, step_slug, task_index, delay, will_retry)
    where f.will_retry;
  end if;

  -- Out of attempts, or failed permanently: fail for good.
  if false = any(v_retry) then
    perform pgflow.fail_tasks_permanently(
      array_agg(f.run_id), array_agg(f.step_slug), array_agg(f.task_index),
      array_agg(f.error_message))
    from unnest(v_runs, v_steps, v_indexes, v_errors, v_retry)
      as f(run_id, step_slug, task_index, error_message, will_retry)
    where not f.will_retry;
  end if;

  return query
  select i.run_id, i.step_slug, i.task_index, coalesce(f.will_retry, false),
         case when f.will_retry then f.delay end,
         not f.will_retry and coalesce(ss.status = 'skipped', false),
         f.run_id is null
  from unnest(p_run_ids, p_step_slugs, p_task_indexes) with ordinality
    as i(run_id, step_slug, task_index, position)
  left join unnest(v_runs, v_steps, v_indexes, v_retry, v_delays)
    as f(run_id, step_slug, task_index, will_retry, delay)
    on f.run_id = i.run_id and f.step_slug = i.step_slug and f.task_index = i.task_index
  left join pgflow.step_states ss
    on f.run_id is not null and ss.run_id = f.run_id and ss.step_slug = f.step_slug
  order by i.position;
end;
$$;


--
-- Name: fail_tasks_permanently(uuid[], text[], integer[], text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.fail_tasks_permanently(p_run_ids uuid[], p_step_slugs text[], p_task_indexes integer[], p_error_messages text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_queues text[];
  v_messages bigint[];
  v_runs uuid[];
  v_skip_runs uuid[];
  v_skip_steps text[];
  v_skip_errors text[];
  v_skip_cascade boolean[];
begin
  with failed as (
    update pgflow.step_tasks t
    set status = 'failed', failed_at = now(), error_message = f.error_message
    from unnest(p_run_ids, p_step_slugs, p_task_indexes, p_error_messages)
      as f(run_id, step_slug, task_index, error_message)
    where t.run_id = f.run_id and t.step_slug = f.step_slug and t.task_index = f.task_index
      and t.status in ('queued', 'started')
    returning t.queue_name, t.message_id
  )
  select array_agg(queue_name), array_agg(message_id) into v_queues, v_messages from failed;

  if v_queues is not null then
    perform pgflow.archive_messages(v_queues, v_messages);
  end if;

  -- Steps that skip rather than fail, skipped first: the steps that fail then fail their runs
  -- (a run with a step of each fails).
  with failing as (
    select distinct on (f.run_id, f.step_slug) f.run_id, f.step_slug, f.error_message,
           s.when_exhausted
    from unnest(p_run_ids, p_step_slugs, p_task_indexes, p_error_messages)
      as f(run_id, step_slug, task_index, error_message)
    join pgflow.runs r on r.run_id = f.run_id
    join pgflow.steps s on s.flow_slug = r.flow_slug and s.step_slug = f.step_slug
    order by f.run_id, f.step_slug, f.task_index
  )
  select array_agg(run_id), array_agg(step_slug), array_agg(error_message),
         array_agg(when_exhausted = 'skip_cascade')
  into v_skip_runs, v_skip_steps, v_skip_errors, v_skip_cascade
  from failing
  where when_exhausted <> 'fail';

  if v_skip_runs is not null then
    perform pgflow.skip_steps(v_skip_runs, v_skip_steps,
                              array_fill('handler_failed'::text, array[cardinality(v_skip_runs)]),
                              v_skip_cascade, v_skip_errors);
  end if;

  with failing as (
    select distinct on (f.run_id, f.step_slug) f.run_id, f.step_slug, f.error_message
    from unnest(p_run_ids, p_step_slugs, p_task_indexes, p_error_messages)
      as f(run_id, step_slug, task_index, error_message)
    order by f.run_id, f.step_slug, f.task_index
  ),
  locked as (
    select ss.ctid as row_ctid, failing.error_message
    from pgflow.step_states ss
    join failing on failing.run_id = ss.run_id and failing.step_slug = ss.step_slug
    join pgflow.runs r on r.run_id = ss.run_id and r.status = 'started'
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    where ss.status = 'started' and s.when_exhausted = 'fail'
    order by ss.run_id, ss.step_slug
    for no key update of ss
  ),
  failed as (
    update pgflow.step_states ss
    set status = 'failed', failed_at = now(), error_message = locked.error_message
    from locked
    where ss.ctid = locked.row_ctid
    returning ss.run_id, ss.step_slug
  )
  select array_agg(distinct run_id) into v_runs from failed;

  if v_runs is not null then
    perform pgflow.fail_runs(v_runs, 'run failed because another step failed');
  end if;
end;
$$;


--
-- Name: finish_completed_steps(uuid[], text[], text[], pgflow.task_claimer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.finish_completed_steps(p_run_ids uuid[], p_step_slugs text[], p_flow_slugs text[], p_claimer pgflow.task_claimer DEFAULT NULL::pgflow.task_claimer) RETURNS tid[]
    LANGUAGE plpgsql
    AS $$
declare
  v_started pgflow.started_step[];
  v_blocked_runs uuid[];
begin
  if cardinality(p_run_ids) = 0 then
    return null;
  end if;

  -- Release the dependents, when there are any: a leaf step's completion (every completion
  -- of a one-step flow) skips the statement that sizes and starts them, whose plan is large
  -- enough that starting it up costs more than this look.
  if exists (select 1
             from unnest(p_step_slugs, p_flow_slugs) as c(step_slug, flow_slug)
             join pgflow.deps d on d.flow_slug = c.flow_slug and d.dep_slug = c.step_slug) then
    with released as (
      select c.run_id, d.step_slug, count(*)::integer as n
      from unnest(p_run_ids, p_step_slugs, p_flow_slugs) as c(run_id, step_slug, flow_slug)
      join pgflow.deps d on d.flow_slug = c.flow_slug and d.dep_slug = c.step_slug
      group by c.run_id, d.step_slug
    ),
    locked as (
      select ss.ctid as row_ctid, ss.run_id, ss.step_slug, ss.flow_slug, released.n,
             ss.status = 'created' and ss.remaining_deps = released.n and r.status = 'started'
               as ready
      from pgflow.step_states ss
      join released on released.run_id = ss.run_id and released.step_slug = ss.step_slug
      join pgflow.runs r on r.run_id = ss.run_id
      order by ss.run_id, ss.step_slug
      for no key update of ss
    ),
    sized as (
      -- A map step has exactly one dependency: the step whose array it maps over.
      select l.row_ctid, l.run_id, l.step_slug, l.n, l.ready, s.queue_name,
             coalesce(s.opt_start_delay, 0) as start_delay,
             case when not l.ready then null
                  -- a condition is evaluated by start_ready_steps
                  when s.condition_when is not null or s.condition_unless is not null then null
                  when s.step_type = 'single' then 1
                  else (select case when dss.status = 'skipped' then 0
                                    when jsonb_typeof(dss.output) = 'array'
                                    then jsonb_array_length(dss.output) end
                        from pgflow.deps d
                        join pgflow.step_states dss
                          on dss.run_id = l.run_id and dss.step_slug = d.dep_slug
                        where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug)
             end as task_count
      from locked l
      join pgflow.steps s on s.flow_slug = l.flow_slug and s.step_slug = l.step_slug
    ),
    decided as (
      select sized.*,
             sized.task_count is not null
               and not bool_or(sized.ready and sized.task_count is null)
                     over (partition by sized.run_id) as start
      from sized
    ),
    changed as (
      update pgflow.step_states ss
      set remaining_deps = ss.remaining_deps - decided.n,
          status = case when decided.start then 'started' else ss.status end,
          started_at = case when decided.start then now() else ss.started_at end,
          initial_tasks = case when decided.start then decided.task_count
                               else ss.initial_tasks end,
          remaining_tasks = case when decided.start then decided.task_count
                                 else ss.remaining_tasks end
      from decided
      where ss.ctid = decided.row_ctid
      returning ss.run_id, ss.step_slug, ss.flow_slug, decided.ready, decided.start,
                decided.task_count, decided.queue_name, decided.start_delay
    )
    select array_agg((run_id, step_slug, flow_slug, task_count, queue_name, start_delay)
                     ::pgflow.started_step) filter (where start),
           array_agg(distinct run_id) filter (where ready and not start)
    into v_started, v_blocked_runs
    from changed;
  end if;

  -- Count the steps down on their runs and complete, in the same write, the runs with nothing
  -- left (output: an object of the leaf steps' outputs).
  with per_run as (
    select run_id, count(*)::integer as n from unnest(p_run_ids) as c(run_id) group by run_id
  ),
  locked as (
    select r.ctid as row_ctid, r.status, per_run.n
    from pgflow.runs r
    join per_run on per_run.run_id = r.run_id
    order by r.run_id
    for no key update of r
  )
  update pgflow.runs r
  set remaining_steps = r.remaining_steps - locked.n,
      status = case when r.remaining_steps = locked.n then 'completed' else r.status end,
      completed_at = case when r.remaining_steps = locked.n then now() end,
      output = case when r.remaining_steps = locked.n then (
        select coalesce(jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
        from pgflow.step_states ss
        where ss.run_id = r.run_id
          and not exists (select 1 from pgflow.deps d
                          where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug))
      end
  from locked
  where r.ctid = locked.row_ctid and locked.status = 'started';

  if v_blocked_runs is not null then
    perform pgflow.start_ready_steps(v_blocked_runs);
  end if;
  if v_started is not null then
    return pgflow.enqueue_step_tasks(v_started, p_claimer);
  end if;
  return null;
end;
$$;


--
-- Name: finish_rollout(bigint); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.finish_rollout(p_rollout_id bigint) RETURNS text[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
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
  set enabled = true, updated_at = now()
  where function_name = any(v_rollout.enabled_before);
  update pgflow.rollouts set status = 'finished', finished_at = now()
  where rollout_id = p_rollout_id;
  return v_rollout.enabled_before;
end;
$$;


--
-- Name: fire_schedule(text, timestamp with time zone, timestamp with time zone[], timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.fire_schedule(p_schedule_name text, p_ticks_after timestamp with time zone, p_ticks timestamp with time zone[], p_ticks_after_now timestamp with time zone, p_next_fire_at timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
declare
  v_schedule pgflow.schedules;
  v_tick timestamptz;
  v_started integer := 0;
  v_error text;
begin
  select * into v_schedule from pgflow.schedules s
  where s.schedule_name = p_schedule_name
  for update skip locked;
  if not found or v_schedule.paused or v_schedule.ticks_after <> p_ticks_after then
    return null;
  end if;

  begin
    foreach v_tick in array coalesce(p_ticks, array[]::timestamptz[]) loop
      perform pgflow.start_flows(
        v_schedule.flow_name, array[v_schedule.input], null, true,
        array[format('schedule:%s:%s', p_schedule_name,
                     to_char(v_tick at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))],
        null, v_tick);
      v_started := v_started + 1;
    end loop;
  exception when sqlstate 'PF004' then
    get stacked diagnostics v_error = message_text;
    v_started := 0;
  end;

  update pgflow.schedules s
  set ticks_after = p_ticks_after_now,
      next_fire_at = p_next_fire_at,
      last_fired_at = case when v_started > 0 then now() else s.last_fired_at end,
      runs_started = s.runs_started + v_started,
      last_error = case when v_error is not null then v_error
                        when v_started > 0 then null else s.last_error end
  where s.schedule_name = p_schedule_name;
  return v_started;
end;
$$;


--
-- Name: flow_shape(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.flow_shape(p_flow_slug text) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
  select coalesce(jsonb_agg(jsonb_build_object(
           'slug', s.step_slug,
           'type', s.step_type,
           'deps', coalesce((select jsonb_agg(d.dep_slug order by d.dep_slug)
                             from pgflow.deps d
                             where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug),
                            '[]'::jsonb),
           'queue', s.queue_name,
           'skip', jsonb_build_object('when', s.condition_when, 'unless', s.condition_unless,
                                      'when_unmet', s.when_unmet,
                                      'when_exhausted', s.when_exhausted))
           order by s.step_index), '[]'::jsonb)
  from pgflow.steps s
  where s.flow_slug = p_flow_slug
$$;


--
-- Name: function_enabled(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.function_enabled(p_function_name text) RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  select coalesce(
    (select enabled from pgflow.worker_functions where function_name = p_function_name), true)
$$;


--
-- Name: functions_serving_queues(text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.functions_serving_queues(p_queue_names text[]) RETURNS text[]
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  select coalesce(array_agg(distinct function_name order by function_name), array[]::text[])
  from pgflow.workers
  where queue_name = any(p_queue_names) and stopped_at is null
$$;


--
-- Name: heartbeat(uuid, uuid[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.heartbeat(p_worker_id uuid, p_running_runs uuid[] DEFAULT NULL::uuid[]) RETURNS TABLE(deprecated boolean, ended_runs uuid[])
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  with beat as (
    update pgflow.workers
    set last_heartbeat_at = now()
    where worker_id = p_worker_id
    returning deprecated_at is not null as deprecated
  )
  select beat.deprecated,
         coalesce((select array_agg(r.run_id order by r.run_id) from pgflow.runs r
                   where r.run_id = any(p_running_runs) and r.status <> 'started'),
                  array[]::uuid[])
  from beat
$$;


--
-- Name: is_valid_queue_name(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.is_valid_queue_name(queue_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
  select queue_name is not null and queue_name ~ '^[a-z0-9_]{1,47}$'
$_$;


--
-- Name: is_valid_slug(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.is_valid_slug(slug text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
  select slug is not null and slug ~ '^[A-Za-z_][A-Za-z0-9_]{0,46}$'
$_$;


--
-- Name: lock_namespace(); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.lock_namespace() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ select 1885824620 $$;


--
-- Name: lock_runs(uuid[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.lock_runs(p_run_ids uuid[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  perform 1 from pgflow.runs
  where run_id = any(p_run_ids)
  order by run_id
  for no key update;
end;
$$;


--
-- Name: mark_lost_workers(); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.mark_lost_workers() RETURNS TABLE(worker_id uuid, queue_name text, function_name text, last_heartbeat_at timestamp with time zone)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  update pgflow.workers w
  set lost_at = now(),
      stopped_at = now(),
      deprecated_at = coalesce(w.deprecated_at, now())
  where w.stopped_at is null
    and w.last_heartbeat_at < now() - make_interval(
          secs => greatest(60, 10 * coalesce(w.heartbeat_interval_ms, 5000) / 1000.0))
  returning w.worker_id, w.queue_name, w.function_name, w.last_heartbeat_at
$$;


--
-- Name: notify_new_runs(uuid[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.notify_new_runs(p_run_ids uuid[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  if not exists (select 1 from pgflow.event_subscribers s where s.expires_at > now()) then
    return;
  end if;
  perform pg_notify('pgflow_events.' || r.flow_slug,
                    pgflow.run_event_payload(r.run_id, r.flow_slug, r.status))
  from unnest(p_run_ids) with ordinality as ids(run_id, ordinality)
  join pgflow.runs r on r.run_id = ids.run_id
  where exists (select 1 from pgflow.event_subscribers s
                where s.flow_slug = r.flow_slug and s.expires_at > now())
  order by ids.ordinality;
  perform pg_notify('pgflow_events.' || ss.flow_slug,
                    pgflow.step_event_payload(ss.run_id, ss.flow_slug, ss.step_slug, ss.status))
  from unnest(p_run_ids) with ordinality as ids(run_id, ordinality)
  join pgflow.step_states ss on ss.run_id = ids.run_id
  join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
  where ss.status <> 'created'
    and exists (select 1 from pgflow.event_subscribers e
                where e.flow_slug = ss.flow_slug and e.expires_at > now())
  order by ids.ordinality, s.step_index;
end;
$$;


--
-- Name: notify_queue(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.notify_queue(p_queue_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_key integer := pgflow.wakeup_key(p_queue_name);
begin
  if pg_try_advisory_lock(pgflow.lock_namespace(), v_key) then
    perform pg_advisory_unlock(pgflow.lock_namespace(), v_key);
  else
    perform pg_notify('pgflow.' || p_queue_name, '');
  end if;
end;
$$;


--
-- Name: notify_run_events(); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.notify_run_events() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  -- Nobody follows any flow (the common case): one look at the small lease table, no more.
  if not exists (select 1 from pgflow.event_subscribers s where s.expires_at > now()) then
    return null;
  end if;
  perform pg_notify('pgflow_events.' || n.flow_slug,
                    pgflow.run_event_payload(n.run_id, n.flow_slug, n.status))
  from new_rows n
  join old_rows o on o.run_id = n.run_id
  where o.status is distinct from n.status
    and exists (select 1 from pgflow.event_subscribers s
                where s.flow_slug = n.flow_slug and s.expires_at > now());
  return null;
end;
$$;


--
-- Name: notify_step_events(); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.notify_step_events() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  -- Nobody follows any flow (the common case): one look at the small lease table, no more.
  if not exists (select 1 from pgflow.event_subscribers s where s.expires_at > now()) then
    return null;
  end if;
  perform pg_notify('pgflow_events.' || n.flow_slug,
                    pgflow.step_event_payload(n.run_id, n.flow_slug, n.step_slug, n.status))
  from new_rows n
  join old_rows o on o.run_id = n.run_id and o.step_slug = n.step_slug
  where o.status is distinct from n.status and n.status <> 'created'
    and exists (select 1 from pgflow.event_subscribers s
                where s.flow_slug = n.flow_slug and s.expires_at > now());
  return null;
end;
$$;


--
-- Name: option_value(text, text, jsonb, text, integer, integer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.option_value(p_flow_slug text, p_where text, p_options jsonb, p_key text, p_min integer, p_default integer) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
declare
  v_value jsonb := p_options -> p_key;
begin
  if v_value is null or v_value = 'null'::jsonb then
    return p_default;
  end if;
  if jsonb_typeof(v_value) <> 'number' or v_value::text !~ '^[0-9]+$'
     or v_value::numeric > 2147483647 or v_value::numeric < p_min then
    perform pgflow.raise_invalid_definition(p_flow_slug, format(
      '%s option `%s` must be a whole number of at least %s, got %s',
      p_where, p_key, p_min, v_value));
  end if;
  return v_value::integer;
end;
$_$;


--
-- Name: pause_schedule(text, boolean); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.pause_schedule(p_schedule_name text, p_paused boolean) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
begin
  update pgflow.schedules s
  set paused = p_paused,
      ticks_after = case when s.paused and not p_paused then now() else s.ticks_after end,
      next_fire_at = case when s.paused and not p_paused then now() else s.next_fire_at end,
      updated_at = now()
  where s.schedule_name = p_schedule_name;
  return found;
end;
$$;


--
-- Name: percent_option(text, text, jsonb, text, integer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.percent_option(p_flow_slug text, p_where text, p_options jsonb, p_key text, p_default integer) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
declare
  v_value jsonb := p_options -> p_key;
begin
  if v_value is null or v_value = 'null'::jsonb then
    return p_default;
  end if;
  if jsonb_typeof(v_value) <> 'number' or v_value::text !~ '^[0-9]+$'
     or v_value::numeric > 100 then
    perform pgflow.raise_invalid_definition(p_flow_slug, format(
      '%s option `%s` is a percentage: a whole number from 0 to 100, got %s',
      p_where, p_key, v_value));
  end if;
  return v_value::integer;
end;
$_$;


--
-- Name: prune(interval, integer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.prune(p_older_than interval, p_batch_size integer DEFAULT 10000) RETURNS TABLE(busy boolean, runs bigint, step_states bigint, tasks bigint, archived_messages bigint, workers bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $_$
#variable_conflict use_column
declare
  v_cutoff timestamptz;
  v_run_ids uuid[];
  v_queue text;
  v_deleted bigint;
begin
  if p_older_than is null or p_older_than < interval '0' then
    raise exception 'prune: older_than must be zero or more (got %)',
      coalesce(p_older_than::text, 'null')
      using errcode = 'PF005',
            hint = 'pass how long ended runs and archived messages are kept, e.g. 7 days';
  end if;
  if p_batch_size is null or p_batch_size < 1 then
    raise exception 'prune: batch_size must be at least 1 (got %)',
      coalesce(p_batch_size::text, 'null')
      using errcode = 'PF005';
  end if;

  busy := not pg_try_advisory_xact_lock(pgflow.lock_namespace(), 3);
  runs := 0; step_states := 0; tasks := 0; archived_messages := 0; workers := 0;
  if busy then
    return next;
    return;
  end if;
  v_cutoff := now() - p_older_than;

  -- Ended runs have no live tasks (ending a run fails its live tasks) and no queued messages;
  -- a late result for one of them locks the run first, so SKIP LOCKED leaves it to finish.
  select array_agg(r.run_id) into v_run_ids
  from (
    select r.run_id
    from pgflow.runs r
    where r.status in ('completed', 'failed', 'cancelled')
      and coalesce(r.completed_at, r.failed_at, r.cancelled_at) < v_cutoff
    limit p_batch_size
    for update of r skip locked
  ) r;

  if v_run_ids is not null then
    delete from pgflow.task_attempts a where a.run_id = any(v_run_ids);
    delete from pgflow.step_tasks t where t.run_id = any(v_run_ids);
    get diagnostics tasks = row_count;
    delete from pgflow.step_states ss where ss.run_id = any(v_run_ids);
    get diagnostics step_states = row_count;
    delete from pgflow.runs r where r.run_id = any(v_run_ids);
    get diagnostics runs = row_count;
  end if;

  -- PGMQ indexes every archive table by archived_at: the oldest are found by key.
  for v_queue in
    select distinct s.queue_name from pgflow.steps s
    where exists (select 1 from pgmq.meta m where m.queue_name = s.queue_name)
    order by 1
  loop
    exit when archived_messages >= p_batch_size;
    execute format(
      'delete from pgmq.%1$I where msg_id in (select msg_id from pgmq.%1$I
         where archived_at < $1 order by archived_at limit $2)',
      'a_' || v_queue)
      using v_cutoff, p_batch_size - archived_messages;
    get diagnostics v_deleted = row_count;
    archived_messages := archived_messages + v_deleted;
  end loop;

  delete from pgflow.workers w where w.stopped_at < v_cutoff;
  get diagnostics workers = row_count;

  return next;
end;
$_$;


--
-- Name: queue_coverage_gaps(text, text[], text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.queue_coverage_gaps(p_queue_name text, p_flow_slugs text[], p_step_slugs text[]) RETURNS TABLE(flow_slug text, step_slug text, active_alias text, queued_tasks bigint, started_tasks bigint, started_runs bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  with supported as (
    select * from unnest(p_flow_slugs, p_step_slugs) as p(flow_slug, step_slug)
  ),
  active_pairs as (
    select s.flow_slug, s.step_slug, a.alias
    from pgflow.aliases a
    join pgflow.steps s on s.flow_slug = a.flow_slug
    where s.queue_name = p_queue_name
  ),
  live_tasks as (
    select t.flow_slug, t.step_slug,
           count(*) filter (where t.status = 'queued') as queued_tasks,
           count(*) filter (where t.status = 'started') as started_tasks
    from pgflow.step_tasks t
    where t.queue_name = p_queue_name and t.status in ('queued', 'started')
    group by t.flow_slug, t.step_slug
  ),
  pending_steps as (
    select ss.flow_slug, ss.step_slug, count(*) as started_runs
    from pgflow.runs r
    join pgflow.step_states ss on ss.run_id = r.run_id
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    where r.status = 'started'
      and ss.status in ('created', 'started')
      and s.queue_name = p_queue_name
    group by ss.flow_slug, ss.step_slug
  ),
  pairs as (
    select flow_slug, step_slug from active_pairs
    union select flow_slug, step_slug from live_tasks
    union select flow_slug, step_slug from pending_steps
  )
  select p.flow_slug, p.step_slug,
         (select a.alias from active_pairs a
          where a.flow_slug = p.flow_slug and a.step_slug = p.step_slug),
         coalesce(l.queued_tasks, 0), coalesce(l.started_tasks, 0), coalesce(r.started_runs, 0)
  from pairs p
  left join live_tasks l on l.flow_slug = p.flow_slug and l.step_slug = p.step_slug
  left join pending_steps r on r.flow_slug = p.flow_slug and r.step_slug = p.step_slug
  where not exists (select 1 from supported s
                    where s.flow_slug = p.flow_slug and s.step_slug = p.step_slug)
  order by p.flow_slug, p.step_slug
$$;


--
-- Name: queue_overview(); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.queue_overview() RETURNS TABLE(queue_name text, depth bigint, oldest_message_age_seconds integer, total_messages bigint, in_flight_tasks bigint, live_workers bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  select m.queue_name, m.queue_length, m.oldest_msg_age_sec, m.total_messages,
         (select count(*) from pgflow.step_tasks t
          where t.queue_name = m.queue_name and t.status = 'started'),
         (select count(*) from pgflow.workers w
          where w.queue_name = m.queue_name and w.stopped_at is null
            and w.last_heartbeat_at > now() - interval '30 seconds')
  from pgmq.metrics_all() m
  order by m.queue_name
$$;


--
-- Name: raise_invalid_definition(text, text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.raise_invalid_definition(p_flow_slug text, p_problem text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  raise exception 'invalid definition of flow `%`: %', p_flow_slug, p_problem
    using errcode = 'PF001';
end;
$$;


--
-- Name: read_and_start_tasks(text, uuid, text[], text[], integer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.read_and_start_tasks(p_queue_name text, p_worker_id uuid, p_flow_slugs text[], p_step_slugs text[], p_quantity integer) RETURNS SETOF pgflow.claimed_task
    LANGUAGE plpgsql SECURITY DEFINER
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
begin
  return query
  select *
  from pgflow.claim_tasks(
    p_queue_name,
    array(select m.msg_id from pgmq.pop(p_queue_name, p_quantity) m order by m.msg_id),
    p_worker_id,
    p_flow_slugs,
    p_step_slugs);
end;
$$;


--
-- Name: refresh_statistics(boolean); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.refresh_statistics(p_even_with_autovacuum boolean DEFAULT false) RETURNS SETOF text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_table regclass;
begin
  if current_setting('autovacuum')::boolean and not p_even_with_autovacuum then
    return;
  end if;
  if not pg_try_advisory_xact_lock(pgflow.lock_namespace(), 1) then
    return;
  end if;
  for v_table in
    select m.table_name from pgflow.maintained_tables m
    where m.changed_since_analyze > 50 + 0.1 * m.estimated_rows
    order by m.table_name::text
  loop
    execute format('analyze %s', v_table);
    return next v_table::text;
  end loop;
end;
$$;


--
-- Name: register_worker(uuid, text, text, text[], integer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.register_worker(p_worker_id uuid, p_queue_name text, p_function_name text, p_flow_slugs text[], p_heartbeat_interval_ms integer DEFAULT NULL::integer) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
declare
  v_enabled boolean;
begin
  insert into pgflow.worker_functions (function_name) values (p_function_name)
  on conflict (function_name) do nothing;
  select enabled into v_enabled
  from pgflow.worker_functions
  where function_name = p_function_name
  for share;
  if not v_enabled then
    return false;
  end if;
  insert into pgflow.workers (worker_id, queue_name, function_name, flow_slugs,
                              heartbeat_interval_ms)
  values (p_worker_id, p_queue_name, p_function_name, p_flow_slugs, p_heartbeat_interval_ms);
  return true;
end;
$$;


--
-- Name: request_wakeups(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.request_wakeups(p_queue_name text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
begin
  perform pg_advisory_lock_shared(pgflow.lock_namespace(), pgflow.wakeup_key(p_queue_name));
end;
$$;


--
-- Name: requeue_stalled_tasks(integer, integer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.requeue_stalled_tasks(p_grace_seconds integer DEFAULT 30, p_max_requeues integer DEFAULT 3) RETURNS TABLE(run_id uuid, step_slug text, task_index integer, queue_name text, message_id bigint, requeued boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
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
    and t.started_at < now() - make_interval(secs => o.timeout + p_grace_seconds);

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
      and t.started_at < now() - make_interval(secs => o.timeout + p_grace_seconds)
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


--
-- Name: resume_matching(text, text, text[], timestamp with time zone, integer, boolean); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.resume_matching(p_name text, p_step_slug text, p_statuses text[], p_started_before timestamp with time zone, p_limit integer, p_dry_run boolean) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
declare
  v_run_ids uuid[];
  v_run_id uuid;
begin
  if exists (select 1 from unnest(coalesce(p_statuses, array['failed'])) s(status)
             where s.status not in ('failed', 'completed', 'cancelled')) then
    raise exception 'resume_matching: only ended runs resume (failed, completed, cancelled)'
      using errcode = 'PF005';
  end if;
  v_run_ids := array(select pgflow.runs_matching(p_name, coalesce(p_statuses, array['failed']),
                                                 p_started_before, p_limit));
  if p_dry_run then
    return cardinality(v_run_ids);
  end if;
  foreach v_run_id in array v_run_ids loop
    perform pgflow.resume_run(v_run_id, p_step_slug);
  end loop;
  return cardinality(v_run_ids);
end;
$$;


--
-- Name: run_row_valid(text, integer, integer, boolean, timestamp with time zone, timestamp with time zone, timestamp with time zone, text, text, text, uuid, text, text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.run_row_valid(status text, remaining_steps integer, retry_count integer, has_output boolean, completed_at timestamp with time zone, failed_at timestamp with time zone, cancelled_at timestamp with time zone, cancel_reason text, idempotency_key text, idempotency_scope text, resumed_from uuid, resumed_at_step text, trace_context text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS $$
begin
  return remaining_steps >= 0 and retry_count >= 0
    and ((status = 'started' and completed_at is null and failed_at is null and not has_output)
      or (status = 'completed' and completed_at is not null and failed_at is null and has_output
          and remaining_steps = 0)
      or (status = 'failed' and failed_at is not null and completed_at is null)
      or (status = 'cancelled' and completed_at is null and failed_at is null and not has_output))
    and (status = 'cancelled') = (cancelled_at is not null)
    and (cancel_reason is null or status = 'cancelled')
    and coalesce(length(idempotency_key) between 1 and 255, true)
    and (idempotency_key is null) = (idempotency_scope is null)
    and (resumed_from is null) = (resumed_at_step is null)
    and coalesce(length(trace_context) <= 1024, true);
end $$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: runs; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.runs (
    run_id uuid DEFAULT gen_random_uuid() NOT NULL,
    flow_slug text NOT NULL,
    status text DEFAULT 'started'::text NOT NULL,
    input jsonb NOT NULL,
    output jsonb,
    remaining_steps integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    completed_at timestamp with time zone,
    failed_at timestamp with time zone,
    idempotency_scope text,
    idempotency_key text,
    cancelled_at timestamp with time zone,
    cancel_reason text,
    retry_count integer DEFAULT 0 NOT NULL,
    resumed_from uuid,
    resumed_at_step text,
    scheduled_for timestamp with time zone,
    trace_context text,
    CONSTRAINT runs_row_valid CHECK (pgflow.run_row_valid(status, remaining_steps, retry_count, (output IS NOT NULL), completed_at, failed_at, cancelled_at, cancel_reason, idempotency_key, idempotency_scope, resumed_from, resumed_at_step, trace_context))
)
WITH (fillfactor='60');


--
-- Name: resume_run(uuid, text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.resume_run(p_run_id uuid, p_step_slug text) RETURNS pgflow.runs
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
declare
  v_old pgflow.runs;
  v_new_id uuid := gen_random_uuid();
  v_rerun text[];
  v_new pgflow.runs;
begin
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

  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, resumed_from,
                           resumed_at_step)
  values (v_new_id, v_old.flow_slug, v_old.input, cardinality(v_rerun), p_run_id, p_step_slug);

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


--
-- Name: retry_matching(text, timestamp with time zone, integer, boolean); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.retry_matching(p_name text, p_started_before timestamp with time zone, p_limit integer, p_dry_run boolean) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
declare
  v_run_ids uuid[];
begin
  v_run_ids := array(select pgflow.runs_matching(p_name, array['failed'], p_started_before,
                                                 p_limit));
  if p_dry_run then
    return cardinality(v_run_ids);
  end if;
  return (select count(*) from pgflow.retry_runs(v_run_ids) r where r.retried);
end;
$$;


--
-- Name: retry_runs(uuid[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.retry_runs(p_run_ids uuid[]) RETURNS TABLE(run_id uuid, status text, retried boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
declare
  v_retried uuid[];
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
begin
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
    -- started is 'created' again (nothing left to wait for), for start_ready_steps.
    with open_steps as (
      select ss.ctid as row_ctid, ss.run_id, ss.step_slug, ss.initial_tasks
      from pgflow.step_states ss
      where ss.run_id = any(v_retried) and ss.status in ('failed', 'started')
      order by ss.run_id, ss.step_slug
      for no key update
    )
    update pgflow.step_states ss
    set status = case when o.initial_tasks is null then 'created' else 'started' end,
        failed_at = null,
        error_message = null,
        started_at = case when o.initial_tasks is null then null else ss.started_at end,
        remaining_tasks = case when o.initial_tasks is null then null
                               else (select count(*) from pgflow.step_tasks t
                                     where t.run_id = o.run_id and t.step_slug = o.step_slug
                                       and t.status <> 'completed') end
    from open_steps o
    where ss.ctid = o.row_ctid;

    if v_runs is not null then
      perform pgflow.send_task_messages(v_runs, v_steps, v_indexes,
                                        array_fill(0, array[cardinality(v_runs)]));
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


--
-- Name: rollout_progress(bigint, interval); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.rollout_progress(p_rollout_id bigint, p_stale_after interval DEFAULT '00:01:00'::interval) RETURNS TABLE(worker_id uuid, function_name text, queue_name text, last_heartbeat_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  select w.worker_id, w.function_name, w.queue_name, w.last_heartbeat_at
  from pgflow.workers w
  join pgflow.rollouts r on w.function_name = any(r.function_names)
  where r.rollout_id = p_rollout_id
    and w.stopped_at is null
    and w.last_heartbeat_at > now() - p_stale_after
  order by w.function_name, w.worker_id
$$;


--
-- Name: run_event_payload(uuid, text, text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.run_event_payload(p_run_id uuid, p_flow_slug text, p_status text) RETURNS text
    LANGUAGE sql STABLE
    AS $$
  select json_build_object('kind', 'run', 'run_id', p_run_id, 'flow_slug', p_flow_slug,
                           'status', p_status)::text
$$;


--
-- Name: run_step_states(uuid); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.run_step_states(p_run_id uuid) RETURNS TABLE(step_slug text, status text, skip_reason text, queue_name text, tasks integer, remaining_tasks integer, max_attempt integer, error text, started_at timestamp with time zone, ended_at timestamp with time zone, output jsonb, output_bytes integer)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  select ss.step_slug, ss.status, ss.skip_reason, s.queue_name, ss.initial_tasks,
         ss.remaining_tasks,
         (select max(t.attempts_count) from pgflow.step_tasks t
          where t.run_id = ss.run_id and t.step_slug = ss.step_slug),
         coalesce(ss.error_message,
                  (select t.error_message from pgflow.step_tasks t
                   where t.run_id = ss.run_id and t.step_slug = ss.step_slug
                     and t.error_message is not null
                   order by t.task_index limit 1)),
         ss.started_at,
         coalesce(ss.completed_at, ss.failed_at, ss.skipped_at, ss.cancelled_at),
         ss.output, octet_length(ss.output::text)
  from pgflow.step_states ss
  join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
  where ss.run_id = p_run_id
  order by s.step_index
$$;


--
-- Name: runs_matching(text, text[], timestamp with time zone, integer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.runs_matching(p_name text, p_statuses text[], p_started_before timestamp with time zone, p_limit integer) RETURNS SETOF uuid
    LANGUAGE sql STABLE
    AS $$
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


--
-- Name: schedules; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.schedules (
    schedule_name text NOT NULL,
    flow_name text NOT NULL,
    cron text NOT NULL,
    time_zone text DEFAULT 'UTC'::text NOT NULL,
    input jsonb DEFAULT 'null'::jsonb NOT NULL,
    missed text DEFAULT 'skip'::text NOT NULL,
    catch_up_limit integer DEFAULT 1 NOT NULL,
    grace_seconds integer DEFAULT 5 NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    ticks_after timestamp with time zone DEFAULT now() NOT NULL,
    next_fire_at timestamp with time zone DEFAULT now() NOT NULL,
    last_fired_at timestamp with time zone,
    runs_started bigint DEFAULT 0 NOT NULL,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedules_catch_up_limit_range CHECK (((catch_up_limit >= 1) AND (catch_up_limit <= 1000))),
    CONSTRAINT schedules_cron_not_blank CHECK ((length(TRIM(BOTH FROM cron)) > 0)),
    CONSTRAINT schedules_flow_name_valid CHECK (pgflow.is_valid_slug(flow_name)),
    CONSTRAINT schedules_grace_non_negative CHECK ((grace_seconds >= 0)),
    CONSTRAINT schedules_missed_domain CHECK ((missed = ANY (ARRAY['skip'::text, 'catch_up'::text]))),
    CONSTRAINT schedules_name_valid CHECK (pgflow.is_valid_slug(schedule_name))
);


--
-- Name: schedule_list(); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.schedule_list() RETURNS SETOF pgflow.schedules
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  select * from pgflow.schedules order by schedule_name
$$;


--
-- Name: schedules_to_fire(); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.schedules_to_fire() RETURNS TABLE(schedule_name text, cron text, time_zone text, missed text, catch_up_limit integer, grace_seconds integer, ticks_after timestamp with time zone, next_fire_at timestamp with time zone, now timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  select s.schedule_name, s.cron, s.time_zone, s.missed, s.catch_up_limit, s.grace_seconds,
         s.ticks_after, s.next_fire_at, now()
  from pgflow.schedules s
  where not s.paused
  order by s.next_fire_at, s.schedule_name
$$;


--
-- Name: send_task_messages(uuid[], text[], integer[], integer[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.send_task_messages(p_run_ids uuid[], p_step_slugs text[], p_task_indexes integer[], p_delays integer[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_group record;
begin
  for v_group in
    select t.queue_name, u.delay,
           array_agg(t.ctid order by t.run_id, t.step_slug, t.task_index) as row_ctids,
           array_agg(pgflow.task_message(t.flow_slug, t.run_id, t.step_slug, t.task_index)
                     order by t.run_id, t.step_slug, t.task_index) as bodies
    from unnest(p_run_ids, p_step_slugs, p_task_indexes, p_delays)
      as u(run_id, step_slug, task_index, delay)
    join pgflow.step_tasks t
      on t.run_id = u.run_id and t.step_slug = u.step_slug and t.task_index = u.task_index
    group by t.queue_name, u.delay
  loop
    -- PGMQ assigns increasing ids in insertion order; pair them with the tasks by rank.
    with sent as (
      select msg_id, row_number() over (order by msg_id) as ordinality
      from pgmq.send_batch(v_group.queue_name, v_group.bodies, null::jsonb[],
                           clock_timestamp() + make_interval(secs => v_group.delay)) as msg_id
    )
    update pgflow.step_tasks t
    set message_id = sent.msg_id
    from unnest(v_group.row_ctids) with ordinality as r(row_ctid, ordinality)
    join sent on sent.ordinality = r.ordinality
    where t.ctid = r.row_ctid;

    if v_group.delay = 0 then
      perform pgflow.notify_queue(v_group.queue_name);
    end if;
  end loop;
end;
$$;


--
-- Name: set_alias(text, text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.set_alias(p_alias text, p_flow_slug text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
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
        activated_at = now();
  if v_previous is distinct from p_flow_slug then
    insert into pgflow.alias_history (alias, from_flow_slug, to_flow_slug, reason)
    values (p_alias, v_previous, p_flow_slug, 'set');
  end if;
  return v_previous;
end;
$$;


--
-- Name: skip_mode_option(text, text, jsonb, text, text[], text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.skip_mode_option(p_flow_slug text, p_step_slug text, p_step jsonb, p_key text, p_allowed text[], p_default text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
declare
  v_value jsonb := p_step -> p_key;
begin
  if v_value is null or v_value = 'null'::jsonb then
    return p_default;
  end if;
  if jsonb_typeof(v_value) <> 'string' or not (v_value #>> '{}' = any(p_allowed)) then
    perform pgflow.raise_invalid_definition(p_flow_slug, format(
      'step `%s` option `%s` must be one of %s, got %s',
      p_step_slug, p_key, array_to_string(p_allowed, ', '), v_value));
  end if;
  return v_value #>> '{}';
end;
$$;


--
-- Name: skip_steps(uuid[], text[], text[], boolean[], text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.skip_steps(p_run_ids uuid[], p_step_slugs text[], p_reasons text[], p_cascade boolean[], p_error_messages text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_queues text[];
  v_messages bigint[];
  v_runs uuid[];
  v_steps text[];
  v_flows text[];
begin
  select array_agg(t.queue_name), array_agg(t.message_id)
  into v_queues, v_messages
  from unnest(p_run_ids, p_step_slugs) as u(run_id, step_slug)
  join pgflow.step_tasks t on t.run_id = u.run_id and t.step_slug = u.step_slug
  where t.status = 'queued';
  if v_queues is not null then
    perform pgflow.archive_messages(v_queues, v_messages);
  end if;

  with live as (
    select t.ctid as row_ctid
    from unnest(p_run_ids, p_step_slugs) as u(run_id, step_slug)
    join pgflow.step_tasks t on t.run_id = u.run_id and t.step_slug = u.step_slug
    join pgflow.step_states ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
    join pgflow.runs r on r.run_id = t.run_id
    where t.status in ('queued', 'started') and ss.status = 'started' and r.status = 'started'
    order by t.run_id, t.step_slug, t.task_index
    for no key update of t
  )
  update pgflow.step_tasks t
  set status = 'skipped', skipped_at = now()
  from live
  where t.ctid = live.row_ctid and t.status in ('queued', 'started');

  with recursive target as (
    select u.run_id, u.step_slug, u.reason, u.cascade, u.error_message, r.flow_slug
    from unnest(p_run_ids, p_step_slugs, p_reasons, p_cascade, p_error_messages)
      as u(run_id, step_slug, reason, cascade, error_message)
    join pgflow.runs r on r.run_id = u.run_id and r.status = 'started'
  ),
  downstream(run_id, flow_slug, step_slug) as (
    select t.run_id, t.flow_slug, d.step_slug
    from target t
    join pgflow.deps d on d.flow_slug = t.flow_slug and d.dep_slug = t.step_slug
    where t.cascade
    union
    select ds.run_id, ds.flow_slug, d.step_slug
    from downstream ds
    join pgflow.deps d on d.flow_slug = ds.flow_slug and d.dep_slug = ds.step_slug
  ),
  wanted as (
    -- a step both named and downstream of another keeps its own reason
    select distinct on (w.run_id, w.step_slug) w.run_id, w.step_slug, w.reason, w.error_message
    from (select run_id, step_slug, reason, error_message, 0 as rank from target
          union all
          select run_id, step_slug, 'dependency_skipped', null, 1 from downstream) w
    order by w.run_id, w.step_slug, w.rank
  ),
  locked as (
    select ss.ctid as row_ctid, wanted.reason, wanted.error_message
    from pgflow.step_states ss
    join wanted on wanted.run_id = ss.run_id and wanted.step_slug = ss.step_slug
    where ss.status in ('created', 'started')
    order by ss.run_id, ss.step_slug
    for no key update of ss
  ),
  skipped as (
    update pgflow.step_states ss
    set status = 'skipped', skipped_at = now(), skip_reason = locked.reason,
        error_message = coalesce(pgflow.bounded_error(locked.error_message), ss.error_message)
    from locked
    where ss.ctid = locked.row_ctid
    returning ss.run_id, ss.step_slug, ss.flow_slug
  )
  select coalesce(array_agg(run_id), array[]::uuid[]),
         coalesce(array_agg(step_slug), array[]::text[]),
         coalesce(array_agg(flow_slug), array[]::text[])
  into v_runs, v_steps, v_flows
  from skipped;

  perform pgflow.finish_completed_steps(v_runs, v_steps, v_flows);
end;
$$;


--
-- Name: start_alias_typed(text, jsonb[], text, text, text[], timestamp with time zone, text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.start_alias_typed(p_alias text, p_inputs jsonb[], p_input_type text, p_output_type text, p_idempotency_keys text[] DEFAULT NULL::text[], p_start_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_trace_context text DEFAULT NULL::text) RETURNS SETOF pgflow.runs
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
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
  return query select * from pgflow.start_flows(v_flow.flow_slug, p_inputs, null, false,
                                                p_idempotency_keys, p_alias, p_start_at,
                                                p_trace_context);
end;
$$;


--
-- Name: start_flow(text, jsonb, uuid, boolean, text, timestamp with time zone, text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.start_flow(p_flow_slug text, p_input jsonb, p_run_id uuid DEFAULT NULL::uuid, p_resolve_alias boolean DEFAULT true, p_idempotency_key text DEFAULT NULL::text, p_start_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_trace_context text DEFAULT NULL::text) RETURNS pgflow.runs
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  select * from pgflow.start_flows(
    p_flow_slug, array[p_input], array[p_run_id], p_resolve_alias,
    case when p_idempotency_key is not null then array[p_idempotency_key] end, null, p_start_at,
    p_trace_context)
$$;


--
-- Name: start_flows(text, jsonb[], uuid[], boolean, text[], text, timestamp with time zone, text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.start_flows(p_flow_slug text, p_inputs jsonb[], p_run_ids uuid[] DEFAULT NULL::uuid[], p_resolve_alias boolean DEFAULT true, p_idempotency_keys text[] DEFAULT NULL::text[], p_started_as text DEFAULT NULL::text, p_start_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_trace_context text DEFAULT NULL::text) RETURNS SETOF pgflow.runs
    LANGUAGE plpgsql SECURITY DEFINER
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
declare
  v_flow_slug text := p_flow_slug;
  v_scope text := coalesce(p_started_as, p_flow_slug);
  -- Whole seconds until p_start_at (rounded up), added to the root steps' start delays.
  v_delay_seconds numeric := greatest(0, ceil(extract(epoch from p_start_at - clock_timestamp())));
  v_delay integer;
  v_step_count integer;
  v_run_ids uuid[];
  v_inputs jsonb[];
  v_result_ids uuid[];
  v_conflict record;
  v_started pgflow.started_step[];
  v_slow_runs uuid[];
begin
  if p_resolve_alias then
    select a.flow_slug into v_flow_slug from pgflow.aliases a where a.alias = p_flow_slug;
    v_flow_slug := coalesce(v_flow_slug, p_flow_slug);
  end if;
  select count(*) into v_step_count from pgflow.steps where flow_slug = v_flow_slug;
  if v_step_count = 0 then
    raise exception 'no concrete flow or active alias is named `%`; compile the flow first (a '
      'worker carrying it does so at startup, and activates its alias)', p_flow_slug
      using errcode = 'PF004', detail = jsonb_build_object('flow_slug', p_flow_slug)::text;
  end if;
  if p_inputs is null or array_position(p_inputs, null) is not null then
    raise exception 'start_flows: every input must be a JSON value (use JSON null, not SQL NULL)'
      using errcode = 'PF005';
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

  if p_idempotency_keys is null and cardinality(p_inputs) = 1 then
    -- One run (an application's request starting its run): a plain insert of one row, without
    -- the batch statement's unnest, ordering and aggregates (a fifth of its time).
    v_run_ids := array[coalesce(p_run_ids[1], gen_random_uuid())];
    v_inputs := p_inputs;
    insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, scheduled_for,
                             trace_context)
    values (v_run_ids[1], v_flow_slug, p_inputs[1], v_step_count, p_start_at, p_trace_context);
    v_result_ids := v_run_ids;
  elsif p_idempotency_keys is null then
    with inserted as (
      insert into pgflow.runs (run_id, flow_slug, input, remaining_steps, scheduled_for,
                               trace_context)
      select coalesce(p_run_ids[i.ordinality], gen_random_uuid()), v_flow_slug, i.input,
             v_step_count, p_start_at, p_trace_context
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
                               idempotency_key, scheduled_for, trace_context)
      select w.run_id, v_flow_slug, w.input, v_step_count,
             case when w.key is not null then v_scope end, w.key, p_start_at, p_trace_context
      from wanted w
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

    -- The inputs whose key was taken: their run, which must have been started with the same
    -- input. (A new statement, so it sees the runs of starts that committed meanwhile.)
    with resolved as (
      select u.ordinality, u.key, u.input, e.run_id as existing_id, e.input as existing_input
      from unnest(v_result_ids, p_inputs, p_idempotency_keys) with ordinality
        as u(run_id, input, key, ordinality)
      left join pgflow.runs e
        on e.idempotency_scope = v_scope and e.idempotency_key = u.key
      where u.key is not null and not (u.run_id = any(coalesce(v_run_ids, array[]::uuid[])))
    )
    select * into v_conflict from resolved
    where existing_id is null or existing_input is distinct from input
    order by ordinality limit 1;
    if found and v_conflict.existing_id is null then
      raise exception 'start_flows: the run of idempotency key `%` was removed while this start '
        'waited for it; start again', v_conflict.key
        using errcode = 'PF009',
              detail = jsonb_build_object('key', v_conflict.key, 'scope', v_scope)::text;
    elsif found then
      raise exception 'idempotency key `%` of `%` belongs to run %, which was started with '
        'another input; use a new key for a new input', v_conflict.key, v_scope,
        v_conflict.existing_id
        using errcode = 'PF009',
              detail = jsonb_build_object('key', v_conflict.key, 'scope', v_scope,
                                          'run_id', v_conflict.existing_id)::text;
    end if;

    select array_agg(coalesce(e.run_id, u.run_id) order by u.ordinality)
    into v_result_ids
    from unnest(v_result_ids, p_idempotency_keys) with ordinality as u(run_id, key, ordinality)
    left join pgflow.runs e
      on u.key is not null and not (u.run_id = any(coalesce(v_run_ids, array[]::uuid[])))
         and e.idempotency_scope = v_scope and e.idempotency_key = u.key;
  end if;

  if v_run_ids is not null then
    -- Every step state in one write, the root steps already started and sized: a single step
    -- gets one task, a root map step one per element of the run's input. A root step with a
    -- condition stays 'created' and is decided by start_ready_steps. A run whose input a root
    -- map step cannot map over (not an array) gets all its steps 'created' and is left to
    -- start_ready_steps, which fails it (unless the map step's condition skips it).
    with planned as (
      select r.run_id, s.step_slug, s.flow_slug, s.deps_count, s.queue_name,
             coalesce(s.opt_start_delay, 0) + v_delay as start_delay,
             case when s.deps_count > 0 or c.conditional then null
                  when s.step_type = 'single' then 1
                  when jsonb_typeof(r.input) = 'array' then jsonb_array_length(r.input)
             end as task_count,
             s.deps_count = 0 and s.step_type = 'map' and not c.conditional
               and jsonb_typeof(r.input) is distinct from 'array' as bad,
             s.deps_count = 0 and c.conditional as decided_later
      from unnest(v_run_ids, v_inputs) as r(run_id, input)
      cross join pgflow.steps s
      cross join lateral (select s.condition_when is not null
                                 or s.condition_unless is not null as conditional) c
      where s.flow_slug = v_flow_slug
    ),
    decided as materialized (
      select planned.*,
             planned.task_count is not null
               and not bool_or(planned.bad) over (partition by planned.run_id) as start
      from planned
    ),
    inserted as (
      insert into pgflow.step_states (run_id, step_slug, flow_slug, remaining_deps, status,
                                      started_at, initial_tasks, remaining_tasks)
      select d.run_id, d.step_slug, d.flow_slug, d.deps_count,
             case when d.start then 'started' else 'created' end,
             case when d.start then now() end,
             case when d.start then d.task_count end,
             case when d.start then d.task_count end
      from decided d
    )
    select array_agg((run_id, step_slug, flow_slug, task_count, queue_name, start_delay)
                     ::pgflow.started_step) filter (where start),
           array_agg(distinct run_id) filter (where bad or decided_later)
    into v_started, v_slow_runs
    from decided;

    -- Their events (`started`), before anything moves them on; checked here first, since a
    -- call costs more than the look at the lease table that nearly always ends it.
    if exists (select 1 from pgflow.event_subscribers s where s.expires_at > now()) then
      perform pgflow.notify_new_runs(v_run_ids);
    end if;

    if v_slow_runs is not null then
      perform pgflow.start_ready_steps(v_slow_runs);
    end if;
    if v_started is not null then
      perform pgflow.enqueue_step_tasks(v_started);
    end if;
  end if;

  -- One key lookup per run (`offset 0` keeps the lookup apart from the join): a plan made
  -- for a batch of runs may otherwise hash-join against a scan of every run.
  return query
  select r.*
  from unnest(v_result_ids) with ordinality as ids(run_id, ordinality)
  cross join lateral (select * from pgflow.runs x where x.run_id = ids.run_id offset 0) r
  order by ids.ordinality;
end;
$$;


--
-- Name: start_ready_steps(uuid[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.start_ready_steps(p_run_ids uuid[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_started pgflow.started_step[];
  v_bad_runs uuid[];
  v_unmet_runs uuid[];
  v_skip_runs uuid[];
  v_skip_steps text[];
  v_skip_cascade boolean[];
begin
  with ready as (
    select ss.ctid as row_ctid, ss.run_id, ss.step_slug, s.step_type, s.queue_name,
           s.when_unmet,
           coalesce(s.opt_start_delay, 0)
             + greatest(0, ceil(extract(epoch from r.scheduled_for - clock_timestamp())))::integer
             as start_delay,
           jsonb_typeof(src.value) as got,
           case when s.step_type = 'single' then 1
                when src.source_skipped then 0
                when jsonb_typeof(src.value) = 'array' then jsonb_array_length(src.value)
           end as task_count,
           (s.condition_when is null or cond.input @> s.condition_when)
             and (s.condition_unless is null or not cond.input @> s.condition_unless) as met
    from pgflow.step_states ss
    join pgflow.runs r on r.run_id = ss.run_id and r.status = 'started'
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    cross join lateral (
      -- what a map step maps over, and whether that is a skipped dependency
      select case when s.step_type = 'single' then null
                  when s.deps_count = 0 then r.input
                  else (select dss.output from pgflow.deps d
                        join pgflow.step_states dss
                          on dss.run_id = ss.run_id and dss.step_slug = d.dep_slug
                        where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug)
             end as value,
             s.step_type = 'map' and s.deps_count > 0
               and exists (select 1 from pgflow.deps d
                           join pgflow.step_states dss
                             on dss.run_id = ss.run_id and dss.step_slug = d.dep_slug
                           where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug
                             and dss.status = 'skipped') as source_skipped
    ) src
    cross join lateral (
      -- what the condition is matched against
      select case when s.condition_when is null and s.condition_unless is null then null
                  when s.deps_count = 0 then r.input
                  else (select jsonb_object_agg(d.dep_slug, dss.output)
                        from pgflow.deps d
                        join pgflow.step_states dss
                          on dss.run_id = ss.run_id and dss.step_slug = d.dep_slug
                        where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug)
             end as input
    ) cond
    where ss.run_id = any(p_run_ids) and ss.status = 'created' and ss.remaining_deps = 0
    order by ss.run_id, ss.step_slug
    for no key update of ss
  ),
  outcomes as (
    select ready.*,
           case when not ready.met and ready.when_unmet = 'fail' then 'unmet'
                when not ready.met then 'skip'
                when ready.task_count is null then 'bad_map'
                else 'start'
           end as outcome
    from ready
  ),
  decided as (
    select outcomes.*,
           bool_or(outcomes.outcome in ('unmet', 'bad_map'))
             over (partition by outcomes.run_id) as run_fails
    from outcomes
  ),
  changed as (
    update pgflow.step_states ss
    set status = case when d.outcome = 'start' then 'started' else 'failed' end,
        started_at = case when d.outcome = 'start' then now() end,
        failed_at = case when d.outcome <> 'start' then now() end,
        error_message = case
          when d.outcome = 'unmet' then
            format('step `%s`: its condition was not met (when_unmet = fail)', d.step_slug)
          when d.outcome = 'bad_map' then
            format('map step `%s` needs an array to map over, got %s',
                   d.step_slug, coalesce(d.got, 'nothing')) end,
        initial_tasks = case when d.outcome = 'start' then d.task_count end,
        remaining_tasks = case when d.outcome = 'start' then d.task_count end
    from decided d
    where ss.ctid = d.row_ctid
      and (d.outcome in ('unmet', 'bad_map') or (d.outcome = 'start' and not d.run_fails))
    returning ss.run_id, ss.step_slug, ss.status, d.outcome, d.task_count, ss.flow_slug,
              d.queue_name, d.start_delay
  ),
  started as (
    select array_agg((run_id, step_slug, flow_slug, task_count, queue_name, start_delay)
                     ::pgflow.started_step) filter (where status = 'started') as steps,
           array_agg(distinct run_id) filter (where outcome = 'bad_map') as bad_runs,
           array_agg(distinct run_id) filter (where outcome = 'unmet') as unmet_runs
    from changed
  ),
  skipping as (
    select array_agg(d.run_id order by d.run_id, d.step_slug) as runs,
           array_agg(d.step_slug order by d.run_id, d.step_slug) as steps,
           array_agg(d.when_unmet = 'skip_cascade' order by d.run_id, d.step_slug) as cascade
    from decided d
    where d.outcome = 'skip' and not d.run_fails
  )
  select started.steps, started.bad_runs, started.unmet_runs, skipping.runs, skipping.steps,
         skipping.cascade
  into v_started, v_bad_runs, v_unmet_runs, v_skip_runs, v_skip_steps, v_skip_cascade
  from started, skipping;

  if v_bad_runs is not null then
    perform pgflow.fail_runs(v_bad_runs, 'run failed: a map step received a non-array input');
  end if;
  if v_unmet_runs is not null then
    perform pgflow.fail_runs(v_unmet_runs, 'run failed: a step''s condition was not met');
  end if;
  if v_skip_runs is not null then
    perform pgflow.skip_steps(v_skip_runs, v_skip_steps,
                              array_fill('condition_unmet'::text, array[cardinality(v_skip_runs)]),
                              v_skip_cascade, null);
  end if;
  if v_started is not null then
    perform pgflow.enqueue_step_tasks(v_started);
  end if;
end;
$$;


--
-- Name: start_tasks(text, bigint[], uuid, text[], text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.start_tasks(p_queue_name text, p_message_ids bigint[], p_worker_id uuid, p_flow_slugs text[], p_step_slugs text[]) RETURNS SETOF pgflow.claimed_task
    LANGUAGE plpgsql SECURITY DEFINER
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
begin
  if coalesce(cardinality(p_message_ids), 0) > 0 then
    perform pgmq.archive(p_queue_name, p_message_ids);
  end if;
  return query
  select * from pgflow.claim_tasks(p_queue_name, p_message_ids, p_worker_id, p_flow_slugs,
                                   p_step_slugs);
end;
$$;


--
-- Name: started_task_rows(tid[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.started_task_rows(p_row_ctids tid[]) RETURNS SETOF pgflow.claimed_task
    LANGUAGE sql STABLE
    AS $$
  select t.flow_slug, t.step_slug, t.run_id, t.task_index, t.message_id, t.queue_name,
         t.attempts_count, o.timeout,
         case
           when s.step_type = 'map' and s.deps_count = 0 then r.input -> t.task_index
           when s.step_type = 'map' then (
             select dss.output -> t.task_index
             from pgflow.deps d
             join pgflow.step_states dss on dss.run_id = t.run_id and dss.step_slug = d.dep_slug
             where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug)
           when s.deps_count = 0 then r.input
           else (
             select jsonb_object_agg(d.dep_slug, dss.output)
             from pgflow.deps d
             join pgflow.step_states dss on dss.run_id = t.run_id and dss.step_slug = d.dep_slug
             where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug)
         end,
         r.trace_context
  from pgflow.step_tasks t
  join pgflow.runs r on r.run_id = t.run_id
  join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
  join pgflow.step_options o on o.flow_slug = t.flow_slug and o.step_slug = t.step_slug
  where t.ctid = any(p_row_ctids)
  order by t.message_id, t.run_id, t.step_slug, t.task_index
$$;


--
-- Name: step_event_payload(uuid, text, text, text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.step_event_payload(p_run_id uuid, p_flow_slug text, p_step_slug text, p_status text) RETURNS text
    LANGUAGE sql STABLE
    AS $$
  select json_build_object('kind', 'step', 'run_id', p_run_id, 'flow_slug', p_flow_slug,
                           'step_slug', p_step_slug, 'status', p_status)::text
$$;


--
-- Name: step_output(uuid, text, text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.step_output(p_run_id uuid, p_step_slug text, p_step_type text) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $$
begin
  if p_step_type = 'single' then
    return (select t.output from pgflow.step_tasks t
            where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = 0);
  end if;
  return coalesce((select jsonb_agg(t.output order by t.task_index)
                   from pgflow.step_tasks t
                   where t.run_id = p_run_id and t.step_slug = p_step_slug),
                  '[]'::jsonb);
end;
$$;


--
-- Name: step_state_row_valid(text, integer, integer, integer, boolean, text, timestamp with time zone, timestamp with time zone, timestamp with time zone, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.step_state_row_valid(status text, remaining_deps integer, initial_tasks integer, remaining_tasks integer, has_output boolean, skip_reason text, started_at timestamp with time zone, completed_at timestamp with time zone, failed_at timestamp with time zone, skipped_at timestamp with time zone, cancelled_at timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS $$
begin
  return remaining_deps >= 0
    and coalesce(initial_tasks >= 0, true) and coalesce(remaining_tasks >= 0, true)
    and coalesce(remaining_tasks <= initial_tasks, true)
    and coalesce(skip_reason in ('condition_unmet', 'handler_failed', 'dependency_skipped'), true)
    and (status = 'skipped') = (skipped_at is not null)
    and (status = 'skipped') = (skip_reason is not null)
    and (status = 'cancelled') = (cancelled_at is not null)
    and ((status = 'created' and started_at is null and completed_at is null and failed_at is null
          and initial_tasks is null and remaining_tasks is null and not has_output)
      or (status = 'started' and started_at is not null and completed_at is null
          and failed_at is null and remaining_tasks is not null and not has_output)
      or (status = 'completed' and completed_at is not null and failed_at is null
          and remaining_tasks = 0 and has_output)
      or (status = 'failed' and failed_at is not null and completed_at is null)
      or (status in ('skipped', 'cancelled') and completed_at is null and failed_at is null
          and not has_output));
end $$;


--
-- Name: step_task_row_valid(text, integer, integer, integer, integer, boolean, timestamp with time zone, timestamp with time zone, timestamp with time zone, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.step_task_row_valid(status text, task_index integer, attempts_count integer, attempts_base integer, requeue_count integer, has_output boolean, started_at timestamp with time zone, completed_at timestamp with time zone, failed_at timestamp with time zone, skipped_at timestamp with time zone, cancelled_at timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS $$
begin
  return task_index >= 0 and attempts_count >= 0 and requeue_count >= 0
    and attempts_base between 0 and attempts_count
    and (status = 'cancelled') = (cancelled_at is not null)
    and (status = 'skipped') = (skipped_at is not null)
    and ((status = 'queued' and completed_at is null and failed_at is null and not has_output)
      or (status = 'started' and started_at is not null and completed_at is null
          and failed_at is null and not has_output)
      or (status = 'completed' and completed_at is not null and failed_at is null and has_output)
      or (status = 'failed' and failed_at is not null and completed_at is null)
      or (status in ('skipped', 'cancelled') and completed_at is null and failed_at is null
          and not has_output));
end $$;


--
-- Name: stop_worker(uuid); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.stop_worker(p_worker_id uuid) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  update pgflow.workers
  set stopped_at = now(),
      deprecated_at = coalesce(deprecated_at, now())
  where worker_id = p_worker_id and stopped_at is null
$$;


--
-- Name: store_completions(uuid[], text[], integer[], integer[], jsonb[], pgflow.task_claimer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.store_completions(p_run_ids uuid[], p_step_slugs text[], p_task_indexes integer[], p_attempts integer[], p_outputs jsonb[], p_claimer pgflow.task_claimer DEFAULT NULL::pgflow.task_claimer, OUT completed integer, OUT claimed tid[]) RETURNS record
    LANGUAGE plpgsql
    AS $$
declare
  v_runs uuid[];
  v_steps text[];
  v_flows text[];
  v_outputs jsonb[];
begin
  if cardinality(p_run_ids) is distinct from cardinality(p_step_slugs)
     or cardinality(p_run_ids) is distinct from cardinality(p_task_indexes)
     or cardinality(p_run_ids) is distinct from cardinality(p_attempts)
     or cardinality(p_run_ids) is distinct from cardinality(p_outputs) then
    raise exception 'complete_tasks: run ids, step slugs, task indexes, attempts and outputs '
      'must be arrays of equal length' using errcode = 'PF005';
  end if;

  perform pgflow.lock_runs(p_run_ids);

  with input as (
    select * from unnest(p_run_ids, p_step_slugs, p_task_indexes, p_attempts, p_outputs)
      as i(run_id, step_slug, task_index, attempt, output)
  ),
  locked as (
    select t.ctid as row_ctid, t.status, input.output
    from pgflow.step_tasks t
    join input on input.run_id = t.run_id and input.step_slug = t.step_slug
      and input.task_index = t.task_index and input.attempt = t.attempts_count
    order by t.run_id, t.step_slug, t.task_index
    for no key update of t
  ),
  completed as (
    update pgflow.step_tasks t
    set status = 'completed',
        completed_at = now(),
        output = coalesce(locked.output, 'null'::jsonb)
    from locked
    where t.ctid = locked.row_ctid and locked.status = 'started'
    returning t.run_id, t.step_slug, t.output
  )
  select array_agg(c.run_id), array_agg(c.step_slug), array_agg(c.output), count(*)
  into v_runs, v_steps, v_outputs, completed
  from completed c;

  if v_runs is null then
    return;
  end if;

  with per_step as (
    -- A single step has one task: the output completed here is the step's output.
    select c.run_id, c.step_slug, count(*)::integer as n, (array_agg(c.output))[1] as output
    from unnest(v_runs, v_steps, v_outputs) as c(run_id, step_slug, output)
    group by c.run_id, c.step_slug
  ),
  locked as (
    select ss.ctid as row_ctid, ss.status, per_step.n, per_step.output
    from pgflow.step_states ss
    join per_step on per_step.run_id = ss.run_id and per_step.step_slug = ss.step_slug
    order by ss.run_id, ss.step_slug
    for no key update of ss
  ),
  counted as (
    -- Counts the tasks down and, in the same write, completes the steps with none left.
    update pgflow.step_states ss
    set remaining_tasks = ss.remaining_tasks - locked.n,
        status = case when ss.remaining_tasks = locked.n then 'completed' else ss.status end,
        completed_at = case when ss.remaining_tasks = locked.n then now() end,
        output = case when ss.remaining_tasks <> locked.n then null
                      when s.step_type = 'single' then locked.output
                      else pgflow.step_output(ss.run_id, ss.step_slug, s.step_type) end
    from locked, pgflow.steps s
    where ss.ctid = locked.row_ctid and locked.status = 'started'
      and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    returning ss.run_id, ss.step_slug, ss.flow_slug, ss.status
  )
  select array_agg(run_id), array_agg(step_slug), array_agg(flow_slug)
  into v_runs, v_steps, v_flows
  from counted where status = 'completed';

  if v_runs is not null then
    claimed := pgflow.finish_completed_steps(v_runs, v_steps, v_flows, p_claimer);
  end if;
end;
$$;


--
-- Name: stored_completions(uuid[], text[], integer[], integer[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.stored_completions(p_run_ids uuid[], p_step_slugs text[], p_task_indexes integer[], p_attempts integer[]) RETURNS bigint
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  select count(*)
  from unnest(p_run_ids, p_step_slugs, p_task_indexes, p_attempts)
    as k(run_id, step_slug, task_index, attempt)
  join pgflow.step_tasks t
    on t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
  where t.status = 'completed' and t.attempts_count = k.attempt
$$;


--
-- Name: subscribe_events(uuid, text[], integer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.subscribe_events(p_subscriber_id uuid, p_flow_slugs text[], p_seconds integer DEFAULT 60) RETURNS timestamp with time zone
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
declare
  v_expires_at timestamptz := now() + make_interval(secs => least(greatest(p_seconds, 10), 3600));
begin
  delete from pgflow.event_subscribers where expires_at < now();
  insert into pgflow.event_subscribers (subscriber_id, flow_slug, expires_at)
  select p_subscriber_id, f.flow_slug, v_expires_at
  from unnest(p_flow_slugs) as f(flow_slug)
  where f.flow_slug is not null
  on conflict (subscriber_id, flow_slug) do update set expires_at = excluded.expires_at;
  return v_expires_at;
end;
$$;


--
-- Name: tables_to_vacuum(boolean); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.tables_to_vacuum(p_even_with_autovacuum boolean DEFAULT false) RETURNS SETOF text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select m.table_name::text from pgflow.maintained_tables m
  where (p_even_with_autovacuum or not current_setting('autovacuum')::boolean)
    and m.dead_rows > 50 + 0.2 * m.estimated_rows
  order by m.table_name::text
$$;


--
-- Name: task_message(text, uuid, text, integer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.task_message(p_flow_slug text, p_run_id uuid, p_step_slug text, p_task_index integer) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
  select jsonb_build_object('flow_slug', p_flow_slug, 'run_id', p_run_id,
                            'step_slug', p_step_slug, 'task_index', p_task_index)
$$;


--
-- Name: trigger_schedule(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.trigger_schedule(p_schedule_name text) RETURNS pgflow.runs
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
declare
  v_schedule pgflow.schedules;
  v_run pgflow.runs;
begin
  select * into v_schedule from pgflow.schedules s where s.schedule_name = p_schedule_name;
  if not found then
    raise exception 'no schedule `%` exists; `pgflow schedules list` lists them', p_schedule_name
      using errcode = 'PF013',
            detail = jsonb_build_object('schedule_name', p_schedule_name)::text;
  end if;
  select * into v_run from pgflow.start_flow(v_schedule.flow_name, v_schedule.input);
  update pgflow.schedules s
  set runs_started = s.runs_started + 1, last_fired_at = now()
  where s.schedule_name = p_schedule_name;
  return v_run;
end;
$$;


--
-- Name: unsubscribe_events(uuid); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.unsubscribe_events(p_subscriber_id uuid) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
  delete from pgflow.event_subscribers where subscriber_id = p_subscriber_id
$$;


--
-- Name: wakeup_key(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.wakeup_key(p_queue_name text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ select hashtext('wakeup:' || p_queue_name) $$;


--
-- Name: withdraw_wakeups(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.withdraw_wakeups(p_queue_name text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pgflow', 'pgmq', 'pg_temp'
    AS $$
begin
  return pg_advisory_unlock_shared(pgflow.lock_namespace(), pgflow.wakeup_key(p_queue_name));
end;
$$;


--
-- Name: _belongs_to_pgmq(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq._belongs_to_pgmq(table_name text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    sql TEXT;
    result BOOLEAN;
BEGIN
  SELECT EXISTS (
    SELECT 1
    FROM pg_depend
    WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pgmq')
    AND objid = (
        SELECT oid
        FROM pg_class
        WHERE relname = table_name
    )
  ) INTO result;
  RETURN result;
END;
$$;


--
-- Name: _create_fifo_index_if_not_exists(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq._create_fifo_index_if_not_exists(queue_name text) RETURNS void
    LANGUAGE plpgsql
    AS $_$
DECLARE
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
    index_name TEXT := qtable || '_fifo_idx';
BEGIN
    -- Create GIN index on headers for efficient FIFO key lookups
    EXECUTE FORMAT(
        $QUERY$
        CREATE INDEX IF NOT EXISTS %I ON pgmq.%I USING GIN (headers);
        $QUERY$,
        index_name, qtable
    );
END;
$_$;


--
-- Name: _ensure_pg_partman_installed(); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq._ensure_pg_partman_installed() RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
  IF NOT pgmq._extension_exists('pg_partman') THEN
    RAISE EXCEPTION 'pg_partman is required for partitioned queues';
  END IF;
END;
$$;


--
-- Name: _extension_exists(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq._extension_exists(extension_name text) RETURNS boolean
    LANGUAGE sql
    AS $$
SELECT EXISTS (
    SELECT 1
    FROM pg_extension
    WHERE extname = extension_name
)
$$;


--
-- Name: _get_partition_col(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq._get_partition_col(partition_interval text) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
  num INTEGER;
BEGIN
    BEGIN
        num := partition_interval::INTEGER;
        RETURN 'msg_id';
    EXCEPTION
        WHEN others THEN
            RETURN 'enqueued_at';
    END;
END;
$$;


--
-- Name: _get_pg_partman_major_version(); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq._get_pg_partman_major_version() RETURNS integer
    LANGUAGE sql
    AS $$
  SELECT split_part(extversion, '.', 1)::INT
  FROM pg_extension
  WHERE extname = 'pg_partman'
$$;


--
-- Name: _get_pg_partman_schema(); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq._get_pg_partman_schema() RETURNS text
    LANGUAGE sql
    AS $$
  SELECT
    extnamespace::regnamespace::text
  FROM
    pg_extension
  WHERE
    extname = 'pg_partman';
$$;


--
-- Name: _send_batch(text, jsonb[], jsonb[], timestamp with time zone); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq._send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay timestamp with time zone) RETURNS SETOF bigint
    LANGUAGE plpgsql
    AS $_$
DECLARE
    sql TEXT;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
    sql := FORMAT(
            $QUERY$
        INSERT INTO pgmq.%I (vt, message, headers)
        SELECT $2, unnest($1), unnest(coalesce($3, ARRAY[]::jsonb[]))
        RETURNING msg_id;
        $QUERY$,
            qtable
           );
    RETURN QUERY EXECUTE sql USING msgs, delay, headers;
END;
$_$;


--
-- Name: _validate_batch_params(jsonb[], jsonb[]); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq._validate_batch_params(msgs jsonb[], headers jsonb[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- Validate that msgs is not NULL or empty
    IF msgs IS NULL OR array_length(msgs, 1) IS NULL THEN
        RAISE EXCEPTION 'msgs cannot be NULL or empty';
    END IF;

    -- Validate that headers array length matches msgs array length if headers is provided
    -- Note: array_length returns NULL for empty arrays, so we use COALESCE to treat empty arrays as length 0
    IF headers IS NOT NULL AND COALESCE(array_length(headers, 1), 0) != COALESCE(array_length(msgs, 1), 0) THEN
        RAISE EXCEPTION 'headers array length (%) must match msgs array length (%)',
            COALESCE(array_length(headers, 1), 0), COALESCE(array_length(msgs, 1), 0);
    END IF;
END;
$$;


--
-- Name: acquire_queue_lock(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.acquire_queue_lock(queue_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('pgmq.queue_' || queue_name));
END;
$$;


--
-- Name: archive(text, bigint[]); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.archive(queue_name text, msg_ids bigint[]) RETURNS SETOF bigint
    LANGUAGE plpgsql
    AS $_$
DECLARE
    sql TEXT;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
    atable TEXT := pgmq.format_table_name(queue_name, 'a');
BEGIN
    sql := FORMAT(
        $QUERY$
        WITH archived AS (
            DELETE FROM pgmq.%I
            WHERE msg_id = ANY($1)
            RETURNING msg_id, vt, read_ct, enqueued_at, last_read_at, message, headers
        )
        INSERT INTO pgmq.%I (msg_id, vt, read_ct, enqueued_at, last_read_at, message, headers)
        SELECT msg_id, vt, read_ct, enqueued_at, last_read_at, message, headers
        FROM archived
        RETURNING msg_id;
        $QUERY$,
        qtable, atable
    );
    RETURN QUERY EXECUTE sql USING msg_ids;
END;
$_$;


--
-- Name: archive(text, bigint); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.archive(queue_name text, msg_id bigint) RETURNS boolean
    LANGUAGE plpgsql
    AS $_$
DECLARE
    sql TEXT;
    result BIGINT;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
    atable TEXT := pgmq.format_table_name(queue_name, 'a');
BEGIN
    sql := FORMAT(
        $QUERY$
        WITH archived AS (
            DELETE FROM pgmq.%I
            WHERE msg_id = $1
            RETURNING msg_id, vt, read_ct, enqueued_at, last_read_at, message, headers
        )
        INSERT INTO pgmq.%I (msg_id, vt, read_ct, enqueued_at, last_read_at, message, headers)
        SELECT msg_id, vt, read_ct, enqueued_at, last_read_at, message, headers
        FROM archived
        RETURNING msg_id;
        $QUERY$,
        qtable, atable
    );
    EXECUTE sql USING msg_id INTO result;
    RETURN NOT (result IS NULL);
END;
$_$;


--
-- Name: bind_topic(text, text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.bind_topic(pattern text, queue_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pgmq.validate_topic_pattern(pattern);
    IF queue_name IS NULL OR queue_name = '' THEN
        RAISE EXCEPTION 'queue_name cannot be NULL or empty';
    END IF;

    IF NOT EXISTS (SELECT 1 FROM pgmq.meta WHERE meta.queue_name = bind_topic.queue_name) THEN
        RAISE EXCEPTION 'Queue "%" does not exist. Create the queue first using pgmq.create()', queue_name;
    END IF;

    INSERT INTO pgmq.topic_bindings (pattern, queue_name)
    VALUES (pattern, queue_name)
    ON CONFLICT ON CONSTRAINT topic_bindings_unique_pattern_queue DO NOTHING;
END;
$$;


--
-- Name: convert_archive_partitioned(text, text, text, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.convert_archive_partitioned(table_name text, partition_interval text DEFAULT '10000'::text, retention_interval text DEFAULT '100000'::text, leading_partition integer DEFAULT 10) RETURNS void
    LANGUAGE plpgsql
    AS $_$
DECLARE
  a_table_name TEXT := pgmq.format_table_name(table_name, 'a');
  a_table_name_old TEXT := pgmq.format_table_name(table_name, 'a') || '_old';
  qualified_a_table_name TEXT := format('pgmq.%I', a_table_name);
  partition_col TEXT;
  a_partition_col TEXT;
BEGIN

  PERFORM c.relkind
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relname = a_table_name
    AND c.relkind = 'p';

  IF FOUND THEN
    RAISE NOTICE 'Table %s is already partitioned', a_table_name;
    RETURN;
  END IF;

  PERFORM c.relkind
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relname = a_table_name
    AND c.relkind = 'r';

  IF NOT FOUND THEN
    RAISE NOTICE 'Table %s does not exists', a_table_name;
    RETURN;
  END IF;

  SELECT pgmq._get_partition_col(partition_interval) INTO partition_col;

  -- For archive tables, use archived_at for time-based partitioning
  IF partition_col = 'enqueued_at' THEN
    a_partition_col := 'archived_at';
  ELSE
    a_partition_col := partition_col;
  END IF;

  EXECUTE 'ALTER TABLE ' || qualified_a_table_name || ' RENAME TO ' || a_table_name_old;

  -- When partitioning by time (archived_at), we need to exclude constraints and indexes
  -- because the existing PRIMARY KEY on msg_id alone is incompatible with partitioning by archived_at.
  -- When partitioning by msg_id, we can keep all constraints including PRIMARY KEY.
  IF a_partition_col = 'archived_at' THEN
    EXECUTE format( 'CREATE TABLE pgmq.%I (LIKE pgmq.%I including defaults including generated including storage including comments) PARTITION BY RANGE (%I)', a_table_name, a_table_name_old, a_partition_col );
  ELSE
    EXECUTE format( 'CREATE TABLE pgmq.%I (LIKE pgmq.%I including all) PARTITION BY RANGE (%I)', a_table_name, a_table_name_old, a_partition_col );
  END IF;

  EXECUTE 'ALTER INDEX pgmq.archived_at_idx_' || table_name || ' RENAME TO archived_at_idx_' || table_name || '_old';
  EXECUTE 'CREATE INDEX archived_at_idx_'|| table_name || ' ON ' || qualified_a_table_name ||'(archived_at)';

  -- https://github.com/pgpartman/pg_partman/blob/master/doc/pg_partman.md
  -- p_parent_table - the existing parent table. MUST be schema qualified, even if in public schema.
  EXECUTE FORMAT(
    $QUERY$
    SELECT %I.create_parent(
      p_parent_table := %L,
      p_control := %L,
      p_interval := %L,
      p_type := case
        when pgmq._get_pg_partman_major_version() = 5 then 'range'
        else 'native'
      end
    )
    $QUERY$,
    pgmq._get_pg_partman_schema(),
    qualified_a_table_name,
    a_partition_col,
    partition_interval
  );

  EXECUTE FORMAT(
    $QUERY$
    UPDATE %I.part_config
    SET
      retention = %L,
      retention_keep_table = false,
      retention_keep_index = false,
      infinite_time_partitions = true
    WHERE
      parent_table = %L;
    $QUERY$,
    pgmq._get_pg_partman_schema(),
    retention_interval,
    qualified_a_table_name
  );
END;
$_$;


--
-- Name: create(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq."create"(queue_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pgmq.create_non_partitioned(queue_name);
END;
$$;


--
-- Name: create_fifo_index(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.create_fifo_index(queue_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pgmq._create_fifo_index_if_not_exists(queue_name);
END;
$$;


--
-- Name: create_fifo_indexes_all(); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.create_fifo_indexes_all() RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    queue_record RECORD;
BEGIN
    FOR queue_record IN SELECT queue_name FROM pgmq.meta LOOP
        PERFORM pgmq.create_fifo_index(queue_record.queue_name);
    END LOOP;
END;
$$;


--
-- Name: create_non_partitioned(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.create_non_partitioned(queue_name text) RETURNS void
    LANGUAGE plpgsql
    AS $_$
DECLARE
  qtable TEXT := pgmq.format_table_name(queue_name, 'q');
  qtable_seq TEXT := qtable || '_msg_id_seq';
  atable TEXT := pgmq.format_table_name(queue_name, 'a');
BEGIN
  PERFORM pgmq.validate_queue_name(queue_name);
  PERFORM pgmq.acquire_queue_lock(queue_name);

  EXECUTE FORMAT(
    $QUERY$
    CREATE TABLE IF NOT EXISTS pgmq.%I (
        msg_id BIGINT PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
        read_ct INT DEFAULT 0 NOT NULL,
        enqueued_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
        last_read_at TIMESTAMP WITH TIME ZONE,
        vt TIMESTAMP WITH TIME ZONE NOT NULL,
        message JSONB,
        headers JSONB
    )
    $QUERY$,
    qtable
  );

  EXECUTE FORMAT(
    $QUERY$
    CREATE TABLE IF NOT EXISTS pgmq.%I (
      msg_id BIGINT PRIMARY KEY,
      read_ct INT DEFAULT 0 NOT NULL,
      enqueued_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
      last_read_at TIMESTAMP WITH TIME ZONE,
      archived_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
      vt TIMESTAMP WITH TIME ZONE NOT NULL,
      message JSONB,
      headers JSONB
    );
    $QUERY$,
    atable
  );

  EXECUTE FORMAT(
    $QUERY$
    CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (vt ASC);
    $QUERY$,
    qtable || '_vt_idx', qtable
  );

  EXECUTE FORMAT(
    $QUERY$
    CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (archived_at);
    $QUERY$,
    'archived_at_idx_' || queue_name, atable
  );

  EXECUTE FORMAT(
    $QUERY$
    INSERT INTO pgmq.meta (queue_name, is_partitioned, is_unlogged)
    VALUES (%L, false, false)
    ON CONFLICT
    DO NOTHING;
    $QUERY$,
    queue_name
  );

END;
$_$;


--
-- Name: create_partitioned(text, text, text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.create_partitioned(queue_name text, partition_interval text DEFAULT '10000'::text, retention_interval text DEFAULT '100000'::text) RETURNS void
    LANGUAGE plpgsql
    AS $_$
DECLARE
  partition_col TEXT;
  a_partition_col TEXT;
  qtable TEXT := pgmq.format_table_name(queue_name, 'q');
  qtable_seq TEXT := qtable || '_msg_id_seq';
  atable TEXT := pgmq.format_table_name(queue_name, 'a');
  fq_qtable TEXT := 'pgmq.' || qtable;
  fq_atable TEXT := 'pgmq.' || atable;
BEGIN
  PERFORM pgmq.validate_queue_name(queue_name);
  PERFORM pgmq.acquire_queue_lock(queue_name);
  PERFORM pgmq._ensure_pg_partman_installed();
  SELECT pgmq._get_partition_col(partition_interval) INTO partition_col;

  EXECUTE FORMAT(
    $QUERY$
    CREATE TABLE IF NOT EXISTS pgmq.%I (
        msg_id BIGINT GENERATED ALWAYS AS IDENTITY,
        read_ct INT DEFAULT 0 NOT NULL,
        enqueued_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
        last_read_at TIMESTAMP WITH TIME ZONE,
        vt TIMESTAMP WITH TIME ZONE NOT NULL,
        message JSONB,
        headers JSONB
    ) PARTITION BY RANGE (%I)
    $QUERY$,
    qtable, partition_col
  );

  -- https://github.com/pgpartman/pg_partman/blob/master/doc/pg_partman.md
  -- p_parent_table - the existing parent table. MUST be schema qualified, even if in public schema.
  EXECUTE FORMAT(
    $QUERY$
    SELECT %I.create_parent(
      p_parent_table := %L,
      p_control := %L,
      p_interval := %L,
      p_type := case
        when pgmq._get_pg_partman_major_version() = 5 then 'range'
        else 'native'
      end
    )
    $QUERY$,
    pgmq._get_pg_partman_schema(),
    fq_qtable,
    partition_col,
    partition_interval
  );

  EXECUTE FORMAT(
    $QUERY$
    CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (%I);
    $QUERY$,
    qtable || '_part_idx', qtable, partition_col
  );

  EXECUTE FORMAT(
    $QUERY$
    UPDATE %I.part_config
    SET
        retention = %L,
        retention_keep_table = false,
        retention_keep_index = true,
        automatic_maintenance = 'on'
    WHERE parent_table = %L;
    $QUERY$,
    pgmq._get_pg_partman_schema(),
    retention_interval,
    'pgmq.' || qtable
  );

  EXECUTE FORMAT(
    $QUERY$
    INSERT INTO pgmq.meta (queue_name, is_partitioned, is_unlogged)
    VALUES (%L, true, false)
    ON CONFLICT
    DO NOTHING;
    $QUERY$,
    queue_name
  );

  IF partition_col = 'enqueued_at' THEN
    a_partition_col := 'archived_at';
  ELSE
    a_partition_col := partition_col;
  END IF;

  EXECUTE FORMAT(
    $QUERY$
    CREATE TABLE IF NOT EXISTS pgmq.%I (
      msg_id BIGINT NOT NULL,
      read_ct INT DEFAULT 0 NOT NULL,
      enqueued_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
      last_read_at TIMESTAMP WITH TIME ZONE,
      archived_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
      vt TIMESTAMP WITH TIME ZONE NOT NULL,
      message JSONB,
      headers JSONB
    ) PARTITION BY RANGE (%I);
    $QUERY$,
    atable, a_partition_col
  );

  -- https://github.com/pgpartman/pg_partman/blob/master/doc/pg_partman.md
  -- p_parent_table - the existing parent table. MUST be schema qualified, even if in public schema.
  EXECUTE FORMAT(
    $QUERY$
    SELECT %I.create_parent(
      p_parent_table := %L,
      p_control := %L,
      p_interval := %L,
      p_type := case
        when pgmq._get_pg_partman_major_version() = 5 then 'range'
        else 'native'
      end
    )
    $QUERY$,
    pgmq._get_pg_partman_schema(),
    fq_atable,
    a_partition_col,
    partition_interval
  );

  EXECUTE FORMAT(
    $QUERY$
    UPDATE %I.part_config
    SET
        retention = %L,
        retention_keep_table = false,
        retention_keep_index = true,
        automatic_maintenance = 'on'
    WHERE parent_table = %L;
    $QUERY$,
    pgmq._get_pg_partman_schema(),
    retention_interval,
    'pgmq.' || atable
  );

  EXECUTE FORMAT(
    $QUERY$
    CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (archived_at);
    $QUERY$,
    'archived_at_idx_' || queue_name, atable
  );

END;
$_$;


--
-- Name: create_unlogged(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.create_unlogged(queue_name text) RETURNS void
    LANGUAGE plpgsql
    AS $_$
DECLARE
  qtable TEXT := pgmq.format_table_name(queue_name, 'q');
  qtable_seq TEXT := qtable || '_msg_id_seq';
  atable TEXT := pgmq.format_table_name(queue_name, 'a');
BEGIN
  PERFORM pgmq.validate_queue_name(queue_name);
  PERFORM pgmq.acquire_queue_lock(queue_name);

  EXECUTE FORMAT(
    $QUERY$
    CREATE UNLOGGED TABLE IF NOT EXISTS pgmq.%I (
        msg_id BIGINT PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
        read_ct INT DEFAULT 0 NOT NULL,
        enqueued_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
        last_read_at TIMESTAMP WITH TIME ZONE,
        vt TIMESTAMP WITH TIME ZONE NOT NULL,
        message JSONB,
        headers JSONB
    )
    $QUERY$,
    qtable
  );

  EXECUTE FORMAT(
    $QUERY$
    CREATE TABLE IF NOT EXISTS pgmq.%I (
      msg_id BIGINT PRIMARY KEY,
      read_ct INT DEFAULT 0 NOT NULL,
      enqueued_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
      last_read_at TIMESTAMP WITH TIME ZONE,
      archived_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
      vt TIMESTAMP WITH TIME ZONE NOT NULL,
      message JSONB,
      headers JSONB
    );
    $QUERY$,
    atable
  );

  EXECUTE FORMAT(
    $QUERY$
    CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (vt ASC);
    $QUERY$,
    qtable || '_vt_idx', qtable
  );

  EXECUTE FORMAT(
    $QUERY$
    CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (archived_at);
    $QUERY$,
    'archived_at_idx_' || queue_name, atable
  );

  EXECUTE FORMAT(
    $QUERY$
    INSERT INTO pgmq.meta (queue_name, is_partitioned, is_unlogged)
    VALUES (%L, false, true)
    ON CONFLICT
    DO NOTHING;
    $QUERY$,
    queue_name
  );
END;
$_$;


--
-- Name: delete(text, bigint[]); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.delete(queue_name text, msg_ids bigint[]) RETURNS SETOF bigint
    LANGUAGE plpgsql
    AS $_$
DECLARE
    sql TEXT;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
    sql := FORMAT(
        $QUERY$
        DELETE FROM pgmq.%I
        WHERE msg_id = ANY($1)
        RETURNING msg_id
        $QUERY$,
        qtable
    );
    RETURN QUERY EXECUTE sql USING msg_ids;
END;
$_$;


--
-- Name: delete(text, bigint); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.delete(queue_name text, msg_id bigint) RETURNS boolean
    LANGUAGE plpgsql
    AS $_$
DECLARE
    sql TEXT;
    result BIGINT;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
    sql := FORMAT(
        $QUERY$
        DELETE FROM pgmq.%I
        WHERE msg_id = $1
        RETURNING msg_id
        $QUERY$,
        qtable
    );
    EXECUTE sql USING msg_id INTO result;
    RETURN NOT (result IS NULL);
END;
$_$;


--
-- Name: detach_archive(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.detach_archive(queue_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
  atable TEXT := pgmq.format_table_name(queue_name, 'a');
BEGIN
  RAISE WARNING 'detach_archive(queue_name) is deprecated and is a no-op. It will be removed in PGMQ v2.0. Archive tables are no longer member objects.';
END
$$;


--
-- Name: disable_notify_insert(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.disable_notify_insert(queue_name text) RETURNS void
    LANGUAGE plpgsql
    AS $_$
DECLARE
  qtable TEXT := pgmq.format_table_name(queue_name, 'q');
  v_queue_name TEXT := queue_name;
BEGIN
  EXECUTE FORMAT(
    $QUERY$
    DROP TRIGGER IF EXISTS trigger_notify_queue_insert_listeners ON pgmq.%I;
    $QUERY$,
    qtable
  );

  DELETE FROM pgmq.notify_insert_throttle nit WHERE nit.queue_name = v_queue_name;
END;
$_$;


--
-- Name: drop_queue(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.drop_queue(queue_name text) RETURNS boolean
    LANGUAGE plpgsql
    AS $_$
DECLARE
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
    qtable_seq TEXT := qtable || '_msg_id_seq';
    fq_qtable TEXT := 'pgmq.' || qtable;
    atable TEXT := pgmq.format_table_name(queue_name, 'a');
    fq_atable TEXT := 'pgmq.' || atable;
    partitioned BOOLEAN;
BEGIN
    PERFORM pgmq.acquire_queue_lock(queue_name);
    EXECUTE FORMAT(
        $QUERY$
        SELECT is_partitioned FROM pgmq.meta WHERE queue_name = %L
        $QUERY$,
        queue_name
    ) INTO partitioned;

    -- check if the queue exists
    IF NOT EXISTS (
        SELECT 1
        FROM information_schema.tables
        WHERE table_name = qtable and table_schema = 'pgmq'
    ) THEN
        RAISE NOTICE 'pgmq queue `%` does not exist', queue_name;
        RETURN FALSE;
    END IF;

    EXECUTE FORMAT(
        $QUERY$
        DROP TABLE IF EXISTS pgmq.%I
        $QUERY$,
        qtable
    );

    EXECUTE FORMAT(
        $QUERY$
        DROP TABLE IF EXISTS pgmq.%I
        $QUERY$,
        atable
    );

     IF EXISTS (
          SELECT 1
          FROM information_schema.tables
          WHERE table_name = 'meta' and table_schema = 'pgmq'
     ) THEN
        EXECUTE FORMAT(
            $QUERY$
            DELETE FROM pgmq.meta WHERE queue_name = %L
            $QUERY$,
            queue_name
        );
     END IF;

     IF partitioned THEN
        EXECUTE FORMAT(
          $QUERY$
          DELETE FROM %I.part_config where parent_table in (%L, %L)
          $QUERY$,
          pgmq._get_pg_partman_schema(), fq_qtable, fq_atable
        );
     END IF;

    RETURN TRUE;
END;
$_$;


--
-- Name: drop_queue(text, boolean); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.drop_queue(queue_name text, partitioned boolean) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
    fq_qtable TEXT := 'pgmq.' || qtable;
    atable TEXT := pgmq.format_table_name(queue_name, 'a');
    fq_atable TEXT := 'pgmq.' || atable;
BEGIN
    RAISE WARNING 'drop_queue(queue_name, partitioned) is deprecated and will be removed in PGMQ v2.0. Use drop_queue(queue_name) instead';

    PERFORM pgmq.drop_queue(queue_name);

    RETURN TRUE;
END;
$$;


--
-- Name: enable_notify_insert(text, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.enable_notify_insert(queue_name text, throttle_interval_ms integer DEFAULT 250) RETURNS void
    LANGUAGE plpgsql
    AS $_$
DECLARE
  qtable TEXT := pgmq.format_table_name(queue_name, 'q');
  v_queue_name TEXT := queue_name;
  v_throttle_interval_ms INTEGER := throttle_interval_ms;
BEGIN
  -- Validate that throttle_interval_ms is non-negative
  IF v_throttle_interval_ms < 0 THEN
    RAISE EXCEPTION 'throttle_interval_ms must be non-negative';
  END IF;

  -- Validate that the queue table exists
  IF NOT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = 'pgmq' AND table_name = qtable) THEN
    RAISE EXCEPTION 'Queue "%" does not exist. Create it first using pgmq.create()', v_queue_name;
  END IF;

  PERFORM pgmq.disable_notify_insert(v_queue_name);

  INSERT INTO pgmq.notify_insert_throttle (queue_name, throttle_interval_ms)
  VALUES (v_queue_name, v_throttle_interval_ms)
  ON CONFLICT ON CONSTRAINT notify_insert_throttle_queue_name_key DO UPDATE
      SET throttle_interval_ms = EXCLUDED.throttle_interval_ms,
          last_notified_at = to_timestamp(0);

  EXECUTE FORMAT(
    $QUERY$
    CREATE CONSTRAINT TRIGGER trigger_notify_queue_insert_listeners
    AFTER INSERT ON pgmq.%I
    DEFERRABLE FOR EACH ROW
    EXECUTE PROCEDURE pgmq.notify_queue_listeners()
    $QUERY$,
    qtable
  );
END;
$_$;


--
-- Name: format_table_name(text, text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.format_table_name(queue_name text, prefix text) RETURNS text
    LANGUAGE plpgsql
    AS $_$
BEGIN
    IF queue_name ~ '\$|;|--|'''
    THEN
        RAISE EXCEPTION 'queue name contains invalid characters: $, ;, --, or \''';
    END IF;
    RETURN lower(prefix || '_' || queue_name);
END;
$_$;


--
-- Name: list_notify_insert_throttles(); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.list_notify_insert_throttles() RETURNS TABLE(queue_name text, throttle_interval_ms integer, last_notified_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT queue_name, throttle_interval_ms, last_notified_at
    FROM pgmq.notify_insert_throttle
    ORDER BY queue_name;
$$;


--
-- Name: list_queues(); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.list_queues() RETURNS SETOF pgmq.queue_record
    LANGUAGE plpgsql
    AS $$
BEGIN
  RETURN QUERY SELECT * FROM pgmq.meta;
END
$$;


--
-- Name: list_topic_bindings(); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.list_topic_bindings() RETURNS TABLE(pattern text, queue_name text, bound_at timestamp with time zone, compiled_regex text)
    LANGUAGE sql STABLE
    AS $$
    SELECT pattern, queue_name, bound_at, compiled_regex
    FROM pgmq.topic_bindings
    ORDER BY bound_at DESC, pattern, queue_name;
$$;


--
-- Name: list_topic_bindings(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.list_topic_bindings(queue_name text) RETURNS TABLE(pattern text, queue_name text, bound_at timestamp with time zone, compiled_regex text)
    LANGUAGE sql STABLE
    AS $$
    SELECT pattern, tb.queue_name, bound_at, compiled_regex
    FROM pgmq.topic_bindings tb
    WHERE tb.queue_name = list_topic_bindings.queue_name
    ORDER BY bound_at DESC, pattern;
$$;


--
-- Name: metrics(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.metrics(queue_name text) RETURNS pgmq.metrics_result
    LANGUAGE plpgsql
    AS $_$
DECLARE
    result_row pgmq.metrics_result;
    query TEXT;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
    query := FORMAT(
        $QUERY$
        WITH q_summary AS (
            SELECT
                count(*) as queue_length,
                count(CASE WHEN vt <= NOW() THEN 1 END) as queue_visible_length,
                EXTRACT(epoch FROM (NOW() - max(enqueued_at)))::int as newest_msg_age_sec,
                EXTRACT(epoch FROM (NOW() - min(enqueued_at)))::int as oldest_msg_age_sec,
                NOW() as scrape_time
            FROM pgmq.%I
        ),
        all_metrics AS (
            SELECT CASE
                WHEN is_called THEN last_value ELSE 0
                END as total_messages
            FROM pgmq.%I
        )
        SELECT
            %L as queue_name,
            q_summary.queue_length,
            q_summary.newest_msg_age_sec,
            q_summary.oldest_msg_age_sec,
            all_metrics.total_messages,
            q_summary.scrape_time,
            q_summary.queue_visible_length
        FROM q_summary, all_metrics
        $QUERY$,
        qtable, qtable || '_msg_id_seq', queue_name
    );
    EXECUTE query INTO result_row;
    RETURN result_row;
END;
$_$;


--
-- Name: metrics_all(); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.metrics_all() RETURNS SETOF pgmq.metrics_result
    LANGUAGE plpgsql
    AS $$
DECLARE
    row_name RECORD;
    result_row pgmq.metrics_result;
BEGIN
    FOR row_name IN SELECT queue_name FROM pgmq.meta LOOP
        result_row := pgmq.metrics(row_name.queue_name);
        RETURN NEXT result_row;
    END LOOP;
END;
$$;


--
-- Name: notify_queue_listeners(); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.notify_queue_listeners() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
  queue_name_extracted TEXT; -- Queue name extracted from trigger table name
  updated_count        INTEGER; -- Number of rows updated (0 or 1)
BEGIN
  queue_name_extracted := substring(TG_TABLE_NAME from 3);

  UPDATE pgmq.notify_insert_throttle
  SET last_notified_at = clock_timestamp()
  WHERE queue_name = queue_name_extracted
    AND (
      throttle_interval_ms = 0 -- No throttling configured
          OR clock_timestamp() - last_notified_at >=
             (throttle_interval_ms * INTERVAL '1 millisecond') -- Throttle interval has elapsed
    );

  -- Check how many rows were updated (will be 0 or 1)
  GET DIAGNOSTICS updated_count = ROW_COUNT;

  IF updated_count > 0 THEN
    PERFORM PG_NOTIFY('pgmq.' || TG_TABLE_NAME || '.' || TG_OP, NULL);
  END IF;

RETURN NEW;
END;
$$;


--
-- Name: pop(text, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.pop(queue_name text, qty integer DEFAULT 1) RETURNS SETOF pgmq.message_record
    LANGUAGE plpgsql
    AS $_$
DECLARE
    sql TEXT;
    result pgmq.message_record;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
    sql := FORMAT(
        $QUERY$
        WITH cte AS
            (
                SELECT msg_id
                FROM pgmq.%I
                WHERE vt <= clock_timestamp()
                ORDER BY msg_id ASC
                LIMIT $1
                FOR UPDATE SKIP LOCKED
            )
        DELETE from pgmq.%I
        WHERE msg_id IN (select msg_id from cte)
        RETURNING msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers;
        $QUERY$,
        qtable, qtable
    );
    RETURN QUERY EXECUTE sql USING qty;
END;
$_$;


--
-- Name: purge_queue(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.purge_queue(queue_name text) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
  deleted_count INTEGER;
  qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
  -- Get the row count before truncating
  EXECUTE format('SELECT count(*) FROM pgmq.%I', qtable) INTO deleted_count;

  -- Use TRUNCATE for better performance on large tables
  EXECUTE format('TRUNCATE TABLE pgmq.%I', qtable);

  -- Return the number of purged rows
  RETURN deleted_count;
END
$$;


--
-- Name: read(text, integer, integer, jsonb); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.read(queue_name text, vt integer, qty integer, conditional jsonb DEFAULT '{}'::jsonb) RETURNS SETOF pgmq.message_record
    LANGUAGE plpgsql
    AS $_$
DECLARE
    sql TEXT;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
    sql := FORMAT(
        $QUERY$
        WITH cte AS
        (
            SELECT msg_id
            FROM pgmq.%I
            WHERE vt <= clock_timestamp() AND CASE
                WHEN %L != '{}'::jsonb THEN (message @> %2$L)::integer
                ELSE 1
            END = 1
            ORDER BY msg_id ASC
            LIMIT $1
            FOR UPDATE SKIP LOCKED
        )
        UPDATE pgmq.%I m
        SET
            last_read_at = clock_timestamp(),
            vt = clock_timestamp() + %L,
            read_ct = read_ct + 1
        FROM cte
        WHERE m.msg_id = cte.msg_id
        RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.last_read_at, m.vt, m.message, m.headers;
        $QUERY$,
        qtable, conditional, qtable, make_interval(secs => vt)
    );
    RETURN QUERY EXECUTE sql USING qty;
END;
$_$;


--
-- Name: read_grouped(text, integer, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.read_grouped(queue_name text, vt integer, qty integer) RETURNS SETOF pgmq.message_record
    LANGUAGE plpgsql
    AS $_$
DECLARE
    sql TEXT;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
    sql := FORMAT(
        $QUERY$
        WITH fifo_groups AS (
            -- Find the minimum msg_id for each FIFO group that's ready to be processed
            SELECT
                COALESCE(headers->>'x-pgmq-group', '_default_fifo_group') as fifo_key,
                MIN(msg_id) as min_msg_id
            FROM pgmq.%I
            WHERE vt <= clock_timestamp()
            GROUP BY COALESCE(headers->>'x-pgmq-group', '_default_fifo_group')
        ),
        locked_groups AS (
            -- Lock the first available message in each FIFO group
            SELECT
                m.msg_id,
                fg.fifo_key
            FROM pgmq.%I m
            INNER JOIN fifo_groups fg ON
                COALESCE(m.headers->>'x-pgmq-group', '_default_fifo_group') = fg.fifo_key
                AND m.msg_id = fg.min_msg_id
            WHERE m.vt <= clock_timestamp()
            ORDER BY m.msg_id ASC
            FOR UPDATE SKIP LOCKED
        ),
        group_priorities AS (
            -- Assign priority to groups based on their oldest message
            SELECT
                fifo_key,
                msg_id as min_msg_id,
                ROW_NUMBER() OVER (ORDER BY msg_id) as group_priority
            FROM locked_groups
        ),
        filtered_groups as (
            SELECT * FROM group_priorities gp
            WHERE NOT EXISTS (
                -- Ensure no earlier message in this group is currently being processed
                SELECT 1
                FROM pgmq.%I m2
                WHERE COALESCE(m2.headers->>'x-pgmq-group', '_default_fifo_group') = gp.fifo_key
                AND m2.vt > clock_timestamp()
                AND m2.msg_id < gp.min_msg_id
            )
        ),
        available_messages as (
            SELECT gp.fifo_key, t.msg_id,gp.group_priority,
                ROW_NUMBER() OVER (PARTITION BY gp.fifo_key ORDER BY t.msg_id) as msg_rank_in_group
            FROM filtered_groups gp
            CROSS JOIN LATERAL (
                SELECT *
                FROM pgmq.%I t
                WHERE COALESCE(t.headers->>'x-pgmq-group', '_default_fifo_group') = gp.fifo_key
                AND t.vt <= clock_timestamp()
                ORDER BY msg_id
                LIMIT $1  -- tip to limit query impact, we know we need at most qty in each group
            ) t
            ORDER BY gp.group_priority
        ),
        batch_selection AS (
            -- Select messages to fill batch, prioritizing earliest group
            SELECT
                msg_id,
                ROW_NUMBER() OVER (ORDER BY group_priority, msg_rank_in_group) as overall_rank
            FROM available_messages
        ),
        selected_messages AS (
            -- Limit to requested quantity
            SELECT msg_id
            FROM batch_selection
            WHERE overall_rank <= $1
            ORDER BY msg_id
            FOR UPDATE SKIP LOCKED
        )
        UPDATE pgmq.%I m
        SET
            vt = clock_timestamp() + %L,
            read_ct = read_ct + 1,
            last_read_at = clock_timestamp()
        FROM selected_messages sm
        WHERE m.msg_id = sm.msg_id
        RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.last_read_at, m.vt, m.message, m.headers;
        $QUERY$,
        qtable, qtable, qtable, qtable, qtable, make_interval(secs => vt)
    );
    RETURN QUERY EXECUTE sql USING qty;
END;
$_$;


--
-- Name: read_grouped_head(text, integer, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.read_grouped_head(queue_name text, vt integer, qty integer) RETURNS SETOF pgmq.message_record
    LANGUAGE plpgsql
    AS $_$
DECLARE
    sql TEXT;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
    sql := FORMAT(
        $QUERY$
        WITH fifo_groups AS (
            -- Determine the absolute head (oldest) message id per FIFO group, regardless of visibility
            SELECT 
                COALESCE(headers->>'x-pgmq-group', '_default_fifo_group') AS fifo_key,
                MIN(msg_id) AS head_msg_id
            FROM pgmq.%1$I
            GROUP BY COALESCE(headers->>'x-pgmq-group', '_default_fifo_group')
        ),
        selected_messages AS (
            -- Take at most 1 message per group
            SELECT g.head_msg_id msg_id
            FROM fifo_groups g
            JOIN pgmq.%1$I q ON q.msg_id = g.head_msg_id
	        WHERE q.vt <= clock_timestamp()
            ORDER BY q.msg_id
            LIMIT $1
            FOR UPDATE SKIP LOCKED
        )
        UPDATE pgmq.%1$I m
        SET
            vt = clock_timestamp() + %2$L,
            read_ct = read_ct + 1,
            last_read_at = clock_timestamp()
        FROM selected_messages sm
        WHERE m.msg_id = sm.msg_id
        RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.last_read_at, m.vt, m.message, m.headers;
        $QUERY$,
        qtable, make_interval(secs => vt)
    );
    RETURN QUERY EXECUTE sql USING qty;
END;
$_$;


--
-- Name: read_grouped_rr(text, integer, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.read_grouped_rr(queue_name text, vt integer, qty integer) RETURNS SETOF pgmq.message_record
    LANGUAGE plpgsql
    AS $_$
DECLARE
    sql TEXT;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
    sql := FORMAT(
        $QUERY$
        WITH fifo_groups AS (
            -- Determine the absolute head (oldest) message id per FIFO group, regardless of visibility
            SELECT
                COALESCE(headers->>'x-pgmq-group', '_default_fifo_group') AS fifo_key,
                MIN(msg_id) AS head_msg_id
            FROM pgmq.%1$I
            GROUP BY COALESCE(headers->>'x-pgmq-group', '_default_fifo_group')
        ),
        eligible_groups AS (
            -- Only groups whose head message is currently visible
            -- Acquire a transaction-level advisory lock per group to prevent concurrent selection
            SELECT
                g.fifo_key,
                g.head_msg_id,
                ROW_NUMBER() OVER (ORDER BY g.head_msg_id) AS group_priority
            FROM fifo_groups g
            JOIN pgmq.%2$I h ON h.msg_id = g.head_msg_id
            WHERE h.vt <= clock_timestamp()
              AND pg_try_advisory_xact_lock(pg_catalog.hashtextextended(g.fifo_key, 0))
        ),
        available_messages AS (
            -- All currently visible messages starting at the head for each eligible group
            SELECT
                m.msg_id,
                eg.group_priority,
                ROW_NUMBER() OVER (
                    PARTITION BY eg.fifo_key
                    ORDER BY m.msg_id
                ) AS msg_rank_in_group
            FROM pgmq.%3$I m
            JOIN eligible_groups eg
              ON COALESCE(m.headers->>'x-pgmq-group', '_default_fifo_group') = eg.fifo_key
            WHERE m.vt <= clock_timestamp()
              AND m.msg_id >= eg.head_msg_id
        ),
        ordered_messages AS (
            -- Layered round-robin: take rank 1 of all groups by group_priority, then rank 2, etc.
            -- Assign selection order before locking
            SELECT msg_id, ROW_NUMBER() OVER (ORDER BY msg_rank_in_group, group_priority) as selection_order
            FROM available_messages
        ),
        selected_messages AS (
            -- Lock the messages in the correct order, preserving selection_order
            SELECT om.msg_id, om.selection_order
            FROM ordered_messages om
            JOIN pgmq.%4$I m ON m.msg_id = om.msg_id
            WHERE om.selection_order <= $1
            ORDER BY om.selection_order
            FOR UPDATE OF m SKIP LOCKED
        ),
        updated_messages AS (
            UPDATE pgmq.%5$I m
            SET
                vt = clock_timestamp() + %6$L,
                read_ct = read_ct + 1,
                last_read_at = clock_timestamp()
            FROM selected_messages sm
            WHERE m.msg_id = sm.msg_id
              AND m.vt <= clock_timestamp() -- final guard to avoid duplicate reads under races
            RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.last_read_at, m.vt, m.message, m.headers, sm.selection_order
        )
        SELECT msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers
        FROM updated_messages
        ORDER BY selection_order;
        $QUERY$,
        qtable, qtable, qtable, qtable, qtable, make_interval(secs => vt)
    );
    RETURN QUERY EXECUTE sql USING qty;
END;
$_$;


--
-- Name: read_grouped_rr_with_poll(text, integer, integer, integer, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.read_grouped_rr_with_poll(queue_name text, vt integer, qty integer, max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100) RETURNS SETOF pgmq.message_record
    LANGUAGE plpgsql
    AS $$
DECLARE
    r pgmq.message_record;
    stop_at TIMESTAMP;
BEGIN
    stop_at := clock_timestamp() + make_interval(secs => max_poll_seconds);
    LOOP
      IF (SELECT clock_timestamp() >= stop_at) THEN
        RETURN;
      END IF;

      FOR r IN
        SELECT * FROM pgmq.read_grouped_rr(queue_name, vt, qty)
      LOOP
        RETURN NEXT r;
      END LOOP;
      IF FOUND THEN
        RETURN;
      ELSE
        PERFORM pg_sleep(poll_interval_ms::numeric / 1000);
      END IF;
    END LOOP;
END;
$$;


--
-- Name: read_grouped_with_poll(text, integer, integer, integer, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.read_grouped_with_poll(queue_name text, vt integer, qty integer, max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100) RETURNS SETOF pgmq.message_record
    LANGUAGE plpgsql
    AS $$
DECLARE
    r pgmq.message_record;
    stop_at TIMESTAMP;
BEGIN
    stop_at := clock_timestamp() + make_interval(secs => max_poll_seconds);
    LOOP
      IF (SELECT clock_timestamp() >= stop_at) THEN
        RETURN;
      END IF;

      FOR r IN
        SELECT * FROM pgmq.read_grouped(queue_name, vt, qty)
      LOOP
        RETURN NEXT r;
      END LOOP;
      IF FOUND THEN
        RETURN;
      ELSE
        PERFORM pg_sleep(poll_interval_ms::numeric / 1000);
      END IF;
    END LOOP;
END;
$$;


--
-- Name: read_with_poll(text, integer, integer, integer, integer, jsonb); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.read_with_poll(queue_name text, vt integer, qty integer, max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100, conditional jsonb DEFAULT '{}'::jsonb) RETURNS SETOF pgmq.message_record
    LANGUAGE plpgsql
    AS $_$
DECLARE
    r pgmq.message_record;
    stop_at TIMESTAMP;
    sql TEXT;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
    stop_at := clock_timestamp() + make_interval(secs => max_poll_seconds);
    LOOP
      IF (SELECT clock_timestamp() >= stop_at) THEN
        RETURN;
      END IF;

      sql := FORMAT(
          $QUERY$
          WITH cte AS
          (
              SELECT msg_id
              FROM pgmq.%I
              WHERE vt <= clock_timestamp() AND CASE
                  WHEN %L != '{}'::jsonb THEN (message @> %2$L)::integer
                  ELSE 1
              END = 1
              ORDER BY msg_id ASC
              LIMIT $1
              FOR UPDATE SKIP LOCKED
          )
          UPDATE pgmq.%I m
          SET
              last_read_at = clock_timestamp(),
              vt = clock_timestamp() + %L,
              read_ct = read_ct + 1
          FROM cte
          WHERE m.msg_id = cte.msg_id
          RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.last_read_at, m.vt, m.message, m.headers;
          $QUERY$,
          qtable, conditional, qtable, make_interval(secs => vt)
      );

      FOR r IN
        EXECUTE sql USING qty
      LOOP
        RETURN NEXT r;
      END LOOP;
      IF FOUND THEN
        RETURN;
      ELSE
        PERFORM pg_sleep(poll_interval_ms::numeric / 1000);
      END IF;
    END LOOP;
END;
$_$;


--
-- Name: send(text, jsonb); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb) RETURNS SETOF bigint
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send(queue_name, msg, NULL, clock_timestamp());
$$;


--
-- Name: send(text, jsonb, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, delay integer) RETURNS SETOF bigint
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send(queue_name, msg, NULL, clock_timestamp() + make_interval(secs => delay));
$$;


--
-- Name: send(text, jsonb, jsonb); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb) RETURNS SETOF bigint
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send(queue_name, msg, headers, clock_timestamp());
$$;


--
-- Name: send(text, jsonb, timestamp with time zone); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, delay timestamp with time zone) RETURNS SETOF bigint
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send(queue_name, msg, NULL, delay);
$$;


--
-- Name: send(text, jsonb, jsonb, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb, delay integer) RETURNS SETOF bigint
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send(queue_name, msg, headers, clock_timestamp() + make_interval(secs => delay));
$$;


--
-- Name: send(text, jsonb, jsonb, timestamp with time zone); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb, delay timestamp with time zone) RETURNS SETOF bigint
    LANGUAGE plpgsql
    AS $_$
DECLARE
    sql TEXT;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
    sql := FORMAT(
            $QUERY$
        INSERT INTO pgmq.%I (vt, message, headers)
        VALUES ($2, $1, $3)
        RETURNING msg_id;
        $QUERY$,
            qtable
           );
    RETURN QUERY EXECUTE sql USING msg, delay, headers;
END;
$_$;


--
-- Name: send_batch(text, jsonb[]); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[]) RETURNS SETOF bigint
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send_batch(queue_name, msgs, NULL, clock_timestamp());
$$;


--
-- Name: send_batch(text, jsonb[], jsonb[]); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[]) RETURNS SETOF bigint
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send_batch(queue_name, msgs, headers, clock_timestamp());
$$;


--
-- Name: send_batch(text, jsonb[], integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], delay integer) RETURNS SETOF bigint
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send_batch(queue_name, msgs, NULL, clock_timestamp() + make_interval(secs => delay));
$$;


--
-- Name: send_batch(text, jsonb[], timestamp with time zone); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], delay timestamp with time zone) RETURNS SETOF bigint
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send_batch(queue_name, msgs, NULL, delay);
$$;


--
-- Name: send_batch(text, jsonb[], jsonb[], integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay integer) RETURNS SETOF bigint
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send_batch(queue_name, msgs, headers, clock_timestamp() + make_interval(secs => delay));
$$;


--
-- Name: send_batch(text, jsonb[], jsonb[], timestamp with time zone); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay timestamp with time zone) RETURNS SETOF bigint
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pgmq._validate_batch_params(msgs, headers);
    RETURN QUERY SELECT * FROM pgmq._send_batch(queue_name, msgs, headers, delay);
END;
$$;


--
-- Name: send_batch_topic(text, jsonb[]); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_batch_topic(routing_key text, msgs jsonb[]) RETURNS TABLE(queue_name text, msg_id bigint)
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send_batch_topic(routing_key, msgs, NULL, clock_timestamp());
$$;


--
-- Name: send_batch_topic(text, jsonb[], jsonb[]); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_batch_topic(routing_key text, msgs jsonb[], headers jsonb[]) RETURNS TABLE(queue_name text, msg_id bigint)
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send_batch_topic(routing_key, msgs, headers, clock_timestamp());
$$;


--
-- Name: send_batch_topic(text, jsonb[], integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_batch_topic(routing_key text, msgs jsonb[], delay integer) RETURNS TABLE(queue_name text, msg_id bigint)
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send_batch_topic(routing_key, msgs, NULL, clock_timestamp() + make_interval(secs => delay));
$$;


--
-- Name: send_batch_topic(text, jsonb[], timestamp with time zone); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_batch_topic(routing_key text, msgs jsonb[], delay timestamp with time zone) RETURNS TABLE(queue_name text, msg_id bigint)
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send_batch_topic(routing_key, msgs, NULL, delay);
$$;


--
-- Name: send_batch_topic(text, jsonb[], jsonb[], integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_batch_topic(routing_key text, msgs jsonb[], headers jsonb[], delay integer) RETURNS TABLE(queue_name text, msg_id bigint)
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.send_batch_topic(routing_key, msgs, headers, clock_timestamp() + make_interval(secs => delay));
$$;


--
-- Name: send_batch_topic(text, jsonb[], jsonb[], timestamp with time zone); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_batch_topic(routing_key text, msgs jsonb[], headers jsonb[], delay timestamp with time zone) RETURNS TABLE(queue_name text, msg_id bigint)
    LANGUAGE plpgsql
    AS $$
DECLARE
    b RECORD;
BEGIN
    PERFORM pgmq.validate_routing_key(routing_key);

    -- Validate batch parameters once (not per queue)
    PERFORM pgmq._validate_batch_params(msgs, headers);

    -- Filter matching patterns in SQL for better performance (uses index)
    -- Any failure will rollback the entire transaction
    FOR b IN
        SELECT DISTINCT tb.queue_name
        FROM pgmq.topic_bindings tb
        WHERE routing_key ~ tb.compiled_regex
        ORDER BY tb.queue_name -- Deterministic ordering, deduplicated by queue_name
        LOOP
            -- Use private _send_batch to avoid redundant validation
            RETURN QUERY
            SELECT b.queue_name, batch_result.msg_id
            FROM pgmq._send_batch(b.queue_name, msgs, headers, delay) AS batch_result(msg_id);
        END LOOP;

    RETURN;
END;
$$;


--
-- Name: send_topic(text, jsonb); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_topic(routing_key text, msg jsonb) RETURNS integer
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN pgmq.send_topic(routing_key, msg, NULL, 0);
END;
$$;


--
-- Name: send_topic(text, jsonb, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_topic(routing_key text, msg jsonb, delay integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN pgmq.send_topic(routing_key, msg, NULL, delay);
END;
$$;


--
-- Name: send_topic(text, jsonb, jsonb, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.send_topic(routing_key text, msg jsonb, headers jsonb, delay integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    b             RECORD;
    matched_count integer := 0;
BEGIN
    PERFORM pgmq.validate_routing_key(routing_key);

    IF msg IS NULL THEN
        RAISE EXCEPTION 'msg cannot be NULL';
    END IF;

    IF delay < 0 THEN
        RAISE EXCEPTION 'delay cannot be negative, got: %', delay;
    END IF;

    -- Filter matching patterns in SQL for better performance (uses index)
    -- Any failure will rollback the entire transaction
    FOR b IN
        SELECT DISTINCT tb.queue_name
        FROM pgmq.topic_bindings tb
        WHERE routing_key ~ tb.compiled_regex
        ORDER BY tb.queue_name -- Deterministic ordering, deduplicated by queue_name
        LOOP
            PERFORM pgmq.send(b.queue_name, msg, headers, delay);
            matched_count := matched_count + 1;
        END LOOP;

    RETURN matched_count;
END;
$$;


--
-- Name: set_vt(text, bigint[], integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.set_vt(queue_name text, msg_ids bigint[], vt integer) RETURNS SETOF pgmq.message_record
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.set_vt(queue_name, msg_ids, clock_timestamp() + make_interval(secs => vt));
$$;


--
-- Name: set_vt(text, bigint[], timestamp with time zone); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.set_vt(queue_name text, msg_ids bigint[], vt timestamp with time zone) RETURNS SETOF pgmq.message_record
    LANGUAGE plpgsql
    AS $_$
DECLARE
    sql TEXT;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
    sql := FORMAT(
        $QUERY$
        UPDATE pgmq.%I
        SET vt = $1
        WHERE msg_id = ANY($2)
        RETURNING msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers;
        $QUERY$,
        qtable
    );
    RETURN QUERY EXECUTE sql USING vt, msg_ids;
END;
$_$;


--
-- Name: set_vt(text, bigint, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.set_vt(queue_name text, msg_id bigint, vt integer) RETURNS SETOF pgmq.message_record
    LANGUAGE sql
    AS $$
    SELECT * FROM pgmq.set_vt(queue_name, msg_id, clock_timestamp() + make_interval(secs => vt));
$$;


--
-- Name: set_vt(text, bigint, timestamp with time zone); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.set_vt(queue_name text, msg_id bigint, vt timestamp with time zone) RETURNS SETOF pgmq.message_record
    LANGUAGE plpgsql
    AS $_$
DECLARE
    sql TEXT;
    result pgmq.message_record;
    qtable TEXT := pgmq.format_table_name(queue_name, 'q');
BEGIN
    sql := FORMAT(
        $QUERY$
        UPDATE pgmq.%I
        SET vt = $1
        WHERE msg_id = $2
        RETURNING msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers;
        $QUERY$, 
        qtable
    );
    RETURN QUERY EXECUTE sql USING vt, msg_id;
END;
$_$;


--
-- Name: test_routing(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.test_routing(routing_key text) RETURNS TABLE(pattern text, queue_name text, compiled_regex text)
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    PERFORM pgmq.validate_routing_key(routing_key);
    RETURN QUERY
        SELECT b.pattern,
               b.queue_name,
               b.compiled_regex
        FROM pgmq.topic_bindings b
        WHERE routing_key ~ b.compiled_regex
        ORDER BY b.pattern;
END;
$$;


--
-- Name: unbind_topic(text, text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.unbind_topic(pattern text, queue_name text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    rows_deleted integer;
BEGIN
    IF pattern IS NULL OR pattern = '' THEN
        RAISE EXCEPTION 'pattern cannot be NULL or empty';
    END IF;

    IF queue_name IS NULL OR queue_name = '' THEN
        RAISE EXCEPTION 'queue_name cannot be NULL or empty';
    END IF;

    DELETE
    FROM pgmq.topic_bindings
    WHERE topic_bindings.pattern = unbind_topic.pattern
      AND topic_bindings.queue_name = unbind_topic.queue_name;

    GET DIAGNOSTICS rows_deleted = ROW_COUNT;

    IF rows_deleted > 0 THEN
        RETURN true;
    ELSE
        RETURN false;
    END IF;
END;
$$;


--
-- Name: update_notify_insert(text, integer); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.update_notify_insert(queue_name text, throttle_interval_ms integer) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF throttle_interval_ms < 0 THEN
        RAISE EXCEPTION 'throttle_interval_ms must be non-negative, got: %', throttle_interval_ms;
    END IF;

    IF NOT EXISTS (SELECT 1 FROM pgmq.meta WHERE meta.queue_name = update_notify_insert.queue_name) THEN
        RAISE EXCEPTION 'Queue "%" does not exist. Create the queue first using pgmq.create()', queue_name;
    END IF;

    IF NOT EXISTS (SELECT 1 FROM pgmq.notify_insert_throttle WHERE notify_insert_throttle.queue_name = update_notify_insert.queue_name) THEN
        RAISE EXCEPTION 'Queue "%" does not have notify_insert enabled. Enable it first using pgmq.enable_notify_insert()', queue_name;
    END IF;

    UPDATE pgmq.notify_insert_throttle
    SET throttle_interval_ms = update_notify_insert.throttle_interval_ms,
        last_notified_at = to_timestamp(0)
    WHERE notify_insert_throttle.queue_name = update_notify_insert.queue_name;
END;
$$;


--
-- Name: validate_queue_name(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.validate_queue_name(queue_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
  IF length(queue_name) > 47 THEN
    -- complete table identifier must be <= 63
    -- https://www.postgresql.org/docs/17/sql-syntax-lexical.html#SQL-SYNTAX-IDENTIFIERS
    -- e.g. template_pgmq_q_my_queue is an identifier for my_queue when partitioned
    -- template_pgmq_q_ (16) + <a max length queue name> (47) = 63 
    RAISE EXCEPTION 'queue name is too long, maximum length is 47 characters';
  END IF;
END;
$$;


--
-- Name: validate_routing_key(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.validate_routing_key(routing_key text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
BEGIN
    -- Valid routing key examples:
    --   "logs.error"
    --   "app.user-service.auth"
    --   "system_events.db.connection_failed"
    --
    -- Invalid routing key examples:
    --   ""                     - empty
    --   ".logs.error"          - starts with dot
    --   "logs.error."          - ends with dot
    --   "logs..error"          - consecutive dots
    --   "logs.error!"          - invalid character
    --   "logs error"           - space not allowed
    --   "logs.*"               - wildcards not allowed in routing keys

    IF routing_key IS NULL OR routing_key = '' THEN
        RAISE EXCEPTION 'routing_key cannot be NULL or empty';
    END IF;

    IF length(routing_key) > 255 THEN
        RAISE EXCEPTION 'routing_key length cannot exceed 255 characters, got % characters', length(routing_key);
    END IF;

    IF routing_key !~ '^[a-zA-Z0-9._-]+$' THEN
        RAISE EXCEPTION 'routing_key contains invalid characters. Only alphanumeric, dots, hyphens, and underscores are allowed. Got: %', routing_key;
    END IF;

    IF routing_key ~ '^\.' THEN
        RAISE EXCEPTION 'routing_key cannot start with a dot. Got: %', routing_key;
    END IF;

    IF routing_key ~ '\.$' THEN
        RAISE EXCEPTION 'routing_key cannot end with a dot. Got: %', routing_key;
    END IF;

    IF routing_key ~ '\.\.' THEN
        RAISE EXCEPTION 'routing_key cannot contain consecutive dots. Got: %', routing_key;
    END IF;

    RETURN true;
END;
$_$;


--
-- Name: validate_topic_pattern(text); Type: FUNCTION; Schema: pgmq; Owner: -
--

CREATE FUNCTION pgmq.validate_topic_pattern(pattern text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
BEGIN
    -- Valid pattern examples:
    --   "logs.*"           - matches one segment after logs. (e.g., logs.error, logs.info)
    --   "logs.#"           - matches one or more segments after logs. (e.g., logs.error, logs.api.error)
    --   "*.error"          - matches one segment before .error (e.g., app.error, db.error)
    --   "#.error"          - matches one or more segments before .error (e.g., app.error, x.y.error)
    --   "app.*.#"          - mixed wildcards (one segment then one or more)
    --   "#"                - catch-all pattern, matches any routing key
    --
    -- Invalid pattern examples:
    --   ".logs.*"          - starts with dot
    --   "logs.*."          - ends with dot
    --   "logs..error"      - consecutive dots
    --   "logs.**"          - consecutive stars
    --   "logs.##"          - consecutive hashes
    --   "logs.*#"          - adjacent wildcards
    --   "logs.error!"      - invalid character

    IF pattern IS NULL OR pattern = '' THEN
        RAISE EXCEPTION 'pattern cannot be NULL or empty';
    END IF;

    IF length(pattern) > 255 THEN
        RAISE EXCEPTION 'pattern length cannot exceed 255 characters, got % characters', length(pattern);
    END IF;

    IF pattern !~ '^[a-zA-Z0-9._\-*#]+$' THEN
        RAISE EXCEPTION 'pattern contains invalid characters. Only alphanumeric, dots, hyphens, underscores, *, and # are allowed. Got: %', pattern;
    END IF;

    IF pattern ~ '^\.' THEN
        RAISE EXCEPTION 'pattern cannot start with a dot. Got: %', pattern;
    END IF;

    IF pattern ~ '\.$' THEN
        RAISE EXCEPTION 'pattern cannot end with a dot. Got: %', pattern;
    END IF;

    IF pattern ~ '\.\.' THEN
        RAISE EXCEPTION 'pattern cannot contain consecutive dots. Got: %', pattern;
    END IF;

    IF pattern ~ '\*\*' THEN
        RAISE EXCEPTION 'pattern cannot contain consecutive stars (**). Use # for multi-segment matching. Got: %', pattern;
    END IF;

    IF pattern ~ '##' THEN
        RAISE EXCEPTION 'pattern cannot contain consecutive hashes (##). A single # already matches zero or more segments. Got: %', pattern;
    END IF;

    IF pattern ~ '\*#' OR pattern ~ '#\*' THEN
        RAISE EXCEPTION 'pattern cannot contain adjacent wildcards (*# or #*). Separate wildcards with dots. Got: %', pattern;
    END IF;

    RETURN true;
END;
$_$;


--
-- Name: alias_history; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.alias_history (
    change_id bigint NOT NULL,
    alias text NOT NULL,
    from_flow_slug text,
    to_flow_slug text NOT NULL,
    reason text NOT NULL,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT alias_history_reason_domain CHECK ((reason = ANY (ARRAY['activated'::text, 'set'::text])))
);


--
-- Name: alias_history_change_id_seq; Type: SEQUENCE; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.alias_history ALTER COLUMN change_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME pgflow.alias_history_change_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: aliases; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.aliases (
    alias text NOT NULL,
    flow_slug text NOT NULL,
    high_water_version integer NOT NULL,
    activated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT aliases_alias_valid CHECK (pgflow.is_valid_slug(alias)),
    CONSTRAINT aliases_high_water_positive CHECK ((high_water_version >= 1))
);


--
-- Name: deps; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.deps (
    flow_slug text NOT NULL,
    dep_slug text NOT NULL,
    step_slug text NOT NULL,
    CONSTRAINT deps_not_self CHECK ((dep_slug <> step_slug))
);


--
-- Name: event_subscribers; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.event_subscribers (
    subscriber_id uuid NOT NULL,
    flow_slug text NOT NULL,
    expires_at timestamp with time zone NOT NULL
);


--
-- Name: flows; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.flows (
    flow_slug text NOT NULL,
    alias text NOT NULL,
    version integer NOT NULL,
    opt_max_attempts integer DEFAULT 3 NOT NULL,
    opt_base_delay integer DEFAULT 1 NOT NULL,
    opt_timeout integer DEFAULT 60 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    opt_max_delay integer,
    opt_jitter integer DEFAULT 0 NOT NULL,
    input_type text,
    output_type text,
    CONSTRAINT flows_alias_valid CHECK (pgflow.is_valid_slug(alias)),
    CONSTRAINT flows_base_delay_non_negative CHECK ((opt_base_delay >= 0)),
    CONSTRAINT flows_flow_slug_valid CHECK (pgflow.is_valid_slug(flow_slug)),
    CONSTRAINT flows_jitter_percent CHECK (((opt_jitter >= 0) AND (opt_jitter <= 100))),
    CONSTRAINT flows_max_attempts_positive CHECK ((opt_max_attempts >= 1)),
    CONSTRAINT flows_max_delay_positive CHECK ((opt_max_delay >= 1)),
    CONSTRAINT flows_timeout_positive CHECK ((opt_timeout >= 1)),
    CONSTRAINT flows_version_positive CHECK ((version >= 1))
);


--
-- Name: steps; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.steps (
    flow_slug text NOT NULL,
    step_slug text NOT NULL,
    step_index integer NOT NULL,
    step_type text NOT NULL,
    deps_count integer NOT NULL,
    queue_name text NOT NULL,
    opt_max_attempts integer,
    opt_base_delay integer,
    opt_timeout integer,
    opt_start_delay integer,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    opt_max_delay integer,
    opt_jitter integer,
    condition_when jsonb,
    condition_unless jsonb,
    when_unmet text DEFAULT 'skip'::text NOT NULL,
    when_exhausted text DEFAULT 'fail'::text NOT NULL,
    CONSTRAINT steps_base_delay_non_negative CHECK ((opt_base_delay >= 0)),
    CONSTRAINT steps_deps_count_non_negative CHECK ((deps_count >= 0)),
    CONSTRAINT steps_jitter_percent CHECK (((opt_jitter >= 0) AND (opt_jitter <= 100))),
    CONSTRAINT steps_map_has_at_most_one_dep CHECK (((step_type = 'single'::text) OR (deps_count <= 1))),
    CONSTRAINT steps_max_attempts_positive CHECK ((opt_max_attempts >= 1)),
    CONSTRAINT steps_max_delay_positive CHECK ((opt_max_delay >= 1)),
    CONSTRAINT steps_queue_name_valid CHECK (pgflow.is_valid_queue_name(queue_name)),
    CONSTRAINT steps_start_delay_non_negative CHECK ((opt_start_delay >= 0)),
    CONSTRAINT steps_step_index_non_negative CHECK ((step_index >= 0)),
    CONSTRAINT steps_step_slug_valid CHECK (pgflow.is_valid_slug(step_slug)),
    CONSTRAINT steps_step_type_domain CHECK ((step_type = ANY (ARRAY['single'::text, 'map'::text]))),
    CONSTRAINT steps_timeout_positive CHECK ((opt_timeout >= 1)),
    CONSTRAINT steps_when_exhausted_domain CHECK ((when_exhausted = ANY (ARRAY['fail'::text, 'skip'::text, 'skip_cascade'::text]))),
    CONSTRAINT steps_when_unmet_domain CHECK ((when_unmet = ANY (ARRAY['skip'::text, 'skip_cascade'::text, 'fail'::text])))
);


--
-- Name: maintained_tables; Type: VIEW; Schema: pgflow; Owner: -
--

CREATE VIEW pgflow.maintained_tables AS
 SELECT (c.oid)::regclass AS table_name,
    GREATEST(c.reltuples, (0)::real) AS estimated_rows,
    COALESCE(st.n_mod_since_analyze, (0)::bigint) AS changed_since_analyze,
    COALESCE(st.n_dead_tup, (0)::bigint) AS dead_rows
   FROM ((pg_class c
     JOIN pg_namespace n ON ((n.oid = c.relnamespace)))
     LEFT JOIN pg_stat_user_tables st ON ((st.relid = c.oid)))
  WHERE ((c.relkind = ANY (ARRAY['r'::"char", 'p'::"char"])) AND (((n.nspname = 'pgflow'::name) AND (c.relname = ANY (ARRAY['runs'::name, 'step_states'::name, 'step_tasks'::name]))) OR ((n.nspname = 'pgmq'::name) AND (c.relname IN ( SELECT ('q_'::text || s.queue_name)
           FROM pgflow.steps s)))));


--
-- Name: rollouts; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.rollouts (
    rollout_id bigint NOT NULL,
    function_names text[] NOT NULL,
    enabled_before text[] NOT NULL,
    status text DEFAULT 'open'::text NOT NULL,
    begun_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    CONSTRAINT rollouts_finished_at CHECK (((status = 'finished'::text) = (finished_at IS NOT NULL))),
    CONSTRAINT rollouts_status_domain CHECK ((status = ANY (ARRAY['open'::text, 'finished'::text])))
);


--
-- Name: rollouts_rollout_id_seq; Type: SEQUENCE; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.rollouts ALTER COLUMN rollout_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME pgflow.rollouts_rollout_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: schema_functions; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.schema_functions (
    singleton boolean DEFAULT true NOT NULL,
    checksum bytea NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schema_functions_singleton_check CHECK (singleton)
);


--
-- Name: schema_migrations; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.schema_migrations (
    version bigint NOT NULL,
    description text NOT NULL,
    checksum bytea NOT NULL,
    installed_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: step_options; Type: VIEW; Schema: pgflow; Owner: -
--

CREATE VIEW pgflow.step_options AS
 SELECT s.flow_slug,
    s.step_slug,
    COALESCE(s.opt_max_attempts, f.opt_max_attempts) AS max_attempts,
    COALESCE(s.opt_base_delay, f.opt_base_delay) AS base_delay,
    COALESCE(s.opt_timeout, f.opt_timeout) AS timeout,
    COALESCE(s.opt_start_delay, 0) AS start_delay,
    COALESCE(s.opt_max_delay, f.opt_max_delay) AS max_delay,
    COALESCE(s.opt_jitter, f.opt_jitter) AS jitter
   FROM (pgflow.steps s
     JOIN pgflow.flows f ON ((f.flow_slug = s.flow_slug)));


--
-- Name: step_states; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.step_states (
    run_id uuid NOT NULL,
    step_slug text NOT NULL,
    flow_slug text NOT NULL,
    status text DEFAULT 'created'::text NOT NULL,
    remaining_deps integer NOT NULL,
    initial_tasks integer,
    remaining_tasks integer,
    output jsonb,
    error_message text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    completed_at timestamp with time zone,
    failed_at timestamp with time zone,
    skipped_at timestamp with time zone,
    skip_reason text,
    cancelled_at timestamp with time zone,
    CONSTRAINT step_states_row_valid CHECK (pgflow.step_state_row_valid(status, remaining_deps, initial_tasks, remaining_tasks, (output IS NOT NULL), skip_reason, started_at, completed_at, failed_at, skipped_at, cancelled_at))
)
WITH (fillfactor='60');


--
-- Name: step_tasks; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.step_tasks (
    run_id uuid NOT NULL,
    step_slug text NOT NULL,
    task_index integer NOT NULL,
    flow_slug text NOT NULL,
    queue_name text NOT NULL,
    message_id bigint,
    status text DEFAULT 'queued'::text NOT NULL,
    attempts_count integer DEFAULT 0 NOT NULL,
    requeue_count integer DEFAULT 0 NOT NULL,
    output jsonb,
    error_message text,
    last_worker_id uuid,
    queued_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    completed_at timestamp with time zone,
    failed_at timestamp with time zone,
    skipped_at timestamp with time zone,
    cancelled_at timestamp with time zone,
    attempts_base integer DEFAULT 0 NOT NULL,
    CONSTRAINT step_tasks_row_valid CHECK (pgflow.step_task_row_valid(status, task_index, attempts_count, attempts_base, requeue_count, (output IS NOT NULL), started_at, completed_at, failed_at, skipped_at, cancelled_at))
);


--
-- Name: task_attempts; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.task_attempts (
    run_id uuid NOT NULL,
    step_slug text NOT NULL,
    task_index integer NOT NULL,
    attempt integer NOT NULL,
    outcome text NOT NULL,
    worker_id uuid,
    started_at timestamp with time zone,
    ended_at timestamp with time zone DEFAULT now() NOT NULL,
    error_message text NOT NULL,
    CONSTRAINT task_attempts_attempt_positive CHECK ((attempt >= 1)),
    CONSTRAINT task_attempts_outcome_domain CHECK ((outcome = ANY (ARRAY['failed'::text, 'permanent'::text, 'stalled'::text])))
);


--
-- Name: worker_functions; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.worker_functions (
    function_name text NOT NULL,
    enabled boolean DEFAULT true NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT worker_functions_name_not_blank CHECK ((length(TRIM(BOTH FROM function_name)) > 0))
);


--
-- Name: workers; Type: TABLE; Schema: pgflow; Owner: -
--

CREATE TABLE pgflow.workers (
    worker_id uuid NOT NULL,
    queue_name text NOT NULL,
    function_name text NOT NULL,
    flow_slugs text[] NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
    deprecated_at timestamp with time zone,
    stopped_at timestamp with time zone,
    heartbeat_interval_ms integer,
    lost_at timestamp with time zone,
    CONSTRAINT workers_heartbeat_interval_positive CHECK ((heartbeat_interval_ms >= 1)),
    CONSTRAINT workers_lost_is_stopped CHECK (((lost_at IS NULL) OR (stopped_at IS NOT NULL))),
    CONSTRAINT workers_queue_name_valid CHECK (pgflow.is_valid_queue_name(queue_name)),
    CONSTRAINT workers_stopped_after_start CHECK (((stopped_at IS NULL) OR (stopped_at >= started_at)))
);


--
-- Name: __pgmq_migrations; Type: TABLE; Schema: pgmq; Owner: -
--

CREATE TABLE pgmq.__pgmq_migrations (
    name text NOT NULL,
    version text NOT NULL,
    run_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);


--
-- Name: a_upgrade_relay; Type: TABLE; Schema: pgmq; Owner: -
--

CREATE TABLE pgmq.a_upgrade_relay (
    msg_id bigint NOT NULL,
    read_ct integer DEFAULT 0 NOT NULL,
    enqueued_at timestamp with time zone DEFAULT now() NOT NULL,
    last_read_at timestamp with time zone,
    archived_at timestamp with time zone DEFAULT now() NOT NULL,
    vt timestamp with time zone NOT NULL,
    message jsonb,
    headers jsonb
);


--
-- Name: meta; Type: TABLE; Schema: pgmq; Owner: -
--

CREATE TABLE pgmq.meta (
    queue_name character varying NOT NULL,
    is_partitioned boolean NOT NULL,
    is_unlogged boolean NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: notify_insert_throttle; Type: TABLE; Schema: pgmq; Owner: -
--

CREATE UNLOGGED TABLE pgmq.notify_insert_throttle (
    queue_name character varying NOT NULL,
    throttle_interval_ms integer DEFAULT 0 NOT NULL,
    last_notified_at timestamp with time zone DEFAULT to_timestamp((0)::double precision) NOT NULL
);


--
-- Name: q_upgrade_relay; Type: TABLE; Schema: pgmq; Owner: -
--

CREATE TABLE pgmq.q_upgrade_relay (
    msg_id bigint NOT NULL,
    read_ct integer DEFAULT 0 NOT NULL,
    enqueued_at timestamp with time zone DEFAULT now() NOT NULL,
    last_read_at timestamp with time zone,
    vt timestamp with time zone NOT NULL,
    message jsonb,
    headers jsonb
);


--
-- Name: q_upgrade_relay_msg_id_seq; Type: SEQUENCE; Schema: pgmq; Owner: -
--

ALTER TABLE pgmq.q_upgrade_relay ALTER COLUMN msg_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME pgmq.q_upgrade_relay_msg_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: topic_bindings; Type: TABLE; Schema: pgmq; Owner: -
--

CREATE TABLE pgmq.topic_bindings (
    pattern text NOT NULL,
    queue_name text NOT NULL,
    bound_at timestamp with time zone DEFAULT now() NOT NULL,
    compiled_regex text GENERATED ALWAYS AS ((('^'::text || replace(replace(regexp_replace(pattern, '([.+?{}()|\[\]\\^$])'::text, '\\\1'::text, 'g'::text), '*'::text, '[^.]+'::text), '#'::text, '.*'::text)) || '$'::text)) STORED
);


--
-- Name: alias_history alias_history_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.alias_history
    ADD CONSTRAINT alias_history_pkey PRIMARY KEY (change_id);


--
-- Name: aliases aliases_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.aliases
    ADD CONSTRAINT aliases_pkey PRIMARY KEY (alias);


--
-- Name: deps deps_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.deps
    ADD CONSTRAINT deps_pkey PRIMARY KEY (flow_slug, step_slug, dep_slug);


--
-- Name: event_subscribers event_subscribers_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.event_subscribers
    ADD CONSTRAINT event_subscribers_pkey PRIMARY KEY (subscriber_id, flow_slug);


--
-- Name: flows flows_alias_version_key; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.flows
    ADD CONSTRAINT flows_alias_version_key UNIQUE (alias, version);


--
-- Name: flows flows_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.flows
    ADD CONSTRAINT flows_pkey PRIMARY KEY (flow_slug);


--
-- Name: rollouts rollouts_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.rollouts
    ADD CONSTRAINT rollouts_pkey PRIMARY KEY (rollout_id);


--
-- Name: runs runs_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (run_id);


--
-- Name: schedules schedules_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (schedule_name);


--
-- Name: schema_functions schema_functions_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.schema_functions
    ADD CONSTRAINT schema_functions_pkey PRIMARY KEY (singleton);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: step_states step_states_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.step_states
    ADD CONSTRAINT step_states_pkey PRIMARY KEY (run_id, step_slug);


--
-- Name: step_tasks step_tasks_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.step_tasks
    ADD CONSTRAINT step_tasks_pkey PRIMARY KEY (run_id, step_slug, task_index);


--
-- Name: steps steps_flow_step_index_key; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.steps
    ADD CONSTRAINT steps_flow_step_index_key UNIQUE (flow_slug, step_index);


--
-- Name: steps steps_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.steps
    ADD CONSTRAINT steps_pkey PRIMARY KEY (flow_slug, step_slug);


--
-- Name: task_attempts task_attempts_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.task_attempts
    ADD CONSTRAINT task_attempts_pkey PRIMARY KEY (run_id, step_slug, task_index, attempt);


--
-- Name: worker_functions worker_functions_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.worker_functions
    ADD CONSTRAINT worker_functions_pkey PRIMARY KEY (function_name);


--
-- Name: workers workers_pkey; Type: CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.workers
    ADD CONSTRAINT workers_pkey PRIMARY KEY (worker_id);


--
-- Name: __pgmq_migrations __pgmq_migrations_pkey; Type: CONSTRAINT; Schema: pgmq; Owner: -
--

ALTER TABLE ONLY pgmq.__pgmq_migrations
    ADD CONSTRAINT __pgmq_migrations_pkey PRIMARY KEY (name);


--
-- Name: a_upgrade_relay a_upgrade_relay_pkey; Type: CONSTRAINT; Schema: pgmq; Owner: -
--

ALTER TABLE ONLY pgmq.a_upgrade_relay
    ADD CONSTRAINT a_upgrade_relay_pkey PRIMARY KEY (msg_id);


--
-- Name: meta meta_queue_name_key; Type: CONSTRAINT; Schema: pgmq; Owner: -
--

ALTER TABLE ONLY pgmq.meta
    ADD CONSTRAINT meta_queue_name_key UNIQUE (queue_name);


--
-- Name: notify_insert_throttle notify_insert_throttle_queue_name_key; Type: CONSTRAINT; Schema: pgmq; Owner: -
--

ALTER TABLE ONLY pgmq.notify_insert_throttle
    ADD CONSTRAINT notify_insert_throttle_queue_name_key UNIQUE (queue_name);


--
-- Name: q_upgrade_relay q_upgrade_relay_pkey; Type: CONSTRAINT; Schema: pgmq; Owner: -
--

ALTER TABLE ONLY pgmq.q_upgrade_relay
    ADD CONSTRAINT q_upgrade_relay_pkey PRIMARY KEY (msg_id);


--
-- Name: topic_bindings topic_bindings_unique_pattern_queue; Type: CONSTRAINT; Schema: pgmq; Owner: -
--

ALTER TABLE ONLY pgmq.topic_bindings
    ADD CONSTRAINT topic_bindings_unique_pattern_queue UNIQUE (pattern, queue_name);


--
-- Name: deps_dep_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE INDEX deps_dep_idx ON pgflow.deps USING btree (flow_slug, dep_slug);


--
-- Name: event_subscribers_flow_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE INDEX event_subscribers_flow_idx ON pgflow.event_subscribers USING btree (flow_slug, expires_at);


--
-- Name: runs_flow_started_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE INDEX runs_flow_started_idx ON pgflow.runs USING btree (flow_slug, started_at, run_id);


--
-- Name: runs_idempotency_key_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE UNIQUE INDEX runs_idempotency_key_idx ON pgflow.runs USING btree (idempotency_scope, idempotency_key) WHERE (idempotency_key IS NOT NULL);


--
-- Name: runs_started_by_flow_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE INDEX runs_started_by_flow_idx ON pgflow.runs USING btree (flow_slug) WHERE (status = 'started'::text);


--
-- Name: runs_unsuccessful_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE INDEX runs_unsuccessful_idx ON pgflow.runs USING btree (flow_slug, status, started_at, run_id) WHERE (status = ANY (ARRAY['failed'::text, 'cancelled'::text]));


--
-- Name: schedules_due_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE INDEX schedules_due_idx ON pgflow.schedules USING btree (next_fire_at) WHERE (NOT paused);


--
-- Name: step_tasks_queued_message_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE UNIQUE INDEX step_tasks_queued_message_idx ON pgflow.step_tasks USING btree (message_id, queue_name) WHERE (status = 'queued'::text);


--
-- Name: step_tasks_started_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE INDEX step_tasks_started_idx ON pgflow.step_tasks USING btree (started_at) WHERE (status = 'started'::text);


--
-- Name: steps_queue_name_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE INDEX steps_queue_name_idx ON pgflow.steps USING btree (queue_name);


--
-- Name: workers_live_by_function_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE INDEX workers_live_by_function_idx ON pgflow.workers USING btree (function_name) WHERE (stopped_at IS NULL);


--
-- Name: workers_live_by_queue_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE INDEX workers_live_by_queue_idx ON pgflow.workers USING btree (queue_name) WHERE (stopped_at IS NULL);


--
-- Name: archived_at_idx_upgrade_relay; Type: INDEX; Schema: pgmq; Owner: -
--

CREATE INDEX archived_at_idx_upgrade_relay ON pgmq.a_upgrade_relay USING btree (archived_at);


--
-- Name: idx_notify_throttle_active; Type: INDEX; Schema: pgmq; Owner: -
--

CREATE INDEX idx_notify_throttle_active ON pgmq.notify_insert_throttle USING btree (queue_name, last_notified_at) WHERE (throttle_interval_ms > 0);


--
-- Name: idx_topic_bindings_covering; Type: INDEX; Schema: pgmq; Owner: -
--

CREATE INDEX idx_topic_bindings_covering ON pgmq.topic_bindings USING btree (pattern) INCLUDE (queue_name, compiled_regex);


--
-- Name: q_upgrade_relay_vt_idx; Type: INDEX; Schema: pgmq; Owner: -
--

CREATE INDEX q_upgrade_relay_vt_idx ON pgmq.q_upgrade_relay USING btree (vt);


--
-- Name: runs runs_events_update; Type: TRIGGER; Schema: pgflow; Owner: -
--

CREATE TRIGGER runs_events_update AFTER UPDATE ON pgflow.runs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION pgflow.notify_run_events();


--
-- Name: step_states step_states_events_update; Type: TRIGGER; Schema: pgflow; Owner: -
--

CREATE TRIGGER step_states_events_update AFTER UPDATE ON pgflow.step_states REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION pgflow.notify_step_events();


--
-- Name: step_states step_states_parents; Type: TRIGGER; Schema: pgflow; Owner: -
--

CREATE TRIGGER step_states_parents AFTER INSERT ON pgflow.step_states REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION pgflow.check_step_state_parents();


--
-- Name: step_tasks step_tasks_parents; Type: TRIGGER; Schema: pgflow; Owner: -
--

CREATE TRIGGER step_tasks_parents AFTER INSERT ON pgflow.step_tasks REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION pgflow.check_step_task_parents();


--
-- Name: task_attempts task_attempts_parents; Type: TRIGGER; Schema: pgflow; Owner: -
--

CREATE TRIGGER task_attempts_parents AFTER INSERT ON pgflow.task_attempts REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION pgflow.check_task_attempt_parents();


--
-- Name: alias_history alias_history_alias_fkey; Type: FK CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.alias_history
    ADD CONSTRAINT alias_history_alias_fkey FOREIGN KEY (alias) REFERENCES pgflow.aliases(alias);


--
-- Name: alias_history alias_history_from_flow_slug_fkey; Type: FK CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.alias_history
    ADD CONSTRAINT alias_history_from_flow_slug_fkey FOREIGN KEY (from_flow_slug) REFERENCES pgflow.flows(flow_slug);


--
-- Name: alias_history alias_history_to_flow_slug_fkey; Type: FK CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.alias_history
    ADD CONSTRAINT alias_history_to_flow_slug_fkey FOREIGN KEY (to_flow_slug) REFERENCES pgflow.flows(flow_slug);


--
-- Name: aliases aliases_flow_slug_fkey; Type: FK CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.aliases
    ADD CONSTRAINT aliases_flow_slug_fkey FOREIGN KEY (flow_slug) REFERENCES pgflow.flows(flow_slug);


--
-- Name: deps deps_flow_slug_dep_slug_fkey; Type: FK CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.deps
    ADD CONSTRAINT deps_flow_slug_dep_slug_fkey FOREIGN KEY (flow_slug, dep_slug) REFERENCES pgflow.steps(flow_slug, step_slug);


--
-- Name: deps deps_flow_slug_step_slug_fkey; Type: FK CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.deps
    ADD CONSTRAINT deps_flow_slug_step_slug_fkey FOREIGN KEY (flow_slug, step_slug) REFERENCES pgflow.steps(flow_slug, step_slug);


--
-- Name: runs runs_flow_slug_fkey; Type: FK CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.runs
    ADD CONSTRAINT runs_flow_slug_fkey FOREIGN KEY (flow_slug) REFERENCES pgflow.flows(flow_slug);


--
-- Name: steps steps_flow_slug_fkey; Type: FK CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.steps
    ADD CONSTRAINT steps_flow_slug_fkey FOREIGN KEY (flow_slug) REFERENCES pgflow.flows(flow_slug);


--
-- Name: workers workers_function_name_fkey; Type: FK CONSTRAINT; Schema: pgflow; Owner: -
--

ALTER TABLE ONLY pgflow.workers
    ADD CONSTRAINT workers_function_name_fkey FOREIGN KEY (function_name) REFERENCES pgflow.worker_functions(function_name);


--
-- Name: notify_insert_throttle notify_insert_throttle_meta_queue_name_fk; Type: FK CONSTRAINT; Schema: pgmq; Owner: -
--

ALTER TABLE ONLY pgmq.notify_insert_throttle
    ADD CONSTRAINT notify_insert_throttle_meta_queue_name_fk FOREIGN KEY (queue_name) REFERENCES pgmq.meta(queue_name) ON DELETE CASCADE;


--
-- Name: topic_bindings topic_bindings_meta_queue_name_fk; Type: FK CONSTRAINT; Schema: pgmq; Owner: -
--

ALTER TABLE ONLY pgmq.topic_bindings
    ADD CONSTRAINT topic_bindings_meta_queue_name_fk FOREIGN KEY (queue_name) REFERENCES pgmq.meta(queue_name) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--


--
-- PostgreSQL database dump
--


-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Data for Name: flows; Type: TABLE DATA; Schema: pgflow; Owner: -
--

SET SESSION AUTHORIZATION DEFAULT;

ALTER TABLE pgflow.flows DISABLE TRIGGER ALL;

INSERT INTO pgflow.flows VALUES ('upgrade_relay', 'upgrade_relay', 1, 3, 1, 60, '2026-12-06 06:11:01.619001+00', NULL, 0, NULL, NULL);


ALTER TABLE pgflow.flows ENABLE TRIGGER ALL;

--
-- Data for Name: aliases; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.aliases DISABLE TRIGGER ALL;

INSERT INTO pgflow.aliases VALUES ('upgrade_relay', 'upgrade_relay', 1, '2026-12-06 06:11:01.632559+00');


ALTER TABLE pgflow.aliases ENABLE TRIGGER ALL;

--
-- Data for Name: alias_history; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.alias_history DISABLE TRIGGER ALL;

INSERT INTO pgflow.alias_history OVERRIDING SYSTEM VALUE VALUES (1, 'upgrade_relay', NULL, 'upgrade_relay', 'activated', '2026-12-06 06:11:01.632559+00');


ALTER TABLE pgflow.alias_history ENABLE TRIGGER ALL;

--
-- Data for Name: steps; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.steps DISABLE TRIGGER ALL;

INSERT INTO pgflow.steps VALUES ('upgrade_relay', 'first', 0, 'single', 0, 'upgrade_relay', NULL, NULL, NULL, NULL, '2026-12-06 06:11:01.619001+00', NULL, NULL, NULL, NULL, 'skip', 'fail');
INSERT INTO pgflow.steps VALUES ('upgrade_relay', 'second', 1, 'single', 1, 'upgrade_relay', NULL, NULL, NULL, NULL, '2026-12-06 06:11:01.619001+00', NULL, NULL, NULL, NULL, 'skip', 'fail');


ALTER TABLE pgflow.steps ENABLE TRIGGER ALL;

--
-- Data for Name: deps; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.deps DISABLE TRIGGER ALL;

INSERT INTO pgflow.deps VALUES ('upgrade_relay', 'first', 'second');


ALTER TABLE pgflow.deps ENABLE TRIGGER ALL;

--
-- Data for Name: event_subscribers; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.event_subscribers DISABLE TRIGGER ALL;



ALTER TABLE pgflow.event_subscribers ENABLE TRIGGER ALL;

--
-- Data for Name: rollouts; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.rollouts DISABLE TRIGGER ALL;



ALTER TABLE pgflow.rollouts ENABLE TRIGGER ALL;

--
-- Data for Name: runs; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.runs DISABLE TRIGGER ALL;

INSERT INTO pgflow.runs VALUES ('7b3f2a4f-8e90-45ff-b495-76407205fd94', 'upgrade_relay', 'started', '1', NULL, 2, '2026-12-06 06:11:01.633831+00', NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL);
INSERT INTO pgflow.runs VALUES ('1bd738e3-6f77-4d31-a405-66d440d130a6', 'upgrade_relay', 'started', '2', NULL, 2, '2026-12-06 06:11:01.633831+00', NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL);
INSERT INTO pgflow.runs VALUES ('b1370383-7542-4d4c-9ce1-e82f677b10f0', 'upgrade_relay', 'started', '3', NULL, 2, '2026-12-06 06:11:01.633831+00', NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL);


ALTER TABLE pgflow.runs ENABLE TRIGGER ALL;

--
-- Data for Name: schedules; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.schedules DISABLE TRIGGER ALL;



ALTER TABLE pgflow.schedules ENABLE TRIGGER ALL;

--
-- Data for Name: schema_functions; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.schema_functions DISABLE TRIGGER ALL;

INSERT INTO pgflow.schema_functions VALUES (true, '\x2cfb09f36bd78654bec5bc427cdbb2a7384b43fd717e647c55e75f57b743a946', '2026-12-06 06:11:01.508892+00');


ALTER TABLE pgflow.schema_functions ENABLE TRIGGER ALL;

--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.schema_migrations DISABLE TRIGGER ALL;

INSERT INTO pgflow.schema_migrations VALUES (20261204000100, 'baseline', '\x80e4fd273c93797ff5e55dda14aca9fb8f27e1776d3da5d166a70a2a13a764335d4cc19b35c1cafc4bf4265a3ca16f1a', '2026-12-06 06:11:01.508892+00');


ALTER TABLE pgflow.schema_migrations ENABLE TRIGGER ALL;

--
-- Data for Name: step_states; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.step_states DISABLE TRIGGER ALL;

INSERT INTO pgflow.step_states VALUES ('7b3f2a4f-8e90-45ff-b495-76407205fd94', 'first', 'upgrade_relay', 'started', 0, 1, 1, NULL, NULL, '2026-12-06 06:11:01.633831+00', '2026-12-06 06:11:01.633831+00', NULL, NULL, NULL, NULL, NULL);
INSERT INTO pgflow.step_states VALUES ('7b3f2a4f-8e90-45ff-b495-76407205fd94', 'second', 'upgrade_relay', 'created', 1, NULL, NULL, NULL, NULL, '2026-12-06 06:11:01.633831+00', NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO pgflow.step_states VALUES ('1bd738e3-6f77-4d31-a405-66d440d130a6', 'first', 'upgrade_relay', 'started', 0, 1, 1, NULL, NULL, '2026-12-06 06:11:01.633831+00', '2026-12-06 06:11:01.633831+00', NULL, NULL, NULL, NULL, NULL);
INSERT INTO pgflow.step_states VALUES ('1bd738e3-6f77-4d31-a405-66d440d130a6', 'second', 'upgrade_relay', 'created', 1, NULL, NULL, NULL, NULL, '2026-12-06 06:11:01.633831+00', NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO pgflow.step_states VALUES ('b1370383-7542-4d4c-9ce1-e82f677b10f0', 'first', 'upgrade_relay', 'started', 0, 1, 1, NULL, NULL, '2026-12-06 06:11:01.633831+00', '2026-12-06 06:11:01.633831+00', NULL, NULL, NULL, NULL, NULL);
INSERT INTO pgflow.step_states VALUES ('b1370383-7542-4d4c-9ce1-e82f677b10f0', 'second', 'upgrade_relay', 'created', 1, NULL, NULL, NULL, NULL, '2026-12-06 06:11:01.633831+00', NULL, NULL, NULL, NULL, NULL, NULL);


ALTER TABLE pgflow.step_states ENABLE TRIGGER ALL;

--
-- Data for Name: step_tasks; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.step_tasks DISABLE TRIGGER ALL;

INSERT INTO pgflow.step_tasks VALUES ('1bd738e3-6f77-4d31-a405-66d440d130a6', 'first', 0, 'upgrade_relay', 'upgrade_relay', 2, 'queued', 0, 0, NULL, NULL, NULL, '2026-12-06 06:11:01.633831+00', NULL, NULL, NULL, NULL, NULL, 0);
INSERT INTO pgflow.step_tasks VALUES ('b1370383-7542-4d4c-9ce1-e82f677b10f0', 'first', 0, 'upgrade_relay', 'upgrade_relay', 3, 'queued', 0, 0, NULL, NULL, NULL, '2026-12-06 06:11:01.633831+00', NULL, NULL, NULL, NULL, NULL, 0);
INSERT INTO pgflow.step_tasks VALUES ('7b3f2a4f-8e90-45ff-b495-76407205fd94', 'first', 0, 'upgrade_relay', 'upgrade_relay', 1, 'started', 1, 0, NULL, NULL, '00000000-0000-4000-8000-000000000001', '2026-12-06 06:11:01.633831+00', '2026-12-06 06:11:01.641308+00', NULL, NULL, NULL, NULL, 0);


ALTER TABLE pgflow.step_tasks ENABLE TRIGGER ALL;

--
-- Data for Name: task_attempts; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.task_attempts DISABLE TRIGGER ALL;



ALTER TABLE pgflow.task_attempts ENABLE TRIGGER ALL;

--
-- Data for Name: worker_functions; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.worker_functions DISABLE TRIGGER ALL;



ALTER TABLE pgflow.worker_functions ENABLE TRIGGER ALL;

--
-- Data for Name: workers; Type: TABLE DATA; Schema: pgflow; Owner: -
--

ALTER TABLE pgflow.workers DISABLE TRIGGER ALL;



ALTER TABLE pgflow.workers ENABLE TRIGGER ALL;

--
-- Data for Name: __pgmq_migrations; Type: TABLE DATA; Schema: pgmq; Owner: -
--

ALTER TABLE pgmq.__pgmq_migrations DISABLE TRIGGER ALL;

INSERT INTO pgmq.__pgmq_migrations VALUES ('pgmq.sql', '1.11.1', '2026-12-06 06:11:01.497943+00');


ALTER TABLE pgmq.__pgmq_migrations ENABLE TRIGGER ALL;

--
-- Data for Name: a_upgrade_relay; Type: TABLE DATA; Schema: pgmq; Owner: -
--

ALTER TABLE pgmq.a_upgrade_relay DISABLE TRIGGER ALL;



ALTER TABLE pgmq.a_upgrade_relay ENABLE TRIGGER ALL;

--
-- Data for Name: meta; Type: TABLE DATA; Schema: pgmq; Owner: -
--

ALTER TABLE pgmq.meta DISABLE TRIGGER ALL;

INSERT INTO pgmq.meta VALUES ('upgrade_relay', false, false, '2026-12-06 06:11:01.619001+00');


ALTER TABLE pgmq.meta ENABLE TRIGGER ALL;

--
-- Data for Name: notify_insert_throttle; Type: TABLE DATA; Schema: pgmq; Owner: -
--

ALTER TABLE pgmq.notify_insert_throttle DISABLE TRIGGER ALL;



ALTER TABLE pgmq.notify_insert_throttle ENABLE TRIGGER ALL;

--
-- Data for Name: q_upgrade_relay; Type: TABLE DATA; Schema: pgmq; Owner: -
--

ALTER TABLE pgmq.q_upgrade_relay DISABLE TRIGGER ALL;

INSERT INTO pgmq.q_upgrade_relay OVERRIDING SYSTEM VALUE VALUES (2, 0, '2026-12-06 06:11:01.633831+00', NULL, '2026-12-06 06:11:01.640264+00', '{"run_id": "1bd738e3-6f77-4d31-a405-66d440d130a6", "flow_slug": "upgrade_relay", "step_slug": "first", "task_index": 0}', NULL);
INSERT INTO pgmq.q_upgrade_relay OVERRIDING SYSTEM VALUE VALUES (3, 0, '2026-12-06 06:11:01.633831+00', NULL, '2026-12-06 06:11:01.640625+00', '{"run_id": "b1370383-7542-4d4c-9ce1-e82f677b10f0", "flow_slug": "upgrade_relay", "step_slug": "first", "task_index": 0}', NULL);


ALTER TABLE pgmq.q_upgrade_relay ENABLE TRIGGER ALL;

--
-- Data for Name: topic_bindings; Type: TABLE DATA; Schema: pgmq; Owner: -
--

ALTER TABLE pgmq.topic_bindings DISABLE TRIGGER ALL;



ALTER TABLE pgmq.topic_bindings ENABLE TRIGGER ALL;

--
-- Name: alias_history_change_id_seq; Type: SEQUENCE SET; Schema: pgflow; Owner: -
--

SELECT pg_catalog.setval('pgflow.alias_history_change_id_seq', 1, true);


--
-- Name: rollouts_rollout_id_seq; Type: SEQUENCE SET; Schema: pgflow; Owner: -
--

SELECT pg_catalog.setval('pgflow.rollouts_rollout_id_seq', 1, false);


--
-- Name: q_upgrade_relay_msg_id_seq; Type: SEQUENCE SET; Schema: pgmq; Owner: -
--

SELECT pg_catalog.setval('pgmq.q_upgrade_relay_msg_id_seq', 3, true);


--
-- PostgreSQL database dump complete
--


