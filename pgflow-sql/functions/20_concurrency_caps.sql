-- Concurrency caps: a step with a concurrency_limit has at most that many tasks holding a slot
-- at once, per key when it has a concurrency_key_path (the tables: migration
-- 20261223000100_concurrency_caps.sql). start_ready_steps holds the tasks of a capped step
-- (hold_tasks) instead of sending their messages; a task is released (given a slot and its
-- message) when a slot of its key is free. The calls that end tasks (store_completions,
-- fail_tasks) give their tasks' slots to the next held tasks at once; slots that other ends
-- free (a cancel, a run that fails, a skip) are given out by release_capped_tasks, which every
-- process with a worker calls once a second.

-- cap_key_of: the key a task of a capped step holds its slot under: read as a signal's key is
-- (signal_key_of), and '' without a path or a value there.
create or replace function pgflow.cap_key_of(p_path text[], p_run_id uuid, p_input jsonb)
returns text
language sql
stable
as $$
  select coalesce(pgflow.signal_key_of(p_path, p_run_id, p_input), '')
$$;

-- handler_may_outlive_end: whether task t (a row of step_tasks) that was ended from outside
-- while its handler ran (its run cancelled or failed by another step, its step skipped; or
-- queued again by a retry of its failed run since) may still be running that handler: until
-- its worker has beaten since the end (a beat tells the worker, which stops the handler within
-- half a second; a retried task has no end time left, and waits for its timeout) or its
-- timeout (p_timeout seconds) has passed since it started (a worker stops a handler at its
-- timeout; a dead one runs nothing). An end the worker reported itself (completed, or an
-- attempt recorded: failed, snoozed, or requeued by the stalled-task sweep) is over.
-- The rule behind the slots of concurrency caps and queue caps.
create or replace function pgflow.handler_may_outlive_end(t pgflow.step_tasks, p_timeout integer)
returns boolean
language sql
stable
as $$
  select t.status in ('cancelled', 'skipped', 'failed', 'queued') and t.started_at is not null
    and t.started_at > pgflow.clock() - make_interval(secs => p_timeout + 2)
    and not exists (select 1 from pgflow.task_attempts a
                    where a.run_id = t.run_id and a.step_slug = t.step_slug
                      and a.task_index = t.task_index and a.attempt = t.attempts_count)
    and not exists (select 1 from pgflow.workers w
                    where w.worker_id = t.last_worker_id
                      and w.last_heartbeat_at
                          > coalesce(t.cancelled_at, t.skipped_at, t.failed_at)
                            + interval '1 second')
$$;

-- A capped task's slot is free when its holder has ended (or is gone) and its handler cannot be
-- running any more (handler_may_outlive_end): the rule the releases that do not end the holder
-- themselves decide by.
create or replace function pgflow.slot_is_free(p_run_id uuid, p_step_slug text,
                                               p_task_index integer)
returns boolean
language sql
stable
as $$
  select p_run_id is null
    or not exists (
      select 1
      from pgflow.step_tasks t
      join pgflow.step_options o on o.flow_slug = t.flow_slug and o.step_slug = t.step_slug
      where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = p_task_index
        and (t.status in ('queued', 'started') or pgflow.handler_may_outlive_end(t, o.timeout)))
$$;

