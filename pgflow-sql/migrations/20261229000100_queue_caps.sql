-- Queue caps (issue 38): at most `concurrency` tasks of a queue run at once, across every worker
-- and process, whatever flows and steps they belong to. An operator's setting
-- (set_queue_concurrency), like a pause: a cap on a queue a flow has to itself caps the flow.
--
-- Kept at the claim: a queue has one slot per unit of its cap (queue_slots), each naming the
-- task that a claim last started with it and when (the task's started_at). A claim on a capped
-- queue takes at most as many messages as it finds free slots, and gives each task it starts
-- one of them. A slot is free once that start is over: its task is no longer `started` with
-- that start time (it completed, failed, was sent back for a retry or a snooze, or was
-- requeued after its worker died: the sweep requeues only after the timeout, so the dead
-- handler cannot be running), unless it was ended from outside while its handler may still run
-- (the rule of concurrency caps' slots). Claims at release are not made on a capped queue.
create table pgflow.queue_caps (
  queue_name text primary key,
  concurrency integer not null
    constraint queue_caps_concurrency_range check (concurrency between 1 and 10000),
  set_at timestamptz not null default now()
);

create table pgflow.queue_slots (
  queue_name text not null references pgflow.queue_caps (queue_name) on delete cascade,
  slot integer not null,
  run_id uuid,
  step_slug text,
  task_index integer,
  taken_at timestamptz,
  primary key (queue_name, slot),
  constraint queue_slots_holder_whole check (num_nulls(run_id, step_slug, task_index, taken_at)
                                             in (0, 4))
);

-- queue_overview shows each queue's cap.
drop function if exists pgflow.queue_overview();
