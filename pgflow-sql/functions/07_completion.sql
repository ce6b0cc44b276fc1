-- Completion and failure: workers report the outputs and the failed attempts of started tasks.
-- A failed attempt is retried with backoff, or fails its task, step and run for good.

-- complete_tasks: records the outputs of started tasks (batched; arrays of equal length).
-- A task is identified by (run_id, step_slug, task_index) and the attempt that produced the
-- output; a task that is no longer 'started' in that attempt (late, duplicate, or requeued and
-- claimed again) is left unchanged. Outputs are stored exactly (0, false, "" and null stay).
-- Counts the tasks down on their steps and completes the steps that are done (which releases
-- dependents, completes runs and starts ready steps). The tasks' messages left the queue when
-- they were claimed (and a task claimed at release never had one).
-- Returns the number of tasks completed by this call.
-- Locks: runs, step_tasks, step_states (see the lock order in README.md).
create or replace function pgflow.complete_tasks(
  p_run_ids uuid[],
  p_step_slugs text[],
  p_task_indexes integer[],
  p_attempts integer[],
  p_outputs jsonb[]
)
returns integer
language plpgsql
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
declare
  v_completed integer;
begin
  v_completed := (pgflow.store_completions(p_run_ids, p_step_slugs, p_task_indexes, p_attempts,
                                           p_outputs)).completed;
  -- Their slots of capped queues are free: a worker may claim with them.
  if v_completed > 0 and exists (select 1 from pgflow.queue_caps) then
    perform pgflow.wake_capped_queues(p_run_ids, p_step_slugs);
  end if;
  return v_completed;
end;
$$;

-- What complete_tasks and complete_and_claim_tasks share: stores the completions and, with a
-- claimer, claims for it tasks the completions release (see enqueue_step_tasks). Returns how
-- many tasks it completed and the row addresses of the tasks it claimed (null when none).
create or replace function pgflow.store_completions(
  p_run_ids uuid[],
  p_step_slugs text[],
  p_task_indexes integer[],
  p_attempts integer[],
  p_outputs jsonb[],
  p_claimer pgflow.task_claimer default null,
  out completed integer,
  out claimed tid[]
)
language plpgsql
as $$
declare
  v_runs uuid[];
  v_steps text[];
  v_flows text[];
  v_outputs jsonb[];
  v_parent_runs uuid[];
  v_parent_steps text[];
  v_capped tid[];
  v_released tid[];