-- hand_over_slots: gives free slots (parallel arrays: flow, step, key, slot), which the caller
-- holds locked, to the held tasks of their keys, longest held first, one task a slot, and
-- sends those tasks' messages (visible at once). Held tasks another transaction is releasing
-- are skipped, never waited for, and so are held tasks that ended while held (cancelled,
-- failed with their run). A slot with no task left to take it stays free.
-- With a claimer (see complete_and_claim_tasks), as many of the tasks it runs on its queue as
-- it offers slots are claimed for it instead ('started', the n-th by the worker of the n-th
-- slot, no message), as enqueue_step_tasks claims what a completion releases: a worker that
-- completes a capped task runs the next one of its key without a message, a poll or a commit
-- of its own.
-- Returns how many tasks it released and the row addresses of those it claimed (null: none).
-- Locks: the keys' next held tasks, their runs and their tasks, all SKIP LOCKED.
create or replace function pgflow.hand_over_slots(
  p_flow_slugs text[], p_step_slugs text[], p_cap_keys text[], p_slots integer[],
  p_claimer pgflow.task_claimer default null,
  out released integer, out claimed tid[]
)
language plpgsql
as $$
declare
  v_held tid[];
  v_held_flows text[];
  v_held_steps text[];
  v_held_keys text[];
  v_held_seqs bigint[];
  v_held_runs uuid[];
  v_held_indexes integer[];
  v_held_priorities smallint[];
  v_top_waiting smallint;
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
begin
  released := 0;
  -- The next held tasks of each key, as many as it has slots to give.
  with freed as (
    select f.flow_slug, f.step_slug, f.cap_key, count(*) as n
    from unnest(p_flow_slugs, p_step_slugs, p_cap_keys) as f(flow_slug, step_slug, cap_key)
    group by f.flow_slug, f.step_slug, f.cap_key
  ),
  next as (
    select x.*
    from freed
    cross join lateral (
      -- Another run's task, taken only when its run is free to take: its run's lock comes
      -- before its task's (the lock order), and whoever holds either (a cancel, a failing
      -- run) is passed over rather than waited for.
      select h.ctid as held_ctid, h.flow_slug, h.step_slug, h.cap_key, h.held_seq, h.run_id,
             h.task_index, h.priority
      from pgflow.held_tasks h
      join pgflow.runs r on r.run_id = h.run_id
      join pgflow.step_tasks t
        on t.run_id = h.run_id and t.step_slug = h.step_slug and t.task_index = h.task_index
      where h.flow_slug = freed.flow_slug and h.step_slug = freed.step_slug
        and h.cap_key = freed.cap_key and r.status = 'started'
        and t.status = 'queued' and t.message_id is null
      order by h.priority, h.held_seq
      limit freed.n
      for update of h skip locked
      for no key update of r skip locked
      for no key update of t skip locked
    ) x
  )
  select array_agg(held_ctid), array_agg(flow_slug), array_agg(step_slug), array_agg(cap_key),
         array_agg(held_seq), array_agg(run_id), array_agg(task_index), array_agg(priority)
  into v_held, v_held_flows, v_held_steps, v_held_keys, v_held_seqs, v_held_runs,
       v_held_indexes, v_held_priorities
  from next;
  if v_held is null then
    return;
  end if;

  -- Pair them, key by key: the i-th slot (by number) with the i-th task (highest priority
  -- first, then longest held first).
  with slots as (
    select s.flow_slug, s.step_slug, s.cap_key, s.slot,
           row_number() over (partition by s.flow_slug, s.step_slug, s.cap_key
                              order by s.slot) as rank
    from unnest(p_flow_slugs, p_step_slugs, p_cap_keys, p_slots)
      as s(flow_slug, step_slug, cap_key, slot)
  ),
  tasks as (
    select h.flow_slug, h.step_slug, h.cap_key, h.run_id, h.task_index, h.held_seq, h.priority,
           row_number() over (partition by h.flow_slug, h.step_slug, h.cap_key
                              order by h.priority, h.held_seq) as rank
    from unnest(v_held_flows, v_held_steps, v_held_keys, v_held_seqs, v_held_runs,
                v_held_indexes, v_held_priorities)
      as h(flow_slug, step_slug, cap_key, held_seq, run_id, task_index, priority)
  ),
  taken as (
    update pgflow.cap_slots cs
    set run_id = t.run_id, task_index = t.task_index, taken_at = pgflow.clock()
    from slots s
    join tasks t
      on t.flow_slug = s.flow_slug and t.step_slug = s.step_slug and t.cap_key = s.cap_key
        and t.rank = s.rank
    where cs.flow_slug = s.flow_slug and cs.step_slug = s.step_slug
      and cs.cap_key = s.cap_key and cs.slot = s.slot
    returning t.run_id, t.step_slug, t.task_index, t.held_seq, t.priority
  )
  select array_agg(run_id order by priority, held_seq),
         array_agg(step_slug order by priority, held_seq),
         array_agg(task_index order by priority, held_seq)
  into v_runs, v_steps, v_indexes
  from taken;
  if v_runs is null then
    return;
  end if;
  released := cardinality(v_runs);
  delete from pgflow.held_tasks h
  using unnest(v_runs, v_steps, v_indexes) as r(run_id, step_slug, task_index)
  where h.run_id = r.run_id and h.step_slug = r.step_slug and h.task_index = r.task_index;

  if cardinality(p_claimer.slots) > 0 then
    -- On a queue with priority lanes, only tasks that rank with the best waiting ones (as
    -- enqueue_step_tasks claims).
    if exists (select 1 from pgflow.queue_lanes l where l.queue_name = p_claimer.queue_name) then
      v_top_waiting := pgflow.highest_waiting_priority(p_claimer.queue_name);
    end if;
    with claimable as (
      select r.run_id, r.step_slug, r.task_index,
             row_number() over (order by r.ordinality) as slot
      from unnest(v_runs, v_steps, v_indexes) with ordinality
        as r(run_id, step_slug, task_index, ordinality)
      join pgflow.step_tasks t
        on t.run_id = r.run_id and t.step_slug = r.step_slug and t.task_index = r.task_index
      join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      where t.queue_name = p_claimer.queue_name
        and coalesce(t.priority, 3) <= coalesce(v_top_waiting, 5)
        and s.rate_limit is null -- a rate-limited task starts at a claim, with a token
        and exists (select 1 from unnest(p_claimer.flow_slugs, p_claimer.step_slugs)
                      as c(flow_slug, step_slug)
                    where c.flow_slug = t.flow_slug and c.step_slug = t.step_slug)
    ),
    started as (
      update pgflow.step_tasks t
      set status = 'started', started_at = pgflow.clock(), attempts_count = t.attempts_count + 1,
          last_worker_id = p_claimer.slots[c.slot]
      from claimable c
      where c.slot <= cardinality(p_claimer.slots)
        and t.run_id = c.run_id and t.step_slug = c.step_slug and t.task_index = c.task_index
      returning t.ctid, t.run_id, t.step_slug, t.task_index
    ),
    claimed_now as (
      select array_agg(st.ctid) as ctids, array_agg(st.run_id) as runs,
             array_agg(st.step_slug) as steps, array_agg(st.task_index) as indexes
      from started st
    )
    -- The rest get their messages.
    select c.ctids, r.runs, r.steps, r.indexes
    into claimed, v_runs, v_steps, v_indexes
    from claimed_now c
    cross join lateral (
      select array_agg(x.run_id order by x.ordinality) as runs,
             array_agg(x.step_slug order by x.ordinality) as steps,
             array_agg(x.task_index order by x.ordinality) as indexes
      from unnest(v_runs, v_steps, v_indexes) with ordinality
        as x(run_id, step_slug, task_index, ordinality)
      where not exists (select 1 from unnest(c.runs, c.steps, c.indexes)
                          as y(run_id, step_slug, task_index)
                        where y.run_id = x.run_id and y.step_slug = x.step_slug
                          and y.task_index = x.task_index)
    ) r;
  end if;
  if v_runs is not null then
    perform pgflow.send_task_messages(v_runs, v_steps, v_indexes,
                                      array_fill(0, array[cardinality(v_runs)]));
  end if;
