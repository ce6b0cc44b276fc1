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
  select interval '2 milliseconds'
$$;

-- take_rate_tokens: for the queued tasks a claim on p_queue_name has locked (row addresses),
-- gives each task of a limited step, of a live run, a token of its key, key by key in (scope,
-- step, key) order; a task that gets none is sent back to wait, and so not claimed: the claim
-- finds its row address gone, as it does a parked task's. Returns the tasks sent back.
-- A token is free when it last let a task start at least a period before this transaction's
-- time (pgflow.clock(), the `started_at` a claim records). So each token lets starts through at least a
-- period apart, and a key never more than its limit in a period, however many claims run.
-- Per key:
-- - A task that was sent for a token (rate_waits.token) takes that token when it is free, and
--   the token is sent for the next task of the line at once (due a period after this start:
--   when the token is free again). Come early (its worker claimed before the token was free:
--   a claim's time is when its transaction began), it is sent again for the moment the token
--   is free. Each token thus carries one task at a time, due when it can start: no task is
--   ever turned away by another.
-- - A new task takes a free token no task was sent for, unless the key has a line (tasks not
--   sent yet): then, and without a free token, it joins the end of the line (it waits
--   without a message) and the key's free tokens are sent for the head of the line
--   (send_rate_waits).
-- Locks: each key's row FOR KEY SHARE (waits only for a sweep deleting the key, which waits for
-- nothing), its tokens and waiting tasks SKIP LOCKED (all its tokens, waiting, when a lowered
-- limit leaves tokens above it). A key met for the first time is inserted, which waits for
-- another claim inserting the same key.
create or replace function pgflow.take_rate_tokens(p_queue_name text, p_row_ctids tid[])
returns table (run_id uuid, step_slug text, task_index integer)
language plpgsql
as $$
declare
  v_key record;
  v_task record;
  v_period interval;
  v_taken integer;
  v_held_runs uuid[];
  v_held_indexes integer[];
  v_held_flows text[];
  v_last_start timestamptz;
