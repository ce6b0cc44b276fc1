-- Rate limits: a step with a rate_limit lets at most that many of its tasks start per
-- rate_period_ms, across every worker and process, per key when it has a rate_key_path (the
-- tables: migration 20261227000100_rate_limits.sql). The limit is kept at the claim, which
-- every attempt passes: claim_tasks calls take_rate_tokens for the tasks it is about to start,
-- and a task without a token is sent back to wait instead (a new message, due when its key is
-- due to have a token for it), with no attempt spent. The paths that start a task without a
-- claim (a completion claiming the next step, a slot's release claiming a capped task) leave
-- limited steps alone. A key belongs to the flow's alias (rate_keys.scope), so the versions of
-- a flow share it.

-- rate_key_text: a limit's key as stored: the value read (cap_key_of), or, past 200 characters,
-- its first 160 and an md5 of the whole (a long key would not fit the keys' indexes).
create or replace function pgflow.rate_key_text(p_key text)
returns text
language sql
immutable
as $$
  select case when length(p_key) <= 200 then p_key
              else left(p_key, 160) || '…' || md5(p_key) end
$$;

-- The margin a waiting task's message is due after its token frees: a claim counts by its
-- transaction's time, which begins a little before it reads the message.
create or replace function pgflow.rate_due_margin()
returns interval
language sql
immutable
as $$
  select interval '10 milliseconds'
$$;

-- take_rate_tokens: for the queued tasks a claim on p_queue_name has locked (row addresses),
-- gives each task of a limited step, of a live run, a token of its key, key by key in (scope,
-- step, key) order; a task that gets none is deferred (defer_rate_limited) and so not claimed:
-- the claim finds its row address gone, as it does a parked task's. Returns the deferred tasks.
-- Within a key, the tasks that waited before go first (longest due first), then the new ones
-- in message order; a new one takes a token only when no task of its key is scheduled to come
-- back later (the key's waiting line is empty), so new tasks do not pass the ones waiting.
-- A token is free when it last let a task start at least a period before this transaction's
-- time (now(), the `started_at` a claim records). Tokens are locked SKIP LOCKED, and one that
-- another claim used since this one's snapshot is checked again at its new time (and updated by
-- its key, so the newer row is the one changed), so each token lets starts through at least a
-- period apart, and a key never more than its limit in a period, however many claims run.
-- Locks: each key's row FOR KEY SHARE (waits only for a sweep deleting the key, which waits for
-- nothing), its tokens SKIP LOCKED (all of them, briefly, when a lowered limit leaves tokens
-- above it), then as defer_rate_limited. A key met for the first time is inserted, which waits
-- for another claim inserting the same key.
create or replace function pgflow.take_rate_tokens(p_queue_name text, p_row_ctids tid[])
returns table (run_id uuid, step_slug text, task_index integer)
language plpgsql
as $$
declare
  v_key record;
  v_next_wait_at timestamptz;
  v_allowed integer;
  v_taken integer;
begin
  if not exists (select 1 from pgflow.steps s
                 where s.queue_name = p_queue_name and s.rate_limit is not null) then
    return;
  end if;
  for v_key in
    with limited as (
      select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.message_id, s.rate_limit,
             s.rate_period_ms, f.alias as scope,
             pgflow.rate_key_text(pgflow.cap_key_of(s.rate_key_path, t.run_id, r.input))
               as rate_key,
             w.due_at
      from unnest(p_row_ctids) as l(row_ctid)
      join pgflow.step_tasks t on t.ctid = l.row_ctid
      join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.flows f on f.flow_slug = t.flow_slug
      join pgflow.runs r on r.run_id = t.run_id
      left join pgflow.rate_waits w
        on w.run_id = t.run_id and w.step_slug = t.step_slug and w.task_index = t.task_index
      where s.rate_limit is not null and r.status = 'started' and t.status = 'queued'
    )
    select l.scope, l.step_slug, l.rate_key, min(l.rate_limit) as rate_limit,
           min(l.rate_period_ms) as period_ms,
           make_interval(secs => min(l.rate_period_ms) / 1000.0) as period,
           array_agg(l.run_id order by l.due_at nulls last, l.message_id) as runs,
           array_agg(l.task_index order by l.due_at nulls last, l.message_id) as indexes,
           array_agg(l.flow_slug order by l.due_at nulls last, l.message_id) as flows,
           count(l.due_at)::integer as waited
    from limited l
    group by l.scope, l.step_slug, l.rate_key
    order by l.scope, l.step_slug, l.rate_key
  loop
    -- The key's row (held so that the sweep leaves the key alone) and one token per unit of
    -- its limit.
    select k.next_wait_at into v_next_wait_at
    from pgflow.rate_keys k
    where k.scope = v_key.scope and k.step_slug = v_key.step_slug
      and k.rate_key = v_key.rate_key
    for key share;
    if not found then
      insert into pgflow.rate_keys (scope, step_slug, rate_key, rate_limit, rate_period_ms)
      values (v_key.scope, v_key.step_slug, v_key.rate_key, v_key.rate_limit, v_key.period_ms)
      on conflict do nothing;
      select k.next_wait_at into v_next_wait_at
      from pgflow.rate_keys k
      where k.scope = v_key.scope and k.step_slug = v_key.step_slug
        and k.rate_key = v_key.rate_key
      for key share;
    end if;
    if exists (select 1 from pgflow.rate_tokens tk
               where tk.scope = v_key.scope and tk.step_slug = v_key.step_slug
                 and tk.rate_key = v_key.rate_key and tk.token > v_key.rate_limit) then
      perform pgflow.lower_rate_tokens(v_key.scope, v_key.step_slug, v_key.rate_key,
                                       v_key.rate_limit);
    end if;
    if not exists (select 1 from pgflow.rate_tokens tk
                   where tk.scope = v_key.scope and tk.step_slug = v_key.step_slug
                     and tk.rate_key = v_key.rate_key and tk.token = v_key.rate_limit) then
      insert into pgflow.rate_tokens (scope, step_slug, rate_key, token)
      select v_key.scope, v_key.step_slug, v_key.rate_key, g
      from generate_series(1, v_key.rate_limit) g
      on conflict do nothing;
    end if;

    -- The tasks that waited before may take tokens; the new ones too when none is waiting.
    v_allowed := case when v_next_wait_at <= now() then cardinality(v_key.runs)
                      else v_key.waited end;
    v_taken := 0;
    if v_allowed > 0 then
      with free as (
        select tk.token
        from pgflow.rate_tokens tk
        where tk.scope = v_key.scope and tk.step_slug = v_key.step_slug
          and tk.rate_key = v_key.rate_key and tk.token <= v_key.rate_limit
          and tk.last_start_at <= now() - v_key.period
        order by tk.last_start_at
        limit v_allowed
        for update skip locked
      ),
      used as (
        update pgflow.rate_tokens tk
        set last_start_at = now()
        from free
        where tk.scope = v_key.scope and tk.step_slug = v_key.step_slug
          and tk.rate_key = v_key.rate_key and tk.token = free.token
        returning 1
      )
      select count(*) into v_taken from used;
    end if;

    if v_taken > 0 then
      delete from pgflow.rate_waits w
      using unnest(v_key.runs[1:v_taken], v_key.indexes[1:v_taken]) as u(run_id, task_index)
      where w.run_id = u.run_id and w.step_slug = v_key.step_slug
        and w.task_index = u.task_index;
    end if;
    if v_taken < cardinality(v_key.runs) then
      perform pgflow.defer_rate_limited(
        v_key.scope, v_key.step_slug, v_key.rate_key, v_key.rate_limit, v_key.period_ms,
        v_key.runs[v_taken + 1:], v_key.indexes[v_taken + 1:], v_key.flows[v_taken + 1:],
        greatest(v_key.waited - v_taken, 0));
      return query
      select u.run_id, v_key.step_slug, u.task_index
      from unnest(v_key.runs[v_taken + 1:], v_key.indexes[v_taken + 1:])
        as u(run_id, task_index);
    end if;
  end loop;
end;
$$;

-- lower_rate_tokens: after a key's limit was lowered to p_limit, keeps its latest starts on
-- tokens 1 to p_limit and drops the tokens above, so the new limit holds from its first period
-- (ignoring the starts of the dropped tokens would let a burst through).
-- Locks: the key's tokens (waits for claims using them).
create or replace function pgflow.lower_rate_tokens(p_scope text, p_step_slug text,
                                                    p_rate_key text, p_limit integer)
returns void
language plpgsql
as $$
begin
  with latest as (
    select tk.last_start_at,
           row_number() over (order by tk.last_start_at desc, tk.token) as n
    from pgflow.rate_tokens tk
    where tk.scope = p_scope and tk.step_slug = p_step_slug and tk.rate_key = p_rate_key
  )
  update pgflow.rate_tokens tk
  set last_start_at = latest.last_start_at
  from latest
  where tk.scope = p_scope and tk.step_slug = p_step_slug and tk.rate_key = p_rate_key
    and tk.token = latest.n and latest.n <= p_limit;
  delete from pgflow.rate_tokens tk
  where tk.scope = p_scope and tk.step_slug = p_step_slug and tk.rate_key = p_rate_key
    and tk.token > p_limit;
end;
$$;

-- defer_rate_limited: sends the tasks of one key of a limited step that found no token back
-- to wait (parallel arrays: run, task index, concrete flow; the first p_waited of them had
-- waited before, the rest are new). Each gets a new message (its old one is gone: the claim
-- took it), due when its key is due to have a token for it (plus rate_due_margin), and its row
-- in rate_waits.
-- The key's next token is free a period after the oldest of its tokens' last starts. The tasks
-- that waited before come back then, a share of the period (period / limit) apart: they keep
-- their place at the head of the line. The new ones join the end of the line
-- (rate_keys.next_wait_at), a share apart, so the line comes back spread out at the rate it can
-- start, in the order it came. The key's row is locked to move the line's end; when another
-- claim holds it (it is moving the end too), this one does not wait: its new tasks go a period
-- past the end it sees.
-- Locks: the key's rate_keys row (FOR NO KEY UPDATE SKIP LOCKED); the tasks are the caller's.
create or replace function pgflow.defer_rate_limited(
  p_scope text, p_step_slug text, p_rate_key text, p_limit integer, p_period_ms integer,
  p_run_ids uuid[], p_task_indexes integer[], p_flow_slugs text[], p_waited integer
)
returns void
language plpgsql
as $$
declare
  v_period interval := make_interval(secs => p_period_ms / 1000.0);
  v_share interval := make_interval(secs => p_period_ms / 1000.0 / p_limit);
  v_next_free timestamptz;
  v_line_end timestamptz;
  v_line_from timestamptz;
  v_locked boolean;
  v_new integer := cardinality(p_run_ids) - p_waited;
  v_task record;
  v_message_id bigint;
begin
  select greatest(min(tk.last_start_at) + v_period, now()) into v_next_free
  from pgflow.rate_tokens tk
  where tk.scope = p_scope and tk.step_slug = p_step_slug and tk.rate_key = p_rate_key
    and tk.token <= p_limit;
  v_next_free := coalesce(v_next_free, now());

  select k.next_wait_at into v_line_end
  from pgflow.rate_keys k
  where k.scope = p_scope and k.step_slug = p_step_slug and k.rate_key = p_rate_key
  for no key update skip locked;
  v_locked := found;
  if not v_locked then
    select k.next_wait_at + v_period into v_line_end
    from pgflow.rate_keys k
    where k.scope = p_scope and k.step_slug = p_step_slug and k.rate_key = p_rate_key;
  end if;
  v_line_from := greatest(coalesce(v_line_end, '-infinity'), v_next_free + v_share * p_waited);
  if v_locked and v_new > 0 then
    update pgflow.rate_keys k
    set next_wait_at = v_line_from + v_share * v_new, rate_limit = p_limit,
        rate_period_ms = p_period_ms
    where k.scope = p_scope and k.step_slug = p_step_slug and k.rate_key = p_rate_key;
  end if;

  for v_task in
    select u.run_id, u.task_index, u.flow_slug, t.queue_name, t.priority,
           pgflow.rate_due_margin()
             + case when u.n <= p_waited then v_next_free + v_share * (u.n - 1)
                    else v_line_from + v_share * (u.n - p_waited - 1) end as due_at
    from unnest(p_run_ids, p_task_indexes, p_flow_slugs) with ordinality
      as u(run_id, task_index, flow_slug, n)
    join pgflow.step_tasks t
      on t.run_id = u.run_id and t.step_slug = p_step_slug and t.task_index = u.task_index
    order by u.n
  loop
    select pgmq.send(pgflow.lane_name(v_task.queue_name, v_task.priority),
                     pgflow.task_message(v_task.flow_slug, v_task.run_id, p_step_slug,
                                         v_task.task_index),
                     v_task.due_at)
    into v_message_id;
    update pgflow.step_tasks t
    set message_id = v_message_id
    where t.run_id = v_task.run_id and t.step_slug = p_step_slug
      and t.task_index = v_task.task_index;
    insert into pgflow.rate_waits (run_id, step_slug, task_index, flow_slug, scope, rate_key,
                                   due_at)
    values (v_task.run_id, p_step_slug, v_task.task_index, v_task.flow_slug, p_scope,
            p_rate_key, v_task.due_at)
    on conflict (run_id, step_slug, task_index)
      do update set due_at = excluded.due_at, scope = excluded.scope,
                    rate_key = excluded.rate_key, misses = pgflow.rate_waits.misses + 1;
  end loop;
end;
$$;

-- tidy_rate_limits: part of the once-a-second flow-control sweep (release_capped_tasks).
-- - Drops the waits of tasks that are no longer queued (cancelled or failed with their run
--   while they waited).
-- - Brings back now the waiting tasks of steps whose limit was dropped (their messages become
--   visible at once and their waits go): they start at their next claim.
-- - Pulls back the end of each line past its last live waiting task (-infinity when none is
--   left), so tasks that are gone leave no gap before new ones.
-- - Drops up to 100 keys idle for an hour (no task waiting, no start in the last hour or
--   period), with their tokens.
-- Keys and tokens a claim holds are passed over, for a later sweep.
-- Locks: the waits it drops; the lines' key rows and the idle keys' rows and tokens, all
-- SKIP LOCKED.
create or replace function pgflow.tidy_rate_limits()
returns void
language plpgsql
as $$
declare
  v_key record;
  v_moved record;
begin
  delete from pgflow.rate_waits w
  using pgflow.step_tasks t
  where t.run_id = w.run_id and t.step_slug = w.step_slug and t.task_index = w.task_index
    and t.status <> 'queued';

  for v_moved in
    with moved as (
      delete from pgflow.rate_waits w
      using pgflow.step_tasks t, pgflow.steps s
      where t.run_id = w.run_id and t.step_slug = w.step_slug and t.task_index = w.task_index
        and s.flow_slug = w.flow_slug and s.step_slug = w.step_slug and s.rate_limit is null
      returning t.queue_name, t.priority, t.message_id
    )
    select pgflow.lane_name(m.queue_name, m.priority) as lane_name,
           array_agg(m.message_id) as message_ids
    from moved m
    where m.message_id is not null
    group by 1
  loop
    perform pgmq.set_vt(v_moved.lane_name, v_moved.message_ids, 0);
  end loop;

  with lines as (
    select k.scope, k.step_slug, k.rate_key,
           coalesce((select max(w.due_at) from pgflow.rate_waits w
                     where w.scope = k.scope and w.step_slug = k.step_slug
                       and w.rate_key = k.rate_key)
                      + make_interval(secs => k.rate_period_ms / 1000.0 / k.rate_limit),
                    '-infinity') as line_end
    from pgflow.rate_keys k
    where k.next_wait_at > now()
    for no key update of k skip locked
  )
  update pgflow.rate_keys k
  set next_wait_at = lines.line_end
  from lines
  where k.scope = lines.scope and k.step_slug = lines.step_slug
    and k.rate_key = lines.rate_key and k.next_wait_at > lines.line_end;

  for v_key in
    select k.scope, k.step_slug, k.rate_key
    from pgflow.rate_keys k
    where k.next_wait_at < now() - interval '1 hour'
      and not exists (select 1 from pgflow.rate_waits w
                      where w.scope = k.scope and w.step_slug = k.step_slug
                        and w.rate_key = k.rate_key)
      and not exists (select 1 from pgflow.rate_tokens tk
                      where tk.scope = k.scope and tk.step_slug = k.step_slug
                        and tk.rate_key = k.rate_key
                        and tk.last_start_at > now() - greatest(
                              interval '1 hour',
                              make_interval(secs => k.rate_period_ms / 1000.0)))
    limit 100
    for update of k skip locked
  loop
    if (select count(*) from (select 1 from pgflow.rate_tokens tk
                              where tk.scope = v_key.scope and tk.step_slug = v_key.step_slug
                                and tk.rate_key = v_key.rate_key
                              for update skip locked) locked)
       = (select count(*) from pgflow.rate_tokens tk
          where tk.scope = v_key.scope and tk.step_slug = v_key.step_slug
            and tk.rate_key = v_key.rate_key) then
      delete from pgflow.rate_keys k
      where k.scope = v_key.scope and k.step_slug = v_key.step_slug
        and k.rate_key = v_key.rate_key;
    end if;
  end loop;
end;
$$;
