-- Support: the advisory lock namespace, the effective step options, and the helpers the engine
-- calls on its hot path: archiving and sending PGMQ messages, waking a queue's workers, and the
-- run locks every change of a run's progress takes first. Error codes, lock order and plan
-- notes for every file here: README.md.

-- Advisory lock keys: one namespace (the first key) for everything pgflow locks.
-- Locks: none (returns a constant).
create or replace function pgflow.lock_namespace()
returns integer
language sql
immutable
parallel safe
as $$ select 1885824620 $$; -- 0x7067666c, "pgfl"

-- Effective step options: the step's own value, else its flow's.
create or replace view pgflow.step_options as
select
  s.flow_slug,
  s.step_slug,
  coalesce(s.opt_max_attempts, f.opt_max_attempts) as max_attempts,
  coalesce(s.opt_base_delay, f.opt_base_delay) as base_delay,
  coalesce(s.opt_timeout, f.opt_timeout) as timeout,
  coalesce(s.opt_start_delay, 0) as start_delay,
  coalesce(s.opt_max_delay, f.opt_max_delay) as max_delay,
  coalesce(s.opt_jitter, f.opt_jitter) as jitter
from pgflow.steps s
join pgflow.flows f on f.flow_slug = s.flow_slug;

-- An error text as stored on a task or step: at most 8,192 characters; a longer one is cut
-- and ends with a marker giving its whole length (`… [truncated, 1048576 bytes]`), as
-- `pgflow_runtime::failure::bounded` does for workers.
create or replace function pgflow.bounded_error(p_text text)
returns text
language sql
immutable
parallel safe
as $$
  select case
    when length(p_text) <= 8192 then p_text
    else left(p_text, 8192 - length(format('… [truncated, %s bytes]', octet_length(p_text))))
         || format('… [truncated, %s bytes]', octet_length(p_text))
  end
$$;

-- Archives messages given as parallel arrays (queue_name[i], message_id[i]), one PGMQ call per
-- queue.
create or replace function pgflow.archive_messages(p_queue_names text[], p_message_ids bigint[])
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

-- Refuses (PF005) supported (flow, step) pairs given as arrays of different lengths; p_caller
-- names the function in the message.
create or replace function pgflow.check_supported_pairs(
  p_caller text,
  p_flow_slugs text[],
  p_step_slugs text[]
)
returns void
language plpgsql
as $$
begin
  if cardinality(coalesce(p_flow_slugs, array[]::text[]))
     <> cardinality(coalesce(p_step_slugs, array[]::text[])) then
    raise exception '%: % flow slugs but % step slugs; supported pairs are given as two arrays '
      'of equal length', p_caller, cardinality(p_flow_slugs), cardinality(p_step_slugs)
      using errcode = 'PF005';
  end if;
end;
$$;

-- Locks runs (FOR NO KEY UPDATE, run_id order): the first lock of every function that changes
-- the progress of existing runs.
create or replace function pgflow.lock_runs(p_run_ids uuid[])
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

-- The advisory key (second half; the first is lock_namespace()) that a queue's listeners hold
-- while they want notifications: see request_wakeups.
create or replace function pgflow.wakeup_key(p_queue_name text)
returns integer
language sql
immutable
parallel safe
as $$ select hashtext('wakeup:' || p_queue_name) $$;

-- Wakes the workers listening on `pgflow.<queue_name>` (see `pgflow_runtime::worker`), if any
-- listener wants a wake-up: a notification makes its commit wait for every other notifying
-- commit of the server (Postgres serializes them, WAL flush included), so a start notifies
-- only while some worker process has every worker of the queue idle (it then holds the
-- queue's wake-up key shared, see request_wakeups). The probe is an exclusive try-lock,
-- released at once: it fails while any listener holds the key (or another probe does, at the
-- same instant: one notification too many, never one too few). Postgres delivers one
-- notification per channel and payload at commit, however often a transaction calls this.
create or replace function pgflow.notify_queue(p_queue_name text)
returns void
language plpgsql
as $$
declare
  v_key integer := pgflow.wakeup_key(p_queue_name);
begin
  if pg_try_advisory_lock(pgflow.lock_namespace(), v_key) then
    perform pg_advisory_unlock(pgflow.lock_namespace(), v_key);
  else
    perform pg_notify('pgflow.' || p_queue_name, '');
  end if;
end;
$$;

-- The PGMQ queue that carries the messages of a queue's tasks of a priority (1, highest, to 5;
-- null is 3): the queue itself for 3, else its lane `<queue>__p<priority>` (see queue_lanes).
create or replace function pgflow.lane_name(p_queue_name text, p_priority smallint)
returns text
language sql
immutable
parallel safe
as $$
  select case when p_priority is null or p_priority = 3 then p_queue_name
              else p_queue_name || '__p' || p_priority end
