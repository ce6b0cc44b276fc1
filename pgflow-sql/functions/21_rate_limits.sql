-- Rate limits: a step with a rate_limit lets at most that many of its tasks start per
-- rate_period_ms, across every worker and process, per key when it has a rate_key_path (the
-- tables: migration 20261227000100_rate_limits.sql). The limit is kept at the claim, which
-- every attempt passes: claim_tasks calls take_rate_tokens for the tasks it is about to start,
-- and a task without a token is sent back to wait instead (a new message, due when its key is
-- due to have a token for it), with no attempt spent. The paths that start a task without a
-- claim (a completion claiming the next step, a slot's release claiming a capped task) leave
-- limited steps alone.

-- take_rate_tokens: for the queued tasks a claim has locked (row addresses), gives each task of
-- a limited step, of a live run, a token of its key, key by key in (flow, step, key) order; a
-- task that gets none is deferred (defer_rate_limited) and so not claimed: the claim finds its
-- row address gone, as it does a parked task's. Within a key, the tasks that waited before go
-- first (longest due first), then the new ones in message order; a new one takes a token only
-- when no task of its key is scheduled to come back later (the key's waiting line is empty),
-- so new tasks do not pass the ones already waiting.
-- A token is free when it last let a task start at least a period before this transaction's
-- time (now(), the `started_at` a claim records). Tokens are locked SKIP LOCKED, and a token
-- another claim used since this one's snapshot is re-checked at its new value, so each token
-- lets starts through at least a period apart, and a key never more than its limit in a
-- period, however many claims run at once.
-- Locks: the keys' tokens (SKIP LOCKED), then, for a key with tasks to defer, its rate_keys
-- row; the tasks themselves are the caller's.
create or replace function pgflow.take_rate_tokens(p_row_ctids tid[])
returns void
language plpgsql
as $$
declare
  v_key record;
  v_next_wait_at timestamptz;
  v_allowed integer;
  v_taken integer;
begin
  for v_key in
    with limited as (
      select t.run_id, t.step_slug, t.task_index, t.flow_slug, t.message_id, s.rate_limit,
             s.rate_period_ms, pgflow.cap_key_of(s.rate_key_path, t.run_id, r.input) as rate_key,
             w.due_at
      from unnest(p_row_ctids) as l(row_ctid)
      join pgflow.step_tasks t on t.ctid = l.row_ctid
      join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.runs r on r.run_id = t.run_id
      left join pgflow.rate_waits w
        on w.run_id = t.run_id and w.step_slug = t.step_slug and w.task_index = t.task_index
      where s.rate_limit is not null and r.status = 'started' and t.status = 'queued'
    )
    select l.flow_slug, l.step_slug, l.rate_key, min(l.rate_limit) as rate_limit,
           make_interval(secs => min(l.rate_period_ms) / 1000.0) as period,
           array_agg(l.run_id order by l.due_at nulls last, l.message_id) as runs,
           array_agg(l.task_index order by l.due_at nulls last, l.message_id) as indexes,
           count(l.due_at)::integer as waited
    from limited l
    group by l.flow_slug, l.step_slug, l.rate_key
    order by l.flow_slug, l.step_slug, l.rate_key
  loop
    -- The key's row and one token per unit of its limit (a raised limit adds the missing).
    select k.next_wait_at into v_next_wait_at
    from pgflow.rate_keys k
    where k.flow_slug = v_key.flow_slug and k.step_slug = v_key.step_slug
      and k.rate_key = v_key.rate_key;
    if not found then
      insert into pgflow.rate_keys (flow_slug, step_slug, rate_key)
      values (v_key.flow_slug, v_key.step_slug, v_key.rate_key)
      on conflict do nothing;
      v_next_wait_at := '-infinity';
    end if;
    if not exists (select 1 from pgflow.rate_tokens tk
                   where tk.flow_slug = v_key.flow_slug and tk.step_slug = v_key.step_slug
                     and tk.rate_key = v_key.rate_key and tk.token = v_key.rate_limit) then
      insert into pgflow.rate_tokens (flow_slug, step_slug, rate_key, token)
      select v_key.flow_slug, v_key.step_slug, v_key.rate_key, g
      from generate_series(1, v_key.rate_limit) g
      on conflict do nothing;
    end if;

    -- The tasks that waited before may take tokens; the new ones too when none is waiting.
    v_allowed := case when v_next_wait_at <= now() then cardinality(v_key.runs)
                      else v_key.waited end;
    v_taken := 0;
    if v_allowed > 0 then
      with free as (
        select tk.ctid as row_ctid
        from pgflow.rate_tokens tk
        where tk.flow_slug = v_key.flow_slug and tk.step_slug = v_key.step_slug
          and tk.rate_key = v_key.rate_key and tk.token <= v_key.rate_limit
          and tk.last_start_at <= now() - v_key.period
        order by tk.last_start_at, tk.token
        limit v_allowed
        for update skip locked
      ),
      used as (
        update pgflow.rate_tokens tk
        set last_start_at = now()
        from free
        where tk.ctid = free.row_ctid
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
        v_key.flow_slug, v_key.step_slug, v_key.rate_key, v_key.rate_limit, v_key.period,
        v_key.runs[v_taken + 1:], v_key.indexes[v_taken + 1:],
        greatest(v_key.waited - v_taken, 0));
    end if;
  end loop;
end;
$$;

-- defer_rate_limited: sends the tasks of one key of a limited step that found no token back
-- to wait (parallel arrays: run, task index; the first p_waited of them had waited before,
-- the rest are new). Each gets a new message (its old one is gone: the claim took it), due
-- when its key is due to have a token for it, and its row in rate_waits.
-- The key's next token is free a period after the oldest of its tokens' last starts. A task
-- that waited before comes back then (several, a share of the period, period / limit, apart):
-- it keeps its place at the head of the line. A new one joins the end of the line
-- (rate_keys.next_wait_at, moved a share on for each), so the line comes back spread out at
-- the rate it can start, in the order it came.
-- Locks: the key's rate_keys row (when it has new tasks to schedule); the tasks are the
-- caller's.
create or replace function pgflow.defer_rate_limited(
  p_flow_slug text, p_step_slug text, p_rate_key text, p_limit integer, p_period interval,
  p_run_ids uuid[], p_task_indexes integer[], p_waited integer
)
returns void
language plpgsql
as $$
declare
  v_share interval := p_period / p_limit;
  v_next_free timestamptz;
  v_line_from timestamptz;
  v_new integer := cardinality(p_run_ids) - p_waited;
  v_task record;
  v_message_id bigint;
begin
  select greatest(min(tk.last_start_at) + p_period, now() + v_share) into v_next_free
  from pgflow.rate_tokens tk
  where tk.flow_slug = p_flow_slug and tk.step_slug = p_step_slug and tk.rate_key = p_rate_key
    and tk.token <= p_limit;

  if v_new > 0 then
    update pgflow.rate_keys k
    set next_wait_at = greatest(k.next_wait_at, v_next_free) + v_share * v_new
    where k.flow_slug = p_flow_slug and k.step_slug = p_step_slug and k.rate_key = p_rate_key
    returning k.next_wait_at - v_share * v_new into v_line_from;
    -- (A key the sweep dropped meanwhile has no line: its tasks come back with the next token.)
    v_line_from := coalesce(v_line_from, v_next_free);
  end if;

  for v_task in
    select u.run_id, u.task_index, u.n, t.flow_slug, t.queue_name, t.priority,
           case when u.n <= p_waited then v_next_free + v_share * (u.n - 1)
                else v_line_from + v_share * (u.n - p_waited - 1) end as due_at
    from unnest(p_run_ids, p_task_indexes) with ordinality as u(run_id, task_index, n)
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
    insert into pgflow.rate_waits (run_id, step_slug, task_index, flow_slug, rate_key, due_at)
    values (v_task.run_id, p_step_slug, v_task.task_index, p_flow_slug, p_rate_key,
            v_task.due_at)
    on conflict (run_id, step_slug, task_index)
      do update set due_at = excluded.due_at, rate_key = excluded.rate_key,
                    misses = pgflow.rate_waits.misses + 1;
  end loop;
end;
$$;

-- tidy_rate_limits: part of the once-a-second flow-control sweep (release_capped_tasks).
-- Drops the waits of tasks that are no longer queued (cancelled or failed with their run while
-- they waited), and up to 100 keys idle for an hour (no task waiting or scheduled, no start in
-- the last hour or period), with their tokens. A key a claim is using (its row or one of its
-- tokens locked) is left for a later sweep.
-- Locks: the idle keys' rows, then their tokens, all SKIP LOCKED.
create or replace function pgflow.tidy_rate_limits()
returns void
language plpgsql
as $$
declare
  v_key record;
begin
  delete from pgflow.rate_waits w
  using pgflow.step_tasks t
  where t.run_id = w.run_id and t.step_slug = w.step_slug and t.task_index = w.task_index
    and t.status <> 'queued';

  for v_key in
    select k.ctid as row_ctid, k.flow_slug, k.step_slug, k.rate_key
    from pgflow.rate_keys k
    join pgflow.steps s on s.flow_slug = k.flow_slug and s.step_slug = k.step_slug
    where k.next_wait_at < now() - interval '1 hour'
      and not exists (select 1 from pgflow.rate_waits w
                      where w.flow_slug = k.flow_slug and w.step_slug = k.step_slug
                        and w.rate_key = k.rate_key)
      and not exists (select 1 from pgflow.rate_tokens tk
                      where tk.flow_slug = k.flow_slug and tk.step_slug = k.step_slug
                        and tk.rate_key = k.rate_key
                        and tk.last_start_at > now() - greatest(
                              interval '1 hour',
                              make_interval(secs => coalesce(s.rate_period_ms, 0) / 1000.0)))
    limit 100
    for update of k skip locked
  loop
    if (select count(*) from (select 1 from pgflow.rate_tokens tk
                              where tk.flow_slug = v_key.flow_slug
                                and tk.step_slug = v_key.step_slug
                                and tk.rate_key = v_key.rate_key
                              for update skip locked) locked)
       = (select count(*) from pgflow.rate_tokens tk
          where tk.flow_slug = v_key.flow_slug and tk.step_slug = v_key.step_slug
            and tk.rate_key = v_key.rate_key) then
      delete from pgflow.rate_keys k where k.ctid = v_key.row_ctid;
    end if;
  end loop;
end;
$$;
