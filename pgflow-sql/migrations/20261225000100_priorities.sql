-- Priorities (issue 38): a run may be started with a priority from 1 (highest) to 5 (lowest);
-- 3, the default, is stored as null on the run. Its tasks carry it (3 for the default). A task's PGMQ message goes to its
-- queue's lane for that priority: the queue itself for 3, else a PGMQ queue of its own named
-- `<queue>__p<priority>` (see pgflow.lane_name), created the first time a start needs it and
-- listed in queue_lanes. A worker of the queue claims from the lanes in priority order (see
-- read_and_start_tasks), so the users' "one worker polls one queue" stays true while a ready
-- task of higher priority is claimed before every waiting task of lower priority. A message
-- that waited longer than its queue's aging limit is claimed first, whatever its lane: no
-- priority starves another for longer than that.
-- No CHECK on the two hot tables (every write re-checks each constraint; see the baseline's
-- note on `*_row_valid`): start_flows refuses a priority out of range, and tasks copy their
-- run's.
alter table pgflow.runs add column priority smallint;
alter table pgflow.step_tasks add column priority smallint not null default 3;
-- A key's held tasks are released highest priority first, then in the order they were held.
alter table pgflow.held_tasks add column priority smallint not null default 3;
create index held_tasks_release_order_idx
  on pgflow.held_tasks (flow_slug, step_slug, cap_key, priority, held_seq);
alter type pgflow.started_step add attribute priority smallint;

-- A message id is unique in its PGMQ queue, and each lane is a queue: the same id may stand
-- for a queued task in each lane of a queue, so the priority joins the key of queued tasks by
-- message.
drop index pgflow.step_tasks_queued_message_idx;
create unique index step_tasks_queued_message_idx
  on pgflow.step_tasks (message_id, queue_name, priority)
  where status = 'queued';

-- The lanes that exist (the queue itself, priority 3, is never listed), and how long a message
-- may wait in a queue's lanes before it is claimed ahead of every priority.
create table pgflow.queue_lanes (
  queue_name text not null
    constraint queue_lanes_queue_name_valid check (pgflow.is_valid_queue_name(queue_name)),
  priority smallint not null constraint queue_lanes_priority_valid
    check (priority in (1, 2, 4, 5)),
  created_at timestamptz not null default now(),
  primary key (queue_name, priority)
);
create table pgflow.queue_aging (
  queue_name text primary key
    constraint queue_aging_queue_name_valid check (pgflow.is_valid_queue_name(queue_name)),
  aging_seconds integer not null constraint queue_aging_seconds_positive
    check (aging_seconds >= 1)
);

-- A lane's name ends in `__p1`, `__p2`, `__p4` or `__p5`: no queue of one's own may. A database
-- that already routes to such a queue is not upgraded (its lanes would share that queue).
do $$
declare
  v_queue text;
begin
  select q.queue_name into v_queue
  from (select queue_name from pgflow.steps
        union select queue_name from pgflow.workers
        union select queue_name from pgflow.paused_queues) q
  where q.queue_name ~ '__p[1245]$'
  limit 1;
  if found then
    raise exception 'queue `%` ends like a priority lane''s name (`__p1`, `__p2`, `__p4`, `__p5`), '
      'which pgflow now keeps for its own queues; route its steps to a queue named otherwise '
      '(and drain this one) before upgrading', v_queue
      using errcode = 'PF001';
  end if;
end
$$;

create or replace function pgflow.is_valid_queue_name(queue_name text)
returns boolean
language sql
immutable
parallel safe
as $$
  select queue_name is not null and queue_name ~ '^[a-z0-9_]{1,47}$'
         and queue_name !~ '__p[1245]$'
$$;

-- The start functions and the claim take a priority now.
drop function if exists pgflow.start_flows(text, jsonb[], uuid[], boolean, text[], text,
                                           timestamptz, text, boolean);
drop function if exists pgflow.start_flow(text, jsonb, uuid, boolean, text, timestamptz, text);
drop function if exists pgflow.start_alias_typed(text, jsonb[], text, text, text[],
                                                 timestamptz, text, uuid[]);
drop function if exists pgflow.claim_tasks(text, bigint[], uuid, text[], text[]);
