-- A fresh install of pgflow schema version 20261204000100 (PGMQ included), made by dump.sh:
-- pg_dump --schema-only, then the rows of the installers' ledgers. Do not edit.
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
    LANGUAGE plpgsql
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
    LANGUAGE sql STABLE
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
    LANGUAGE plpgsql
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
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
declare
  v_runs uuid[];
  v_steps text[];
  v_flows text[];
  v_outputs jsonb[];
  v_completed integer;
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
  select array_agg(run_id), array_agg(step_slug), array_agg(output), count(*)
  into v_runs, v_steps, v_outputs, v_completed
  from completed;

  if v_runs is null then
    return 0;
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
    perform pgflow.finish_completed_steps(v_runs, v_steps, v_flows);
  end if;

  return v_completed;
end;
$$;


--
-- Name: define_flow(text, text, integer, jsonb, jsonb); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.define_flow(p_flow_slug text, p_alias text, p_version integer, p_options jsonb, p_steps jsonb) RETURNS text
    LANGUAGE plpgsql
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
  v_timeout integer;
  v_status text;
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

    v_seen := v_seen || v_slug;
    v_shape := v_shape || jsonb_build_array(jsonb_build_object(
      'slug', v_slug,
      'type', v_type,
      'deps', (select coalesce(jsonb_agg(d order by d), '[]'::jsonb) from unnest(v_deps) d),
      'queue', v_queue));
    v_settings := v_settings || jsonb_build_array(jsonb_build_object(
      'slug', v_slug,
      'deps', to_jsonb(v_deps),
      'max_attempts', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'max_attempts', 1, null),
      'base_delay', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'base_delay', 0, null),
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
        opt_timeout = v_timeout
    where flow_slug = p_flow_slug
      and (opt_max_attempts, opt_base_delay, opt_timeout)
          is distinct from (v_max_attempts, v_base_delay, v_timeout);

    update pgflow.steps s
    set opt_max_attempts = (x ->> 'max_attempts')::integer,
        opt_base_delay = (x ->> 'base_delay')::integer,
        opt_timeout = (x ->> 'timeout')::integer,
        opt_start_delay = (x ->> 'start_delay')::integer
    from jsonb_array_elements(v_settings) x
    where s.flow_slug = p_flow_slug
      and s.step_slug = x ->> 'slug'
      and (s.opt_max_attempts, s.opt_base_delay, s.opt_timeout, s.opt_start_delay)
          is distinct from ((x ->> 'max_attempts')::integer, (x ->> 'base_delay')::integer,
                            (x ->> 'timeout')::integer, (x ->> 'start_delay')::integer);
    v_status := 'verified';
  else
    -- 3b. Compile.
    insert into pgflow.flows (flow_slug, alias, version, opt_max_attempts, opt_base_delay, opt_timeout)
    values (p_flow_slug, p_alias, p_version, v_max_attempts, v_base_delay, v_timeout);

    insert into pgflow.steps (flow_slug, step_slug, step_index, step_type, deps_count, queue_name,
                              opt_max_attempts, opt_base_delay, opt_timeout, opt_start_delay)
    select p_flow_slug,
           shape.value ->> 'slug',
           (shape.ordinality - 1)::integer,
           shape.value ->> 'type',
           jsonb_array_length(shape.value -> 'deps'),
           shape.value ->> 'queue',
           (settings ->> 'max_attempts')::integer,
           (settings ->> 'base_delay')::integer,
           (settings ->> 'timeout')::integer,
           (settings ->> 'start_delay')::integer
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
-- Name: deprecate_workers(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.deprecate_workers(p_function_name text) RETURNS integer
    LANGUAGE sql
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
    LANGUAGE plpgsql STABLE
    AS $$
#variable_conflict use_column
begin
  if not exists (select 1 from pgflow.flows f where f.flow_slug = p_flow_slug) then
    raise exception 'flow `%` is not defined', p_flow_slug
      using errcode = 'PF004', detail = jsonb_build_object('flow_slug', p_flow_slug)::text;
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
-- Name: enqueue_step_tasks(pgflow.started_step[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.enqueue_step_tasks(p_steps pgflow.started_step[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_group record;
  v_empty_runs uuid[];
  v_empty_steps text[];
begin
  for v_group in
    select u.queue_name, u.start_delay,
           array_agg(u.flow_slug order by u.run_id, u.step_slug, i) as flow_slugs,
           array_agg(u.run_id order by u.run_id, u.step_slug, i) as run_ids,
           array_agg(u.step_slug order by u.run_id, u.step_slug, i) as step_slugs,
           array_agg(i order by u.run_id, u.step_slug, i) as task_indexes
    from unnest(p_steps) as u
    cross join lateral generate_series(0, u.task_count - 1) as i
    where u.task_count > 0
    group by u.queue_name, u.start_delay
  loop
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
        (select array_agg(jsonb_build_object('flow_slug', flow_slug, 'run_id', run_id,
                                             'step_slug', step_slug, 'task_index', task_index)
                          order by ordinality)
         from batch),
        null::jsonb[],
        clock_timestamp() + make_interval(secs => v_group.start_delay)) as msg_id
    )
    insert into pgflow.step_tasks (run_id, step_slug, task_index, flow_slug, queue_name, message_id)
    select batch.run_id, batch.step_slug, batch.task_index, batch.flow_slug,
           v_group.queue_name, sent.msg_id
    from batch join sent on sent.ordinality = batch.ordinality;

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
-- Name: fail_tasks(uuid[], text[], integer[], integer[], text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.fail_tasks(p_run_ids uuid[], p_step_slugs text[], p_task_indexes integer[], p_attempts integer[], p_error_messages text[]) RETURNS TABLE(run_id uuid, step_slug text, task_index integer, will_retry boolean, retry_delay_seconds integer)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
declare
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
  v_errors text[];
  v_retry boolean[];
  v_delays integer[];
begin
  if cardinality(p_run_ids) is distinct from cardinality(p_step_slugs)
     or cardinality(p_run_ids) is distinct from cardinality(p_task_indexes)
     or cardinality(p_run_ids) is distinct from cardinality(p_attempts)
     or cardinality(p_run_ids) is distinct from cardinality(p_error_messages) then
    raise exception 'fail_tasks: run ids, step slugs, task indexes, attempts and error messages '
      'must be arrays of equal length' using errcode = 'PF005';
  end if;

  perform pgflow.lock_runs(p_run_ids);

  with failing as (
    select t.run_id, t.step_slug, t.task_index, t.status,
           left(coalesce(i.error_message, 'unknown error'), 8192) as error_message,
           r.status = 'started' and t.attempts_count < o.max_attempts as will_retry,
           least(o.base_delay::bigint * power(2, least(t.attempts_count - 1, 40))::bigint,
                 2147483647)::integer as retry_delay_seconds
    from pgflow.step_tasks t
    join unnest(p_run_ids, p_step_slugs, p_task_indexes, p_attempts, p_error_messages)
      as i(run_id, step_slug, task_index, attempt, error_message)
      on i.run_id = t.run_id and i.step_slug = t.step_slug and i.task_index = t.task_index
        and i.attempt = t.attempts_count
    join pgflow.runs r on r.run_id = t.run_id
    join pgflow.step_options o on o.flow_slug = t.flow_slug and o.step_slug = t.step_slug
    order by t.run_id, t.step_slug, t.task_index
    for no key update of t
  )
  select array_agg(f.run_id), array_agg(f.step_slug), array_agg(f.task_index),
         array_agg(f.error_message), array_agg(f.will_retry), array_agg(f.retry_delay_seconds)
  into v_runs, v_steps, v_indexes, v_errors, v_retry, v_delays
  from failing f
  where f.status = 'started';

  if v_runs is null then
    return;
  end if;

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

  -- Out of attempts: fail for good.
  if false = any(v_retry) then
    perform pgflow.fail_tasks_permanently(
      array_agg(f.run_id), array_agg(f.step_slug), array_agg(f.task_index),
      array_agg(f.error_message))
    from unnest(v_runs, v_steps, v_indexes, v_errors, v_retry)
      as f(run_id, step_slug, task_index, error_message, will_retry)
    where not f.will_retry;
  end if;

  return query
  select f.run_id, f.step_slug, f.task_index, f.will_retry,
         case when f.will_retry then f.delay end
  from unnest(v_runs, v_steps, v_indexes, v_retry, v_delays)
    as f(run_id, step_slug, task_index, will_retry, delay)
  order by f.run_id, f.step_slug, f.task_index;
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
    where ss.status = 'started'
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
-- Name: finish_completed_steps(uuid[], text[], text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.finish_completed_steps(p_run_ids uuid[], p_step_slugs text[], p_flow_slugs text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_started pgflow.started_step[];
  v_blocked_runs uuid[];
begin
  if cardinality(p_run_ids) = 0 then
    return;
  end if;

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
                when s.step_type = 'single' then 1
                else (select case when jsonb_typeof(dss.output) = 'array'
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
    perform pgflow.enqueue_step_tasks(v_started);
  end if;
end;
$$;


--
-- Name: finish_rollout(bigint); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.finish_rollout(p_rollout_id bigint) RETURNS text[]
    LANGUAGE plpgsql
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
           'queue', s.queue_name) order by s.step_index), '[]'::jsonb)
  from pgflow.steps s
  where s.flow_slug = p_flow_slug
$$;


--
-- Name: function_enabled(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.function_enabled(p_function_name text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
  select coalesce(
    (select enabled from pgflow.worker_functions where function_name = p_function_name), true)
$$;


--
-- Name: functions_serving_queues(text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.functions_serving_queues(p_queue_names text[]) RETURNS text[]
    LANGUAGE sql STABLE
    AS $$
  select coalesce(array_agg(distinct function_name order by function_name), array[]::text[])
  from pgflow.workers
  where queue_name = any(p_queue_names) and stopped_at is null
$$;


--
-- Name: heartbeat(uuid); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.heartbeat(p_worker_id uuid) RETURNS boolean
    LANGUAGE sql
    AS $$
  update pgflow.workers
  set last_heartbeat_at = now()
  where worker_id = p_worker_id
  returning deprecated_at is not null
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
-- Name: notify_queue(text); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.notify_queue(p_queue_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  perform pg_notify('pgflow.' || p_queue_name, '');
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
-- Name: prune(interval, integer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.prune(p_older_than interval, p_batch_size integer DEFAULT 10000) RETURNS TABLE(busy boolean, runs bigint, step_states bigint, tasks bigint, archived_messages bigint, workers bigint)
    LANGUAGE plpgsql
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
    where r.status in ('completed', 'failed')
      and coalesce(r.completed_at, r.failed_at) < v_cutoff
    limit p_batch_size
    for update of r skip locked
  ) r;

  if v_run_ids is not null then
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

CREATE FUNCTION pgflow.queue_coverage_gaps(p_queue_name text, p_flow_slugs text[], p_step_slugs text[]) RETURNS TABLE(flow_slug text, step_slug text, active boolean, queued_tasks bigint, started_tasks bigint, started_runs bigint)
    LANGUAGE sql STABLE
    AS $$
  with supported as (
    select * from unnest(p_flow_slugs, p_step_slugs) as p(flow_slug, step_slug)
  ),
  active_pairs as (
    select s.flow_slug, s.step_slug
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
         exists (select 1 from active_pairs a
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
-- Name: read_and_start_tasks(text, uuid, text[], text[], integer, integer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.read_and_start_tasks(p_queue_name text, p_worker_id uuid, p_flow_slugs text[], p_step_slugs text[], p_quantity integer, p_visibility_timeout integer) RETURNS TABLE(flow_slug text, step_slug text, run_id uuid, task_index integer, message_id bigint, queue_name text, attempt integer, timeout_seconds integer, input jsonb)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
begin
  return query
  select *
  from pgflow.start_tasks(
    p_queue_name,
    array(select m.msg_id from pgmq.read(p_queue_name, p_visibility_timeout, p_quantity) m),
    p_worker_id,
    p_flow_slugs,
    p_step_slugs);
end;
$$;


--
-- Name: refresh_statistics(boolean); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.refresh_statistics(p_even_with_autovacuum boolean DEFAULT false) RETURNS SETOF text
    LANGUAGE plpgsql
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
-- Name: register_worker(uuid, text, text, text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.register_worker(p_worker_id uuid, p_queue_name text, p_function_name text, p_flow_slugs text[]) RETURNS boolean
    LANGUAGE plpgsql
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
  insert into pgflow.workers (worker_id, queue_name, function_name, flow_slugs)
  values (p_worker_id, p_queue_name, p_function_name, p_flow_slugs);
  return true;
end;
$$;


--
-- Name: requeue_stalled_tasks(integer, integer); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.requeue_stalled_tasks(p_grace_seconds integer DEFAULT 30, p_max_requeues integer DEFAULT 3) RETURNS TABLE(run_id uuid, step_slug text, task_index integer, queue_name text, message_id bigint, requeued boolean)
    LANGUAGE plpgsql
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
-- Name: rollout_progress(bigint, interval); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.rollout_progress(p_rollout_id bigint, p_stale_after interval DEFAULT '00:01:00'::interval) RETURNS TABLE(worker_id uuid, function_name text, queue_name text, last_heartbeat_at timestamp with time zone)
    LANGUAGE sql STABLE
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
           array_agg(jsonb_build_object('flow_slug', t.flow_slug, 'run_id', t.run_id,
                                        'step_slug', t.step_slug, 'task_index', t.task_index)
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
    LANGUAGE plpgsql
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
    CONSTRAINT runs_remaining_steps_non_negative CHECK ((remaining_steps >= 0)),
    CONSTRAINT runs_status_domain CHECK ((status = ANY (ARRAY['started'::text, 'completed'::text, 'failed'::text]))),
    CONSTRAINT runs_status_timestamps CHECK ((((status = 'started'::text) AND (completed_at IS NULL) AND (failed_at IS NULL) AND (output IS NULL)) OR ((status = 'completed'::text) AND (completed_at IS NOT NULL) AND (failed_at IS NULL) AND (output IS NOT NULL) AND (remaining_steps = 0)) OR ((status = 'failed'::text) AND (failed_at IS NOT NULL) AND (completed_at IS NULL))))
)
WITH (fillfactor='60');


--
-- Name: start_flow(text, jsonb, uuid, boolean); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.start_flow(p_flow_slug text, p_input jsonb, p_run_id uuid DEFAULT NULL::uuid, p_resolve_alias boolean DEFAULT true) RETURNS pgflow.runs
    LANGUAGE sql
    AS $$
  select * from pgflow.start_flows(p_flow_slug, array[p_input], array[p_run_id], p_resolve_alias)
$$;


--
-- Name: start_flows(text, jsonb[], uuid[], boolean); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.start_flows(p_flow_slug text, p_inputs jsonb[], p_run_ids uuid[] DEFAULT NULL::uuid[], p_resolve_alias boolean DEFAULT true) RETURNS SETOF pgflow.runs
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
declare
  v_flow_slug text := p_flow_slug;
  v_step_count integer;
  v_run_ids uuid[];
  v_inputs jsonb[];
  v_started pgflow.started_step[];
  v_bad_runs uuid[];
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

  with inserted as (
    insert into pgflow.runs (run_id, flow_slug, input, remaining_steps)
    select coalesce(p_run_ids[i.ordinality], gen_random_uuid()), v_flow_slug, i.input, v_step_count
    from unnest(p_inputs) with ordinality as i(input, ordinality)
    order by i.ordinality
    returning run_id, input
  )
  select array_agg(run_id), array_agg(input) into v_run_ids, v_inputs from inserted;

  if v_run_ids is null then
    return;
  end if;

  -- Every step state in one write, the root steps already started and sized: a single step
  -- gets one task, a root map step one per element of the run's input. A run whose input a
  -- root map step cannot map over (not an array) gets all its steps 'created' and is left to
  -- start_ready_steps, which fails it.
  with planned as (
    select r.run_id, s.step_slug, s.flow_slug, s.deps_count, s.queue_name,
           coalesce(s.opt_start_delay, 0) as start_delay,
           case when s.deps_count > 0 then null
                when s.step_type = 'single' then 1
                when jsonb_typeof(r.input) = 'array' then jsonb_array_length(r.input)
           end as task_count,
           s.deps_count = 0 and s.step_type = 'map'
             and jsonb_typeof(r.input) is distinct from 'array' as bad
    from unnest(v_run_ids, v_inputs) as r(run_id, input)
    cross join pgflow.steps s
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
         array_agg(distinct run_id) filter (where bad)
  into v_started, v_bad_runs
  from decided;

  if v_bad_runs is not null then
    perform pgflow.start_ready_steps(v_bad_runs);
  end if;
  if v_started is not null then
    perform pgflow.enqueue_step_tasks(v_started);
  end if;

  -- One key lookup per run (`offset 0` keeps the lookup apart from the join): a plan made
  -- for a batch of runs may otherwise hash-join against a scan of every run.
  return query
  select r.*
  from unnest(v_run_ids) with ordinality as ids(run_id, ordinality)
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
begin
  with ready as (
    select ss.ctid as row_ctid, ss.run_id, ss.step_slug, s.step_type, s.queue_name,
           coalesce(s.opt_start_delay, 0) as start_delay,
           jsonb_typeof(src.value) as got,
           case when s.step_type = 'single' then 1
                when jsonb_typeof(src.value) = 'array' then jsonb_array_length(src.value)
           end as task_count
    from pgflow.step_states ss
    join pgflow.runs r on r.run_id = ss.run_id and r.status = 'started'
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    cross join lateral (
      select case when s.step_type = 'single' then null
                  when s.deps_count = 0 then r.input
                  else (select dss.output from pgflow.deps d
                        join pgflow.step_states dss
                          on dss.run_id = ss.run_id and dss.step_slug = d.dep_slug
                        where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug)
             end as value
    ) src
    where ss.run_id = any(p_run_ids) and ss.status = 'created' and ss.remaining_deps = 0
    order by ss.run_id, ss.step_slug
    for no key update of ss
  ),
  decided as (
    select ready.*,
           bool_or(ready.task_count is null) over (partition by ready.run_id) as run_has_bad_map
    from ready
  ),
  changed as (
    update pgflow.step_states ss
    set status = case when d.task_count is null then 'failed' else 'started' end,
        started_at = case when d.task_count is not null then now() end,
        failed_at = case when d.task_count is null then now() end,
        error_message = case when d.task_count is null then
          format('map step `%s` needs an array to map over, got %s',
                 d.step_slug, coalesce(d.got, 'nothing')) end,
        initial_tasks = d.task_count,
        remaining_tasks = d.task_count
    from decided d
    where ss.ctid = d.row_ctid
      and (d.task_count is null or not d.run_has_bad_map)
    returning ss.run_id, ss.step_slug, ss.status, d.task_count, ss.flow_slug,
              d.queue_name, d.start_delay
  )
  select array_agg((run_id, step_slug, flow_slug, task_count, queue_name, start_delay)
                   ::pgflow.started_step) filter (where status = 'started'),
         array_agg(distinct run_id) filter (where status = 'failed')
  into v_started, v_bad_runs
  from changed;

  if v_bad_runs is not null then
    perform pgflow.fail_runs(v_bad_runs, 'run failed: a map step received a non-array input');
  end if;
  if v_started is not null then
    perform pgflow.enqueue_step_tasks(v_started);
  end if;
end;
$$;


--
-- Name: start_tasks(text, bigint[], uuid, text[], text[]); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.start_tasks(p_queue_name text, p_message_ids bigint[], p_worker_id uuid, p_flow_slugs text[], p_step_slugs text[]) RETURNS TABLE(flow_slug text, step_slug text, run_id uuid, task_index integer, message_id bigint, queue_name text, attempt integer, timeout_seconds integer, input jsonb)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
declare
  v_row_ctids tid[];
  v_unsupported jsonb;
begin
  if cardinality(coalesce(p_flow_slugs, array[]::text[]))
     <> cardinality(coalesce(p_step_slugs, array[]::text[])) then
    raise exception 'start_tasks: % flow slugs but % step slugs; supported pairs are given as '
      'two arrays of equal length', cardinality(p_flow_slugs), cardinality(p_step_slugs)
      using errcode = 'PF005';
  end if;

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
         (select jsonb_agg(jsonb_build_object('flow_slug', u.flow_slug,
                                              'step_slug', u.step_slug,
                                              'message_ids', u.message_ids)
                           order by u.flow_slug, u.step_slug)
          from unsupported u)
  into v_row_ctids, v_unsupported;

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

  perform pgmq.archive(p_queue_name, p_message_ids);

  if v_row_ctids is null then
    return;
  end if;

  -- Claim the locked tasks, found by row address: a task of a live run becomes 'started'; a
  -- task of a run that ended while it waited becomes 'failed' and is not returned.
  return query
  with changed as (
    update pgflow.step_tasks t
    set status = case when r.status = 'started' then 'started' else 'failed' end,
        started_at = case when r.status = 'started' then now() else t.started_at end,
        attempts_count = t.attempts_count + case when r.status = 'started' then 1 else 0 end,
        last_worker_id = case when r.status = 'started' then p_worker_id
                              else t.last_worker_id end,
        failed_at = case when r.status = 'started' then t.failed_at else now() end,
        error_message = case when r.status = 'started' then t.error_message
                             else 'run failed before this task started' end
    from unnest(v_row_ctids) as l(row_ctid), pgflow.runs r
    where t.ctid = l.row_ctid and r.run_id = t.run_id
    returning t.run_id, t.step_slug, t.task_index, t.flow_slug, t.message_id, t.attempts_count,
              t.status, r.input as run_input
  )
  select c.flow_slug, c.step_slug, c.run_id, c.task_index, c.message_id, p_queue_name,
         c.attempts_count, o.timeout,
         case
           when s.step_type = 'map' and s.deps_count = 0 then c.run_input -> c.task_index
           when s.step_type = 'map' then (
             select dss.output -> c.task_index
             from pgflow.deps d
             join pgflow.step_states dss on dss.run_id = c.run_id and dss.step_slug = d.dep_slug
             where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug)
           when s.deps_count = 0 then c.run_input
           else (
             select jsonb_object_agg(d.dep_slug, dss.output)
             from pgflow.deps d
             join pgflow.step_states dss on dss.run_id = c.run_id and dss.step_slug = d.dep_slug
             where d.flow_slug = c.flow_slug and d.step_slug = c.step_slug)
         end
  from changed c
  join pgflow.steps s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
  join pgflow.step_options o on o.flow_slug = c.flow_slug and o.step_slug = c.step_slug
  where c.status = 'started'
  order by c.message_id;
end;
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
-- Name: stop_worker(uuid); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.stop_worker(p_worker_id uuid) RETURNS void
    LANGUAGE sql
    AS $$
  update pgflow.workers
  set stopped_at = now(),
      deprecated_at = coalesce(deprecated_at, now())
  where worker_id = p_worker_id and stopped_at is null
$$;


--
-- Name: tables_to_vacuum(boolean); Type: FUNCTION; Schema: pgflow; Owner: -
--

CREATE FUNCTION pgflow.tables_to_vacuum(p_even_with_autovacuum boolean DEFAULT false) RETURNS SETOF text
    LANGUAGE sql STABLE
    AS $$
  select m.table_name::text from pgflow.maintained_tables m
  where (p_even_with_autovacuum or not current_setting('autovacuum')::boolean)
    and m.dead_rows > 50 + 0.2 * m.estimated_rows
  order by m.table_name::text
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
    CONSTRAINT flows_alias_valid CHECK (pgflow.is_valid_slug(alias)),
    CONSTRAINT flows_base_delay_non_negative CHECK ((opt_base_delay >= 0)),
    CONSTRAINT flows_flow_slug_valid CHECK (pgflow.is_valid_slug(flow_slug)),
    CONSTRAINT flows_max_attempts_positive CHECK ((opt_max_attempts >= 1)),
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
    CONSTRAINT steps_base_delay_non_negative CHECK ((opt_base_delay >= 0)),
    CONSTRAINT steps_deps_count_non_negative CHECK ((deps_count >= 0)),
    CONSTRAINT steps_map_has_at_most_one_dep CHECK (((step_type = 'single'::text) OR (deps_count <= 1))),
    CONSTRAINT steps_max_attempts_positive CHECK ((opt_max_attempts >= 1)),
    CONSTRAINT steps_queue_name_valid CHECK (pgflow.is_valid_queue_name(queue_name)),
    CONSTRAINT steps_start_delay_non_negative CHECK ((opt_start_delay >= 0)),
    CONSTRAINT steps_step_index_non_negative CHECK ((step_index >= 0)),
    CONSTRAINT steps_step_slug_valid CHECK (pgflow.is_valid_slug(step_slug)),
    CONSTRAINT steps_step_type_domain CHECK ((step_type = ANY (ARRAY['single'::text, 'map'::text]))),
    CONSTRAINT steps_timeout_positive CHECK ((opt_timeout >= 1))
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
    COALESCE(s.opt_start_delay, 0) AS start_delay
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
    CONSTRAINT step_states_initial_tasks_non_negative CHECK ((initial_tasks >= 0)),
    CONSTRAINT step_states_remaining_deps_non_negative CHECK ((remaining_deps >= 0)),
    CONSTRAINT step_states_remaining_tasks_non_negative CHECK ((remaining_tasks >= 0)),
    CONSTRAINT step_states_remaining_within_initial CHECK ((remaining_tasks <= initial_tasks)),
    CONSTRAINT step_states_status_domain CHECK ((status = ANY (ARRAY['created'::text, 'started'::text, 'completed'::text, 'failed'::text]))),
    CONSTRAINT step_states_status_timestamps CHECK ((((status = 'created'::text) AND (started_at IS NULL) AND (completed_at IS NULL) AND (failed_at IS NULL) AND (initial_tasks IS NULL) AND (remaining_tasks IS NULL) AND (output IS NULL)) OR ((status = 'started'::text) AND (started_at IS NOT NULL) AND (completed_at IS NULL) AND (failed_at IS NULL) AND (remaining_tasks IS NOT NULL) AND (output IS NULL)) OR ((status = 'completed'::text) AND (completed_at IS NOT NULL) AND (failed_at IS NULL) AND (remaining_tasks = 0) AND (output IS NOT NULL)) OR ((status = 'failed'::text) AND (failed_at IS NOT NULL) AND (completed_at IS NULL))))
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
    message_id bigint NOT NULL,
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
    CONSTRAINT step_tasks_attempts_non_negative CHECK ((attempts_count >= 0)),
    CONSTRAINT step_tasks_requeue_count_non_negative CHECK ((requeue_count >= 0)),
    CONSTRAINT step_tasks_status_domain CHECK ((status = ANY (ARRAY['queued'::text, 'started'::text, 'completed'::text, 'failed'::text]))),
    CONSTRAINT step_tasks_status_timestamps CHECK ((((status = 'queued'::text) AND (completed_at IS NULL) AND (failed_at IS NULL) AND (output IS NULL)) OR ((status = 'started'::text) AND (started_at IS NOT NULL) AND (completed_at IS NULL) AND (failed_at IS NULL) AND (output IS NULL)) OR ((status = 'completed'::text) AND (completed_at IS NOT NULL) AND (failed_at IS NULL) AND (output IS NOT NULL)) OR ((status = 'failed'::text) AND (failed_at IS NOT NULL) AND (completed_at IS NULL)))),
    CONSTRAINT step_tasks_task_index_non_negative CHECK ((task_index >= 0))
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
-- Name: topic_bindings topic_bindings_unique_pattern_queue; Type: CONSTRAINT; Schema: pgmq; Owner: -
--

ALTER TABLE ONLY pgmq.topic_bindings
    ADD CONSTRAINT topic_bindings_unique_pattern_queue UNIQUE (pattern, queue_name);


--
-- Name: deps_dep_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE INDEX deps_dep_idx ON pgflow.deps USING btree (flow_slug, dep_slug);


--
-- Name: runs_started_by_flow_idx; Type: INDEX; Schema: pgflow; Owner: -
--

CREATE INDEX runs_started_by_flow_idx ON pgflow.runs USING btree (flow_slug) WHERE (status = 'started'::text);


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
-- Name: idx_notify_throttle_active; Type: INDEX; Schema: pgmq; Owner: -
--

CREATE INDEX idx_notify_throttle_active ON pgmq.notify_insert_throttle USING btree (queue_name, last_notified_at) WHERE (throttle_interval_ms > 0);


--
-- Name: idx_topic_bindings_covering; Type: INDEX; Schema: pgmq; Owner: -
--

CREATE INDEX idx_topic_bindings_covering ON pgmq.topic_bindings USING btree (pattern) INCLUDE (queue_name, compiled_regex);


--
-- Name: step_states step_states_parents; Type: TRIGGER; Schema: pgflow; Owner: -
--

CREATE TRIGGER step_states_parents AFTER INSERT ON pgflow.step_states REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION pgflow.check_step_state_parents();


--
-- Name: step_tasks step_tasks_parents; Type: TRIGGER; Schema: pgflow; Owner: -
--

CREATE TRIGGER step_tasks_parents AFTER INSERT ON pgflow.step_tasks REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION pgflow.check_step_task_parents();


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
-- Data for Name: schema_functions; Type: TABLE DATA; Schema: pgflow; Owner: -
--

INSERT INTO pgflow.schema_functions VALUES (true, '\x75976d8eb96e1b0a6e64baf84c10146db51e32ba74b78ec1f8234e85e0fd8671', '2026-12-03 14:38:50.749417+00');


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: pgflow; Owner: -
--

INSERT INTO pgflow.schema_migrations VALUES (20261204000100, 'baseline', '\x2ff26f685ebb8ec935f583b047ee168c87a5e89d1c66bd1a1c9dfb61fd5f5c4ba397104ca70e425b6835e37688494d87', '2026-12-03 14:38:50.749417+00');


--
-- Data for Name: __pgmq_migrations; Type: TABLE DATA; Schema: pgmq; Owner: -
--

INSERT INTO pgmq.__pgmq_migrations VALUES ('pgmq.sql', '1.11.1', '2026-12-03 14:38:50.737064+00');


--
-- PostgreSQL database dump complete
--


