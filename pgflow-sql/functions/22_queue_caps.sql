-- Queue caps: at most queue_caps.concurrency tasks of a queue running at once, kept at the
-- claim with one slot per unit of the cap (the tables: migration 20261229000100_queue_caps.sql).
-- read_and_start_tasks and start_tasks take free slots (take_free_queue_slots) before they
-- take messages, and give them to the tasks they start (give_queue_slots); a completion
-- on a capped queue claims nothing at release, and the calls that end attempts wake the
-- queue's idle workers (wake_capped_queues; complete_and_claim_tasks, which knows its queue,
-- calls notify_queue itself).

-- wake_capped_queues: wakes the idle workers of the capped queues of the tasks of the given
-- runs and steps (their attempts just ended: their slots are free), as a start wakes them
-- (notify_queue: only when a process has every worker of the queue idle; a worker whose claim
-- the cap cut short reads again soon, or is idle). Sent once per queue, at commit.
-- Locks: none (reads only).
create or replace function pgflow.wake_capped_queues(p_run_ids uuid[], p_step_slugs text[])
returns void
language sql
as $$
  select pgflow.notify_queue(c.queue_name)
  from pgflow.queue_caps c
  where exists (select 1
                from unnest(p_run_ids, p_step_slugs) as u(run_id, step_slug)
                join pgflow.runs r on r.run_id = u.run_id
                join pgflow.steps st on st.flow_slug = r.flow_slug and st.step_slug = u.step_slug
                where st.queue_name = c.queue_name)
$$;

-- free_queue_slots: the free slots among slots p_slots of capped queue p_queue_name, lowest
-- first. A slot is free when it has no holder
-- or that start of its holder is over: the task is no longer `started` with that start time
-- (it completed or failed, was sent back for a retry or a snooze, or was requeued after its
-- worker died, which the sweep does only after the step's timeout), unless it was ended from
-- outside while its handler may still be running (handler_may_outlive_end). One statement, as
-- the snapshot it runs in sees them.
-- Locks: none (reads only).
create or replace function pgflow.free_queue_slots(p_queue_name text, p_slots integer[])
returns setof integer
language sql
stable
as $$
  select s.slot
  from pgflow.queue_slots s
  where s.queue_name = p_queue_name and s.slot = any(p_slots)
    and not exists (
      select 1
      from pgflow.step_tasks t
      join pgflow.step_options o on o.flow_slug = t.flow_slug and o.step_slug = t.step_slug
      where t.run_id = s.run_id and t.step_slug = s.step_slug and t.task_index = s.task_index
        and t.started_at = s.taken_at
        and (t.status = 'started' or pgflow.handler_may_outlive_end(t, o.timeout)))
  order by s.slot
$$;

-- take_free_queue_slots: locks up to p_wanted free slots among the first p_concurrency of
-- capped queue p_queue_name (slots above a lowered cap are not used; see free_queue_slots for
-- when a slot is free, which the first statement spells out so that it stops when it has
-- enough), lowest first, skipping those another claim holds, and returns them. Freedom is read
-- again once they are locked, in a statement of its own: a claim that held one has committed
-- by then, and its start is seen.
-- The queue's tasks that run without a slot among the first p_concurrency (claimed before the
-- cap was set, by a claim that read no cap yet, or holding a slot above a lowered cap) are
-- given free slots first, as if claimed with them: each counts against the cap until its start
-- is over. (Two claims at once may both give one such task a slot; it then holds two until it
-- ends, which keeps the cap, with one slot to spare.)
-- Locks: the slots it locks (FOR UPDATE SKIP LOCKED); it waits for nothing.
create or replace function pgflow.take_free_queue_slots(p_queue_name text,
                                                        p_concurrency integer,
                                                        p_wanted integer)
returns integer[]
language plpgsql
set enable_seqscan = off
as $$
declare
  v_unslotted record;
  v_locked integer[];
  v_free integer[];
  v_adopted integer := 0;
