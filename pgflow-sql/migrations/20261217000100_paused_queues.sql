-- Paused queues (issue 38's pause): a queue listed here is claimed from by no one until it is
-- resumed (pause_queue, resume_queue in the function files). queue_overview gains `paused`,
-- which changes its return type: the old function is dropped here, and the function file
-- creates the new one.

create table pgflow.paused_queues (
  queue_name text primary key
    constraint paused_queues_queue_name_valid check (pgflow.is_valid_queue_name(queue_name)),
  paused_at timestamptz not null default now(),
  reason text
);

drop function if exists pgflow.queue_overview();
