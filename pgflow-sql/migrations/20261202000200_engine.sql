-- pgflow engine: compile, start, claim, complete, fail and recover.
--
-- Errors raised for callers carry their own SQLSTATE (class `PF`) and, where a program needs the
-- parts, a JSON DETAIL:
--   PF001 invalid flow definition         (message says what and how to fix)
--   PF002 flow shape mismatch             (DETAIL: {"flow_slug", "differences": [text]})
--   PF003 unsupported tasks in a claim    (DETAIL: {"queue_name", "message_ids", "unsupported": [{flow_slug, step_slug, message_ids}]})
--   PF004 unknown flow                    (DETAIL: {"flow_slug"})
--   PF005 invalid call arguments          (message says which)
--
-- Lock order, for every function below (deadlock freedom):
--   1. advisory lock of a flow (compile only; the stalled-task sweep uses a try-lock),
--   2. runs rows, in run_id order (every function that changes a run's progress locks the
--      runs it touches first, with FOR NO KEY UPDATE),
--   3. step_tasks rows, in (run_id, step_slug, task_index) order,
--   4. step_states rows, in (run_id, step_slug) order: completed steps before their dependents,
--   5. other live tasks of failing runs, with SKIP LOCKED (never waits).
-- A claim (start_tasks) locks queued step_tasks only and never waits for a run.
-- PGMQ calls (send, archive) only touch message rows of tasks this transaction holds.
-- A locking query of a batch finds its rows by key alone and returns their status as it
-- stands under the lock: with the status in the locking query, the planner may read every
-- live row through a partial index (work that grows with the tasks in flight), and statistics
-- taken while little was in flight make it think that cheap. The write then finds each locked
-- row by the row address (ctid) the locking query returned, a direct fetch, and checks the
-- status the locking query returned, never the target's own column: joined by key, or with
-- `status = ...` on the target where a partial index has that predicate, the planner (which
-- always takes a locking query for a row or two) may scan a table or that index once per
-- locked row.

-- Advisory lock keys: one namespace (the first key) for everything pgflow locks.
create function pgflow.lock_namespace()
returns integer
language sql
immutable
parallel safe
as $$ select 1885824620 $$; -- 0x7067666c, "pgfl"

-- Effective step options: the step's own value, else its flow's.
create view pgflow.step_options as
select
  s.flow_slug,
  s.step_slug,
  coalesce(s.opt_max_attempts, f.opt_max_attempts) as max_attempts,
  coalesce(s.opt_base_delay, f.opt_base_delay) as base_delay,
  coalesce(s.opt_timeout, f.opt_timeout) as timeout,
  coalesce(s.opt_start_delay, 0) as start_delay
from pgflow.steps s
join pgflow.flows f on f.flow_slug = s.flow_slug;

------------------------------------------------------------------------------------------------
-- PGMQ batches
------------------------------------------------------------------------------------------------

-- Helpers on the hot path are plpgsql, not SQL functions: Postgres 15 parses and plans a SQL
-- function's body on every call, while plpgsql keeps its plans for the session. For the same
-- reason messages are sent with PGMQ's plpgsql form of send_batch (queue, messages, headers,
-- visible-at time); its shorter forms are SQL functions around it.
--
-- The entry points called once per batch (start_flows, start_tasks, read_and_start_tasks,
-- complete_tasks, fail_tasks) run with plan_cache_mode = force_generic_plan, which holds for
-- everything they call: their statements look up arrays of keys, a custom plan per call costs
-- planning time for every batch, and the plans are written to stay right whatever the
-- statistics say (see the lock order notes above). ANALYZE, which autovacuum or the workers'
-- maintenance runs as the tables grow, makes sessions plan again. They also run with
-- enable_seqscan = off: a batch reaches its rows through their keys even when the session
-- planned it while the tables were small. Planned for the ten rows a generic plan assumes of
-- an array, against a table of a few hundred rows, a hash join over a scan of the whole table
-- looks cheaper than ten key lookups, and the table then grows under the cached plan: each
-- completion of one task scanned every run, task and step state (0.6 ms of 2.5 for one task
-- with 750 runs, measured with pgbench, and growing with the tables).


-- Archives messages given as parallel arrays (queue_name[i], message_id[i]), one PGMQ call per
-- queue.
create function pgflow.archive_messages(p_queue_names text[], p_message_ids bigint[])
returns void
language plpgsql
as $$
begin
  perform pgmq.archive(g.queue_name, g.message_ids)
  from (select u.queue_name, array_agg(u.message_id) as message_ids
        from unnest(p_queue_names, p_message_ids) as u(queue_name, message_id)
        group by u.queue_name) g;
