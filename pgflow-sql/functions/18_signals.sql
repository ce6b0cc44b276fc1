-- Signals and sleeps: a step that waits for a named signal starts once its run has received
-- it, and one that sleeps once its wake time has come (start_ready_steps makes either
-- 'waiting' until then). send_signal delivers a signal, in the caller's transaction;
-- expire_waits ends the waits whose deadline passed (a timeout, or a sleep's end); a worker
-- reads the payload of the signal its step waited for with signal_payload.

-- Raises PF016: a signal refused, naming the run, the signal and why. Nothing was changed.
create or replace function pgflow.refuse_signal(
  p_run_id uuid, p_signal_name text, p_reason text, p_message text
)
returns void
language plpgsql
as $$
begin
  raise exception '%', p_message
    using errcode = 'PF016',
          detail = jsonb_build_object('run_id', p_run_id, 'signal_name', p_signal_name,
                                      'reason', p_reason)::text;
end;
$$;

-- send_signal: delivers signal p_signal_name with p_payload (SQL null is JSON null) to run
-- p_run_id. The run keeps it (once per run and name); when the step of the run's flow that
-- waits for this name is waiting, it starts now, and when the run has not reached that step
-- yet, the step starts without waiting once it does. A retry of the run reuses the signals the
-- run received.
--
-- Returns 'delivered' (the step was waiting and starts), 'kept' (the run has not reached the
-- step yet) or 'duplicate' (the run already received this signal with an equal payload:
-- nothing changed, so a sender may repeat a send it is unsure of).
--
-- Refused, changing nothing: PF011 when no run has the id; PF016 (detail: run_id,
-- signal_name, reason) when
--   unknown_signal  no step of the run's flow waits for this name (the message lists those
--                   that do),
--   already_sent    the run received this signal before, with another payload,
--   run_ended       the run is completed, failed or cancelled,
--   too_late        the step stopped waiting without it (its wait timed out, or it was
--                   skipped or cancelled),
--   payload_misfit  the payload does not fit the JSON Schema the step records for its signal
--                   (flows with `check_input`), naming the field.
--
-- It runs in the caller's transaction: a signal sent in a transaction that rolls back was
-- never sent, and one sent with the caller's own writes commits with them.
-- Locks: the run (as completions do, so a completion that makes the step wait and this send
-- cannot miss each other), then as start_ready_steps.
create or replace function pgflow.send_signal(
  p_run_id uuid,
  p_signal_name text,
  p_payload jsonb
)
returns text
language plpgsql
as $$
declare
  v_run pgflow.runs;
  v_step pgflow.steps;
  v_step_state record;
  v_stored jsonb;
  v_misfit jsonb;
begin
  if p_run_id is null or p_signal_name is null then
    raise exception 'send_signal needs a run id and a signal name (got null)'
      using errcode = '22004';
  end if;
  p_payload := coalesce(p_payload, 'null'::jsonb);

  perform pgflow.lock_runs(array[p_run_id]);
  select * into v_run from pgflow.runs r where r.run_id = p_run_id;
  if not found then
    -- An archived run ended long ago: refused as any ended run is.
    select * into v_run from pgflow.all_runs r where r.run_id = p_run_id limit 1;
  end if;
  if not found then
    raise exception 'run % does not exist', p_run_id
      using errcode = 'PF011', detail = jsonb_build_object('run_id', p_run_id)::text;
  end if;

  select * into v_step from pgflow.steps s
  where s.flow_slug = v_run.flow_slug and s.signal_name = p_signal_name;
  if not found then
    perform pgflow.refuse_signal(p_run_id, p_signal_name, 'unknown_signal', format(
      'flow `%s` (run %s) has no step that waits for a signal `%s`; %s',
      v_run.flow_slug, p_run_id, p_signal_name,
      coalesce('its signals: ' || (select string_agg(s.signal_name, ', ' order by s.step_index)
                                   from pgflow.steps s
                                   where s.flow_slug = v_run.flow_slug
                                     and s.signal_name is not null),
               'it waits for no signal')));
  end if;

  select sg.payload into v_stored from pgflow.signals sg
  where sg.run_id = p_run_id and sg.signal_name = p_signal_name;
  if found then
    if v_stored = p_payload then
      return 'duplicate';
    end if;
    perform pgflow.refuse_signal(p_run_id, p_signal_name, 'already_sent', format(
      'run %s already received signal `%s`, with another payload; a signal is delivered once '
      || 'per run (sending the same payload again is accepted and changes nothing)',
      p_run_id, p_signal_name));
  end if;

  if v_run.status <> 'started' then
    perform pgflow.refuse_signal(p_run_id, p_signal_name, 'run_ended', format(
      'run %s is %s; signal `%s` changes nothing (retry or resume the run to run it again)',
      p_run_id, v_run.status, p_signal_name));
  end if;

  select ss.status, ss.skip_reason into v_step_state from pgflow.step_states ss
  where ss.run_id = p_run_id and ss.step_slug = v_step.step_slug;
  if v_step_state.status in ('skipped', 'failed', 'cancelled') then
    perform pgflow.refuse_signal(p_run_id, p_signal_name, 'too_late', format(
      'step `%s` of run %s no longer waits for signal `%s`: it is %s%s',
      v_step.step_slug, p_run_id, p_signal_name, v_step_state.status,
      coalesce(' (' || v_step_state.skip_reason || ')', '')));
  end if;

  v_misfit := pgflow.input_misfit(v_step.signal_schema, p_payload);
  if v_misfit is not null then
    perform pgflow.refuse_signal(p_run_id, p_signal_name, 'payload_misfit', format(
      'the payload of signal `%s` (type %s) does not fit%s: %s; run %s was not signalled',
      p_signal_name, coalesce(v_step.signal_type, 'unrecorded'),
      case when v_misfit ->> 'path' = '' then ''
           else ' at ' || (v_misfit ->> 'path') end,
      v_misfit ->> 'problem', p_run_id));
  end if;

  insert into pgflow.signals (run_id, signal_name, payload)
  values (p_run_id, p_signal_name, p_payload);

  delete from pgflow.waits w where w.run_id = p_run_id and w.step_slug = v_step.step_slug;
  if found then
    perform pgflow.start_ready_steps(array[p_run_id]);
    return 'delivered';
  end if;
  return 'kept';
