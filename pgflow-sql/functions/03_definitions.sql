-- Definitions: compiling a concrete flow from its JSON definition, or verifying it against the
-- stored one (define_flow), with the helpers that validate it and compare shapes.

-- The shape of a stored flow in the normalized form that `define_flow` compares:
-- [{"slug", "type", "deps": [sorted], "queue", "skip": {"when", "unless", "when_unmet",
-- "when_exhausted"}, "wait": {"signal", "when_timed_out", "key"} or null}] in step_index
-- order.
create or replace function pgflow.flow_shape(p_flow_slug text)
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
           'queue', s.queue_name,
           'skip', jsonb_build_object('when', s.condition_when, 'unless', s.condition_unless,
                                      'when_unmet', s.when_unmet,
                                      'when_exhausted', s.when_exhausted),
           'wait', case when s.signal_name is not null then
                     jsonb_build_object('signal', s.signal_name,
                                        'when_timed_out', s.when_timed_out,
                                        'key', to_jsonb(s.signal_key_path)) end,
           'subflow', case when s.subflow is not null then
                        jsonb_build_object('flow', s.subflow,
                                           'when_timed_out', s.when_timed_out) end)
           order by s.step_index), '[]'::jsonb)
  from pgflow.steps s
  where s.flow_slug = p_flow_slug
$$;

-- A JSON array of strings as a text array, in order (null for JSON null or nothing).
create or replace function pgflow.text_array(p_value jsonb)
returns text[]
language sql
immutable
as $$
  select array_agg(e.value order by e.n)
  from jsonb_array_elements_text(nullif(p_value, 'null'::jsonb)) with ordinality as e(value, n)
$$;

-- Checks a step's path option p_key (`signal_key`, `sleep_until`, `concurrency_key`): absent or null gives null,
-- else a JSON array of field names whose first element is `input` or one of the step's
-- dependencies p_deps (see run_value_at), returned as it is.
create or replace function pgflow.run_path_option(
  p_flow_slug text, p_step_slug text, p_step jsonb, p_key text, p_deps text[]
)
returns jsonb
language plpgsql
immutable
as $$
declare
  v_path jsonb := nullif(p_step -> p_key, 'null'::jsonb);
begin
  if v_path is not null and (
       jsonb_typeof(v_path) <> 'array' or jsonb_array_length(v_path) = 0
       or exists (select 1 from jsonb_array_elements(v_path) e where jsonb_typeof(e) <> 'string')
       or not (v_path ->> 0 = 'input' or v_path ->> 0 = any(p_deps))) then
    perform pgflow.raise_invalid_definition(p_flow_slug, format(
      'step `%s`: %s must be a path of field names whose first element is `input` or one of '
      || 'the step''s dependencies, got %s', p_step_slug, p_key, v_path));
  end if;
  return v_path;
end;
$$;

-- Raises PF001 with a message naming the flow and what is wrong.
create or replace function pgflow.raise_invalid_definition(p_flow_slug text, p_problem text)
returns void
language plpgsql
as $$
begin
  raise exception 'invalid definition of flow `%`: %', p_flow_slug, p_problem
    using errcode = 'PF001';
end;
$$;

