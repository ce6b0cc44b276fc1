-- Progression: what completing (or skipping) steps sets off. Completing steps releases their
-- dependents, starts the ready ones (deciding their conditions) and creates their tasks and
-- PGMQ messages; runs complete when no step is left and fail with their live tasks. The
-- starts (05_starts.sql), completions (07_completion.sql), recovery and run control call in
-- here; nothing here is an entry point a role calls.

-- Fails runs (status 'started' only) and every live task of theirs that nobody holds a lock
-- on: those tasks become 'failed' and the queued ones' messages are archived. A task locked by a
-- concurrent claim or completion is skipped; that transaction sees the failed run and acts
-- accordingly (a claim fails such tasks, a completion stops cascading).
-- Locks: runs (run_id order), then live tasks with SKIP LOCKED.
create or replace function pgflow.fail_runs(p_run_ids uuid[], p_reason text)
returns void
language plpgsql
as $$
declare
  v_failed uuid[];
  v_children uuid[];
  v_queues text[];
  v_messages bigint[];
begin
  with locked as (
    select ctid as row_ctid from pgflow.runs
    where run_id = any(p_run_ids) and status = 'started'
    order by run_id
    for no key update
  ),
  failed as (
    update pgflow.runs r
    set status = 'failed', failed_at = pgflow.clock()
    from locked
    where r.ctid = locked.row_ctid
    returning r.run_id, r.parent_run_id
  )
  select coalesce(array_agg(run_id), array[]::uuid[]),
         array_agg(run_id) filter (where parent_run_id is not null)
  into v_failed, v_children
  from failed;

  if cardinality(v_failed) = 0 then
    return;
  end if;
  -- Their steps that wait stay 'waiting' (as those not reached stay 'created'), but no
  -- deadline of theirs is kept: a retry decides them again.
  delete from pgflow.waits w where w.run_id = any(v_failed);

  with live as (
    select ctid as row_ctid from pgflow.step_tasks
    where run_id = any(v_failed) and status in ('queued', 'started')
    order by run_id, step_slug, task_index
    for no key update skip locked
  ),
  cancelled as (
    update pgflow.step_tasks t
    set status = 'failed',
        failed_at = pgflow.clock(),
        error_message = p_reason
    from live
    where t.ctid = live.row_ctid
    returning pgflow.lane_name(t.queue_name, t.priority) as lane_name, t.message_id
  )
  select array_agg(lane_name), array_agg(message_id) into v_queues, v_messages from cancelled;

  if v_queues is not null then
    perform pgflow.archive_messages(v_queues, v_messages);
  end if;
  -- Failed children fail the steps of their parents that wait for them.
  if v_children is not null then
    perform pgflow.settle_parents(v_children);
  end if;
end;
$$;

-- The output of a step whose tasks are all done: a single step's task output; a map step's
-- task outputs as an array in task order ([] for a map over nothing).
create or replace function pgflow.step_output(p_run_id uuid, p_step_slug text, p_step_type text)
returns jsonb
language plpgsql
stable
as $$
begin
  if p_step_type = 'single' then
    return (select t.output from pgflow.step_tasks t
            where t.run_id = p_run_id and t.step_slug = p_step_slug and t.task_index = 0);
  end if;
  return coalesce((select jsonb_agg(t.output order by t.task_index)
                   from pgflow.step_tasks t
                   where t.run_id = p_run_id and t.step_slug = p_step_slug),
                  '[]'::jsonb);
end;
$$;

-- Completes started steps whose tasks are all done (storing their step_output), then goes on
-- as finish_completed_steps.
-- Locks: step_states of the steps (order), then as finish_completed_steps.
create or replace function pgflow.complete_steps(p_run_ids uuid[], p_step_slugs text[])
returns void
language plpgsql
as $$
declare
  v_runs uuid[];
  v_steps text[];
  v_flows text[];