end;
$$;

-- run_value_at: the value at p_path in run p_run_id: its first element `input` (the run's
-- input p_input) or a dependency's slug (that step's output), then field names; null without a
-- path or a value there. (SQL functions Postgres inlines into the statements that call them.)
create or replace function pgflow.run_value_at(p_path text[], p_run_id uuid, p_input jsonb)
returns jsonb
language sql
stable
as $$
  select case when p_path is null then null
              when p_path[1] = 'input' then p_input #> p_path[2:]
              else (select dss.output from pgflow.step_states dss
                    where dss.run_id = p_run_id and dss.step_slug = p_path[1]) #> p_path[2:]
         end
$$;

-- signal_key_of: the key a step waits by in run p_run_id, read at p_path (steps.signal_key_path,
-- see run_value_at) as text; null without a path or a value there. start_flows and
-- start_ready_steps read it when steps begin to wait.
create or replace function pgflow.signal_key_of(p_path text[], p_run_id uuid, p_input jsonb)
returns text
language sql
stable
as $$
  select pgflow.run_value_at(p_path, p_run_id, p_input) #>> '{}'
$$;

-- wake_time_of: p_value as the time a sleeping step wakes at: a JSON string holding an RFC 3339
-- time with its offset (2026-12-09T09:00:00Z, 2026-12-09T10:00:00.5+01:00), as chrono and
-- most JSON encoders write one; null for anything else (the caller tells a missing or null
-- value, which means no sleep, from one that is no time).
create or replace function pgflow.wake_time_of(p_value jsonb)
returns timestamptz
language plpgsql
stable
as $$
declare
  v_text text;
begin
  if p_value is null or jsonb_typeof(p_value) <> 'string' then
    return null;
  end if;
  v_text := p_value #>> '{}';
  if v_text !~ '^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$' then
    return null;
  end if;
  begin
    return v_text::timestamptz;
  exception when datetime_field_overflow or invalid_datetime_format then
    return null;  -- well formed, but no such day or hour (2026-02-30)
  end;
end;
$$;

-- signal_payload: the payload of the signal step p_step_slug of run p_run_id waited for (null
-- when the run has not received it). A worker reads it for the handler of that step.
-- Locks: none (reads only).
create or replace function pgflow.signal_payload(p_run_id uuid, p_step_slug text)
returns jsonb
language sql
stable
as $$
  select sg.payload
  from pgflow.runs r
  join pgflow.steps s on s.flow_slug = r.flow_slug and s.step_slug = p_step_slug
  join pgflow.signals sg on sg.run_id = r.run_id and sg.signal_name = s.signal_name
  where r.run_id = p_run_id
$$;

