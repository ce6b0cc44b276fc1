-- Read-only views of the engine for operators' tools, as functions: a role granted them reads
-- what they show without holding any privilege on PGMQ's own tables.

-- queue_overview: every PGMQ queue of the database with its depth, the age of its oldest
-- message, the messages ever sent to it (PGMQ's counter: read it twice for a rate), the tasks
-- in flight on it (claimed, not finished), the live workers serving it (worker_is_live;
-- draining ones count), whether it is paused (pause_queue) and its cap of tasks running at once
-- (set_queue_concurrency; null: none). A queue's priority lanes (queue_lanes) are counted in
-- it, not listed.
-- Locks: none (reads only; PGMQ's metrics read the queue tables without locks).
create or replace function pgflow.queue_overview()
returns table (queue_name text, depth bigint, oldest_message_age_seconds integer,
               total_messages bigint, in_flight_tasks bigint, live_workers bigint,
               paused boolean, concurrency integer)
language sql
stable
-- The plan's estimate (PGMQ's metrics function, a subplan per column) passes jit_above_cost,
-- and compiling it took 35-75 ms of a query that runs in 1-3 ms (BENCHMARKS.md, Dashboard pages).
set jit = off
as $$
  select q.queue_name, q.depth, q.oldest_age, q.total,
         (select count(*) from pgflow.step_tasks t
          where t.queue_name = q.queue_name and t.status = 'started'),
         (select count(*) from pgflow.workers w
          where w.queue_name = q.queue_name
            and pgflow.worker_is_live(w.stopped_at, w.last_heartbeat_at)),
         exists (select 1 from pgflow.paused_queues p where p.queue_name = q.queue_name),
         (select c.concurrency from pgflow.queue_caps c where c.queue_name = q.queue_name)
  from (select coalesce(l.queue_name, m.queue_name) as queue_name,
               sum(m.queue_length)::bigint as depth,
               max(m.oldest_msg_age_sec)::integer as oldest_age,
               sum(m.total_messages)::bigint as total
        from pgmq.metrics_all() m
        left join pgflow.queue_lanes l on pgflow.lane_name(l.queue_name, l.priority) = m.queue_name
        group by coalesce(l.queue_name, m.queue_name)) q
  order by q.queue_name
$$;

-- run_step_states: each step of a run as readers see it (in the flow's step order): status,
-- why it was skipped, its queue, how many tasks it has and has left, how many of them a worker
-- holds now, the highest attempt of any of its tasks, its error (or else the first error of one
-- of its tasks), when it started and ended, its output and the output's size; of a live or an
-- archived run. Clients read it (see pgflow_runtime's `RunHandle::steps` and `pgflow run`).
-- Locks: none (reads only).
create or replace function pgflow.run_step_states(p_run_id uuid)
returns table (step_slug text, status text, skip_reason text, queue_name text, tasks integer,
               remaining_tasks integer, max_attempt integer, error text,
               started_at timestamptz, ended_at timestamptz, output jsonb, output_bytes integer,
               running_tasks integer)
language sql
stable
as $$
  select ss.step_slug, ss.status, ss.skip_reason, s.queue_name, ss.initial_tasks,
         ss.remaining_tasks,
         (select max(t.attempts_count) from pgflow.all_step_tasks t
          where t.run_id = ss.run_id and t.step_slug = ss.step_slug),
         coalesce(ss.error_message,
                  (select t.error_message from pgflow.all_step_tasks t
                   where t.run_id = ss.run_id and t.step_slug = ss.step_slug
                     and t.error_message is not null
                   order by t.task_index limit 1)),
         ss.started_at,
         coalesce(ss.completed_at, ss.failed_at, ss.skipped_at, ss.cancelled_at),
         ss.output, octet_length(ss.output::text),
         (select count(*)::integer from pgflow.all_step_tasks t
          where t.run_id = ss.run_id and t.step_slug = ss.step_slug and t.status = 'started')
  from pgflow.all_step_states ss
  join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
  where ss.run_id = p_run_id
  order by s.step_index
$$;