end;
$$;

-- release_held_tasks: gives the free slots of one key of a capped step to its held tasks (see
-- hand_over_slots). A slot is free when its holder has ended as this transaction sees it.
-- Slots another transaction is giving out are skipped, never waited for. Returns how many
-- tasks it released.
-- Locks: the key's free slots (SKIP LOCKED), then as hand_over_slots.
create or replace function pgflow.release_held_tasks(p_flow_slug text, p_step_slug text,
                                                      p_cap_key text)
returns integer
language plpgsql
as $$
declare
  v_limit integer;
  v_candidates integer[];
  v_slots integer[];
begin
  select s.concurrency_limit into v_limit
  from pgflow.steps s where s.flow_slug = p_flow_slug and s.step_slug = p_step_slug;
  if v_limit is null then
    return 0;
  end if;

  -- Take the slots that look free. A slot another transaction just gave out may look free to
  -- this statement and be locked after that transaction committed...
  select array_agg(c.slot) into v_candidates
  from (select cs.slot from pgflow.cap_slots cs
        where cs.flow_slug = p_flow_slug and cs.step_slug = p_step_slug
          and cs.cap_key = p_cap_key and cs.slot <= v_limit
          and pgflow.slot_is_free(cs.run_id, cs.step_slug, cs.task_index)
        order by cs.slot
        for update skip locked) c;
  if v_candidates is null then
    return 0;
  end if;
  -- ...so which of them are free is decided again, now that no one else can give them out.
  select array_agg(cs.slot order by cs.slot) into v_slots
  from pgflow.cap_slots cs
  where cs.flow_slug = p_flow_slug and cs.step_slug = p_step_slug and cs.cap_key = p_cap_key
    and cs.slot = any(v_candidates)
    and pgflow.slot_is_free(cs.run_id, cs.step_slug, cs.task_index);
  if v_slots is null then
    return 0;
  end if;
  return (pgflow.hand_over_slots(
    array_fill(p_flow_slug, array[cardinality(v_slots)]),
    array_fill(p_step_slug, array[cardinality(v_slots)]),
    array_fill(p_cap_key, array[cardinality(v_slots)]), v_slots)).released;