begin
  if not exists (select 1 from pgflow.steps s
                 where s.queue_name = p_queue_name and s.rate_limit is not null) then
    return;
  end if;
  for v_key in
    with limited as (
      select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.message_id, t.queue_name,
             t.priority, s.rate_limit, s.rate_period_ms, f.alias as scope,
             pgflow.rate_key_text(pgflow.cap_key_of(s.rate_key_path, t.run_id, r.input))
               as rate_key,
             w.token, w.due_at
      from unnest(p_row_ctids) as l(row_ctid)
      join pgflow.step_tasks t on t.ctid = l.row_ctid
      join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.flows f on f.flow_slug = t.flow_slug
      join pgflow.runs r on r.run_id = t.run_id
      left join pgflow.rate_waits w
        on w.run_id = t.run_id and w.step_slug = t.step_slug and w.task_index = t.task_index
      where s.rate_limit is not null and r.status = 'started' and t.status = 'queued'
    )
    select g.*, coalesce(newest.rate_limit, g.batch_limit) as rate_limit,
           coalesce(newest.rate_period_ms, g.batch_period_ms) as period_ms
    from (
      select l.scope, l.step_slug, l.rate_key, min(l.rate_limit) as batch_limit,
             min(l.rate_period_ms) as batch_period_ms,
             -- Tasks sent for a token: run, task, flow, token.
             array_agg(l.run_id order by l.due_at, l.run_id, l.task_index)
               filter (where l.token is not null) as sent_runs,
             array_agg(l.task_index order by l.due_at, l.run_id, l.task_index)
               filter (where l.token is not null) as sent_indexes,
             array_agg(l.flow_slug order by l.due_at, l.run_id, l.task_index)
               filter (where l.token is not null) as sent_flows,
             array_agg(l.token order by l.due_at, l.run_id, l.task_index)
               filter (where l.token is not null) as tokens,
             -- The others, in message order.
             array_agg(l.run_id order by l.message_id) filter (where l.token is null)
               as new_runs,
             array_agg(l.task_index order by l.message_id) filter (where l.token is null)
               as new_indexes,
             array_agg(l.flow_slug order by l.message_id) filter (where l.token is null)
               as new_flows
      from limited l
      group by l.scope, l.step_slug, l.rate_key
    ) g
    -- One limit a key, however many versions of the flow share it: the newest version's.
    left join lateral (
      select s.rate_limit, s.rate_period_ms
      from pgflow.flows f
      join pgflow.steps s on s.flow_slug = f.flow_slug and s.step_slug = g.step_slug
      where f.alias = g.scope and s.rate_limit is not null
      order by f.version desc
      limit 1
    ) newest on true
    order by g.scope, g.step_slug, g.rate_key
  loop
    v_period := make_interval(secs => v_key.period_ms / 1000.0);
    -- The key's row (held so that the sweep leaves the key alone) and one token per unit of
    -- its limit.
    perform 1 from pgflow.rate_keys k
    where k.scope = v_key.scope and k.step_slug = v_key.step_slug
      and k.rate_key = v_key.rate_key
    for key share;
    if not found then
      insert into pgflow.rate_keys (scope, step_slug, rate_key, rate_limit, rate_period_ms)
      values (v_key.scope, v_key.step_slug, v_key.rate_key, v_key.rate_limit, v_key.period_ms)
      on conflict do nothing;
      perform 1 from pgflow.rate_keys k
      where k.scope = v_key.scope and k.step_slug = v_key.step_slug
        and k.rate_key = v_key.rate_key
      for key share;
    end if;
    -- The key row says the limit its claims go by (for the sweep and what status shows).
    update pgflow.rate_keys k
    set rate_limit = v_key.rate_limit, rate_period_ms = v_key.period_ms
    where k.scope = v_key.scope and k.step_slug = v_key.step_slug
      and k.rate_key = v_key.rate_key
      and (k.rate_limit, k.rate_period_ms) is distinct from (v_key.rate_limit, v_key.period_ms);
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

    v_held_runs := array[]::uuid[];
    v_held_indexes := array[]::integer[];
    v_held_flows := array[]::text[];

    -- Tasks sent for a token: each takes its own, or is sent again for when it is free.
    for v_task in
      select u.run_id, u.task_index, u.flow_slug, u.token
      from unnest(v_key.sent_runs, v_key.sent_indexes, v_key.sent_flows, v_key.tokens)
        as u(run_id, task_index, flow_slug, token)
    loop
      select tk.last_start_at into v_last_start
      from pgflow.rate_tokens tk
      where tk.scope = v_key.scope and tk.step_slug = v_key.step_slug
        and tk.rate_key = v_key.rate_key and tk.token = v_task.token
        and tk.token <= v_key.rate_limit
      for update skip locked;
      if not found then
        -- Its token is gone (a lowered limit) or busy (the sweep): it waits in the line again.
        v_held_runs := v_held_runs || v_task.run_id;
        v_held_indexes := v_held_indexes || v_task.task_index;
        v_held_flows := v_held_flows || v_task.flow_slug;
      elsif v_last_start <= pgflow.clock() - v_period then
        update pgflow.rate_tokens tk
        set last_start_at = pgflow.clock(), reserved_due = null
        where tk.scope = v_key.scope and tk.step_slug = v_key.step_slug
          and tk.rate_key = v_key.rate_key and tk.token = v_task.token;
        delete from pgflow.rate_waits w
        where w.run_id = v_task.run_id and w.step_slug = v_key.step_slug
          and w.task_index = v_task.task_index;
      else
        perform pgflow.send_rate_wait(v_key.scope, v_key.rate_key, v_task.run_id,
                                      v_key.step_slug, v_task.task_index, v_task.token,
                                      v_last_start + v_period);
        return query select v_task.run_id, v_key.step_slug, v_task.task_index;
      end if;
    end loop;

    -- New tasks: free tokens no task was sent for, when the key has no line.
    v_taken := 0;
    if v_key.new_runs is not null
       and not exists (select 1 from pgflow.rate_waits w
                       where w.scope = v_key.scope and w.step_slug = v_key.step_slug
                         and w.rate_key = v_key.rate_key and w.due_at is null) then
      with free as (
        select tk.token
        from pgflow.rate_tokens tk
        where tk.scope = v_key.scope and tk.step_slug = v_key.step_slug
          and tk.rate_key = v_key.rate_key and tk.reserved_due is null
          and tk.token <= v_key.rate_limit and tk.last_start_at <= pgflow.clock() - v_period
        order by tk.last_start_at
        limit cardinality(v_key.new_runs)
        for update skip locked
      ),
      used as (
        update pgflow.rate_tokens tk
        set last_start_at = pgflow.clock()
        from free
        where tk.scope = v_key.scope and tk.step_slug = v_key.step_slug
          and tk.rate_key = v_key.rate_key and tk.token = free.token
        returning 1
      )
      select count(*) into v_taken from used;
    end if;
    if v_key.new_runs is not null then
      v_held_runs := v_held_runs || v_key.new_runs[v_taken + 1:];
      v_held_indexes := v_held_indexes || v_key.new_indexes[v_taken + 1:];
      v_held_flows := v_held_flows || v_key.new_flows[v_taken + 1:];
    end if;

    -- The rest join the line, without a message (a task that waited before keeps its place).
    if cardinality(v_held_runs) > 0 then
      update pgflow.step_tasks t
      set message_id = null
      from unnest(v_held_runs, v_held_indexes) as u(run_id, task_index)
      where t.run_id = u.run_id and t.step_slug = v_key.step_slug
        and t.task_index = u.task_index;
      insert into pgflow.rate_waits (run_id, step_slug, task_index, flow_slug, scope, rate_key)
      select u.run_id, v_key.step_slug, u.task_index, u.flow_slug, v_key.scope, v_key.rate_key
      from unnest(v_held_runs, v_held_indexes, v_held_flows) with ordinality
        as u(run_id, task_index, flow_slug, n)
      order by u.n
      on conflict on constraint rate_waits_pkey
        do update set due_at = null, token = null, scope = excluded.scope,
                      rate_key = excluded.rate_key, misses = pgflow.rate_waits.misses + 1;
      return query
      select u.run_id, v_key.step_slug, u.task_index
      from unnest(v_held_runs, v_held_indexes) as u(run_id, task_index);
    end if;

    -- The key's free tokens go to the head of its line.
    perform pgflow.send_rate_waits(v_key.scope, v_key.step_slug, v_key.rate_key,
                                   v_key.rate_limit, v_key.period_ms);
  end loop;