$$;

-- Makes sure every queue of flow p_flow_slug has its lane for p_priority (nothing for null):
-- a missing lane is created (a PGMQ queue) and listed in queue_lanes, once, however many
-- starts ask at the same time (they wait for each other on the queue's lane lock). Raises
-- PF005 when a queue's name leaves no room for its lane's suffix within PGMQ's 47 bytes.
-- Locks: advisory (namespace, hashtext('lanes:' || queue)) until commit, per missing lane.
create or replace function pgflow.ensure_lanes(p_flow_slug text, p_priority smallint)
returns void
language plpgsql
as $$
declare
  v_queue text;
begin
  if p_priority is null or p_priority = 3 then
    return;
  end if;
  for v_queue in
    select distinct s.queue_name
    from pgflow.steps s
    where s.flow_slug = p_flow_slug
      and not exists (select 1 from pgflow.queue_lanes l
                      where l.queue_name = s.queue_name and l.priority = p_priority)
    order by s.queue_name
  loop
    if octet_length(pgflow.lane_name(v_queue, p_priority)) > 47 then
      raise exception 'queue `%` of flow `%` is % bytes long: a start with a priority needs its '
        'queues to be at most 43 bytes, so that their lanes (`%`) fit PGMQ''s 47',
        v_queue, p_flow_slug, octet_length(v_queue), pgflow.lane_name(v_queue, p_priority)
        using errcode = 'PF005',
              hint = 'route the flow''s steps to a shorter queue, or start without a priority';
    end if;
    perform pg_advisory_xact_lock(pgflow.lock_namespace(), hashtext('lanes:' || v_queue));
    -- Decided again under the lock: a start that created the lane meanwhile has committed.
    if not exists (select 1 from pgflow.queue_lanes l
                   where l.queue_name = v_queue and l.priority = p_priority) then
      perform pgmq.create(pgflow.lane_name(v_queue, p_priority));
      insert into pgflow.queue_lanes (queue_name, priority) values (v_queue, p_priority)
      on conflict do nothing;
    end if;
  end loop;
end;
$$;

-- How long a message may wait, visible, in queue p_queue_name's lanes before it counts as
-- aged (see read_and_start_tasks): the queue's queue_aging row, else 60 s.
create or replace function pgflow.aging_seconds(p_queue_name text)
returns integer
language sql
stable
as $$
  select coalesce((select a.aging_seconds from pgflow.queue_aging a
                   where a.queue_name = p_queue_name), 60)
$$;

-- The highest priority (1 highest) of the lanes of queue p_queue_name that hold a visible
-- message, the queue itself counting as 3, and 1 when a lane below that holds a message that
-- waited past the queue's aging limit (see read_and_start_tasks); null when no lane holds a
-- visible message, or when the queue has no lanes (then nothing waits ahead of any task). A
-- completion claims at release only tasks of at least this priority: a claim that skips the
-- lanes must not pass over tasks that rank before it, nor keep an aged one waiting.
-- Locks: none (reads only).
create or replace function pgflow.highest_waiting_priority(p_queue_name text)
returns smallint
language plpgsql
stable
as $$
declare
  v_lane smallint;
  v_top smallint;
  v_waiting boolean;
  v_aged_before timestamptz := clock_timestamp() - make_interval(secs => pgflow.aging_seconds(p_queue_name));
begin
  for v_lane in
    select l.priority from pgflow.queue_lanes l where l.queue_name = p_queue_name
    union all
    select 3 where exists (select 1 from pgflow.queue_lanes l where l.queue_name = p_queue_name)
    order by 1
  loop
    if v_top is null then
      execute format('select exists (select 1 from pgmq.%I q where q.vt <= clock_timestamp())',
                     'q_' || pgflow.lane_name(p_queue_name, v_lane))
      into v_waiting;
      if v_waiting then
        v_top := v_lane;
        exit when v_top = 1;
      end if;
    else
      execute format('select exists (select 1 from pgmq.%I q where q.vt <= $1)',
                     'q_' || pgflow.lane_name(p_queue_name, v_lane))
      into v_waiting
      using v_aged_before;
      if v_waiting then
        return 1;
      end if;
    end if;
  end loop;
  return v_top;
end;
$$;

-- The body of a task's PGMQ message: the task it stands for. (A SQL function Postgres inlines
-- into the statements that call it.)
create or replace function pgflow.task_message(p_flow_slug text, p_run_id uuid,
                                               p_step_slug text, p_task_index integer)