end;
$$;

-- release_keys: for each (flow, step, key) given (parallel arrays), in order, makes sure the
-- key has a slot row for each unit of its step's limit and releases its held tasks (see
-- release_held_tasks). Returns how many tasks it released.
-- Locks: as release_held_tasks, one key after another, in (flow, step, key) order.
create or replace function pgflow.release_keys(p_flow_slugs text[], p_step_slugs text[],
                                               p_cap_keys text[])
returns integer
language plpgsql
as $$
declare
  v_key record;
  v_released integer := 0;
begin
  for v_key in
    select distinct k.flow_slug, k.step_slug, k.cap_key, s.concurrency_limit
    from unnest(p_flow_slugs, p_step_slugs, p_cap_keys) as k(flow_slug, step_slug, cap_key)
    join pgflow.steps s on s.flow_slug = k.flow_slug and s.step_slug = k.step_slug
    where s.concurrency_limit is not null
    order by k.flow_slug, k.step_slug, k.cap_key
  loop
    if (select count(*) from pgflow.cap_slots cs
        where cs.flow_slug = v_key.flow_slug and cs.step_slug = v_key.step_slug
          and cs.cap_key = v_key.cap_key and cs.slot <= v_key.concurrency_limit)
       < v_key.concurrency_limit then
      insert into pgflow.cap_slots (flow_slug, step_slug, cap_key, slot)
      select v_key.flow_slug, v_key.step_slug, v_key.cap_key, g
      from generate_series(1, v_key.concurrency_limit) g
      on conflict do nothing;
    end if;
    v_released := v_released
      + pgflow.release_held_tasks(v_key.flow_slug, v_key.step_slug, v_key.cap_key);
  end loop;
  return v_released;
end;
$$;

-- hold_tasks: holds queued tasks of capped steps that have no message (parallel arrays: run,
-- step, task index), in the order given, under the key each reads from its run, then releases
-- what their keys' free slots allow. A task that holds a slot from before (a retried run's
-- failed task) gives it up first.
-- Expects the caller to hold the tasks' locks.
-- Locks: the tasks' old slots, then as release_keys.
create or replace function pgflow.hold_tasks(p_run_ids uuid[], p_step_slugs text[],
                                             p_task_indexes integer[])
returns void
language plpgsql
as $$
declare
  v_flows text[];
  v_steps text[];
  v_keys text[];
