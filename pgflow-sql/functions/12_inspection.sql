-- Read-only views of the engine for operators' tools, as functions: a role granted them reads
-- what they show without holding any privilege on PGMQ's own tables.

-- queue_overview: every PGMQ queue of the database with its depth, the age of its oldest
-- message and the tasks in flight on it (claimed, not finished). No locks.
create or replace function pgflow.queue_overview()
returns table (queue_name text, depth bigint, oldest_message_age_seconds integer,
               in_flight_tasks bigint)
language sql
stable
as $$
  select m.queue_name, m.queue_length, m.oldest_msg_age_sec,
         (select count(*) from pgflow.step_tasks t
          where t.queue_name = m.queue_name and t.status = 'started')
  from pgmq.metrics_all() m
  order by m.queue_name
$$;
