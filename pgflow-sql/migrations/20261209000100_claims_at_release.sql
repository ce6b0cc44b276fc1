-- Claims at release: a worker that completes tasks may claim, in the same transaction, the
-- tasks its completions release on its own queue (complete_and_claim_tasks). Such a task is
-- created 'started' and never has a PGMQ message, so a task's message id is now optional.
-- A queued task still gets one in the transaction that queues it (a check constraint cannot
-- say so: a retry or a requeue marks the task queued before it sends the new message).
--
-- complete_tasks, finish_completed_steps and enqueue_step_tasks gain the claimer (who may
-- claim what they release); their signatures change, so the old ones are dropped here.

alter table pgflow.step_tasks
  alter column message_id drop not null;

-- Who claims the tasks a completion releases: the worker, its queue, the (flow, step) pairs it
-- runs (parallel arrays) and how many tasks it has room for.
create type pgflow.task_claimer as (
  queue_name text,
  worker_id uuid,
  flow_slugs text[],
  step_slugs text[],
  quantity integer
);

drop function if exists pgflow.complete_tasks(uuid[], text[], integer[], integer[], jsonb[]);
drop function if exists pgflow.finish_completed_steps(uuid[], text[], text[]);
drop function if exists pgflow.enqueue_step_tasks(pgflow.started_step[]);