begin
  update pgflow.cap_slots cs
  set run_id = null, task_index = null, taken_at = null
  from (select c.ctid as row_ctid
        from unnest(p_run_ids, p_step_slugs, p_task_indexes) as u(run_id, step_slug, task_index)
        cross join lateral (
          select x.ctid from pgflow.cap_slots x
          where x.run_id = u.run_id and x.step_slug = u.step_slug
            and x.task_index = u.task_index and x.run_id is not null
        ) c) held_before
  where cs.ctid = held_before.row_ctid;
  -- A task held again (a retried run's) leaves its old place: a held row a sweep could drop
  -- for its old status, and a parked row a resume would give a message.
  delete from pgflow.held_tasks h
  using unnest(p_run_ids, p_step_slugs, p_task_indexes) as u(run_id, step_slug, task_index)
  where h.run_id = u.run_id and h.step_slug = u.step_slug and h.task_index = u.task_index;
  delete from pgflow.parked_tasks p
  using unnest(p_run_ids, p_step_slugs, p_task_indexes) as u(run_id, step_slug, task_index)
  where p.run_id = u.run_id and p.step_slug = u.step_slug and p.task_index = u.task_index;
  -- A held task has no message (a retried task still names its old one).
  update pgflow.step_tasks t
  set message_id = null
  from unnest(p_run_ids, p_step_slugs, p_task_indexes) as u(run_id, step_slug, task_index)
  where t.run_id = u.run_id and t.step_slug = u.step_slug and t.task_index = u.task_index
    and t.message_id is not null;

  with held as (
    insert into pgflow.held_tasks (flow_slug, step_slug, cap_key, run_id, task_index, priority)
    select t.flow_slug, t.step_slug,
           pgflow.cap_key_of(s.concurrency_key_path, t.run_id, r.input), t.run_id, t.task_index,
           coalesce(t.priority, 3)
    from unnest(p_run_ids, p_step_slugs, p_task_indexes) with ordinality
      as u(run_id, step_slug, task_index, n)
    join pgflow.step_tasks t
      on t.run_id = u.run_id and t.step_slug = u.step_slug and t.task_index = u.task_index
    join pgflow.runs r on r.run_id = t.run_id
    join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
    order by u.n
    on conflict (run_id, step_slug, task_index) do nothing
    returning flow_slug, step_slug, cap_key
  )
  select array_agg(h.flow_slug), array_agg(h.step_slug), array_agg(h.cap_key)
  into v_flows, v_steps, v_keys
  from held h;

  if v_flows is not null then
    perform pgflow.release_keys(v_flows, v_steps, v_keys);
  end if;
end;
$$;

-- hold_step_tasks: creates the tasks of capped steps that were just started (see
-- enqueue_step_tasks), 'queued' without a message, and holds them (hold_tasks).
-- Locks: as hold_tasks.
create or replace function pgflow.hold_step_tasks(p_steps pgflow.started_step[])
returns void
language plpgsql
as $$
declare
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
begin
  with created as (
    insert into pgflow.step_tasks (run_id, step_slug, task_index, flow_slug, queue_name,
                                   priority)
    select u.run_id, u.step_slug, i, u.flow_slug, u.queue_name, coalesce(u.priority, 3)
    from unnest(p_steps) as u
    cross join lateral generate_series(0, u.task_count - 1) as i
    order by u.run_id, u.step_slug, i
    returning run_id, step_slug, task_index
  )
  select array_agg(c.run_id order by c.run_id, c.step_slug, c.task_index),
         array_agg(c.step_slug order by c.run_id, c.step_slug, c.task_index),
         array_agg(c.task_index order by c.run_id, c.step_slug, c.task_index)
  into v_runs, v_steps, v_indexes
  from created c;

  if v_runs is not null then
    perform pgflow.hold_tasks(v_runs, v_steps, v_indexes);
  end if;
end;
$$;

-- release_after_ends: gives the slots of the given tasks (parallel arrays) that ended in this
-- transaction to the next held tasks of their keys (see hand_over_slots; with a claimer, some
-- are claimed for it). store_completions and fail_tasks call it with the tasks they reported.
-- No other transaction takes those slots meanwhile: to all others their holders are still
-- running until this one commits. A slot above its step's cap (lowered since) is left free.
-- Returns the row addresses of the tasks claimed (null: none).
-- Locks: the ended tasks' slots, then as hand_over_slots.
create or replace function pgflow.release_after_ends(p_run_ids uuid[], p_step_slugs text[],
                                                     p_task_indexes integer[],
                                                     p_claimer pgflow.task_claimer default null)
returns tid[]
language plpgsql
as $$
declare
  v_flows text[];
  v_steps text[];
  v_keys text[];
  v_slots integer[];
begin
  with ended as (
    -- Each task's slot by the index of holders (a lateral lookup: a plan made while the table
    -- was small would otherwise scan every slot of the step for each task).
    select cs.flow_slug, cs.step_slug, cs.cap_key, cs.slot
    from unnest(p_run_ids, p_step_slugs, p_task_indexes) as u(run_id, step_slug, task_index)
    join pgflow.step_tasks t
      on t.run_id = u.run_id and t.step_slug = u.step_slug and t.task_index = u.task_index
    cross join lateral (
      select c.flow_slug, c.step_slug, c.cap_key, c.slot
      from pgflow.cap_slots c
      where c.run_id = u.run_id and c.step_slug = u.step_slug and c.task_index = u.task_index
        and c.run_id is not null
      for update skip locked
    ) cs
    join pgflow.steps s on s.flow_slug = cs.flow_slug and s.step_slug = cs.step_slug
    where t.status not in ('queued', 'started') and cs.slot <= s.concurrency_limit
  )
  select array_agg(flow_slug), array_agg(step_slug), array_agg(cap_key), array_agg(slot)
  into v_flows, v_steps, v_keys, v_slots
  from ended;

  if v_flows is null then
    return null;
  end if;
  return (pgflow.hand_over_slots(v_flows, v_steps, v_keys, v_slots, p_claimer)).claimed;