begin
  if cardinality(p_run_ids) is distinct from cardinality(p_step_slugs)
     or cardinality(p_run_ids) is distinct from cardinality(p_task_indexes)
     or cardinality(p_run_ids) is distinct from cardinality(p_attempts)
     or cardinality(p_run_ids) is distinct from cardinality(p_outputs) then
    raise exception 'complete_tasks: run ids, step slugs, task indexes, attempts and outputs '
      'must be arrays of equal length' using errcode = 'PF005';
  end if;

  perform pgflow.lock_runs(p_run_ids);

  with input as (
    select * from unnest(p_run_ids, p_step_slugs, p_task_indexes, p_attempts, p_outputs)
      as i(run_id, step_slug, task_index, attempt, output)
  ),
  locked as (
    select t.ctid as row_ctid, t.status, input.output
    from pgflow.step_tasks t
    join input on input.run_id = t.run_id and input.step_slug = t.step_slug
      and input.task_index = t.task_index and input.attempt = t.attempts_count
    order by t.run_id, t.step_slug, t.task_index
    for no key update of t
  ),
  completed as (
    update pgflow.step_tasks t
    set status = 'completed',
        completed_at = pgflow.clock(),
        output = coalesce(locked.output, 'null'::jsonb)
    from locked
    where t.ctid = locked.row_ctid and locked.status = 'started'
    returning t.run_id, t.step_slug, t.output
  )
  select array_agg(c.run_id), array_agg(c.step_slug), array_agg(c.output), count(*)
  into v_runs, v_steps, v_outputs, completed
  from completed c;

  if v_runs is null then
    return;
  end if;
  -- The slots of capped tasks that completed go to the next held tasks (claimed for the
  -- claimer, as many as it offers slots; the rest of its slots go to what the completions
  -- release below).
  if exists (select 1 from pgflow.cap_slots) then
    v_capped := pgflow.release_after_ends(p_run_ids, p_step_slugs, p_task_indexes, p_claimer);
    if v_capped is not null then
      p_claimer.slots := p_claimer.slots[cardinality(v_capped) + 1:];
      claimed := v_capped;
    end if;
  end if;

  with per_step as (
    -- A single step has one task: the output completed here is the step's output.
    select c.run_id, c.step_slug, count(*)::integer as n, (array_agg(c.output))[1] as output
    from unnest(v_runs, v_steps, v_outputs) as c(run_id, step_slug, output)
    group by c.run_id, c.step_slug
  ),
  locked as (
    select ss.ctid as row_ctid, ss.status, per_step.n, per_step.output
    from pgflow.step_states ss
    join per_step on per_step.run_id = ss.run_id and per_step.step_slug = ss.step_slug
    order by ss.run_id, ss.step_slug
    for no key update of ss
  ),
  counted as (
    -- Counts the tasks down and, in the same write, completes the steps with none left (a
    -- step that runs a subflow waits for its children instead: see start_children).
    update pgflow.step_states ss
    set remaining_tasks = ss.remaining_tasks - locked.n,
        status = case when ss.remaining_tasks <> locked.n then ss.status
                      when s.subflow is not null then 'waiting'
                      else 'completed' end,
        completed_at = case when ss.remaining_tasks = locked.n and s.subflow is null
                            then pgflow.clock() end,
        output = case when ss.remaining_tasks <> locked.n or s.subflow is not null then null
                      when s.step_type = 'single' then locked.output
                      else pgflow.step_output(ss.run_id, ss.step_slug, s.step_type) end
    from locked, pgflow.steps s
    where ss.ctid = locked.row_ctid and locked.status = 'started'
      and s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    returning ss.run_id, ss.step_slug, ss.flow_slug, ss.status
  )
  select array_agg(run_id) filter (where status = 'completed'),
         array_agg(step_slug) filter (where status = 'completed'),
         array_agg(flow_slug) filter (where status = 'completed'),
         array_agg(run_id) filter (where status = 'waiting'),
         array_agg(step_slug) filter (where status = 'waiting')
  into v_runs, v_steps, v_flows, v_parent_runs, v_parent_steps
  from counted;

  if v_parent_runs is not null then
    perform pgflow.start_children(v_parent_runs, v_parent_steps);
  end if;
  if v_runs is not null then
    v_released := pgflow.finish_completed_steps(v_runs, v_steps, v_flows, p_claimer);
    if v_released is not null then
      claimed := coalesce(claimed, array[]::tid[]) || v_released;
    end if;
  end if;
end;
$$;

-- complete_and_claim_tasks: complete_tasks for workers of `p_queue_name` that have free
-- slots, one element of p_slots per slot (the worker's id; a process's workers on one queue
-- share their completion calls). Of the tasks the completions release, those visible at once
-- on the queue and of a (flow, step) pair the workers run (p_flow_slugs[i], p_step_slugs[i])
-- are claimed in the same transaction, one per slot, the n-th by the n-th slot's worker:
-- created 'started' in their first attempt, without a PGMQ message, so no send, no claim and
-- no commit of their own. The rest are queued as complete_tasks queues them. A chain's next
-- step runs on a worker of the process that ran the step before it. On a paused queue, or a
-- capped one (queue_caps), nothing is claimed; a completion on a capped queue wakes its idle
-- workers, one of which claims what the freed slots allow.
-- Returns one row per claimed task (its worker, and the task as claims return it, see
-- started_task_rows), each with `completed`, the number of tasks completed by this call; when
-- none was claimed, one row with only `completed` set.
-- Locks: as complete_tasks.
create or replace function pgflow.complete_and_claim_tasks(
  p_run_ids uuid[],
  p_step_slugs text[],
  p_task_indexes integer[],
  p_attempts integer[],
  p_outputs jsonb[],
  p_queue_name text,
  p_flow_slugs text[],
  p_supported_step_slugs text[],
  p_slots uuid[]
)
returns table (
  completed integer,
  worker_id uuid,
  task pgflow.claimed_task
)
language plpgsql
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
declare
  v_stored record;
  v_paused boolean;
  v_capped boolean;
