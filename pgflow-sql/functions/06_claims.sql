-- Claims: a worker claims the queued tasks behind the PGMQ messages it read, and gets each
-- task's handler input.

-- The rows a claim returns for tasks it has just started (found by row address), in message
-- order (tasks claimed at release, which have no message, last), as pgflow.claimed_task (the
-- one type every claim returns; see the migration that made it): each task with its attempt,
-- its step's timeout, its run's trace context and the handler input: the flow input (root
-- single step), the element (map step), or an object of the dependencies' outputs keyed by
-- step slug. (A SQL function Postgres inlines into the statement that calls it.)
create or replace function pgflow.started_task_rows(p_row_ctids tid[])
returns setof pgflow.claimed_task
language sql
stable
as $$
  select t.flow_slug, t.step_slug, t.run_id, t.task_index, t.message_id, t.queue_name,
         t.attempts_count, o.timeout,
         case
           when s.step_type = 'map' and s.deps_count = 0 then r.input -> t.task_index
           when s.step_type = 'map' then (
             select dss.output -> t.task_index
             from pgflow.deps d
             join pgflow.step_states dss on dss.run_id = t.run_id and dss.step_slug = d.dep_slug
             where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug)
           when s.deps_count = 0 then r.input
           else (
             select jsonb_object_agg(d.dep_slug, dss.output)
             from pgflow.deps d
             join pgflow.step_states dss on dss.run_id = t.run_id and dss.step_slug = d.dep_slug
             where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug)
         end,
         r.trace_context
  from pgflow.step_tasks t
  join pgflow.runs r on r.run_id = t.run_id
  join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
  join pgflow.step_options o on o.flow_slug = t.flow_slug and o.step_slug = t.step_slug
  where t.ctid = any(p_row_ctids)
  order by t.message_id, t.run_id, t.step_slug, t.task_index
$$;

-- claim_tasks: claims the queued tasks behind PGMQ messages of `p_queue_name`'s lane for
-- p_priority (null: the queue itself; see lane_name) that the caller has taken off that lane
-- (popped, or archives in the same transaction). The claim behind start_tasks and
-- read_and_start_tasks; not an entry point.
--
-- Matches tasks by (queue_name, priority, message_id) only; the flow recorded on each task is data, never
-- a filter. Every matched (flow_slug, step_slug) pair is checked against the worker's supported
-- pairs (p_flow_slugs[i], p_step_slugs[i]) before anything is written: one unsupported pair
-- raises PF003 naming the queue, the message ids and the pairs, and the transaction's changes
-- are undone (no task status, no attempt, and the messages stay on the queue as they were).
--
-- Otherwise each claimable task becomes 'started' and its attempt is counted; tasks of runs
-- that already failed are failed instead of being returned. A claimed task is tracked by its
-- row from now on (a task whose worker dies is recovered by requeue_stalled_tasks, a failed
-- attempt is retried with a new message), so the queue holds only messages that wait, and
-- reads never walk past claimed ones.
--
-- Returns one row per claimed task, in message order, possibly of several concrete flows (see
-- started_task_rows for what a row holds). After them, one row per task sent back to wait for
-- a token of its step's rate limit (take_rate_tokens), with only `run_id`, `step_slug`,
-- `task_index` and `queue_name` set, so the caller counts it as work read. After them, one row per stale
-- message (no queued task behind it: sent by hand, for an unknown run, or left over), with
-- only `message_id` and `queue_name` set, so the caller can report it; a caller that only
-- wants tasks skips rows whose `flow_slug` is null.
-- Locks: the matched queued step_tasks (key order); no run locks; with rate-limited steps on
-- the queue, then as take_rate_tokens.
create or replace function pgflow.claim_tasks(
  p_queue_name text,
  p_message_ids bigint[],
  p_worker_id uuid,
  p_flow_slugs text[],
  p_step_slugs text[],
  p_priority smallint default null
)
returns setof pgflow.claimed_task
language plpgsql
as $$
declare
  v_row_ctids tid[];
  v_started_ctids tid[];
  v_matched_ids bigint[];
  v_unsupported jsonb;
  v_deferred_runs uuid[];
  v_deferred_steps text[];
  v_deferred_indexes integer[];