begin
  with target as (
    select ss.ctid as row_ctid
    from pgflow.step_states ss
    join unnest(p_run_ids, p_step_slugs) as t(run_id, step_slug)
      on ss.run_id = t.run_id and ss.step_slug = t.step_slug
    where ss.status = 'started' and ss.remaining_tasks = 0
    order by ss.run_id, ss.step_slug
    for no key update of ss
  ),
  completed as (
    update pgflow.step_states ss
    set status = 'completed',
        completed_at = pgflow.clock(),
        output = pgflow.step_output(ss.run_id, ss.step_slug, s.step_type)
    from target, pgflow.steps s
    where ss.ctid = target.row_ctid
      and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    returning ss.run_id, ss.step_slug, ss.flow_slug
  )
  select coalesce(array_agg(run_id), array[]::uuid[]),
         coalesce(array_agg(step_slug), array[]::text[]),
         coalesce(array_agg(flow_slug), array[]::text[])
  into v_runs, v_steps, v_flows
  from completed;

  perform pgflow.finish_completed_steps(v_runs, v_steps, v_flows);
end;
$$;

-- What follows the completion of steps (parallel arrays: run, step, flow of each step that just
-- became 'completed' or 'skipped'): releases their dependents, starting in the same write each
-- dependent left with nothing to wait for (a single step with one task, a map step with one
-- task per element of its dependency's array, or none when that dependency was skipped);
-- counts the steps down on their runs and completes the runs with nothing left (output: an
-- object of the leaf steps' outputs, null for a skipped leaf); then creates the started steps'
-- tasks. A ready step with a condition, and a ready map step whose dependency's output is not
-- an array, are left to start_ready_steps (which decides the condition, or fails the step and
-- its run); the other ready steps of that run are left to it too.
-- With a claimer, returns the row addresses of the tasks claimed for it (see
-- enqueue_step_tasks); null otherwise.
-- Locks: step_states of the dependents (order), then runs (order).
create or replace function pgflow.finish_completed_steps(
  p_run_ids uuid[], p_step_slugs text[], p_flow_slugs text[],
  p_claimer pgflow.task_claimer default null
)
returns tid[]
language plpgsql
as $$
declare
  v_started pgflow.started_step[];
  v_blocked_runs uuid[];
  v_children uuid[];
begin
  if cardinality(p_run_ids) = 0 then
    return null;
  end if;

  -- Release the dependents, when there are any: a leaf step's completion (every completion
  -- of a one-step flow) skips the statement that sizes and starts them, whose plan is large
  -- enough that starting it up costs more than this look.
  if exists (select 1
             from unnest(p_step_slugs, p_flow_slugs) as c(step_slug, flow_slug)
             join pgflow.deps d on d.flow_slug = c.flow_slug and d.dep_slug = c.step_slug) then
    with released as (
      select c.run_id, d.step_slug, count(*)::integer as n
      from unnest(p_run_ids, p_step_slugs, p_flow_slugs) as c(run_id, step_slug, flow_slug)
      join pgflow.deps d on d.flow_slug = c.flow_slug and d.dep_slug = c.step_slug
      group by c.run_id, d.step_slug
    ),
    locked as (
      select ss.ctid as row_ctid, ss.run_id, ss.step_slug, ss.flow_slug, released.n,
             ss.status = 'created' and ss.remaining_deps = released.n and r.status = 'started'
               as ready, r.priority
      from pgflow.step_states ss
      join released on released.run_id = ss.run_id and released.step_slug = ss.step_slug
      join pgflow.runs r on r.run_id = ss.run_id
      order by ss.run_id, ss.step_slug
      for no key update of ss
    ),
    sized as (
      -- A map step has exactly one dependency: the step whose array it maps over.
      select l.row_ctid, l.run_id, l.step_slug, l.n, l.ready, l.priority, s.queue_name,
             coalesce(s.opt_start_delay, 0) as start_delay,
             case when not l.ready then null
                  -- a condition, a signal, a sleep, a cap or a rate limit is decided by
                  -- start_ready_steps (which never claims)
                  when s.condition_when is not null or s.condition_unless is not null
                       or s.signal_name is not null or s.sleep_seconds is not null
                       or s.sleep_until_path is not null
                       or s.concurrency_limit is not null or s.rate_limit is not null
                  then null
                  when s.step_type = 'single' then 1
                  else (select case when dss.status = 'skipped' then 0
                                    when jsonb_typeof(dss.output) = 'array'
                                    then jsonb_array_length(dss.output) end
                        from pgflow.deps d
                        join pgflow.step_states dss
                          on dss.run_id = l.run_id and dss.step_slug = d.dep_slug
                        where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug)
             end as task_count
      from locked l
      join pgflow.steps s on s.flow_slug = l.flow_slug and s.step_slug = l.step_slug
    ),
    decided as (
      select sized.*,
             sized.task_count is not null
               and not bool_or(sized.ready and sized.task_count is null)
                     over (partition by sized.run_id) as start
      from sized
    ),
    changed as (
      update pgflow.step_states ss
      set remaining_deps = ss.remaining_deps - decided.n,
          status = case when decided.start then 'started' else ss.status end,
          started_at = case when decided.start then pgflow.clock() else ss.started_at end,
          initial_tasks = case when decided.start then decided.task_count
                               else ss.initial_tasks end,
          remaining_tasks = case when decided.start then decided.task_count
                                 else ss.remaining_tasks end
      from decided
      where ss.ctid = decided.row_ctid
      returning ss.run_id, ss.step_slug, ss.flow_slug, decided.ready, decided.start,
                decided.task_count, decided.queue_name, decided.start_delay, decided.priority
    )
    select array_agg((run_id, step_slug, flow_slug, task_count, queue_name, start_delay,
                      priority)::pgflow.started_step) filter (where start),
           array_agg(distinct run_id) filter (where ready and not start)
    into v_started, v_blocked_runs
    from changed;
  end if;

  -- Count the steps down on their runs and complete, in the same write, the runs with nothing
  -- left (output: an object of the leaf steps' outputs).
  with per_run as (
    select run_id, count(*)::integer as n from unnest(p_run_ids) as c(run_id) group by run_id
  ),
  locked as (
    select r.ctid as row_ctid, r.status, per_run.n
    from pgflow.runs r
    join per_run on per_run.run_id = r.run_id
    order by r.run_id
    for no key update of r
  ),
  counted as (
    update pgflow.runs r
    set remaining_steps = r.remaining_steps - locked.n,
        status = case when r.remaining_steps = locked.n then 'completed' else r.status end,
        completed_at = case when r.remaining_steps = locked.n then pgflow.clock() end,
        output = case when r.remaining_steps = locked.n then (
          select coalesce(jsonb_object_agg(ss.step_slug, ss.output), '{}'::jsonb)
          from pgflow.step_states ss
          where ss.run_id = r.run_id
            and not exists (select 1 from pgflow.deps d
                            where d.flow_slug = ss.flow_slug and d.dep_slug = ss.step_slug))
        end
    from locked
    where r.ctid = locked.row_ctid and locked.status = 'started'
    returning r.run_id, r.status, r.parent_run_id
  )
  -- Completed children complete (or go on waiting for their siblings) the steps of their
  -- parents that wait for them.
  select array_agg(c.run_id) filter (where c.status = 'completed' and c.parent_run_id is not null)
  into v_children
  from counted c;
  if v_children is not null then
    perform pgflow.settle_parents(v_children);
  end if;

  if v_blocked_runs is not null then
    perform pgflow.start_ready_steps(v_blocked_runs);
  end if;
  if v_started is not null then
    return pgflow.enqueue_step_tasks(v_started, p_claimer);
  end if;
  return null;
end;
$$;

-- Creates the tasks of steps that were just started: one task and one PGMQ message per
-- element, sent to the step's queue (the task's queue snapshot), in the lane of the run's
-- priority, and delayed by the step's start delay, one batch per (lane, delay). A map step over an empty array completes at once
-- with [], which may start further steps.
-- With a claimer (see complete_and_claim_tasks), as many of the tasks it runs on its queue,
-- visible at once and of no lower priority than any message waiting on the queue's lanes
-- (highest_waiting_priority), as it offers slots are created claimed instead ('started', first attempt,
-- no message), the n-th by the worker of the n-th slot. This is the one rule of what a
-- completion may claim: the worker learns what it may claim from claims_at_release.
-- Returns the row addresses of the tasks claimed (null when none), for the caller to return.
create or replace function pgflow.enqueue_step_tasks(
  p_steps pgflow.started_step[],
  p_claimer pgflow.task_claimer default null
)
returns tid[]
language plpgsql
as $$
declare
  v_claimed tid[];
  v_group record;
  v_empty_runs uuid[];
  v_empty_steps text[];
  v_claimed_runs uuid[];
  v_claimed_steps text[];
  v_claimed_indexes integer[];
  v_top_waiting smallint;
begin
  if cardinality(p_claimer.slots) > 0 then
    -- On a queue with priority lanes, only tasks that rank with the best waiting ones.
    if exists (select 1 from pgflow.queue_lanes l where l.queue_name = p_claimer.queue_name) then
      v_top_waiting := pgflow.highest_waiting_priority(p_claimer.queue_name);
    end if;
    with claimable as (
      select u.run_id, u.step_slug, u.flow_slug, u.queue_name, u.priority, i as task_index,
             row_number() over (order by coalesce(u.priority, 3), u.run_id, u.step_slug, i)
               as slot
      from unnest(p_steps) as u
      cross join lateral generate_series(0, u.task_count - 1) as i
      where u.queue_name = p_claimer.queue_name and u.start_delay = 0
        and coalesce(u.priority, 3) <= coalesce(v_top_waiting, 5)
        and exists (select 1 from unnest(p_claimer.flow_slugs, p_claimer.step_slugs)
                      as p(flow_slug, step_slug)
                    where p.flow_slug = u.flow_slug and p.step_slug = u.step_slug)
      order by coalesce(u.priority, 3), u.run_id, u.step_slug, i
      limit cardinality(p_claimer.slots)
    ),
    claimed as (
      insert into pgflow.step_tasks (run_id, step_slug, task_index, flow_slug, queue_name,
                                     priority, status, attempts_count, started_at,
                                     last_worker_id)
      select c.run_id, c.step_slug, c.task_index, c.flow_slug, c.queue_name,
             coalesce(c.priority, 3), 'started', 1, pgflow.clock(), p_claimer.slots[c.slot]
      from claimable c
      returning ctid, run_id, step_slug, task_index
    )
    select array_agg(ctid), array_agg(run_id), array_agg(step_slug), array_agg(task_index)
    into v_claimed, v_claimed_runs, v_claimed_steps, v_claimed_indexes
    from claimed;
  end if;

  for v_group in
    select u.queue_name, u.priority,
           -- (a default priority's lane is its queue: no call, on the path of every start)
           case when u.priority is null then u.queue_name
                else pgflow.lane_name(u.queue_name, u.priority) end as lane_name,
           u.start_delay,
           array_agg(u.flow_slug order by u.run_id, u.step_slug, i) as flow_slugs,
           array_agg(u.run_id order by u.run_id, u.step_slug, i) as run_ids,
           array_agg(u.step_slug order by u.run_id, u.step_slug, i) as step_slugs,
           array_agg(i order by u.run_id, u.step_slug, i) as task_indexes
    from unnest(p_steps) as u
    cross join lateral generate_series(0, u.task_count - 1) as i
    where u.task_count > 0
      and not exists (select 1
                      from unnest(v_claimed_runs, v_claimed_steps, v_claimed_indexes)
                        as c(run_id, step_slug, task_index)
                      where c.run_id = u.run_id and c.step_slug = u.step_slug
                        and c.task_index = i)
    group by u.queue_name, u.priority, u.start_delay
  loop
    if cardinality(v_group.run_ids) = 1 then
      -- One task (a start of one run, most often): PGMQ's single send costs a good deal less
      -- than a batch of one.
      insert into pgflow.step_tasks (run_id, step_slug, task_index, flow_slug, queue_name,
                                     priority, message_id)
      select v_group.run_ids[1], v_group.step_slugs[1], v_group.task_indexes[1],
             v_group.flow_slugs[1], v_group.queue_name, coalesce(v_group.priority, 3),
             sent.msg_id
      from pgmq.send(
        v_group.lane_name,
        pgflow.task_message(v_group.flow_slugs[1], v_group.run_ids[1], v_group.step_slugs[1],
                            v_group.task_indexes[1]),
        null::jsonb,
        clock_timestamp() + make_interval(secs => v_group.start_delay)) as sent(msg_id);
    else
      with batch as (
        select b.flow_slug, b.run_id, b.step_slug, b.task_index, b.ordinality
        from unnest(v_group.flow_slugs, v_group.run_ids, v_group.step_slugs, v_group.task_indexes)
          with ordinality as b(flow_slug, run_id, step_slug, task_index, ordinality)
      ),
      sent as (
        -- PGMQ assigns increasing ids in insertion order; pair them with the batch by rank.
        select msg_id, row_number() over (order by msg_id) as ordinality
        from pgmq.send_batch(
          v_group.lane_name,
          (select array_agg(pgflow.task_message(flow_slug, run_id, step_slug, task_index)
                            order by ordinality)
           from batch),
          null::jsonb[],
          clock_timestamp() + make_interval(secs => v_group.start_delay)) as msg_id
      )
      insert into pgflow.step_tasks (run_id, step_slug, task_index, flow_slug, queue_name,
                                     priority, message_id)
      select batch.run_id, batch.step_slug, batch.task_index, batch.flow_slug,
             v_group.queue_name, coalesce(v_group.priority, 3), sent.msg_id
      from batch join sent on sent.ordinality = batch.ordinality;
    end if;

    -- Wake the queue's idle workers (delivered at commit, once per channel and transaction).
    if v_group.start_delay = 0 then
      perform pgflow.notify_queue(v_group.queue_name);
    end if;
  end loop;

  select array_agg(u.run_id), array_agg(u.step_slug)
  into v_empty_runs, v_empty_steps
  from unnest(p_steps) as u
  where u.task_count = 0;

  if v_empty_runs is not null then
    perform pgflow.complete_steps(v_empty_runs, v_empty_steps);
  end if;
  return v_claimed;
end;
$$;

-- Starts every step of the given (started) runs whose dependencies are all done (completed or
-- skipped) and that is still 'created': the slow path behind the starts that
-- finish_completed_steps and start_flows make in the writes that release steps or create runs.
--
-- A step that waits for a signal (steps.signal_name) starts only once the run has received it
-- (pgflow.signals); until then it becomes 'waiting', with a row in pgflow.waits carrying its
-- deadline (now plus its wait_timeout, if it has one) and, for a step reached by key, its key
-- (read at signal_key_path from the flow input or a dependency's output, as text; null when
-- absent), and holds no task. A waiting step whose signal has arrived since (send_signal and
-- emit_events call this) starts as any other. Its condition, if it has one, is decided before
-- it waits.
--
-- A step that sleeps (steps.sleep_seconds, or sleep_until_path: a time read from the flow input
-- or a dependency's output) is 'waiting' the same way, with a wait of kind 'sleep' whose
-- deadline is its wake time, fixed when it becomes ready; a wake time that has passed (or a
-- missing or null one) starts it at once, and one that is no RFC 3339 time fails the step and
-- its run. It starts once its wait is gone (expire_waits removes it at the wake time).
--
-- A step with a concurrency cap (steps.concurrency_limit) starts here too: its tasks are held
-- until their key has a free slot (hold_step_tasks; see 20_concurrency_caps.sql).
--
-- A step with a condition is decided here. Its input is the flow input (a root step) or the
-- object of its dependencies' outputs, keyed by step slug (null for a skipped one); the
-- condition holds when the input contains the `when` pattern (if any) and does not contain
-- the `unless` pattern (if any), as jsonb `@>` decides. When it does not hold, `when_unmet`
-- skips the step (reason condition_unmet; see skip_steps), skips it and everything downstream,
-- or fails the step and its run.
--
-- A map over something that is not an array fails the step and its run (a map over a skipped
-- dependency has no tasks). In a run that fails, the other ready steps are left as they are;
-- the other runs' ready steps start (see enqueue_step_tasks) or are skipped.
create or replace function pgflow.start_ready_steps(p_run_ids uuid[])
returns void
language plpgsql
as $$
declare
  v_started pgflow.started_step[];
  v_capped pgflow.started_step[];
  v_bad_runs uuid[];
  v_bad_wake_runs uuid[];
  v_unmet_runs uuid[];
  v_skip_runs uuid[];
  v_skip_steps text[];
  v_skip_cascade boolean[];
begin
  with ready as (
    select ss.ctid as row_ctid, ss.run_id, ss.step_slug, s.step_type, s.queue_name,
           r.priority,
           s.when_unmet, s.signal_name, s.wait_timeout, sig.awaited, sig.signal_key,
           s.concurrency_limit is not null as capped,
           slp.wake_at, slp.bad_wake, s.sleep_until_path, jsonb_typeof(slp.raw) as wake_got,
           coalesce(s.opt_start_delay, 0)
             + greatest(0, ceil(extract(epoch from r.scheduled_for - pgflow.clock())))::integer
             as start_delay,
           jsonb_typeof(src.value) as got,
           case when s.step_type = 'single' then 1
                when src.source_skipped then 0
                when jsonb_typeof(src.value) = 'array' then jsonb_array_length(src.value)
           end as task_count,
           (s.condition_when is null or cond.input @> s.condition_when)
             and (s.condition_unless is null or not cond.input @> s.condition_unless) as met
    from pgflow.step_states ss
    join pgflow.runs r on r.run_id = ss.run_id and r.status = 'started'
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    cross join lateral (
      -- what a map step maps over, and whether that is a skipped dependency
      select case when s.step_type = 'single' then null
                  when s.deps_count = 0 then r.input
                  else (select dss.output from pgflow.deps d
                        join pgflow.step_states dss
                          on dss.run_id = ss.run_id and dss.step_slug = d.dep_slug
                        where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug)
             end as value,
             s.step_type = 'map' and s.deps_count > 0
               and exists (select 1 from pgflow.deps d
                           join pgflow.step_states dss
                             on dss.run_id = ss.run_id and dss.step_slug = d.dep_slug
                           where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug
                             and dss.status = 'skipped') as source_skipped
    ) src
    cross join lateral (
      -- what the condition is matched against
      select case when s.condition_when is null and s.condition_unless is null then null
                  when s.deps_count = 0 then r.input
                  else (select jsonb_object_agg(d.dep_slug, dss.output)
                        from pgflow.deps d
                        join pgflow.step_states dss
                          on dss.run_id = ss.run_id and dss.step_slug = d.dep_slug
                        where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug)
             end as input
    ) cond
    cross join lateral (
      -- when a step that sleeps wakes, fixed as it becomes ready ('created')
      select v.raw,
             case when ss.status <> 'created' then null
                  when s.sleep_seconds is not null
                    then pgflow.clock() + make_interval(secs => s.sleep_seconds)
                  when v.raw is not null then pgflow.wake_time_of(v.raw)
             end as wake_at,
             v.raw is not null and v.raw <> 'null'::jsonb
               and pgflow.wake_time_of(v.raw) is null as bad_wake
      from (select case when s.sleep_until_path is not null and ss.status = 'created'
                        then pgflow.run_value_at(s.sleep_until_path, ss.run_id, r.input)
                   end as raw) v
    ) slp
    cross join lateral (
      -- whether the step has what it waits for (a step that waits for nothing has): its
      -- signal, or the end of its sleep (its wake time has passed, or its wait is gone)
      select case when s.signal_name is not null then
                    exists (select 1 from pgflow.signals sg
                            where sg.run_id = ss.run_id and sg.signal_name = s.signal_name)
                  when ss.status = 'waiting' then
                    not exists (select 1 from pgflow.waits w
                                where w.run_id = ss.run_id and w.step_slug = ss.step_slug)
                  else slp.wake_at is null or slp.wake_at <= pgflow.clock()
             end as awaited,
             pgflow.signal_key_of(s.signal_key_path, ss.run_id, r.input) as signal_key
    ) sig
    where ss.run_id = any(p_run_ids) and ss.remaining_deps = 0
      and (ss.status = 'created' or (ss.status = 'waiting' and sig.awaited))
    order by ss.run_id, ss.step_slug
    for no key update of ss
  ),
  outcomes as (
    select ready.*,
           case when not ready.met and ready.when_unmet = 'fail' then 'unmet'
                when not ready.met then 'skip'
                when ready.task_count is null then 'bad_map'
                when ready.bad_wake then 'bad_wake'
                when not ready.awaited then 'wait'
                else 'start'
           end as outcome
    from ready
  ),
  decided as (
    select outcomes.*,
           bool_or(outcomes.outcome in ('unmet', 'bad_map', 'bad_wake'))
             over (partition by outcomes.run_id) as run_fails
    from outcomes
  ),
  changed as (
    update pgflow.step_states ss
    set status = case d.outcome when 'start' then 'started' when 'wait' then 'waiting'
                                else 'failed' end,
        started_at = case when d.outcome = 'start' then pgflow.clock() end,
        failed_at = case when d.outcome not in ('start', 'wait') then pgflow.clock() end,
        error_message = case
          when d.outcome = 'unmet' then
            format('step `%s`: its condition was not met (when_unmet = fail)', d.step_slug)
          when d.outcome = 'bad_map' then
            format('map step `%s` needs an array to map over, got %s',
                   d.step_slug, coalesce(d.got, 'nothing'))
          when d.outcome = 'bad_wake' then
            format('step `%s` sleeps until the time at `%s`, but got a %s that is no time; '
                   'write an RFC 3339 time with its offset, as 2026-12-09T09:00:00Z',
                   d.step_slug, array_to_string(d.sleep_until_path, '.'), d.wake_got) end,
        initial_tasks = case when d.outcome = 'start' then d.task_count end,
        remaining_tasks = case when d.outcome = 'start' then d.task_count end
    from decided d
    where ss.ctid = d.row_ctid
      and (d.outcome in ('unmet', 'bad_map', 'bad_wake')
           or (d.outcome in ('start', 'wait') and not d.run_fails))
    returning ss.run_id, ss.step_slug, ss.status, d.outcome, d.task_count, ss.flow_slug,
              d.queue_name, d.start_delay, d.signal_name, d.wait_timeout, d.signal_key,
              d.wake_at, d.capped, d.priority
  ),
  waiting as (
    insert into pgflow.waits (run_id, step_slug, flow_slug, signal_name, deadline, signal_key,
                              kind)
    select c.run_id, c.step_slug, c.flow_slug, c.signal_name,
           case when c.signal_name is null then c.wake_at
                else pgflow.clock() + make_interval(secs => c.wait_timeout) end,
           c.signal_key, case when c.signal_name is null then 'sleep' else 'signal' end
    from changed c
    where c.outcome = 'wait'
    on conflict (run_id, step_slug) do nothing
  ),
  started as (
    select array_agg((run_id, step_slug, flow_slug, task_count, queue_name, start_delay,
                      priority)::pgflow.started_step)
             filter (where status = 'started' and not (capped and task_count > 0)) as steps,
           array_agg((run_id, step_slug, flow_slug, task_count, queue_name, start_delay,
                      priority)::pgflow.started_step)
             filter (where status = 'started' and capped and task_count > 0) as capped_steps,
           array_agg(distinct run_id) filter (where outcome = 'bad_map') as bad_runs,
           array_agg(distinct run_id) filter (where outcome = 'bad_wake') as bad_wake_runs,
           array_agg(distinct run_id) filter (where outcome = 'unmet') as unmet_runs
    from changed
  ),
  skipping as (
    select array_agg(d.run_id order by d.run_id, d.step_slug) as runs,
           array_agg(d.step_slug order by d.run_id, d.step_slug) as steps,
           array_agg(d.when_unmet = 'skip_cascade' order by d.run_id, d.step_slug) as cascade
    from decided d
    where d.outcome = 'skip' and not d.run_fails
  )
  select started.steps, started.capped_steps, started.bad_runs, started.bad_wake_runs,
         started.unmet_runs, skipping.runs, skipping.steps, skipping.cascade
  into v_started, v_capped, v_bad_runs, v_bad_wake_runs, v_unmet_runs, v_skip_runs, v_skip_steps,
       v_skip_cascade
  from started, skipping;

  if v_bad_runs is not null then
    perform pgflow.fail_runs(v_bad_runs, 'run failed: a map step received a non-array input');
  end if;
  if v_bad_wake_runs is not null then
    perform pgflow.fail_runs(v_bad_wake_runs, 'run failed: a step''s wake time is no time');
  end if;
  if v_unmet_runs is not null then
    perform pgflow.fail_runs(v_unmet_runs, 'run failed: a step''s condition was not met');
  end if;
  if v_skip_runs is not null then
    perform pgflow.skip_steps(v_skip_runs, v_skip_steps,
                              array_fill('condition_unmet'::text, array[cardinality(v_skip_runs)]),
                              v_skip_cascade, null);
  end if;
  if v_started is not null then
    perform pgflow.enqueue_step_tasks(v_started);
  end if;
  if v_capped is not null then
    perform pgflow.hold_step_tasks(v_capped);
  end if;
end;
$$;

-- Its statements are planned once per session, not at every call: planning the statement
-- above for the values of one call costs three times what running it does for a run or two
-- (a signal's delivery: 4.4 ms a send with custom plans, 1.1 ms with generic ones), and the
-- plan hardly depends on the values (a lookup of the runs' steps by key).
alter function pgflow.start_ready_steps(uuid[]) set plan_cache_mode = force_generic_plan;

-- Skips steps of started runs (parallel arrays: run, step, reason, whether the skip cascades,
-- and optionally an error message each). Each step still 'created' or 'started' becomes
-- 'skipped' with its reason; a cascading skip also skips every step downstream of it that is
-- still 'created' (reason dependency_skipped). The live tasks of a skipped step become
-- 'skipped': queued ones never reach a handler (their messages are archived), and the result
-- of a running one is discarded when it arrives. Skipped steps then count as done, as
-- completed ones do: finish_completed_steps releases their dependents (which receive null for
-- them), counts them down on their runs and completes the runs with nothing left.
-- Locks: the queued tasks' messages, then the live tasks of the steps (a claim in flight holds
-- its messages before their tasks, so taking them in this order cannot deadlock with it), then
-- step_states of the steps and everything downstream (order), then as finish_completed_steps.
-- A caller skipping steps that have tasks holds their runs' locks.
create or replace function pgflow.skip_steps(
  p_run_ids uuid[],
  p_step_slugs text[],
  p_reasons text[],
  p_cascade boolean[],
  p_error_messages text[]
)
returns void
language plpgsql
as $$
declare
  v_queues text[];
  v_messages bigint[];
  v_runs uuid[];
  v_steps text[];
  v_flows text[];
begin
  select array_agg(pgflow.lane_name(t.queue_name, t.priority)), array_agg(t.message_id)
  into v_queues, v_messages
  from unnest(p_run_ids, p_step_slugs) as u(run_id, step_slug)
  join pgflow.step_tasks t on t.run_id = u.run_id and t.step_slug = u.step_slug
  where t.status = 'queued';
  if v_queues is not null then
    perform pgflow.archive_messages(v_queues, v_messages);
  end if;

  with live as (
    select t.ctid as row_ctid
    from unnest(p_run_ids, p_step_slugs) as u(run_id, step_slug)
    join pgflow.step_tasks t on t.run_id = u.run_id and t.step_slug = u.step_slug
    join pgflow.step_states ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
    join pgflow.runs r on r.run_id = t.run_id
    where t.status in ('queued', 'started') and ss.status = 'started' and r.status = 'started'
    order by t.run_id, t.step_slug, t.task_index
    for no key update of t
  )
  update pgflow.step_tasks t
  set status = 'skipped', skipped_at = pgflow.clock()
  from live
  where t.ctid = live.row_ctid and t.status in ('queued', 'started');

  with recursive target as (
    select u.run_id, u.step_slug, u.reason, u.cascade, u.error_message, r.flow_slug
    from unnest(p_run_ids, p_step_slugs, p_reasons, p_cascade, p_error_messages)
      as u(run_id, step_slug, reason, cascade, error_message)
    join pgflow.runs r on r.run_id = u.run_id and r.status = 'started'
  ),
  downstream(run_id, flow_slug, step_slug) as (
    select t.run_id, t.flow_slug, d.step_slug
    from target t
    join pgflow.deps d on d.flow_slug = t.flow_slug and d.dep_slug = t.step_slug
    where t.cascade
    union
    select ds.run_id, ds.flow_slug, d.step_slug
    from downstream ds
    join pgflow.deps d on d.flow_slug = ds.flow_slug and d.dep_slug = ds.step_slug
  ),
  wanted as (
    -- a step both named and downstream of another keeps its own reason
    select distinct on (w.run_id, w.step_slug) w.run_id, w.step_slug, w.reason, w.error_message
    from (select run_id, step_slug, reason, error_message, 0 as rank from target
          union all
          select run_id, step_slug, 'dependency_skipped', null, 1 from downstream) w
    order by w.run_id, w.step_slug, w.rank
  ),
  locked as (
    select ss.ctid as row_ctid, wanted.reason, wanted.error_message
    from pgflow.step_states ss
    join wanted on wanted.run_id = ss.run_id and wanted.step_slug = ss.step_slug
    where ss.status in ('created', 'waiting', 'started')
    order by ss.run_id, ss.step_slug
    for no key update of ss
  ),
  skipped as (
    update pgflow.step_states ss
    set status = 'skipped', skipped_at = pgflow.clock(), skip_reason = locked.reason,
        error_message = coalesce(pgflow.bounded_error(locked.error_message), ss.error_message)
    from locked
    where ss.ctid = locked.row_ctid
    returning ss.run_id, ss.step_slug, ss.flow_slug
  )
  select coalesce(array_agg(run_id), array[]::uuid[]),
         coalesce(array_agg(step_slug), array[]::text[]),
         coalesce(array_agg(flow_slug), array[]::text[])
  into v_runs, v_steps, v_flows
  from skipped;

  perform pgflow.finish_completed_steps(v_runs, v_steps, v_flows);
end;
$$;
