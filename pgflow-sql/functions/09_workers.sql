-- Workers: registering, heartbeats, stopping and deprecating worker instances, and the check
-- that the workers of a queue carry every flow and step routed to it.

-- worker_is_live: the one liveness rule. A worker is live when it has not stopped and was heard
-- from (a heartbeat) within the last 30 seconds; a worker beats every 5 s by default, so one
-- silent this long was killed, hung or cut off from the database. Every reader of liveness uses
-- this: the queue overview, rollouts (which functions serve a queue, which workers are still
-- running), deprecation counts, delete_flow's refusal, and the `pgflow` command's and the
-- dashboard's worker lists (pgflow_runtime's admin::inspect). A stale worker (not stopped, not
-- live) is declared lost later by mark_lost_workers. (A SQL function Postgres inlines.)
-- Locks: none (a rule over the values it is given).
create or replace function pgflow.worker_is_live(
  p_stopped_at timestamptz,
  p_last_heartbeat_at timestamptz
)
returns boolean
language sql
stable
as $$
  select p_stopped_at is null and p_last_heartbeat_at > pgflow.clock() - interval '30 seconds'
$$;

-- register_worker: records a started worker (and its function, enabled, if new), with its
-- heartbeat interval in milliseconds (null: unknown, taken as 5 s). Returns false,
-- registering nothing, when the function is disabled (a rollout is in progress): the worker
-- must wait until it is enabled. Locks the function row (FOR SHARE) so that a concurrent
-- rollout either sees this worker (and deprecates it) or this call sees the function disabled.
-- Locks: its worker_functions row (inserted when new, then for share), then inserts its
-- workers row (see the lock order in README.md).
create or replace function pgflow.register_worker(
  p_worker_id uuid,
  p_queue_name text,
  p_function_name text,
  p_flow_slugs text[],
  p_heartbeat_interval_ms integer default null
)
returns boolean
language plpgsql
as $$
declare
  v_enabled boolean;
begin
  insert into pgflow.worker_functions (function_name) values (p_function_name)
  on conflict (function_name) do nothing;
  select enabled into v_enabled
  from pgflow.worker_functions
  where function_name = p_function_name
  for share;
  if not v_enabled then
    return false;
  end if;
  insert into pgflow.workers (worker_id, queue_name, function_name, flow_slugs,
                              heartbeat_interval_ms)
  values (p_worker_id, p_queue_name, p_function_name, p_flow_slugs, p_heartbeat_interval_ms);
  return true;
end;
$$;

-- request_wakeups: from now until withdraw_wakeups (or the end of this session), transactions
-- that make tasks of the queue visible notify `pgflow.<queue_name>` (see notify_queue). A
-- worker process's listener calls it on its own session when every worker it serves on the
-- queue is idle, then has one worker look once more: a transaction that probed just before
-- this call may still commit without notifying, and that look (and one a little later) finds
-- its tasks. Holds the queue's wake-up key shared, at session level: the request dies with the
-- session, so a crashed worker leaves nothing behind. Call it at most once per session and
-- queue before withdrawing it.
-- Locks: advisory (namespace, wakeup_key(queue)), a session lock, shared, held until
-- withdraw_wakeups or the session ends; it waits only while a notify_queue probe holds
-- the key.
create or replace function pgflow.request_wakeups(p_queue_name text)
returns void
language plpgsql
as $$
begin
  perform pg_advisory_lock_shared(pgflow.lock_namespace(), pgflow.wakeup_key(p_queue_name));
end;
$$;

-- withdraw_wakeups: ends this session's request_wakeups on the queue (a worker of it is
-- claiming again and will find new tasks without being woken). False when the session held
-- no request.
-- Locks: none; releases one shared session hold of advisory (namespace, wakeup_key(queue)).
create or replace function pgflow.withdraw_wakeups(p_queue_name text)
returns boolean
language plpgsql
as $$
begin
  return pg_advisory_unlock_shared(pgflow.lock_namespace(), pgflow.wakeup_key(p_queue_name));
end;
$$;

-- function_enabled: whether workers of the function may start (true for an unknown function).
-- Locks: none (reads only).
create or replace function pgflow.function_enabled(p_function_name text)
returns boolean
language sql
stable
as $$
  select coalesce(
    (select enabled from pgflow.worker_functions where function_name = p_function_name), true)
$$;

-- heartbeat: records that the worker is alive. Returns whether it has been deprecated (it
-- should stop polling, finish in-flight tasks and stop), and which of p_running_runs (the runs
-- it is running handlers of) are no longer going: cancelled or failed, so their handlers'
-- results would be discarded and the worker cancels them. No row when the worker is unknown.
-- Locks: its workers row (update); reads the runs without locks.
create or replace function pgflow.heartbeat(p_worker_id uuid, p_running_runs uuid[] default null)
returns table (deprecated boolean, ended_runs uuid[])
language sql
as $$
  with beat as (
    update pgflow.workers
    set last_heartbeat_at = pgflow.clock()
    where worker_id = p_worker_id
    returning deprecated_at is not null as deprecated
  )
  select beat.deprecated,
         coalesce((select array_agg(r.run_id order by r.run_id) from pgflow.runs r
                   where r.run_id = any(p_running_runs) and r.status <> 'started'),
                  array[]::uuid[])
  from beat
$$;

-- stop_worker: records that the worker has stopped.
-- Locks: its workers row (update).
create or replace function pgflow.stop_worker(p_worker_id uuid)
returns void
language sql
as $$
  update pgflow.workers
  set stopped_at = pgflow.clock(),
      deprecated_at = coalesce(deprecated_at, pgflow.clock())
  where worker_id = p_worker_id and stopped_at is null