begin
  perform pgflow.check_supported_pairs('claim', p_flow_slugs, p_step_slugs);

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
      and t.priority = coalesce(p_priority, 3)
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
         (select array_agg(message_id) from matched),
         (select jsonb_agg(jsonb_build_object('flow_slug', u.flow_slug,
                                              'step_slug', u.step_slug,
                                              'message_ids', u.message_ids)
                           order by u.flow_slug, u.step_slug)
          from unsupported u)
  into v_row_ctids, v_matched_ids, v_unsupported;

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

  -- Tasks of paused flows are parked, not claimed: they stay queued without a message (the
  -- claim took it) until resume_flow gives them a new one. The paused flows' rows are read
  -- with a share lock, so a resume (which deletes them) waits for this claim and then sees
  -- what it parked.
  if v_row_ctids is not null and exists (select 1 from pgflow.paused_flows) then
    with paused as (
      select p.flow_slug from pgflow.paused_flows p order by p.flow_slug for share
    ),
    parked as (
      update pgflow.step_tasks t
      set message_id = null
      from unnest(v_row_ctids) as l(row_ctid), paused
      where t.ctid = l.row_ctid and t.flow_slug = paused.flow_slug
      returning t.run_id, t.step_slug, t.task_index, t.flow_slug
    )
    insert into pgflow.parked_tasks (run_id, step_slug, task_index, flow_slug)
    select run_id, step_slug, task_index, flow_slug from parked
    on conflict do nothing;
  end if;

  -- Tasks of rate-limited steps start only with a token of their key; the others are sent back
  -- to wait for one (see take_rate_tokens), and their addresses are gone like a parked task's.
  if v_row_ctids is not null
     and exists (select 1 from pgflow.steps s
                 where s.queue_name = p_queue_name and s.rate_limit is not null) then
    select array_agg(d.run_id), array_agg(d.step_slug), array_agg(d.task_index)
    into v_deferred_runs, v_deferred_steps, v_deferred_indexes
    from pgflow.take_rate_tokens(p_queue_name, v_row_ctids) d;
  end if;

  -- Claim the locked tasks (if any), found by row address (a parked task's address is gone:
  -- its update made a new version of the row): a task of a live run becomes
  -- 'started'; a task of a run that ended while it waited becomes 'failed' ('cancelled' when
  -- the run was cancelled) and is not returned.
  with changed as (
    update pgflow.step_tasks t
    set status = case when r.status = 'started' then 'started'
                      when r.status = 'cancelled' then 'cancelled' else 'failed' end,
        started_at = case when r.status = 'started' then pgflow.clock() else t.started_at end,
        attempts_count = t.attempts_count + case when r.status = 'started' then 1 else 0 end,
        last_worker_id = case when r.status = 'started' then p_worker_id
                              else t.last_worker_id end,
        failed_at = case when r.status in ('started', 'cancelled') then t.failed_at
                         else pgflow.clock() end,
        cancelled_at = case when r.status = 'cancelled' then pgflow.clock() end,
        error_message = case when r.status in ('started', 'cancelled') then t.error_message
                             else 'run failed before this task started' end
    from unnest(v_row_ctids) as l(row_ctid), pgflow.runs r
    where t.ctid = l.row_ctid and r.run_id = t.run_id
    returning t.ctid as row_ctid, t.status
  )
  select array_agg(row_ctid) filter (where status = 'started') into v_started_ctids
  from changed;

  return query select * from pgflow.started_task_rows(v_started_ctids);

  -- Tasks sent back to wait for a rate token: run, step, task and queue, no flow.
  if v_deferred_runs is not null then
    return query
    select (jsonb_populate_record(null::pgflow.claimed_task,
                                  jsonb_build_object('run_id', d.run_id, 'step_slug', d.step_slug,
                                                     'task_index', d.task_index,
                                                     'queue_name', p_queue_name))).*
    from unnest(v_deferred_runs, v_deferred_steps, v_deferred_indexes)
      as d(run_id, step_slug, task_index);
  end if;

  -- Stale messages: no queued task was behind them.
  return query
  select (jsonb_populate_record(null::pgflow.claimed_task,
                                jsonb_build_object('message_id', m.id,
                                                   'queue_name', p_queue_name))).*
  from unnest(p_message_ids) as m(id)
  where m.id <> all(coalesce(v_matched_ids, array[]::bigint[]))
  order by m.id;