begin
  perform pgflow.check_supported_pairs('complete_and_claim_tasks', p_flow_slugs,
                                      p_supported_step_slugs);

  -- On a paused queue the completions claim nothing: what they release is queued as usual;
  -- nor do they claim tasks of paused flows (those are parked when a worker meets them).
  if exists (select 1 from pgflow.paused_flows) then
    select coalesce(array_agg(p.flow_slug order by p.n), array[]::text[]),
           coalesce(array_agg(p.step_slug order by p.n), array[]::text[])
    into p_flow_slugs, p_supported_step_slugs
    from unnest(p_flow_slugs, p_supported_step_slugs) with ordinality as p(flow_slug, step_slug, n)
    where not exists (select 1 from pgflow.paused_flows f where f.flow_slug = p.flow_slug);
  end if;
  -- Nor on a capped queue: there every start takes a slot at a claim. Its freed slots wake
  -- the queue's idle workers instead (see wake_capped_queues).
  select exists (select 1 from pgflow.paused_queues q where q.queue_name = p_queue_name),
         exists (select 1 from pgflow.queue_caps c where c.queue_name = p_queue_name)
  into v_paused, v_capped;
  v_stored := pgflow.store_completions(
    p_run_ids, p_step_slugs, p_task_indexes, p_attempts, p_outputs,
    case when not (v_paused or v_capped)
         then (p_queue_name, p_flow_slugs, p_supported_step_slugs, p_slots)::pgflow.task_claimer
    end);
  if v_capped and v_stored.completed > 0 then
    perform pgflow.notify_queue(p_queue_name);
  end if;

  if v_stored.claimed is null then
    return query select coalesce(v_stored.completed, 0), null::uuid, null::pgflow.claimed_task;
    return;
  end if;

  return query
  select coalesce(v_stored.completed, 0), t.last_worker_id, r
  from pgflow.started_task_rows(v_stored.claimed) r
  join pgflow.step_tasks t
    on t.run_id = r.run_id and t.step_slug = r.step_slug and t.task_index = r.task_index;
end;
$$;