-- expire_waits: ends the waits whose deadline has passed (at most p_limit, oldest deadline
-- first). A sleep's ends at its wake time: its step starts. A signal's times out, and so does a
-- subflow's (its children still going are then cancelled), as its step's when_timed_out says:
-- `fail` fails the step (its error names what it waited for and how long) and its run; `skip`
-- and `skip_cascade` skip it (reason timed_out, and with skip_cascade everything downstream),
-- and the run goes on. The deadline is the database's
-- clock, so a wait ends on time whichever process looks, and late (at the next look) when none
-- does. Any number of processes may call it at once: a wait ends once.
-- Returns how many waits it ended and the soonest deadline still ahead (null: none), so the
-- caller knows when to look again.
-- Locks: the runs of the due waits (order), then their waits, then as fail_runs, skip_steps
-- and start_ready_steps.
create or replace function pgflow.expire_waits(p_limit integer default 1000)
returns table (expired integer, next_deadline timestamptz)
language plpgsql
as $$
declare
  v_due uuid[];
  v_fail_runs uuid[];
  v_skip_runs uuid[];
  v_skip_steps text[];
  v_skip_cascade boolean[];
  v_woken_runs uuid[];
  v_parent_runs uuid[];
  v_parent_steps text[];
  v_count integer := 0;
begin
  select array_agg(distinct w.run_id) into v_due
  from (select w.run_id from pgflow.waits w
        where w.deadline <= pgflow.clock()
        order by w.deadline
        limit p_limit) w;

  if v_due is not null then
    perform pgflow.lock_runs(v_due);
    with due as (
      select w.ctid as row_ctid, w.run_id, w.step_slug, w.signal_name, w.waiting_since, w.kind,
             case when w.kind = 'sleep' then 'wake' else s.when_timed_out end as ending
      from pgflow.waits w
      join pgflow.runs r on r.run_id = w.run_id and r.status = 'started'
      join pgflow.steps s on s.flow_slug = w.flow_slug and s.step_slug = w.step_slug
      where w.run_id = any(v_due) and w.deadline <= pgflow.clock()
      order by w.run_id, w.step_slug
      for update of w
    ),
    ended as (
      delete from pgflow.waits w using due
      where w.ctid = due.row_ctid
      returning due.*
    ),
    failed as (
      update pgflow.step_states ss
      set status = 'failed', failed_at = pgflow.clock(),
          error_message = format(
            'step `%s` waited %s for %s and timed out (when_timed_out = fail)',
            e.step_slug, date_trunc('second', pgflow.clock() - e.waiting_since),
            case when e.kind = 'subflow' then 'its child runs'
                 else format('signal `%s`', e.signal_name) end)
      from ended e
      where e.ending = 'fail' and ss.run_id = e.run_id and ss.step_slug = e.step_slug
        and ss.status = 'waiting'
      returning ss.run_id
    )
    select (select count(*) from ended)::integer,
           (select array_agg(distinct f.run_id) from failed f),
           (select array_agg(e.run_id order by e.run_id, e.step_slug) from ended e
            where e.ending like 'skip%'),
           (select array_agg(e.step_slug order by e.run_id, e.step_slug) from ended e
            where e.ending like 'skip%'),
           (select array_agg(e.ending = 'skip_cascade' order by e.run_id, e.step_slug)
            from ended e where e.ending like 'skip%'),
           (select array_agg(distinct e.run_id) from ended e where e.ending = 'wake'),
           (select array_agg(e.run_id) from ended e where e.kind = 'subflow'),
           (select array_agg(e.step_slug) from ended e where e.kind = 'subflow')
    into v_count, v_fail_runs, v_skip_runs, v_skip_steps, v_skip_cascade, v_woken_runs,
         v_parent_runs, v_parent_steps;


    if v_fail_runs is not null then
      perform pgflow.fail_runs(v_fail_runs, 'run failed: a step timed out waiting');
    end if;
    if v_skip_runs is not null then
      perform pgflow.skip_steps(v_skip_runs, v_skip_steps,
                                array_fill('timed_out'::text, array[cardinality(v_skip_runs)]),
                                v_skip_cascade, null);
    end if;
    if v_woken_runs is not null then
      perform pgflow.start_ready_steps(v_woken_runs);
    end if;
    -- Children of steps that stopped waiting for them go (after their steps ended, so that
    -- their cancel does not fail those steps again).
    if v_parent_runs is not null then
      perform pgflow.cancel_children(v_parent_runs, v_parent_steps,
                                     'its parent step timed out waiting for it');
    end if;
    -- Waits of runs that ended without them (failed or cancelled meanwhile) go too.
    delete from pgflow.waits w
    where w.run_id = any(v_due) and w.deadline <= pgflow.clock()
      and not exists (select 1 from pgflow.runs r
                      where r.run_id = w.run_id and r.status = 'started');
  end if;

  return query
  select v_count, (select min(w.deadline) from pgflow.waits w where w.deadline > pgflow.clock());