end;
$$;

-- start_tasks: claims the queued tasks behind PGMQ messages a worker of `p_queue_name` read
-- itself, and archives every one of those messages (a stale one too). See claim_tasks for the
-- claim, the PF003 refusal (which archives nothing) and the rows returned. It serves the
-- queue itself, that is the default priority: a caller that reads a queue's priority lanes
-- must claim with read_and_start_tasks, and a lane's name is refused (PF005).
-- On a capped queue (queue_caps) it claims only as many of the messages as it finds free slots,
-- in message order; the others are not archived, and are visible again after their timeout.
-- Locks: with a cap, the free slots it takes (SKIP LOCKED); the messages (archiving them), then
-- as claim_tasks.
create or replace function pgflow.start_tasks(
  p_queue_name text,
  p_message_ids bigint[],
  p_worker_id uuid,
  p_flow_slugs text[],
  p_step_slugs text[]
)
returns setof pgflow.claimed_task
language plpgsql
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
declare
  v_paused boolean;
  v_concurrency integer;
  v_slots integer[];
begin
  if p_queue_name ~ '__p[1245]$' then
    raise exception 'start_tasks: `%` is a priority lane; claim a queue''s lanes with '
      'read_and_start_tasks', p_queue_name
      using errcode = 'PF005';
  end if;
  -- A paused queue claims nothing: the messages read stay, visible again after their timeout.
  -- (One look for a pause and a cap.)
  select exists (select 1 from pgflow.paused_queues q where q.queue_name = p_queue_name),
         (select c.concurrency from pgflow.queue_caps c where c.queue_name = p_queue_name)
  into v_paused, v_concurrency;
  if v_paused then
    return;
  end if;
  if v_concurrency is not null then
    v_slots := pgflow.take_free_queue_slots(p_queue_name, v_concurrency,
                                            coalesce(cardinality(p_message_ids), 0));
    p_message_ids := array(select m from unnest(p_message_ids) m order by m
                           limit cardinality(v_slots));
  end if;
  if coalesce(cardinality(p_message_ids), 0) > 0 then
    perform pgmq.archive(p_queue_name, p_message_ids);
  end if;
  return query
  select * from pgflow.claim_tasks(p_queue_name, p_message_ids, p_worker_id, p_flow_slugs,
                                   p_step_slugs);
  if v_concurrency is not null then
    perform pgflow.give_queue_slots(p_queue_name, p_worker_id, v_slots);
  end if;
end;
$$;