end;
$$;

-- send_rate_wait: gives a waiting task of a limited step a new message for token p_token of its
-- key (p_scope, the step, p_rate_key), due at p_due (plus rate_due_margin), and records both on
-- its wait and on the token.
-- Locks: the task's wait and the token (the caller holds or may take them).
create or replace function pgflow.send_rate_wait(p_scope text, p_rate_key text, p_run_id uuid,
                                                 p_step_slug text, p_task_index integer,
                                                 p_token integer, p_due timestamptz)
returns void
language plpgsql
as $$
declare
  v_task record;
  v_due timestamptz := greatest(p_due, pgflow.clock()) + pgflow.rate_due_margin();
  v_message_id bigint;
begin
  select t.flow_slug, t.queue_name, t.priority into v_task
  from pgflow.step_tasks t
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index;
  -- v_due is the engine's time; a message's visibility is PGMQ's (the server's clock).
  select pgmq.send(pgflow.lane_name(v_task.queue_name, v_task.priority),
                   pgflow.task_message(v_task.flow_slug, p_run_id, p_step_slug, p_task_index),
                   v_due - (pgflow.clock() - now()))
  into v_message_id;
  update pgflow.step_tasks t
  set message_id = v_message_id
  where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index;
  update pgflow.rate_waits w
  set due_at = v_due, token = p_token
  where w.run_id = p_run_id and w.step_slug = p_step_slug and w.task_index = p_task_index;
  update pgflow.rate_tokens tk
  set reserved_due = v_due
  where tk.scope = p_scope and tk.step_slug = p_step_slug and tk.rate_key = p_rate_key
    and tk.token = p_token;
