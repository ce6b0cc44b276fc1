-- Queue samples (issue 40, trends): each queue's depth, oldest message and tasks in flight, once
-- a minute, kept for a day, for the dashboard's charts of how queues filled and drained. Written
-- by one process's maintenance at a time (sample_queues); a day of a queue is 1,440 rows.
create table pgflow.queue_samples (
  sampled_at timestamptz not null,
  queue_name text not null,
  depth bigint not null,
  oldest_message_age_seconds integer,
  in_flight integer not null,
  primary key (sampled_at, queue_name)
);