$$;

-- mark_lost_workers: declares lost every worker that has not stopped and has been silent for
-- ten of its heartbeat intervals (5 s when unrecorded), and at least 60 s: it is stopped and
-- deprecated as of now, with the time it was declared lost. Its started tasks are recovered
-- by requeue_stalled_tasks once their timeout passes, as before. Returns the workers marked.
-- Locks: the workers rows of the workers it marks lost (update).
create or replace function pgflow.mark_lost_workers()
returns table (worker_id uuid, queue_name text, function_name text, last_heartbeat_at timestamptz)
language sql
as $$
  update pgflow.workers w
  set lost_at = pgflow.clock(),
      stopped_at = pgflow.clock(),
      deprecated_at = coalesce(w.deprecated_at, pgflow.clock())
  where w.stopped_at is null
    and w.last_heartbeat_at < pgflow.clock() - make_interval(
          secs => greatest(60, 10 * coalesce(w.heartbeat_interval_ms, 5000) / 1000.0))
  returning w.worker_id, w.queue_name, w.function_name, w.last_heartbeat_at
$$;

-- deprecate_workers: asks every worker of a function that has not stopped to drain and stop
-- (a stale one, should it come back, drains too); returns how many of them are live
-- (worker_is_live), the ones that will act on it now.
-- Locks: the function's not-stopped workers rows (update); not its worker_functions row.
create or replace function pgflow.deprecate_workers(p_function_name text)
returns integer
language sql
as $$
  with deprecated as (
    update pgflow.workers
    set deprecated_at = pgflow.clock()
    where function_name = p_function_name and stopped_at is null and deprecated_at is null
    returning pgflow.worker_is_live(stopped_at, last_heartbeat_at) as live
  )
  select (count(*) filter (where live))::integer from deprecated
$$;

-- queue_coverage_gaps: the (flow_slug, step_slug) pairs that work on `p_queue_name` needs but
-- the supported pairs (p_flow_slugs[i], p_step_slugs[i]) lack, with what needs them:
--   active_alias   the alias whose active target the pair's flow is, when it routes the step
--                  here (new runs will put tasks on this queue; it never drains), else null,
--   queued_tasks   executable tasks of the pair on this queue,
--   started_tasks  recoverable tasks (they may stall and be requeued),
--   started_runs   started runs whose step of this pair has not completed yet and routes here
--                  (draining versions: the step may still put tasks on this queue), runs that
--                  have not begun yet (a debounce's window, a singleton's turn) included.
-- Ordered by flow and step.
-- Locks: none (reads only).
create or replace function pgflow.queue_coverage_gaps(
  p_queue_name text,
  p_flow_slugs text[],
  p_step_slugs text[]
)
returns table (flow_slug text, step_slug text, active_alias text, queued_tasks bigint,
               started_tasks bigint, started_runs bigint)
language sql
stable
as $$
  with supported as (
    select * from unnest(p_flow_slugs, p_step_slugs) as p(flow_slug, step_slug)
  ),
  active_pairs as (
    select s.flow_slug, s.step_slug, a.alias
    from pgflow.aliases a
    join pgflow.steps s on s.flow_slug = a.flow_slug
    where s.queue_name = p_queue_name
  ),
  live_tasks as (
    select t.flow_slug, t.step_slug,
           count(*) filter (where t.status = 'queued') as queued_tasks,
           count(*) filter (where t.status = 'started') as started_tasks
    from pgflow.step_tasks t
    where t.queue_name = p_queue_name and t.status in ('queued', 'started')
    group by t.flow_slug, t.step_slug
  ),
  pending_steps as (
    select p.flow_slug, p.step_slug, sum(p.n)::bigint as started_runs
    from (
      select ss.flow_slug, ss.step_slug, count(*) as n
      from pgflow.runs r
      join pgflow.step_states ss on ss.run_id = r.run_id
      join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
      where r.status = 'started'
        and ss.status in ('created', 'waiting', 'started')
        and s.queue_name = p_queue_name
      group by ss.flow_slug, ss.step_slug
      union all
      -- Runs not begun yet: each of their steps routed here will run.
      select s.flow_slug, s.step_slug, count(*)
      from (select d.run_id from pgflow.deferred_runs d
            union all
            select w.run_id from pgflow.singleton_waits w) n
      join pgflow.runs r on r.run_id = n.run_id and r.status = 'started'
      join pgflow.steps s on s.flow_slug = r.flow_slug
      where s.queue_name = p_queue_name
      group by s.flow_slug, s.step_slug
    ) p
    group by p.flow_slug, p.step_slug
  ),
  pairs as (
    select flow_slug, step_slug from active_pairs
    union select flow_slug, step_slug from live_tasks
    union select flow_slug, step_slug from pending_steps
  )
  select p.flow_slug, p.step_slug,
         (select a.alias from active_pairs a
          where a.flow_slug = p.flow_slug and a.step_slug = p.step_slug),
         coalesce(l.queued_tasks, 0), coalesce(l.started_tasks, 0), coalesce(r.started_runs, 0)
  from pairs p
  left join live_tasks l on l.flow_slug = p.flow_slug and l.step_slug = p.step_slug
  left join pending_steps r on r.flow_slug = p.flow_slug and r.step_slug = p.step_slug
  where not exists (select 1 from supported s
                    where s.flow_slug = p.flow_slug and s.step_slug = p.step_slug)
  order by p.flow_slug, p.step_slug
$$;