end;
$$;

-- emit_events: delivers event p_event_name, by key, to every run waiting for it: each
-- (p_keys[i], p_payloads[i]) resolves the waits of steps that wait for a signal of that name
-- by key (steps.signal_key_path) whose run's key is p_keys[i], in any flow, as send_signal
-- would with that payload (the step starts, and the signal is kept as the run's). A key given
-- twice delivers its last payload. Waits are matched as they are now: a run that reaches its
-- wait later is not resolved by an event emitted before (send it the signal by run id), and
-- a run waiting for the name without a key is only reached by run id.
--
-- Returns a row per resolved run: the run, its step and the key. Nothing waiting for a key is
-- no error (no rows). A payload that does not fit the schema of a step it would reach (flows
-- with `check_input`) refuses the whole call with PF016 (payload_misfit), delivering nothing.
--
-- It runs in the caller's transaction, like send_signal.
-- Locks: the runs of the matching waits (order), then their waits, then as start_ready_steps.
create or replace function pgflow.emit_events(
  p_event_name text,
  p_keys text[],
  p_payloads jsonb[]
)
returns table (run_id uuid, step_slug text, event_key text)
language plpgsql
as $$
declare
  v_runs uuid[];
  v_misfit record;
  v_run_ids uuid[];
  v_steps text[];
  v_keys text[];
  v_payloads jsonb[];
begin
  if p_event_name is null or p_keys is null or p_payloads is null
     or cardinality(p_keys) <> cardinality(p_payloads) then
    raise exception 'emit_events needs an event name and as many payloads as keys (got % keys '
      'and % payloads)', coalesce(cardinality(p_keys), 0), coalesce(cardinality(p_payloads), 0)
      using errcode = 'PF005';
  end if;

  select array_agg(distinct w.run_id order by w.run_id) into v_runs
  from pgflow.waits w
  where w.signal_name = p_event_name and w.signal_key = any(p_keys);
  if v_runs is null then
    return;
  end if;
  perform pgflow.lock_runs(v_runs);

  -- The waits to resolve, locked, with their payloads (a key given twice: its last payload).
  with events as (
    select distinct on (e.key) e.key, coalesce(e.payload, 'null'::jsonb) as payload
    from unnest(p_keys, p_payloads) with ordinality as e(key, payload, n)
    where e.key is not null
    order by e.key, e.n desc
  ),
  due as (
    select w.run_id, w.step_slug, w.signal_key, e.payload
    from pgflow.waits w
    join events e on e.key = w.signal_key
    join pgflow.runs r on r.run_id = w.run_id and r.status = 'started'
    where w.run_id = any(v_runs) and w.signal_name = p_event_name
    order by w.run_id, w.step_slug
    for update of w
  )
  select array_agg(d.run_id), array_agg(d.step_slug), array_agg(d.signal_key),
         array_agg(d.payload)
  into v_run_ids, v_steps, v_keys, v_payloads
  from due d;
  if v_run_ids is null then
    return;
  end if;

  select u.run_id, u.key, s.signal_type, pgflow.input_misfit(s.signal_schema, u.payload) as misfit
  into v_misfit
  from unnest(v_run_ids, v_steps, v_keys, v_payloads) as u(run_id, step_slug, key, payload)
  join pgflow.runs r on r.run_id = u.run_id
  join pgflow.steps s on s.flow_slug = r.flow_slug and s.step_slug = u.step_slug
  where s.signal_schema is not null
    and pgflow.input_misfit(s.signal_schema, u.payload) is not null
  limit 1;
  if found then
    perform pgflow.refuse_signal(v_misfit.run_id, p_event_name, 'payload_misfit', format(
      'the payload of event `%s` for key `%s` (type %s) does not fit%s: %s; nothing was delivered',
      p_event_name, v_misfit.key, coalesce(v_misfit.signal_type, 'unrecorded'),
      case when v_misfit.misfit ->> 'path' = '' then ''
           else ' at ' || (v_misfit.misfit ->> 'path') end,
      v_misfit.misfit ->> 'problem'));
  end if;

  delete from pgflow.waits w
  using unnest(v_run_ids, v_steps) as u(run_id, step_slug)
  where w.run_id = u.run_id and w.step_slug = u.step_slug;
  insert into pgflow.signals (run_id, signal_name, payload)
  select u.run_id, p_event_name, u.payload
  from unnest(v_run_ids, v_payloads) as u(run_id, payload)
  on conflict do nothing;

  perform pgflow.start_ready_steps(v_run_ids);

  return query
  select u.run_id, u.step_slug, u.key
  from unnest(v_run_ids, v_steps, v_keys) as u(run_id, step_slug, key)
  order by u.run_id, u.step_slug;
end;
$$;

-- emit_event: emit_events for one key.
-- Locks: as emit_events.
create or replace function pgflow.emit_event(p_event_name text, p_key text, p_payload jsonb)
returns table (run_id uuid, step_slug text, event_key text)
language sql
as $$
  select * from pgflow.emit_events(p_event_name, array[p_key], array[p_payload])
$$;

-- The MAC of signal p_signal_name of run p_run_id under the install's secret (the first 128
-- bits of sha256(secret || sha256(secret || run/signal)), hex): what a callback token carries.
create or replace function pgflow.signal_token_mac(p_run_id uuid, p_signal_name text)
returns text
language sql
stable
as $$
  select encode(substr(sha256(s.secret || sha256(s.secret
                                                  || convert_to(p_run_id::text || '/'
                                                                || p_signal_name, 'UTF8'))),
                       1, 16), 'hex')
  from pgflow.signal_secret s
