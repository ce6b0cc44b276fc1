-- Queue caps: at most queue_caps.concurrency tasks of a queue running at once, kept at the
-- claim with one slot per unit of the cap (the tables: migration 20261229000100_queue_caps.sql).
-- read_and_start_tasks and start_tasks take free slots (take_free_queue_slots) before they
-- take messages, and give them to the tasks they start (give_queue_slots); a completion
-- on a capped queue claims nothing at release, and wakes the queue's idle workers instead.

-- queue_slot_is_free: whether a slot whose holder is (p_run_id, p_step_slug, p_task_index),
-- started at p_taken_at, is free: no holder, or that start of it is over. It is over when the
-- task is no longer `started` with that start time (it completed or failed, was sent back for
-- a retry or a snooze, or was requeued after its worker died, which the sweep does only after
-- the step's timeout), unless it was ended from outside while its handler may still be running
-- (handler_may_outlive_end). (A SQL function Postgres inlines into the statements that call it.)
create or replace function pgflow.queue_slot_is_free(p_run_id uuid, p_step_slug text,
                                                     p_task_index integer,
                                                     p_taken_at timestamptz)
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
        and t.started_at = p_taken_at
        and (t.status = 'started' or pgflow.handler_may_outlive_end(t, o.timeout)))
$$;

-- take_free_queue_slots: locks up to p_wanted free slots of capped queue p_queue_name (the
-- first p_concurrency; slots above a lowered cap are not used), lowest first, skipping those
-- another claim holds, and returns them. Freedom is read again once they are locked, in a
-- statement of its own: a claim that held one committed before, and its start is then seen.
-- Locks: the slots it returns (FOR UPDATE SKIP LOCKED); it waits for nothing.
create or replace function pgflow.take_free_queue_slots(p_queue_name text,
                                                        p_concurrency integer,
                                                        p_wanted integer)
returns integer[]
language plpgsql
as $$
declare
  v_locked integer[];
begin
  v_locked := array(
    select s.slot from pgflow.queue_slots s
    where s.queue_name = p_queue_name and s.slot <= p_concurrency
      and pgflow.queue_slot_is_free(s.run_id, s.step_slug, s.task_index, s.taken_at)
    order by s.slot
    limit greatest(p_wanted, 0)
    for update skip locked);
  return array(
    select s.slot from pgflow.queue_slots s
    where s.queue_name = p_queue_name and s.slot = any(v_locked)
      and pgflow.queue_slot_is_free(s.run_id, s.step_slug, s.task_index, s.taken_at)
    order by s.slot);
end;
$$;

-- give_queue_slots: gives slots p_slots of queue p_queue_name (locked by take_free_queue_slots
-- in this transaction) to the tasks this transaction started on the queue for worker
-- p_worker_id (started_at is the transaction's now()), one each, in task order; slots left over
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
    where t.status = 'started' and t.started_at = now() and t.queue_name = p_queue_name
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
  set run_id = p.run_id, step_slug = p.step_slug, task_index = p.task_index, taken_at = now()
  from paired p
  where s.queue_name = p_queue_name and s.slot = p.slot
$$;

-- set_queue_concurrency: caps queue p_queue_name at p_concurrency tasks running at once (1 to
-- 10,000), or lifts its cap (null). A new cap counts the queue's tasks already running, up to
-- the cap, in its slots; a raised cap's new slots are free; a lowered cap lets the tasks that
-- hold the slots above it finish. Wakes the queue's idle workers. Returns the cap before
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
    if v_before is null then
      -- The tasks running now hold the first slots.
      with running as (
        select t.run_id, t.step_slug, t.task_index, t.started_at,
               row_number() over (order by t.started_at, t.run_id, t.step_slug, t.task_index)
                 as n
        from pgflow.step_tasks t
        where t.status = 'started' and t.queue_name = p_queue_name
      )
      update pgflow.queue_slots s
      set run_id = r.run_id, step_slug = r.step_slug, task_index = r.task_index,
          taken_at = r.started_at
      from running r
      where s.queue_name = p_queue_name and s.slot = r.n;
    end if;
  end if;
  perform pg_notify('pgflow.' || p_queue_name, '');
  return v_before;
end;
$$;