-- Checks an option value: absent/null is allowed when p_nullable, else a whole number >= p_min.
create or replace function pgflow.option_value(
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

-- Checks a percentage option: absent/null gives p_default, else a whole number from 0 to 100.
create or replace function pgflow.percent_option(
  p_flow_slug text, p_where text, p_options jsonb, p_key text, p_default integer
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
     or v_value::numeric > 100 then
    perform pgflow.raise_invalid_definition(p_flow_slug, format(
      '%s option `%s` is a percentage: a whole number from 0 to 100, got %s',
      p_where, p_key, v_value));
  end if;
  return v_value::integer;
end;
$$;

-- Checks a step's condition pattern (`when` or `unless`): absent or null means none. A root
-- step's pattern is matched against the flow input and may be any JSON value; any other
-- step's is matched against the object of its dependencies' outputs, so it must be an object
-- whose keys are dependencies of the step.
create or replace function pgflow.condition_pattern(
  p_flow_slug text, p_step_slug text, p_step jsonb, p_key text, p_deps text[]
)
returns jsonb
language plpgsql
immutable
as $$
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

-- Checks a skip mode option: absent/null gives p_default, else one of p_allowed.
create or replace function pgflow.skip_mode_option(
  p_flow_slug text, p_step_slug text, p_step jsonb, p_key text, p_allowed text[],
  p_default text
)
returns text
language plpgsql
immutable
as $$
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

-- define_flow: compile a concrete flow, or verify it against the stored one.
--
-- p_options: {"max_attempts", "base_delay", "max_delay", "jitter", "timeout"} (delays and
--            timeout in seconds, jitter a percentage from 0 to 100; each optional).
-- p_steps:   [{"slug", "type": "single"|"map", "deps": [slug], "queue",
--              "max_attempts", "base_delay", "max_delay", "jitter", "timeout", "start_delay",
--              "when", "unless", "when_unmet", "when_exhausted", "signal", "signal_type",
--              "signal_schema", "wait_timeout", "when_timed_out", "signal_key"}]
--            in topological order
--            (every dependency listed before its dependents). "queue" defaults to the
--            lowercased flow slug; "type" to "single"; "deps" to []. "when"/"unless" are
--            JSON containment patterns (see condition_pattern); "when_unmet" is "skip"
--            (default), "skip_cascade" or "fail" and needs a condition; "when_exhausted" is
--            "fail" (default), "skip" or "skip_cascade". "signal" names the signal the step
--            waits for once its dependencies are done (a slug, one step per name in a flow);
--            "signal_type" is the Rust type its payload decodes into and "signal_schema" that
--            type's JSON Schema, against which untyped signals are checked (null: no check);
--            "wait_timeout" is how long, in seconds, the step may wait (null: for ever) and
--            "when_timed_out" what passing it does: "fail" (default), "skip" or
--            "skip_cascade". "signal_key" is where the key an event reaches the step by is
--            read when it begins to wait: a path whose first element is "input" (the flow
--            input) or one of the step's dependencies, then field names (see emit_events).
--            The signal, its key and when_timed_out are part of the shape; the type, schema
--            and timeout are settings. "sleep" (seconds, at least 1) makes the step sleep that
--            long once its dependencies are done; "sleep_until" instead until the time read
--            then at a path like signal_key's (an RFC 3339 time; a missing or null value: no
--            sleep). A step sleeps or waits for a signal, not both. Both are settings: a
--            sleep delays a step, it changes neither what runs nor what it receives.
--            "subflow" names a flow (an alias, or a concrete slug) the step runs: its handler
--            returns the child's input, and the step's output is the child run's output (a map
--            step's: the outputs of its children, in task order); part of the shape.
--            "subflow_input_type" is the Rust type the handler returns, checked against the
--            child flow's recorded input type when a child starts (a setting). A step that
--            runs a subflow may set "wait_timeout" and "when_timed_out" too: how long it waits
--            for its children, and what passing it does (its children are then cancelled).
--            "concurrency" (at least 1) caps how many of the step's tasks run at once, across
--            every worker; with "concurrency_key" (a path like signal_key's), per value read
--            there as the step becomes ready (a missing value is the key ""). Both are
--            settings: a cap holds tasks back, it changes neither what runs nor what it
--            receives (see 20_concurrency_caps.sql).
--            "rate_limit" (at least 1) limits how many of the step's tasks start per
--            "rate_period_ms" (at least 1; 1000 when absent), across every worker, each attempt
--            counted; with "rate_key" (a path like concurrency_key's), per value read there as
--            a task is claimed. Settings too (see 21_rate_limits.sql).
--
-- p_input_type, p_output_type: the Rust type names of the flow's input and output as the
--            caller's code names them (null: not known); recorded on compile and brought up to
--            date on verify when given. They are not part of the shape.
--
-- p_input_schema: a JSON Schema (an object, or true/false) of the flow input that every start
--            not typed by the flow's own input type is checked against (see start_flows and
--            input_misfit), or null for no check. Recorded on compile and replaced on verify
--            like the options: the definition's own is the one kept. Not part of the shape.
--
-- Returns 'compiled' (created now) or 'verified' (same shape already stored; its options and
-- recorded types are brought up to date with the definition). A different shape (steps, order, types, deps,
-- queues) or a different alias/version for an existing slug raises PF002 listing every
-- difference: a changed DAG needs a new concrete slug. Conditions and skip modes are part of
-- the shape: they decide which steps run and what their dependents receive.
--
-- Creates every routed PGMQ queue that does not exist yet; queues are never dropped here.
-- Locks: advisory lock (namespace, hashtext(flow_slug)) for the transaction.
create or replace function pgflow.define_flow(
  p_flow_slug text,
  p_alias text,
  p_version integer,
  p_options jsonb,
  p_steps jsonb,
  p_input_type text default null,
  p_output_type text default null,
  p_input_schema jsonb default null
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
  v_max_delay integer;
  v_jitter integer;
  v_timeout integer;
  v_status text;
  v_when jsonb;
  v_unless jsonb;
  v_when_unmet text;
  v_when_exhausted text;
  v_signal text;
  v_signals text[] := array[]::text[];
  v_wait jsonb;
  v_key jsonb;
  v_sleep_until jsonb;
  v_concurrency_key jsonb;
  v_rate_key jsonb;
  v_rate_limit integer;
  v_rate_period integer;
  v_subflow text;
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

  if p_input_schema is not null and jsonb_typeof(p_input_schema) not in ('object', 'boolean') then
    perform pgflow.raise_invalid_definition(p_flow_slug,
      'the input schema must be a JSON Schema: a JSON object (or true or false)');
  end if;

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
        'step `%s` routes to queue `%s`; a queue name is 1 to 47 bytes of `a-z`, `0-9` and `_`, '
        'not ending in `__p1`, `__p2`, `__p4` or `__p5` (the names of priority lanes)',
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

    v_subflow := nullif(v_step -> 'subflow', 'null'::jsonb) #>> '{}';
    if v_subflow is not null and (jsonb_typeof(v_step -> 'subflow') <> 'string'
                                  or not pgflow.is_valid_slug(v_subflow)) then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s` runs flow %s; a flow name must start with a letter or `_`, contain only '
        || 'letters, digits and `_`, and be at most 47 bytes', v_slug, v_step -> 'subflow'));
    end if;
    v_signal := nullif(v_step -> 'signal', 'null'::jsonb) #>> '{}';
    v_wait := null;
    if v_signal is not null then
      if jsonb_typeof(v_step -> 'signal') <> 'string' or not pgflow.is_valid_slug(v_signal) then
        perform pgflow.raise_invalid_definition(p_flow_slug, format(
          'step `%s` waits for signal %s; a signal name must start with a letter or `_`, '
          || 'contain only letters, digits and `_`, and be at most 47 bytes',
          v_slug, v_step -> 'signal'));
      end if;
      if v_signal = any(v_signals) then
        perform pgflow.raise_invalid_definition(p_flow_slug, format(
          'step `%s` waits for signal `%s`, which another step waits for already; a signal '
          || 'name belongs to one step of a flow', v_slug, v_signal));
      end if;
      if v_step ? 'signal_schema' and v_step -> 'signal_schema' <> 'null'::jsonb
         and jsonb_typeof(v_step -> 'signal_schema') not in ('object', 'boolean') then
        perform pgflow.raise_invalid_definition(p_flow_slug, format(
          'step `%s`: the signal schema must be a JSON Schema: a JSON object (or true or false)',
          v_slug));
      end if;
      v_key := pgflow.run_path_option(p_flow_slug, v_slug, v_step, 'signal_key', v_deps);
      v_signals := v_signals || v_signal;
      v_wait := jsonb_build_object('signal', v_signal,
        'when_timed_out', pgflow.skip_mode_option(p_flow_slug, v_slug, v_step, 'when_timed_out',
                                                  array['fail', 'skip', 'skip_cascade'], 'fail'),
        'key', v_key);
    elsif coalesce(v_step -> 'signal_key', 'null'::jsonb) <> 'null'::jsonb
          or (v_subflow is null
              and (coalesce(v_step -> 'wait_timeout', 'null'::jsonb) <> 'null'::jsonb
                   or coalesce(v_step -> 'when_timed_out', 'null'::jsonb) <> 'null'::jsonb)) then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s` sets `wait_timeout`, `when_timed_out` or `signal_key` but waits for nothing; '
        || 'add `signal` (or, for the timeout, `subflow`), or drop them', v_slug));
    end if;

    v_sleep_until := pgflow.run_path_option(p_flow_slug, v_slug, v_step, 'sleep_until', v_deps);
    if v_sleep_until is not null and coalesce(v_step -> 'sleep', 'null'::jsonb) <> 'null'::jsonb
    then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s` sets both `sleep` and `sleep_until`; a step sleeps one way', v_slug));
    end if;
    if v_signal is not null and (v_sleep_until is not null
                                 or coalesce(v_step -> 'sleep', 'null'::jsonb) <> 'null'::jsonb)
    then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s` both sleeps and waits for signal `%s`; a step does one or the other (put the '
        || 'sleep on a step before it)', v_slug, v_signal));
    end if;

    if v_subflow is not null and (v_signal is not null or v_sleep_until is not null
                                  or coalesce(v_step -> 'sleep', 'null'::jsonb) <> 'null'::jsonb)
    then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s` runs flow `%s` and also waits for a signal or sleeps; a step does one of '
        || 'them (put the wait on a step before it)', v_slug, v_subflow));
    end if;

    v_concurrency_key := pgflow.run_path_option(p_flow_slug, v_slug, v_step, 'concurrency_key',
                                                v_deps);
    if v_concurrency_key is not null
       and coalesce(v_step -> 'concurrency', 'null'::jsonb) = 'null'::jsonb then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s` sets `concurrency_key` without `concurrency`; add the cap each key gets '
        || '(`concurrency`: 2 runs at most two of its tasks per key at once)', v_slug));
    end if;

    v_rate_key := pgflow.run_path_option(p_flow_slug, v_slug, v_step, 'rate_key', v_deps);
    v_rate_limit := pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step,
                                        'rate_limit', 1, null);
    v_rate_period := pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step,
                                         'rate_period_ms', 1, null);
    if v_rate_limit is null and (v_rate_key is not null or v_rate_period is not null) then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s` sets `%s` without `rate_limit`; add how many of its tasks may start per '
        || 'period (`rate_limit`: 10 with `rate_period_ms`: 1000 is 10 a second)', v_slug,
        case when v_rate_key is not null then 'rate_key' else 'rate_period_ms' end));
    end if;
    if v_rate_limit > 10000 then
      perform pgflow.raise_invalid_definition(p_flow_slug, format(
        'step `%s` option `rate_limit` must be at most 10000 starts per period, got %s; use a '
        || 'shorter period for the same rate (100000 an hour is about 28 a second)', v_slug,
        v_rate_limit));
    end if;
    if v_rate_limit is not null and v_rate_period is null then
      v_rate_period := 1000;
    end if;

    v_seen := v_seen || v_slug;
    v_shape := v_shape || jsonb_build_array(jsonb_build_object(
      'slug', v_slug,
      'type', v_type,
      'deps', (select coalesce(jsonb_agg(d order by d), '[]'::jsonb) from unnest(v_deps) d),
      'queue', v_queue,
      'skip', jsonb_build_object('when', v_when, 'unless', v_unless,
                                 'when_unmet', v_when_unmet,
                                 'when_exhausted', v_when_exhausted),
      'wait', v_wait,
      'subflow', case when v_subflow is not null then jsonb_build_object(
        'flow', v_subflow,
        'when_timed_out', pgflow.skip_mode_option(p_flow_slug, v_slug, v_step, 'when_timed_out',
                                                  array['fail', 'skip', 'skip_cascade'], 'fail'))
      end));
    v_settings := v_settings || jsonb_build_array(jsonb_build_object(
      'slug', v_slug,
      'deps', to_jsonb(v_deps),
      'max_attempts', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'max_attempts', 1, null),
      'base_delay', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'base_delay', 0, null),
      'max_delay', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'max_delay', 1, null),
      'jitter', pgflow.percent_option(p_flow_slug, format('step `%s`', v_slug), v_step, 'jitter', null),
      'timeout', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'timeout', 1, null),
      'start_delay', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'start_delay', 0, null),
      'wait_timeout', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'wait_timeout', 1, null),
      'signal_type', v_step ->> 'signal_type',
      'signal_schema', nullif(v_step -> 'signal_schema', 'null'::jsonb),
      'sleep', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'sleep', 1, null),
      'sleep_until', v_sleep_until,
      'subflow_input_type', v_step ->> 'subflow_input_type',
      'concurrency', pgflow.option_value(p_flow_slug, format('step `%s`', v_slug), v_step, 'concurrency', 1, null),
      'concurrency_key', v_concurrency_key,
      'rate_limit', v_rate_limit,
      'rate_period_ms', v_rate_period,
      'rate_key', v_rate_key));
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
      if v_stored_shape -> v_index -> 'subflow' is distinct from v_shape -> v_index -> 'subflow'
      then
        v_differences := v_differences || format(
          'step `%s` subflow: stored %s, definition %s', v_shape -> v_index ->> 'slug',
          coalesce(v_stored_shape -> v_index -> 'subflow', 'null'::jsonb),
          coalesce(v_shape -> v_index -> 'subflow', 'null'::jsonb));
      end if;
      if v_stored_shape -> v_index -> 'wait' <> v_shape -> v_index -> 'wait' then
        v_differences := v_differences || format(
          'step `%s` signal: stored %s, definition %s', v_shape -> v_index ->> 'slug',
          v_stored_shape -> v_index -> 'wait', v_shape -> v_index -> 'wait');
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
        output_type = coalesce(p_output_type, output_type),
        input_schema = p_input_schema
    where flow_slug = p_flow_slug
      and (opt_max_attempts, opt_base_delay, opt_max_delay, opt_jitter, opt_timeout,
           input_type, output_type, input_schema)
          is distinct from (v_max_attempts, v_base_delay, v_max_delay, v_jitter, v_timeout,
                            coalesce(p_input_type, input_type),
                            coalesce(p_output_type, output_type), p_input_schema);

    update pgflow.steps s
    set opt_max_attempts = (x ->> 'max_attempts')::integer,
        opt_base_delay = (x ->> 'base_delay')::integer,
        opt_max_delay = (x ->> 'max_delay')::integer,
        opt_jitter = (x ->> 'jitter')::integer,
        opt_timeout = (x ->> 'timeout')::integer,
        opt_start_delay = (x ->> 'start_delay')::integer,
        wait_timeout = (x ->> 'wait_timeout')::integer,
        signal_type = coalesce(x ->> 'signal_type', s.signal_type),
        signal_schema = nullif(x -> 'signal_schema', 'null'::jsonb),
        sleep_seconds = (x ->> 'sleep')::integer,
        sleep_until_path = pgflow.text_array(x -> 'sleep_until'),
        subflow_input_type = coalesce(x ->> 'subflow_input_type', s.subflow_input_type),
        concurrency_limit = (x ->> 'concurrency')::integer,
        concurrency_key_path = pgflow.text_array(x -> 'concurrency_key'),
        rate_limit = (x ->> 'rate_limit')::integer,
        rate_period_ms = (x ->> 'rate_period_ms')::integer,
        rate_key_path = pgflow.text_array(x -> 'rate_key')
    from jsonb_array_elements(v_settings) x
    where s.flow_slug = p_flow_slug
      and s.step_slug = x ->> 'slug'
      and (s.opt_max_attempts, s.opt_base_delay, s.opt_max_delay, s.opt_jitter, s.opt_timeout,
           s.opt_start_delay, s.wait_timeout, s.signal_type, s.signal_schema, s.sleep_seconds,
           s.sleep_until_path, s.subflow_input_type, s.concurrency_limit,
           s.concurrency_key_path, s.rate_limit, s.rate_period_ms, s.rate_key_path)
          is distinct from ((x ->> 'max_attempts')::integer, (x ->> 'base_delay')::integer,
                            (x ->> 'max_delay')::integer, (x ->> 'jitter')::integer,
                            (x ->> 'timeout')::integer, (x ->> 'start_delay')::integer,
                            (x ->> 'wait_timeout')::integer,
                            coalesce(x ->> 'signal_type', s.signal_type),
                            nullif(x -> 'signal_schema', 'null'::jsonb),
                            (x ->> 'sleep')::integer, pgflow.text_array(x -> 'sleep_until'),
                            coalesce(x ->> 'subflow_input_type', s.subflow_input_type),
                            (x ->> 'concurrency')::integer,
                            pgflow.text_array(x -> 'concurrency_key'),
                            (x ->> 'rate_limit')::integer, (x ->> 'rate_period_ms')::integer,
                            pgflow.text_array(x -> 'rate_key'));
    v_status := 'verified';
  else
    -- 3b. Compile.
    insert into pgflow.flows (flow_slug, alias, version, opt_max_attempts, opt_base_delay,
                              opt_max_delay, opt_jitter, opt_timeout, input_type, output_type,
                              input_schema)
    values (p_flow_slug, p_alias, p_version, v_max_attempts, v_base_delay, v_max_delay, v_jitter,
            v_timeout, p_input_type, p_output_type, p_input_schema);

    insert into pgflow.steps (flow_slug, step_slug, step_index, step_type, deps_count, queue_name,
                              opt_max_attempts, opt_base_delay, opt_max_delay, opt_jitter,
                              opt_timeout, opt_start_delay, condition_when, condition_unless,
                              when_unmet, when_exhausted, signal_name, when_timed_out,
                              wait_timeout, signal_type, signal_schema, signal_key_path,
                              sleep_seconds, sleep_until_path, subflow, subflow_input_type,
                              concurrency_limit, concurrency_key_path, rate_limit,
                              rate_period_ms, rate_key_path)
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
           shape.value -> 'skip' ->> 'when_exhausted',
           shape.value -> 'wait' ->> 'signal',
           coalesce(shape.value -> 'wait' ->> 'when_timed_out',
                    shape.value -> 'subflow' ->> 'when_timed_out', 'fail'),
           (settings ->> 'wait_timeout')::integer,
           settings ->> 'signal_type',
           nullif(settings -> 'signal_schema', 'null'::jsonb),
           pgflow.text_array(shape.value -> 'wait' -> 'key'),
           (settings ->> 'sleep')::integer,
           pgflow.text_array(settings -> 'sleep_until'),
           shape.value -> 'subflow' ->> 'flow',
           settings ->> 'subflow_input_type',
           (settings ->> 'concurrency')::integer,
           pgflow.text_array(settings -> 'concurrency_key'),
           (settings ->> 'rate_limit')::integer,
           (settings ->> 'rate_period_ms')::integer,
           pgflow.text_array(settings -> 'rate_key')
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