end;
$$;

-- send_rate_waits: sends the head of a key's line (its waiting tasks without a message, in the
-- order they came) for the key's tokens that no task was sent for, one task a token, each due
-- when its token is free again (a period after its last start), the soonest free first. The
-- line's tasks of a paused flow, and those waiting for a slot of a cap, are passed over.
-- Returns how many it sent.
-- Locks: the head of the line (its waits and tasks), then as many tokens, all SKIP LOCKED (a
-- task or token another claim is sending is left to it).
create or replace function pgflow.send_rate_waits(p_scope text, p_step_slug text,
                                                  p_rate_key text, p_limit integer,
                                                  p_period_ms integer)
returns integer
language plpgsql
as $$
declare
  v_runs uuid[];
  v_indexes integer[];
  v_pair record;
  v_sent integer := 0;
  v_free integer;
begin
  -- As many of the line as the key has tokens no task was sent for (mostly those this claim
  -- just used).
  select count(*) into v_free
  from pgflow.rate_tokens tk
  where tk.scope = p_scope and tk.step_slug = p_step_slug and tk.rate_key = p_rate_key
    and tk.reserved_due is null and tk.token <= p_limit;
  if v_free = 0 then
    return 0;
  end if;
  -- The head of the line by its index first (a plain ordered read), then those of them that
  -- can be sent, locked: two steps, so that no plan reads the whole line.
  select array_agg(x.run_id order by x.wait_seq), array_agg(x.task_index order by x.wait_seq)
  into v_runs, v_indexes
  from (select x.run_id, x.task_index, x.wait_seq
        from pgflow.rate_waits x
        where x.scope = p_scope and x.step_slug = p_step_slug and x.rate_key = p_rate_key
          and x.due_at is null
        order by x.wait_seq
        limit v_free * 4 + 16) x;
  if v_runs is null then
    return 0;
  end if;
  select array_agg(h.run_id order by h.n), array_agg(h.task_index order by h.n)
  into v_runs, v_indexes
  from (select w.run_id, w.task_index, c.n
        from unnest(v_runs, v_indexes) with ordinality as c(run_id, task_index, n)
        join pgflow.rate_waits w
          on w.run_id = c.run_id and w.step_slug = p_step_slug and w.task_index = c.task_index
        join pgflow.step_tasks t
          on t.run_id = c.run_id and t.step_slug = p_step_slug and t.task_index = c.task_index
        where w.due_at is null and t.status = 'queued' and t.message_id is null
          and not exists (select 1 from pgflow.paused_flows p where p.flow_slug = t.flow_slug)
          and not exists (select 1 from pgflow.held_tasks h
                          where h.run_id = t.run_id and h.step_slug = t.step_slug
                            and h.task_index = t.task_index)
        order by c.n
        limit v_free
        for update of w skip locked
        for no key update of t skip locked) h;
  if v_runs is null then
    return 0;
  end if;

  for v_pair in
    with tokens as (
      select tk.token, tk.last_start_at, row_number() over (order by tk.last_start_at) as n
      from (select tk.token, tk.last_start_at
            from pgflow.rate_tokens tk
            where tk.scope = p_scope and tk.step_slug = p_step_slug
              and tk.rate_key = p_rate_key and tk.reserved_due is null
              and tk.token <= p_limit
            order by tk.last_start_at
            limit cardinality(v_runs)
            for update skip locked) tk
    )
    select l.run_id, l.task_index, tokens.token,
           tokens.last_start_at + make_interval(secs => p_period_ms / 1000.0) as due
    from unnest(v_runs, v_indexes) with ordinality as l(run_id, task_index, n)
    join tokens on tokens.n = l.n
    order by l.n
  loop
    perform pgflow.send_rate_wait(p_scope, p_rate_key, v_pair.run_id, p_step_slug,
                                  v_pair.task_index, v_pair.token, v_pair.due);
    v_sent := v_sent + 1;
  end loop;
  return v_sent;