-- read_and_start_tasks: takes up to p_quantity visible messages off the queue (PGMQ's pop,
-- which deletes them) and claims their tasks with claim_tasks, in one transaction. The task
-- rows are the record of claimed work, so its messages are not archived: one PGMQ call per
-- claim instead of a read and an archive, and no archive row per task. A stale message (no
-- queued task behind it) is removed too, and returned for the caller to report.
-- When the batch is refused (PF003), the pop is undone with it: every message of the batch is
-- on the queue again as it was.
-- A queue with lanes (runs started with a priority; see queue_lanes) is read lane by lane,
-- highest priority first, each lane in message order. So that no priority starves another,
-- the messages of the lower lanes that have been visible for longer than the queue's aging
-- limit (aging_seconds: queue_aging, 60 s by default) go first, oldest first, up to a quarter
-- of the claim: p_quantity / 4, plus one with the chance of the remainder (a claim of one
-- takes an aged message one time in four). Higher priorities keep three quarters of the
-- claims however long the backlog, and an aged task is claimed within about four claims of
-- its turn. PGMQ has no read by age, so the aged messages are found in the lanes' tables
-- (pgmq.q_<lane>) by their visibility index, without locks (a message's `vt` is when it
-- became visible: a claim pops it, so nothing moves it later), and taken with PGMQ's delete,
-- which skips those another claim took meanwhile.
-- On a capped queue (queue_caps: at most so many of its tasks running at once) it takes no more
-- messages than it finds free slots (take_free_queue_slots), and gives them to the tasks it
-- starts (give_queue_slots); with none free it takes nothing.
-- Locks: with a cap, the free slots it takes (SKIP LOCKED); up to p_quantity visible messages
-- (PGMQ's pop: for update skip locked, then deleted; with lanes, the aged ones by PGMQ's
-- delete, which waits for a claim that locked one), then as claim_tasks.
create or replace function pgflow.read_and_start_tasks(
  p_queue_name text,
  p_worker_id uuid,
  p_flow_slugs text[],
  p_step_slugs text[],
  p_quantity integer
)
returns setof pgflow.claimed_task
language plpgsql
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
declare
  v_paused boolean;
  v_laned boolean;
  v_lanes smallint[];
  v_lane smallint;
  v_quota integer;
  v_aged_before timestamptz;
  v_aged record;
  v_aged_lanes smallint[];
  v_aged_ids bigint[];
  v_aged_vts timestamptz[];
  v_wanted integer;
  v_ids bigint[];
  v_vts timestamptz[];
  v_concurrency integer;
  v_slots integer[];
begin
  -- A paused queue claims nothing, and takes no message off the queue. (One look for all.)
  select exists (select 1 from pgflow.paused_queues q where q.queue_name = p_queue_name),
         exists (select 1 from pgflow.queue_lanes l where l.queue_name = p_queue_name),
         (select c.concurrency from pgflow.queue_caps c where c.queue_name = p_queue_name)
  into v_paused, v_laned, v_concurrency;
  if v_paused then
    return;
  end if;
  if v_concurrency is not null then
    v_slots := pgflow.take_free_queue_slots(p_queue_name, v_concurrency, p_quantity);
    p_quantity := cardinality(v_slots);
    if p_quantity = 0 then
      return;
    end if;
  end if;
  if not v_laned then
    return query
    select *
    from pgflow.claim_tasks(
      p_queue_name,
      array(select m.msg_id from pgmq.pop(p_queue_name, p_quantity) m order by m.msg_id),
      p_worker_id,
      p_flow_slugs,
      p_step_slugs);
    if v_concurrency is not null then
      perform pgflow.give_queue_slots(p_queue_name, p_worker_id, v_slots);
    end if;
    return;
  end if;

  v_lanes := array(select l.priority from pgflow.queue_lanes l
                   where l.queue_name = p_queue_name
                   union all
                   select 3
                   order by 1);
  v_wanted := p_quantity;
  v_aged_lanes := array[]::smallint[];
  v_aged_ids := array[]::bigint[];
  v_aged_vts := array[]::timestamptz[];
  v_quota := p_quantity / 4 + case when random() < (p_quantity % 4) / 4.0 then 1 else 0 end;
  if v_quota > 0 then
    -- The aged messages of the lanes below the highest (which goes first anyway): up to the
    -- quota per lane, then the oldest of them.
    v_aged_before := clock_timestamp()
                     - make_interval(secs => pgflow.aging_seconds(p_queue_name));
    foreach v_lane in array v_lanes[2:] loop
      execute format(
        'select array_agg(m.msg_id), array_agg(m.vt) '
        'from (select q.msg_id, q.vt from pgmq.%I q where q.vt <= $1 order by q.vt limit $2) m',
        'q_' || pgflow.lane_name(p_queue_name, v_lane))
      into v_ids, v_vts
      using v_aged_before, v_quota;
      if v_ids is not null then
        v_aged_lanes := v_aged_lanes || array_fill(v_lane, array[cardinality(v_ids)]);
        v_aged_ids := v_aged_ids || v_ids;
        v_aged_vts := v_aged_vts || v_vts;
      end if;
    end loop;
    for v_aged in
      select a.priority, array_agg(a.msg_id order by a.msg_id) as ids
      from (select * from unnest(v_aged_lanes, v_aged_ids, v_aged_vts)
                            as u(priority, msg_id, vt)
            order by u.vt, u.priority limit v_quota) a
      group by a.priority
      order by a.priority
    loop
      v_ids := array(select d
                     from pgmq.delete(pgflow.lane_name(p_queue_name, v_aged.priority),
                                      v_aged.ids) as d
                     order by d);
      v_wanted := v_wanted - cardinality(v_ids);
      return query
      select * from pgflow.claim_tasks(p_queue_name, v_ids, p_worker_id, p_flow_slugs,
                                       p_step_slugs, v_aged.priority);
    end loop;
  end if;

  -- The rest, by priority.
  foreach v_lane in array v_lanes loop
    exit when v_wanted <= 0;
    v_ids := array(select m.msg_id
                   from pgmq.pop(pgflow.lane_name(p_queue_name, v_lane), v_wanted) m
                   order by m.msg_id);
    v_wanted := v_wanted - cardinality(v_ids);
    return query
    select * from pgflow.claim_tasks(p_queue_name, v_ids, p_worker_id, p_flow_slugs,
                                     p_step_slugs, v_lane);
  end loop;
  if v_concurrency is not null then
    perform pgflow.give_queue_slots(p_queue_name, p_worker_id, v_slots);
  end if;