begin
  if p_wanted <= 0 then
    return array[]::integer[];
  end if;
  select coalesce(array_agg(t.run_id order by t.started_at, t.run_id, t.step_slug,
                                      t.task_index), array[]::uuid[]) as runs,
         coalesce(array_agg(t.step_slug order by t.started_at, t.run_id, t.step_slug,
                                         t.task_index), array[]::text[]) as steps,
         coalesce(array_agg(t.task_index order by t.started_at, t.run_id, t.step_slug,
                                          t.task_index), array[]::integer[]) as indexes,
         coalesce(array_agg(t.started_at order by t.started_at, t.run_id, t.step_slug,
                                          t.task_index), array[]::timestamptz[]) as starts
  into v_unslotted
  from pgflow.step_tasks t
  where t.status = 'started' and t.queue_name = p_queue_name
    and not exists (select 1 from pgflow.queue_slots s
                    where s.queue_name = p_queue_name and s.slot <= p_concurrency
                      and s.run_id = t.run_id and s.step_slug = t.step_slug
                      and s.task_index = t.task_index and s.taken_at = t.started_at);
  v_locked := array(
    select s.slot from pgflow.queue_slots s
    where s.queue_name = p_queue_name and s.slot <= p_concurrency
      and not exists (
        select 1
        from pgflow.step_tasks t
        join pgflow.step_options o on o.flow_slug = t.flow_slug and o.step_slug = t.step_slug
        where t.run_id = s.run_id and t.step_slug = s.step_slug
          and t.task_index = s.task_index and t.started_at = s.taken_at
          and (t.status = 'started' or pgflow.handler_may_outlive_end(t, o.timeout)))
    order by s.slot
    limit p_wanted + cardinality(v_unslotted.runs)
    for update skip locked);
  if cardinality(v_locked) = 0 then
    return v_locked;
  end if;
  v_free := array(select pgflow.free_queue_slots(p_queue_name, v_locked));
  if cardinality(v_unslotted.runs) > 0 and cardinality(v_free) > 0 then
    with adopted as (
      update pgflow.queue_slots s
      set run_id = u.run_id, step_slug = u.step_slug, task_index = u.task_index,
          taken_at = u.started_at
      from unnest(v_free, v_unslotted.runs, v_unslotted.steps, v_unslotted.indexes,
                  v_unslotted.starts) as u(slot, run_id, step_slug, task_index, started_at)
      where u.slot is not null and u.run_id is not null
        and s.queue_name = p_queue_name and s.slot = u.slot
      returning s.slot
    )
    select count(*) into v_adopted from adopted;
  end if;
  return v_free[v_adopted + 1:v_adopted + p_wanted];
end;
$$;

-- give_queue_slots: gives slots p_slots of queue p_queue_name (locked by take_free_queue_slots
-- in this transaction) to the tasks this transaction started on the queue for worker
-- p_worker_id (started_at is the transaction's pgflow.clock()), one each, in task order; slots left over
-- stay free. Expects the caller to hold the slots' locks.
create or replace function pgflow.give_queue_slots(p_queue_name text, p_worker_id uuid,
                                                   p_slots integer[])
returns void
language sql
as $$
  with started as (
    select t.run_id, t.step_slug, t.task_index,
           row_number() over (order by t.run_id, t.step_slug, t.task_index) as n
    from pgflow.step_tasks t
    where t.status = 'started' and t.started_at = pgflow.clock() and t.queue_name = p_queue_name
      and t.last_worker_id = p_worker_id
      and not exists (select 1 from pgflow.queue_slots s
                      where s.queue_name = p_queue_name and s.run_id = t.run_id
                        and s.step_slug = t.step_slug and s.task_index = t.task_index
                        and s.taken_at = t.started_at)
  ),
  paired as (
    select f.slot, st.run_id, st.step_slug, st.task_index
    from unnest(p_slots) with ordinality as f(slot, n)
    join started st on st.n = f.n
  )
  update pgflow.queue_slots s
  set run_id = p.run_id, step_slug = p.step_slug, task_index = p.task_index, taken_at = pgflow.clock()
  from paired p
  where s.queue_name = p_queue_name and s.slot = p.slot
$$;

-- set_queue_concurrency: caps queue p_queue_name at p_concurrency tasks running at once (1 to
-- 10,000), or lifts its cap (null). The queue's tasks already running count against a new cap
-- (claims give them slots first, see take_free_queue_slots), and so do those that hold the
-- slots above a lowered one; a raised cap's new slots are free. Wakes the queue's idle workers. Returns the cap before
-- (null: none). Raises PF015 for a queue no flow routes to, PF005 for a cap out of range.
-- Locks: the queue's row of queue_caps, then its slots.
create or replace function pgflow.set_queue_concurrency(p_queue_name text,
                                                        p_concurrency integer)
returns integer
language plpgsql
as $$
declare
  v_before integer;
begin
  perform pgflow.require_routed_queue(p_queue_name);
  if p_concurrency is not null and p_concurrency not between 1 and 10000 then
    raise exception 'set_queue_concurrency: a queue''s cap is 1 to 10000 tasks at once, got %; '
      'lift a cap with null', p_concurrency
      using errcode = 'PF005';
  end if;
  select c.concurrency into v_before from pgflow.queue_caps c
  where c.queue_name = p_queue_name for update;
  if p_concurrency is null then
    delete from pgflow.queue_caps c where c.queue_name = p_queue_name;
  else
    insert into pgflow.queue_caps (queue_name, concurrency)
    values (p_queue_name, p_concurrency)
    on conflict (queue_name) do update
      set concurrency = excluded.concurrency, set_at = excluded.set_at;
    insert into pgflow.queue_slots (queue_name, slot)
    select p_queue_name, n from generate_series(1, p_concurrency) n
    on conflict do nothing;
  end if;
  perform pgflow.notify_queue(p_queue_name);
  return v_before;
end;
$$;
