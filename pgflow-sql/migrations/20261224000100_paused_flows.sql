-- Paused flows (issue 38's pause, for a flow): the tasks of a flow listed here are claimed by no
-- one until it is resumed (pause_flow, resume_flow in the function files). A claim that meets
-- a task of a paused flow parks it: the task stays 'queued', its message is gone (the claim
-- took it off the queue) and it is listed in parked_tasks; resuming gives each parked task a
-- new message. Runs of a paused flow keep starting, and its other tasks keep being queued.

create table pgflow.paused_flows (
  flow_slug text primary key references pgflow.flows (flow_slug) on delete cascade,
  paused_at timestamptz not null default now(),
  reason text
);

create table pgflow.parked_tasks (
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null,
  flow_slug text not null,
  parked_at timestamptz not null default now(),
  primary key (run_id, step_slug, task_index),
  foreign key (run_id, step_slug, task_index)
    references pgflow.step_tasks (run_id, step_slug, task_index) on delete cascade
);
create index parked_tasks_flow_idx on pgflow.parked_tasks (flow_slug);