$$;

-- signal_token: the callback token of signal p_signal_name of run p_run_id,
-- `<run id, 32 hex digits>.<signal>.<MAC>`: whoever holds it may send that signal to that run
-- once (send_signal_by_token), with no credentials of their own, while the step waits or
-- before. A step's handler mints the token of a signal its run waits for later (the link of an
-- approval e-mail) through its context. Raises PF011 for an unknown run, PF016
-- (unknown_signal) for a name no step of the run's flow waits for.
-- Locks: none (reads only).
create or replace function pgflow.signal_token(p_run_id uuid, p_signal_name text)
returns text
language plpgsql
stable
as $$
declare
  v_flow_slug text;
begin
  select r.flow_slug into v_flow_slug from pgflow.all_runs r where r.run_id = p_run_id limit 1;
  if not found then
    raise exception 'run % does not exist', p_run_id
      using errcode = 'PF011', detail = jsonb_build_object('run_id', p_run_id)::text;
  end if;
  if not exists (select 1 from pgflow.steps s
                 where s.flow_slug = v_flow_slug and s.signal_name = p_signal_name) then
    perform pgflow.refuse_signal(p_run_id, p_signal_name, 'unknown_signal', format(
      'flow `%s` (run %s) has no step that waits for a signal `%s`; no token is made for it',
      v_flow_slug, p_run_id, p_signal_name));
  end if;
  return replace(p_run_id::text, '-', '') || '.' || p_signal_name || '.'
         || pgflow.signal_token_mac(p_run_id, p_signal_name);
end;
$$;

-- send_signal_by_token: sends the signal a callback token stands for, with p_payload, as
-- send_signal does. Returns 'delivered' or 'kept' as send_signal; 'used' when the run already
-- received this signal with an equal payload (a token serves once: a second use changes
-- nothing); 'unknown' when p_token is no token of this install (malformed, or its MAC does not
-- match; nothing says which). Refusals as send_signal's: PF016 when the run ended, the step
-- stopped waiting, another payload was sent, or the payload does not fit; PF011 when the run
-- is gone (pruned).
-- Locks: as send_signal.
create or replace function pgflow.send_signal_by_token(p_token text, p_payload jsonb)
returns text
language plpgsql
as $$
declare
  v_parts text[] := string_to_array(coalesce(p_token, ''), '.');
  v_run_id uuid;
  v_outcome text;
begin
  if cardinality(v_parts) <> 3 or v_parts[1] !~ '^[0-9a-f]{32}$'
     or not coalesce(pgflow.is_valid_slug(v_parts[2]), false)
     or v_parts[3] !~ '^[0-9a-f]{32}$' then
    return 'unknown';
  end if;
  v_run_id := v_parts[1]::uuid;
  if pgflow.signal_token_mac(v_run_id, v_parts[2]) is distinct from v_parts[3] then
    return 'unknown';
  end if;
  v_outcome := pgflow.send_signal(v_run_id, v_parts[2], p_payload);
  return case when v_outcome = 'duplicate' then 'used' else v_outcome end;
end;
$$;