end;
$$;

-- Locks runs (FOR NO KEY UPDATE, run_id order): the first lock of every function that changes
-- the progress of existing runs.
create function pgflow.lock_runs(p_run_ids uuid[])
returns void
language plpgsql
as $$
begin
  perform 1 from pgflow.runs
  where run_id = any(p_run_ids)
  order by run_id
  for no key update;
end;
$$;

-- Wakes the workers listening on `pgflow.<queue_name>` (see `pgflow_runtime::worker`).
-- Postgres delivers one notification per channel and payload at commit, however often a
-- transaction calls this.
create function pgflow.notify_queue(p_queue_name text)
returns void
language plpgsql
as $$
begin
  perform pg_notify('pgflow.' || p_queue_name, '');
end;
$$;

-- Gives queued tasks (parallel arrays: run, step, task index, delay in seconds) a new PGMQ
-- message each, sent to the task's queue snapshot and visible after the delay: a claim
-- archives the message it claimed, so a retry or a requeue needs a new one. One batch per
-- (queue, delay); wakes the queue's idle workers when the messages are visible at once.
-- Expects the caller to hold the tasks' row locks.
create function pgflow.send_task_messages(
  p_run_ids uuid[], p_step_slugs text[], p_task_indexes integer[], p_delays integer[]
)
returns void
language plpgsql
as $$
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

------------------------------------------------------------------------------------------------
-- Definitions
------------------------------------------------------------------------------------------------

-- The shape of a stored flow in the normalized form that `define_flow` compares:
-- [{"slug", "type", "deps": [sorted], "queue"}] in step_index order.
create function pgflow.flow_shape(p_flow_slug text)
returns jsonb
language sql
stable
as $$
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

-- Raises PF001 with a message naming the flow and what is wrong.
create function pgflow.raise_invalid_definition(p_flow_slug text, p_problem text)
returns void
language plpgsql
as $$
begin
  raise exception 'invalid definition of flow `%`: %', p_flow_slug, p_problem
    using errcode = 'PF001';
end;
$$;

-- Checks an option value: absent/null is allowed when p_nullable, else a whole number >= p_min.
create function pgflow.option_value(
  p_flow_slug text, p_where text, p_options jsonb, p_key text, p_min integer, p_default integer
)
returns integer
language plpgsql
immutable
as $$
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
$$;

-- define_flow: compile a concrete flow, or verify it against the stored one.
--
-- p_options: {"max_attempts", "base_delay", "timeout"} (seconds; each optional).
-- p_steps:   [{"slug", "type": "single"|"map", "deps": [slug], "queue",
--              "max_attempts", "base_delay", "timeout", "start_delay"}] in topological order
--            (every dependency listed before its dependents). "queue" defaults to the
--            lowercased flow slug; "type" to "single"; "deps" to [].
--
-- Returns 'compiled' (created now) or 'verified' (same shape already stored; its options are
-- brought up to date with the definition). A different shape (steps, order, types, deps,
-- queues) or a different alias/version for an existing slug raises PF002 listing every
-- difference: a changed DAG needs a new concrete slug.
--
-- Creates every routed PGMQ queue that does not exist yet; queues are never dropped here.
-- Locks: advisory lock (namespace, hashtext(flow_slug)) for the transaction.
create function pgflow.define_flow(
  p_flow_slug text,
  p_alias text,
  p_version integer,
  p_options jsonb,
  p_steps jsonb
)
returns text
language plpgsql
as $$
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

------------------------------------------------------------------------------------------------
-- Run progression (internal helpers)
------------------------------------------------------------------------------------------------

-- Fails runs (status 'started' only) and every live task of theirs that nobody holds a lock
-- on: those tasks become 'failed' and their messages are archived. A task locked by a
-- concurrent claim or completion is skipped; that transaction sees the failed run and acts
-- accordingly (a claim fails such tasks, a completion stops cascading).
-- Locks: runs (run_id order), then live tasks with SKIP LOCKED.
create function pgflow.fail_runs(p_run_ids uuid[], p_reason text)
returns void
language plpgsql
as $$
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

-- The output of a step whose tasks are all done: a single step's task output; a map step's
-- task outputs as an array in task order ([] for a map over nothing).
create function pgflow.step_output(p_run_id uuid, p_step_slug text, p_step_type text)
returns jsonb
language plpgsql
stable
as $$
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