end;
$$;

-- claims_at_release: how many tasks a completion call may claim for a worker when a task of
-- each of its supported pairs (p_flow_slugs[i], p_step_slugs[i]) completes, by the rule
-- enqueue_step_tasks claims with: the completed step's dependents on p_queue_name that the
-- worker runs, with no start delay, condition, signal, sleep, concurrency cap or rate limit (those are
-- decided on the slower path, which never claims). `at_most` is their count, or null when any number (a map
-- dependent has one task per element). A worker sizes the slots it offers a completion call
-- by it. Pairs that release none are absent, and so are map steps: only the last of a map
-- step's many tasks releases anything, and holding slots for each of their completions would
-- take them from the worker's claims.
-- A capped step on p_queue_name (see release_held_tasks) adds one: each of its completions
-- frees a slot of its key, whose next held task the completion claims (a map step's too).
-- Locks: none (reads only).
create or replace function pgflow.claims_at_release(
  p_queue_name text,
  p_flow_slugs text[],
  p_step_slugs text[]
)
returns table (flow_slug text, step_slug text, at_most integer)
language sql
stable
as $$
  select r.flow_slug, r.step_slug,
         case when bool_or(r.many) then null else sum(r.n)::integer end
  from (
    select p.flow_slug, p.step_slug, dependent.step_type = 'map' as many, 1 as n
    from unnest(p_flow_slugs, p_step_slugs) as p(flow_slug, step_slug)
    join pgflow.steps completed
      on completed.flow_slug = p.flow_slug and completed.step_slug = p.step_slug
    join pgflow.deps d on d.flow_slug = p.flow_slug and d.dep_slug = p.step_slug
    join pgflow.steps dependent
      on dependent.flow_slug = d.flow_slug and dependent.step_slug = d.step_slug
    where completed.step_type = 'single'
      and dependent.queue_name = p_queue_name
      and coalesce(dependent.opt_start_delay, 0) = 0
      and dependent.condition_when is null and dependent.condition_unless is null
      and dependent.signal_name is null and dependent.sleep_seconds is null
      and dependent.sleep_until_path is null and dependent.concurrency_limit is null
      and dependent.rate_limit is null
      and exists (select 1 from unnest(p_flow_slugs, p_step_slugs) as s(flow_slug, step_slug)
                  where s.flow_slug = dependent.flow_slug and s.step_slug = dependent.step_slug)
    union all
    select p.flow_slug, p.step_slug, false, 1
    from unnest(p_flow_slugs, p_step_slugs) as p(flow_slug, step_slug)
    join pgflow.steps capped
      on capped.flow_slug = p.flow_slug and capped.step_slug = p.step_slug
    where capped.concurrency_limit is not null and capped.rate_limit is null
      and capped.queue_name = p_queue_name
  ) r
  group by r.flow_slug, r.step_slug
$$;