end;
$$;

-- lower_rate_tokens: after a key's limit was lowered to p_limit, keeps its latest starts on
-- tokens 1 to p_limit and drops the tokens above, so the new limit holds from its first period
-- (ignoring the starts of the dropped tokens would let a burst through). The key's tokens are
-- locked first and the fold is read after, so starts another claim made meanwhile are folded
-- too. A task sent for a dropped token finds it gone when it comes and waits in the line
-- again; one sent for a kept token finds that token's new last start and, if early, is sent
-- again for when it is free.
-- Locks: all the key's tokens, in token order (waits for claims using them).
create or replace function pgflow.lower_rate_tokens(p_scope text, p_step_slug text,
                                                    p_rate_key text, p_limit integer)
returns void
language plpgsql
as $$
begin
  perform 1
  from pgflow.rate_tokens tk
  where tk.scope = p_scope and tk.step_slug = p_step_slug and tk.rate_key = p_rate_key
  order by tk.token
  for update;
  if not exists (select 1 from pgflow.rate_tokens tk
                 where tk.scope = p_scope and tk.step_slug = p_step_slug
                   and tk.rate_key = p_rate_key and tk.token > p_limit) then
    return; -- another claim folded them meanwhile
  end if;
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

-- tidy_rate_limits: part of the once-a-second flow-control sweep (release_capped_tasks).
-- - Drops the waits of tasks that are no longer queued (cancelled or failed with their run
--   while they waited), puts back in the line the tasks sent for a token that lost their
--   message since (parked by a pause, held for a cap's slot), and frees the tokens sent for
--   tasks that no longer wait for them.
-- - Brings back now the waiting tasks of steps whose limit was dropped (those with a message:
--   visible at once; those without: a message each), and drops their waits: they start at their
--   next claim.
-- - Sends the head of each line for the tokens of its key that no task was sent for (a claim
--   that took such a token for a new task while another was lining one up leaves it so).
-- - Drops up to 100 keys idle for an hour (no task waiting, no start in the last hour or
--   period), with their tokens.
-- Keys, tokens and waits a claim holds are passed over, for a later sweep.
-- Locks: the waiting tasks it changes, then their waits; the tokens it frees or sends, the idle
-- keys' rows and tokens; all SKIP LOCKED.
create or replace function pgflow.tidy_rate_limits()
returns void
language plpgsql
as $$
declare
  v_key record;
  v_moved record;
begin
  -- Each step reads the tasks it changes under their row locks (SKIP LOCKED: a task a claim, a
  -- cancel or a retry holds is left for a later sweep), so it sees them as they are now.
  -- The waits of tasks that ended.
  delete from pgflow.rate_waits w
  using (select t.run_id, t.step_slug, t.task_index
         from pgflow.rate_waits x
         join pgflow.step_tasks t
           on t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
         where t.status <> 'queued'
         for no key update of t skip locked) ended
  where w.run_id = ended.run_id and w.step_slug = ended.step_slug
    and w.task_index = ended.task_index;
  -- Tasks sent for a token that lost their message since (parked by a pause, held again for a
  -- cap's slot by a retry) give the token back and wait in the line again.
  update pgflow.rate_waits w
  set token = null, due_at = null
  from (select t.run_id, t.step_slug, t.task_index
        from pgflow.rate_waits x
        join pgflow.step_tasks t
          on t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
        where x.token is not null and t.status = 'queued' and t.message_id is null
        for no key update of t skip locked) unsent
  where w.run_id = unsent.run_id and w.step_slug = unsent.step_slug
    and w.task_index = unsent.task_index;
  -- Tokens sent for a task that no longer waits for them.
  update pgflow.rate_tokens tk
  set reserved_due = null
  where tk.ctid in (select x.ctid from pgflow.rate_tokens x
                    where x.reserved_due is not null
                      and not exists (select 1 from pgflow.rate_waits w
                                      where w.scope = x.scope and w.step_slug = x.step_slug
                                        and w.rate_key = x.rate_key and w.token = x.token)
                    for update skip locked);

  for v_moved in
    with unlimited as (
      select t.run_id, t.step_slug, t.task_index, t.queue_name, t.priority, t.message_id
      from pgflow.rate_waits x
      join pgflow.step_tasks t
        on t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
      join pgflow.steps s on s.flow_slug = x.flow_slug and s.step_slug = x.step_slug
      where s.rate_limit is null and t.status = 'queued'
      for no key update of t skip locked
    ),
    moved as (
      delete from pgflow.rate_waits w
      using unlimited u
      where w.run_id = u.run_id and w.step_slug = u.step_slug and w.task_index = u.task_index
      returning u.run_id, u.step_slug, u.task_index, u.queue_name, u.priority, u.message_id
    )
    select pgflow.lane_name(m.queue_name, m.priority) as lane_name,
           array_agg(m.message_id) filter (where m.message_id is not null) as message_ids,
           array_agg(m.run_id) filter (where m.message_id is null) as runs,
           array_agg(m.step_slug) filter (where m.message_id is null) as steps,
           array_agg(m.task_index) filter (where m.message_id is null) as indexes
    from moved m
    group by 1
  loop
    if v_moved.message_ids is not null then
      perform pgmq.set_vt(v_moved.lane_name, v_moved.message_ids, 0);
    end if;
    if v_moved.runs is not null then
      perform pgflow.requeue_messageless_tasks(v_moved.runs, v_moved.steps, v_moved.indexes);
    end if;
  end loop;

  -- Keys with a token no task was sent for: their lines, if any, get it.
  for v_key in
    select k.scope, k.step_slug, k.rate_key, k.rate_limit, k.rate_period_ms
    from pgflow.rate_keys k
    where exists (select 1 from pgflow.rate_tokens tk
                  where tk.scope = k.scope and tk.step_slug = k.step_slug
                    and tk.rate_key = k.rate_key and tk.reserved_due is null
                    and tk.token <= k.rate_limit)
  loop
    perform pgflow.send_rate_waits(v_key.scope, v_key.step_slug, v_key.rate_key,
                                   v_key.rate_limit, v_key.rate_period_ms);
  end loop;

  for v_key in
    select k.scope, k.step_slug, k.rate_key
    from pgflow.rate_keys k
    where not exists (select 1 from pgflow.rate_waits w
                      where w.scope = k.scope and w.step_slug = k.step_slug
                        and w.rate_key = k.rate_key)
      and not exists (select 1 from pgflow.rate_tokens tk
                      where tk.scope = k.scope and tk.step_slug = k.step_slug
                        and tk.rate_key = k.rate_key
                        and tk.last_start_at > pgflow.clock() - greatest(
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

-- next_message_in: how many seconds until the next message of queue p_queue_name (or of one
-- of its priority lanes) is visible: 0 when one is visible now, null when the queue has none
-- or is paused. A worker of a queue with rate-limited steps asks it before it goes idle, and
-- wakes then rather than at its next poll: a task sent for a token is due when the token is
-- free, and a due message wakes nobody. Counted by the database's clock, whatever the
-- worker's says.
-- Locks: none (reads PGMQ's visibility index).
create or replace function pgflow.next_message_in(p_queue_name text)
returns double precision
language plpgsql
stable
as $$
declare
  v_lane text;
  v_at timestamptz;
  v_next timestamptz;
begin
  if exists (select 1 from pgflow.paused_queues q where q.queue_name = p_queue_name) then
    return null;
  end if;
  for v_lane in
    select p_queue_name
    union all
    select pgflow.lane_name(l.queue_name, l.priority)
    from pgflow.queue_lanes l where l.queue_name = p_queue_name
  loop
    execute format('select min(q.vt) from pgmq.%I q', 'q_' || v_lane) into v_at;
    v_next := least(v_next, v_at);
  end loop;
  if v_next is null then
    return null;
  end if;
  return greatest(extract(epoch from v_next - clock_timestamp()), 0);
end;
$$;