-- Completes started steps whose tasks are all done (storing their step_output), then goes on
-- as finish_completed_steps.
-- Locks: step_states of the steps (order), then as finish_completed_steps.
create function pgflow.complete_steps(p_run_ids uuid[], p_step_slugs text[])
returns void
language plpgsql
as $$
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

-- A step that was just started, sized, as enqueue_step_tasks takes it.
create type pgflow.started_step as (
  run_id uuid,
  step_slug text,
  flow_slug text,
  task_count integer,
  queue_name text,
  start_delay integer
);

-- What follows the completion of steps (parallel arrays: run, step, flow of each step that just
-- became 'completed'): releases their dependents, starting in the same write each dependent
-- left with nothing to wait for (a single step with one task, a map step with one task per
-- element of its dependency's array); counts the steps down on their runs and completes the
-- runs with nothing left (output: an object of the leaf steps' outputs); then creates the
-- started steps' tasks. A ready map step whose dependency's output is not an array is left to
-- start_ready_steps, which fails it and its run; no other step of that run starts.
-- Locks: step_states of the dependents (order), then runs (order).
create function pgflow.finish_completed_steps(
  p_run_ids uuid[], p_step_slugs text[], p_flow_slugs text[]
)
returns void
language plpgsql
as $$
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

-- Creates the tasks of steps that were just started: one task and one PGMQ message per
-- element, sent to the step's queue (the task's queue snapshot) and delayed by the step's
-- start delay, one batch per (queue, delay). A map step over an empty array completes at once
-- with [], which may start further steps.
create function pgflow.enqueue_step_tasks(p_steps pgflow.started_step[])
returns void
language plpgsql
as $$
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

-- Starts every step of the given (started) runs whose dependencies are all complete and that
-- is still 'created': the slow path behind the starts that finish_completed_steps and
-- start_flows make in the writes that release steps or create runs. A map over something
-- that is not an array fails the step and its run, and the run's other ready steps are left
-- as they are; the other runs' ready steps start (see enqueue_step_tasks).
create function pgflow.start_ready_steps(p_run_ids uuid[])
returns void
language plpgsql
as $$
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

------------------------------------------------------------------------------------------------
-- Starting runs
------------------------------------------------------------------------------------------------

-- start_flows: starts one run per input, in one transaction.
-- p_flow_slug names an alias (resolved to its active concrete flow now, unless
-- p_resolve_alias is false) or a concrete flow. The runs record the concrete flow and keep it.
-- p_run_ids optionally fixes the run ids (same length as p_inputs; null entries get new ids).
-- Returns the runs in input order, as they stand after the first steps were started (a run
-- whose steps all complete at once, e.g. a map over [], is already 'completed').
-- Raises PF004 when the name is neither an alias with an active version nor a concrete flow.
create function pgflow.start_flows(
  p_flow_slug text,
  p_inputs jsonb[],
  p_run_ids uuid[] default null,
  p_resolve_alias boolean default true
)
returns setof pgflow.runs
language plpgsql
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
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

-- start_flow: starts one run. See start_flows.
create function pgflow.start_flow(
  p_flow_slug text,
  p_input jsonb,
  p_run_id uuid default null,
  p_resolve_alias boolean default true
)
returns pgflow.runs
language sql
as $$
  select * from pgflow.start_flows(p_flow_slug, array[p_input], array[p_run_id], p_resolve_alias)
$$;

------------------------------------------------------------------------------------------------
-- Claiming
------------------------------------------------------------------------------------------------

-- start_tasks: claims the queued tasks behind PGMQ messages a worker of `p_queue_name` read.
--
-- Matches tasks by (queue_name, message_id) only; the flow recorded on each task is data, never
-- a filter. Every matched (flow_slug, step_slug) pair is checked against the worker's supported
-- pairs (p_flow_slugs[i], p_step_slugs[i]) before anything is written: one unsupported pair
-- raises PF003 naming the queue, the message ids and the pairs, and nothing changes (no task
-- status, no attempt, no message archived; with read_and_start_tasks, not the read either).
--
-- Otherwise each claimable task becomes 'started' and its attempt is counted; tasks of runs
-- that already failed are failed instead of being returned. Every message of the call is
-- archived: a claimed task is tracked by its row from now on (a task whose worker dies is
-- recovered by requeue_stalled_tasks, a failed attempt is retried with a new message), so
-- the queue holds only messages that wait, and reads never walk past claimed ones. A
-- message without a queued task (stale) is archived too.
--
-- Returns one row per claimed task, in message order, possibly of several concrete flows,
-- with the handler input: the flow input (root single step), the element (map step), or an
-- object of the dependencies' outputs keyed by step slug.
-- Locks: the matched queued step_tasks (key order); no run locks.
create function pgflow.start_tasks(
  p_queue_name text,
  p_message_ids bigint[],
  p_worker_id uuid,
  p_flow_slugs text[],
  p_step_slugs text[]
)
returns table (
  flow_slug text,
  step_slug text,
  run_id uuid,
  task_index integer,
  message_id bigint,
  queue_name text,
  attempt integer,
  timeout_seconds integer,
  input jsonb
)
language plpgsql
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
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

-- read_and_start_tasks: reads up to p_quantity visible messages of the queue and claims their
-- tasks with start_tasks, in one transaction, which archives the messages it read. The read
-- hides the messages for p_visibility_timeout seconds, which only matters to concurrent
-- readers until the claim commits.
-- When start_tasks refuses the batch (PF003), the read is rolled back with it: every message
-- of the batch is visible again with its read count unchanged.
create function pgflow.read_and_start_tasks(
  p_queue_name text,
  p_worker_id uuid,
  p_flow_slugs text[],
  p_step_slugs text[],
  p_quantity integer,
  p_visibility_timeout integer
)
returns table (
  flow_slug text,
  step_slug text,
  run_id uuid,
  task_index integer,
  message_id bigint,
  queue_name text,
  attempt integer,
  timeout_seconds integer,
  input jsonb
)
language plpgsql
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
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

------------------------------------------------------------------------------------------------
-- Completion and failure
------------------------------------------------------------------------------------------------

-- complete_tasks: records the outputs of started tasks (batched; arrays of equal length).
-- A task is identified by (run_id, step_slug, task_index) and the attempt that produced the
-- output; a task that is no longer 'started' in that attempt (late, duplicate, or requeued and
-- claimed again) is left unchanged. Outputs are stored exactly (0, false, "" and null stay).
-- Counts the tasks down on their steps and completes the steps that are done (which releases
-- dependents, completes runs and starts ready steps). The tasks' messages were archived when
-- they were claimed.
-- Returns the number of tasks completed by this call.
-- Locks: runs, step_tasks, step_states (see the lock order above).
create function pgflow.complete_tasks(
  p_run_ids uuid[],
  p_step_slugs text[],
  p_task_indexes integer[],
  p_attempts integer[],
  p_outputs jsonb[]
)
returns integer
language plpgsql
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
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

-- Fails tasks for good: the tasks, their steps and their runs become 'failed'; the runs' other
-- live tasks are failed too and every affected message is archived.
-- Expects the caller to hold the runs' and the tasks' locks.
create function pgflow.fail_tasks_permanently(
  p_run_ids uuid[],
  p_step_slugs text[],
  p_task_indexes integer[],
  p_error_messages text[]
)
returns void
language plpgsql
as $$
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

-- fail_tasks: records failed attempts of started tasks (batched; arrays of equal length;
-- matched like complete_tasks, so late or duplicate reports change nothing).
-- A task with attempts left goes back to 'queued' with a new message that becomes visible
-- after base_delay * 2^(attempt - 1) seconds (exponential backoff; the first retry waits
-- base_delay). A task out of attempts fails for good, with its step and run (see
-- fail_tasks_permanently). Tasks of runs that already failed are failed without retry.
-- Returns, per task handled, whether it will be retried and after how many seconds.
-- Locks: runs, step_tasks, then as fail_tasks_permanently.
create function pgflow.fail_tasks(
  p_run_ids uuid[],
  p_step_slugs text[],
  p_task_indexes integer[],
  p_attempts integer[],
  p_error_messages text[]
)
returns table (run_id uuid, step_slug text, task_index integer, will_retry boolean, retry_delay_seconds integer)
language plpgsql
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
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

------------------------------------------------------------------------------------------------
-- Recovery
------------------------------------------------------------------------------------------------

-- requeue_stalled_tasks: finds 'started' tasks whose step timeout plus p_grace_seconds has
-- passed (their worker died or lost its connection) and puts them back: status 'queued' and
-- a new message visible now, at most p_max_requeues times per task; a task stalled more often
-- fails for good (with its run). The attempt the stalled worker consumed stays counted.
-- Returns the tasks handled, each with its message id as it now stands.
-- One caller at a time per database (a transaction advisory try-lock; others return nothing).
-- Safe to call from every worker on an interval; no pg_cron needed.
-- Locks: advisory (namespace, 0), runs of the candidates, then step_tasks with SKIP LOCKED.
create function pgflow.requeue_stalled_tasks(
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