returns jsonb
language sql
stable
as $$
  select jsonb_build_object('flow_slug', p_flow_slug, 'run_id', p_run_id,
                            'step_slug', p_step_slug, 'task_index', p_task_index)
$$;

-- Gives queued tasks (parallel arrays: run, step, task index, delay in seconds) a new PGMQ
-- message each, sent to the lane of the task's queue snapshot for its priority and visible
-- after the delay: a claim takes
-- the message it claimed off the queue, so a retry or a requeue needs a new one. One batch per
-- (queue, delay); wakes the queue's idle workers when the messages are visible at once.
-- Expects the caller to hold the tasks' row locks.
create or replace function pgflow.send_task_messages(
  p_run_ids uuid[], p_step_slugs text[], p_task_indexes integer[], p_delays integer[]
)
returns void
language plpgsql
as $$
declare
  v_group record;
begin
  for v_group in
    select t.queue_name, pgflow.lane_name(t.queue_name, t.priority) as lane_name, u.delay,
           array_agg(t.ctid order by t.run_id, t.step_slug, t.task_index) as row_ctids,
           array_agg(pgflow.task_message(t.flow_slug, t.run_id, t.step_slug, t.task_index)
                     order by t.run_id, t.step_slug, t.task_index) as bodies
    from unnest(p_run_ids, p_step_slugs, p_task_indexes, p_delays)
      as u(run_id, step_slug, task_index, delay)
    join pgflow.step_tasks t
      on t.run_id = u.run_id and t.step_slug = u.step_slug and t.task_index = u.task_index
    group by t.queue_name, pgflow.lane_name(t.queue_name, t.priority), u.delay
  loop
    -- PGMQ assigns increasing ids in insertion order; pair them with the tasks by rank.
    with sent as (
      select msg_id, row_number() over (order by msg_id) as ordinality
      from pgmq.send_batch(v_group.lane_name, v_group.bodies, null::jsonb[],
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

-- Queues again tasks held back without a message (parallel arrays: run, step, task index; a
-- paused flow's parked tasks, a dropped cap's held ones): each still 'queued' without a
-- message, and not waiting for a slot of a cap (held_tasks: a parked task whose run was
-- retried since is held again), gets one, visible at once. Returns how many it queued.
-- Locks: those tasks (key order).
create or replace function pgflow.requeue_messageless_tasks(
  p_run_ids uuid[], p_step_slugs text[], p_task_indexes integer[]
)
returns integer
language plpgsql
as $$
declare
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
begin
  with waiting as (
    select t.run_id, t.step_slug, t.task_index
    from unnest(p_run_ids, p_step_slugs, p_task_indexes) as u(run_id, step_slug, task_index)
    join pgflow.step_tasks t
      on t.run_id = u.run_id and t.step_slug = u.step_slug and t.task_index = u.task_index
    where t.status = 'queued' and t.message_id is null
    order by t.run_id, t.step_slug, t.task_index
    for no key update of t
  )
  select array_agg(run_id), array_agg(step_slug), array_agg(task_index)
  into v_runs, v_steps, v_indexes
  from waiting;
  -- Decided again under the tasks' locks (a hold that committed while this waited is seen).
  select array_agg(w.run_id), array_agg(w.step_slug), array_agg(w.task_index)
  into v_runs, v_steps, v_indexes
  from unnest(v_runs, v_steps, v_indexes) as w(run_id, step_slug, task_index)
  where not exists (select 1 from pgflow.held_tasks h
                    where h.run_id = w.run_id and h.step_slug = w.step_slug
                      and h.task_index = w.task_index);
  if v_runs is null then
    return 0;
  end if;
  perform pgflow.send_task_messages(v_runs, v_steps, v_indexes,
                                    array_fill(0, array[cardinality(v_runs)]));
  return cardinality(v_runs);
end;
$$;