-- Fails tasks for good: the tasks become 'failed', and a queued one's message is archived (a
-- started one's left the queue when it was claimed). Then, by the step's `when_exhausted`:
-- `fail` fails the step and its run (the run's other live tasks are failed too, the queued
-- ones' messages archived); `skip` and `skip_cascade` skip the step
-- (reason handler_failed, the task's error kept on the step) and, for `skip_cascade`,
-- everything downstream of it, and the run goes on (see skip_steps).
-- Expects the caller to hold the runs' and the tasks' locks.
create or replace function pgflow.fail_tasks_permanently(
  p_run_ids uuid[],
  p_step_slugs text[],
  p_task_indexes integer[],
  p_error_messages text[]
)
returns void
language plpgsql
as $$
declare
  v_queues text[];
  v_messages bigint[];
  v_runs uuid[];
  v_skip_runs uuid[];
  v_skip_steps text[];
  v_skip_errors text[];
  v_skip_cascade boolean[];
begin
  with failed as (
    update pgflow.step_tasks t
    set status = 'failed', failed_at = pgflow.clock(), error_message = f.error_message
    from unnest(p_run_ids, p_step_slugs, p_task_indexes, p_error_messages)
      as f(run_id, step_slug, task_index, error_message)
    where t.run_id = f.run_id and t.step_slug = f.step_slug and t.task_index = f.task_index
      and t.status in ('queued', 'started')
    returning pgflow.lane_name(t.queue_name, t.priority) as lane_name, t.message_id
  )
  select array_agg(lane_name), array_agg(message_id) into v_queues, v_messages from failed;

  if v_queues is not null then
    perform pgflow.archive_messages(v_queues, v_messages);
  end if;

  -- Steps that skip rather than fail, skipped first: the steps that fail then fail their runs
  -- (a run with a step of each fails).
  with failing as (
    select distinct on (f.run_id, f.step_slug) f.run_id, f.step_slug, f.error_message,
           s.when_exhausted
    from unnest(p_run_ids, p_step_slugs, p_task_indexes, p_error_messages)
      as f(run_id, step_slug, task_index, error_message)
    join pgflow.runs r on r.run_id = f.run_id
    join pgflow.steps s on s.flow_slug = r.flow_slug and s.step_slug = f.step_slug
    order by f.run_id, f.step_slug, f.task_index
  )
  select array_agg(run_id), array_agg(step_slug), array_agg(error_message),
         array_agg(when_exhausted = 'skip_cascade')
  into v_skip_runs, v_skip_steps, v_skip_errors, v_skip_cascade
  from failing
  where when_exhausted <> 'fail';

  if v_skip_runs is not null then
    perform pgflow.skip_steps(v_skip_runs, v_skip_steps,
                              array_fill('handler_failed'::text, array[cardinality(v_skip_runs)]),
                              v_skip_cascade, v_skip_errors);
  end if;

  with failing as (
    select distinct on (f.run_id, f.step_slug) f.run_id, f.step_slug, f.error_message
    from unnest(p_run_ids, p_step_slugs, p_task_indexes, p_error_messages)
      as f(run_id, step_slug, task_index, error_message)
    order by f.run_id, f.step_slug, f.task_index
  ),
  locked as (
    select ss.ctid as row_ctid, failing.error_message
    from pgflow.step_states ss
    join failing on failing.run_id = ss.run_id and failing.step_slug = ss.step_slug
    join pgflow.runs r on r.run_id = ss.run_id and r.status = 'started'
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    where ss.status = 'started' and s.when_exhausted = 'fail'
    order by ss.run_id, ss.step_slug
    for no key update of ss
  ),
  failed as (
    update pgflow.step_states ss
    set status = 'failed', failed_at = pgflow.clock(), error_message = locked.error_message
    from locked
    where ss.ctid = locked.row_ctid
    returning ss.run_id, ss.step_slug
  )
  select array_agg(distinct run_id) into v_runs from failed;

  if v_runs is not null then
    perform pgflow.fail_runs(v_runs, 'run failed because another step failed');
  end if;
end;
$$;

-- fail_tasks: records failed attempts of started tasks (batched; arrays of equal length;
-- matched like complete_tasks, so late or duplicate reports change nothing).
-- A task with attempts left goes back to 'queued' with a new message that becomes visible
-- after base_delay * 2^(attempt - 1) seconds (exponential backoff; the first retry waits
-- base_delay), at most max_delay seconds when the step has a cap, and shortened by a random
-- part of up to jitter percent. A task out of attempts, or whose attempt failed permanently
-- (p_permanent[i]; null or absent means not), fails for good, with its step and run (see
-- fail_tasks_permanently). Tasks of runs that already failed are failed without retry.
-- A snoozed attempt (p_snooze_seconds[i] not null: the handler asked to run again later) spends
-- no attempt: the task goes back to 'queued' with a new message visible after exactly that
-- many seconds (no backoff, no jitter), its attempts_base grows by one so that the attempt does
-- not count against max_attempts, and its history row says 'snoozed' with the handler's
-- reason. A snooze of a task whose run has ended is discarded like any late report.
-- Returns one row per input, in input order: whether the task will be retried and after how
-- many seconds; for a task that will not, whether its step was skipped (when_exhausted) rather
-- than its run failed; and whether the report was discarded (late, duplicate, or its run had
-- ended: nothing changed).
-- Locks: runs, step_tasks, then as fail_tasks_permanently.
create or replace function pgflow.fail_tasks(
  p_run_ids uuid[],
  p_step_slugs text[],
  p_task_indexes integer[],
  p_attempts integer[],
  p_error_messages text[],
  p_permanent boolean[] default null,
  p_snooze_seconds integer[] default null
)
returns table (
  run_id uuid,
  step_slug text,
  task_index integer,
  will_retry boolean,
  retry_delay_seconds integer,
  step_skipped boolean,
  discarded boolean
)
language plpgsql
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
#variable_conflict use_column
declare
  v_runs uuid[];
  v_steps text[];
  v_indexes integer[];
  v_errors text[];
  v_retry boolean[];
  v_delays integer[];
  v_outcomes text[];
begin
  if cardinality(p_run_ids) is distinct from cardinality(p_step_slugs)
     or cardinality(p_run_ids) is distinct from cardinality(p_task_indexes)
     or cardinality(p_run_ids) is distinct from cardinality(p_attempts)
     or cardinality(p_run_ids) is distinct from cardinality(p_error_messages)
     or (p_permanent is not null
         and cardinality(p_run_ids) is distinct from cardinality(p_permanent))
     or (p_snooze_seconds is not null
         and cardinality(p_run_ids) is distinct from cardinality(p_snooze_seconds)) then
    raise exception 'fail_tasks: run ids, step slugs, task indexes, attempts, error messages, '
      'permanent flags and snoozes must be arrays of equal length' using errcode = 'PF005';
  end if;
  if exists (select 1 from unnest(p_snooze_seconds) s(seconds) where s.seconds < 0) then
    raise exception 'fail_tasks: a snooze is zero or more seconds' using errcode = 'PF005';
  end if;
  p_permanent := coalesce(p_permanent, array_fill(false, array[cardinality(p_run_ids)]));
  p_snooze_seconds := coalesce(p_snooze_seconds,
                               array_fill(null::integer, array[cardinality(p_run_ids)]));

  perform pgflow.lock_runs(p_run_ids);

  with failing as (
    select t.run_id, t.step_slug, t.task_index, t.status,
           pgflow.bounded_error(coalesce(i.error_message, 'unknown error')) as error_message,
           r.status = 'started'
             and (i.snooze is not null
                  or (t.attempts_count - t.attempts_base < o.max_attempts
                      and not coalesce(i.permanent, false))) as will_retry,
           case when i.snooze is not null then 'snoozed'
                when coalesce(i.permanent, false) then 'permanent'
                else 'failed' end as outcome,
           case when i.snooze is not null then 0 else o.jitter end as jitter,
           case when i.snooze is not null then i.snooze
                else least(o.base_delay::bigint
                             * power(2, least(t.attempts_count - t.attempts_base - 1, 40))::bigint,
                           coalesce(o.max_delay, 2147483647))::integer
           end as backoff
    from pgflow.step_tasks t
    join unnest(p_run_ids, p_step_slugs, p_task_indexes, p_attempts, p_error_messages,
                p_permanent, p_snooze_seconds)
      as i(run_id, step_slug, task_index, attempt, error_message, permanent, snooze)
      on i.run_id = t.run_id and i.step_slug = t.step_slug and i.task_index = t.task_index
        and i.attempt = t.attempts_count
    join pgflow.runs r on r.run_id = t.run_id
    join pgflow.step_options o on o.flow_slug = t.flow_slug and o.step_slug = t.step_slug
    order by t.run_id, t.step_slug, t.task_index
    for no key update of t
  )
  select array_agg(f.run_id), array_agg(f.step_slug), array_agg(f.task_index),
         array_agg(f.error_message), array_agg(f.will_retry), array_agg(f.outcome),
         array_agg(f.backoff - floor(f.backoff * f.jitter / 100.0 * random())::integer)
  into v_runs, v_steps, v_indexes, v_errors, v_retry, v_outcomes, v_delays
  from failing f
  where f.status = 'started';

  -- The attempt's history row, taken from the task before it is requeued or failed.
  insert into pgflow.task_attempts
    (run_id, step_slug, task_index, attempt, outcome, worker_id, started_at, error_message)
  select t.run_id, t.step_slug, t.task_index, t.attempts_count, f.outcome, t.last_worker_id,
         t.started_at, f.error_message
  from unnest(v_runs, v_steps, v_indexes, v_errors, v_outcomes)
    as f(run_id, step_slug, task_index, error_message, outcome)
  join pgflow.step_tasks t
    on t.run_id = f.run_id and t.step_slug = f.step_slug and t.task_index = f.task_index
  on conflict do nothing;

  -- Retries: back to queued, with a new message visible after the backoff (a snooze: after its
  -- own delay, and the attempt given back).
  if true = any(v_retry) then
    update pgflow.step_tasks t
    set status = 'queued', error_message = f.error_message,
        attempts_base = t.attempts_base + case when f.outcome = 'snoozed' then 1 else 0 end
    from unnest(v_runs, v_steps, v_indexes, v_errors, v_retry, v_outcomes)
      as f(run_id, step_slug, task_index, error_message, will_retry, outcome)
    where f.will_retry
      and t.run_id = f.run_id and t.step_slug = f.step_slug and t.task_index = f.task_index;

    perform pgflow.send_task_messages(array_agg(f.run_id), array_agg(f.step_slug),
                                      array_agg(f.task_index), array_agg(f.delay))
    from unnest(v_runs, v_steps, v_indexes, v_delays, v_retry)
      as f(run_id, step_slug, task_index, delay, will_retry)
    where f.will_retry;
  end if;

  -- Out of attempts, or failed permanently: fail for good (and give up a capped task's slot).
  if false = any(v_retry) then
    perform pgflow.fail_tasks_permanently(
      array_agg(f.run_id), array_agg(f.step_slug), array_agg(f.task_index),
      array_agg(f.error_message))
    from unnest(v_runs, v_steps, v_indexes, v_errors, v_retry)
      as f(run_id, step_slug, task_index, error_message, will_retry)
    where not f.will_retry;
    if exists (select 1 from pgflow.cap_slots) then
      perform pgflow.release_after_ends(v_runs, v_steps, v_indexes);
    end if;
  end if;
  -- The attempts' slots of capped queues are free: a worker may claim with them.
  if v_runs is not null and exists (select 1 from pgflow.queue_caps) then
    perform pgflow.wake_capped_queues(v_runs, v_steps);
  end if;

  return query
  select i.run_id, i.step_slug, i.task_index, coalesce(f.will_retry, false),
         case when f.will_retry then f.delay end,
         not f.will_retry and coalesce(ss.status = 'skipped', false),
         f.run_id is null
  from unnest(p_run_ids, p_step_slugs, p_task_indexes) with ordinality
    as i(run_id, step_slug, task_index, position)
  left join unnest(v_runs, v_steps, v_indexes, v_retry, v_delays)
    as f(run_id, step_slug, task_index, will_retry, delay)
    on f.run_id = i.run_id and f.step_slug = i.step_slug and f.task_index = i.task_index
  left join pgflow.step_states ss
    on f.run_id is not null and ss.run_id = f.run_id and ss.step_slug = f.step_slug
  order by i.position;
end;
$$;

-- stored_completions: how many of the given attempts' completions are stored, i.e. their task
-- is completed by that very attempt. A worker whose completion call was retried (the first
-- try's reply lost with the connection) asks this to tell completions that try committed
-- apart from late ones.
-- Locks: none (reads only).
create or replace function pgflow.stored_completions(
  p_run_ids uuid[],
  p_step_slugs text[],
  p_task_indexes integer[],
  p_attempts integer[]
)
returns bigint
language sql
stable
as $$
  select count(*)
  from unnest(p_run_ids, p_step_slugs, p_task_indexes, p_attempts)
    as k(run_id, step_slug, task_index, attempt)
  join pgflow.step_tasks t
    on t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
  where t.status = 'completed' and t.attempts_count = k.attempt
$$;