end;
$$;

-- release_capped_tasks: the once-a-second sweep (every process with a worker calls it; one
-- runs at a time, the others return 0 at once). Drops held tasks that ended while held,
-- gives the highest priority to a key's oldest held task past its queue's aging limit (one at
-- a time), releases at once
-- the held tasks of steps no longer capped (a redeploy dropped the cap),
-- releases the held tasks of up to p_limit keys whose slots freed without a release (a cancel,
-- a failed run, a skip, a race between two releases; the keys waiting longest first), and
-- deletes the slot rows of keys idle for an hour (no held task, every slot free). It tidies
-- the rate limits' tables too (tidy_rate_limits). Returns how many tasks it released.
-- Locks: advisory (namespace, 4), then as tidy_rate_limits, then the aged held tasks (SKIP
-- LOCKED), then as release_keys; the idle keys' slots (SKIP LOCKED).
create or replace function pgflow.release_capped_tasks(p_limit integer default 1000)
returns integer
language plpgsql
as $$
declare
  v_flows text[];
  v_steps text[];
  v_keys text[];
  v_released integer := 0;
  v_uncapped_runs uuid[];
  v_uncapped_steps text[];
  v_uncapped_indexes integer[];
begin
  if not pg_try_advisory_xact_lock(pgflow.lock_namespace(), 4) then
    return 0;
  end if;

  perform pgflow.tidy_rate_limits();

  delete from pgflow.held_tasks h
  using pgflow.step_tasks t
  where t.run_id = h.run_id and t.step_slug = h.step_slug and t.task_index = h.task_index
    and t.status <> 'queued';

  -- No priority starves another under a cap either: a key's oldest task held for longer than
  -- its queue's aging limit (set_priority_aging, 60 s by default) takes the highest priority,
  -- one at a time per key (the next once it was released), so it goes before the tasks held
  -- after it while urgent tasks keep the other releases. (Held rows a release holds are left
  -- for the next sweep.)
  update pgflow.held_tasks h
  set priority = 1
  where h.ctid = any(array(
    select y.ctid
    from (select distinct k.flow_slug, k.step_slug, k.cap_key from pgflow.held_tasks k) k
    join (select s.flow_slug, s.step_slug,
                 pgflow.clock() - make_interval(secs => pgflow.aging_seconds(s.queue_name)) as aged_before
          from pgflow.steps s
          where s.concurrency_limit is not null) c
      on c.flow_slug = k.flow_slug and c.step_slug = k.step_slug
    cross join lateral (
      select x.ctid from pgflow.held_tasks x
      where x.flow_slug = k.flow_slug and x.step_slug = k.step_slug and x.cap_key = k.cap_key
        and x.priority > 1 and x.held_at < c.aged_before
      order by x.held_seq
      limit 1
      for update skip locked) y
    where not exists (select 1 from pgflow.held_tasks z
                      where z.flow_slug = k.flow_slug and z.step_slug = k.step_slug
                        and z.cap_key = k.cap_key and z.priority = 1
                        and z.held_at < c.aged_before)));

  -- Steps whose cap was dropped: their held tasks get their messages now.
  with uncapped as (
    delete from pgflow.held_tasks h
    using pgflow.steps s
    where s.flow_slug = h.flow_slug and s.step_slug = h.step_slug
      and s.concurrency_limit is null
    returning h.run_id, h.step_slug, h.task_index
  )
  select array_agg(run_id), array_agg(step_slug), array_agg(task_index)
  into v_uncapped_runs, v_uncapped_steps, v_uncapped_indexes
  from uncapped;
  if v_uncapped_runs is not null then
    v_released := pgflow.requeue_messageless_tasks(v_uncapped_runs, v_uncapped_steps,
                                                   v_uncapped_indexes);
  end if;

  select array_agg(k.flow_slug), array_agg(k.step_slug), array_agg(k.cap_key)
  into v_flows, v_steps, v_keys
  from (select h.flow_slug, h.step_slug, h.cap_key
        -- each key once (materialized: its slots are counted once, not once a held task),
        -- the key whose task has waited longest first, so that no key waits behind others
        -- beyond p_limit for ever
        from (select flow_slug, step_slug, cap_key, min(held_seq) as first_seq
              from pgflow.held_tasks
              group by flow_slug, step_slug, cap_key
              offset 0) h
        join pgflow.steps s on s.flow_slug = h.flow_slug and s.step_slug = h.step_slug
        where (select count(*) from pgflow.cap_slots cs
               where cs.flow_slug = h.flow_slug and cs.step_slug = h.step_slug
                 and cs.cap_key = h.cap_key and cs.slot <= s.concurrency_limit
                 and not pgflow.slot_is_free(cs.run_id, cs.step_slug, cs.task_index))
              < coalesce(s.concurrency_limit, 0)
        order by h.first_seq
        limit p_limit) k;
  if v_flows is not null then
    v_released := v_released + pgflow.release_keys(v_flows, v_steps, v_keys);
  end if;

  with idle as (
    select cs.flow_slug, cs.step_slug, cs.cap_key
    from pgflow.cap_slots cs
    group by cs.flow_slug, cs.step_slug, cs.cap_key
    having bool_and(coalesce(cs.taken_at < pgflow.clock() - interval '1 hour', true)
                    and pgflow.slot_is_free(cs.run_id, cs.step_slug, cs.task_index))
       and not exists (select 1 from pgflow.held_tasks h
                       where h.flow_slug = cs.flow_slug and h.step_slug = cs.step_slug
                         and h.cap_key = cs.cap_key)
  ),
  locked as (
    select cs.ctid as row_ctid
    from pgflow.cap_slots cs
    join idle i
      on i.flow_slug = cs.flow_slug and i.step_slug = cs.step_slug and i.cap_key = cs.cap_key
    for update of cs skip locked
  )
  delete from pgflow.cap_slots cs using locked where cs.ctid = locked.row_ctid;

  return v_released;
end;
$$;
