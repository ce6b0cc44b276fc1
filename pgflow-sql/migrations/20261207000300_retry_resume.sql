-- Retrying a failed run, and resuming a run from a step.
--
-- * A retried run records how often it was retried. Its failed tasks are queued again with a
--   fresh budget of attempts: `attempts_base` is the attempts they had spent before the retry,
--   so attempt numbers keep growing (a late result of an attempt from before the retry never
--   matches a new attempt) while `attempts_count - attempts_base` is what counts against the
--   step's max_attempts.
-- * Resuming makes a new run linked to the old one (`resumed_from`, `resumed_at_step`), which
--   keeps the old run's history as it was. No foreign key: retention may remove the old run.

alter table pgflow.runs
  add column retry_count integer not null default 0
    constraint runs_retry_count_non_negative check (retry_count >= 0),
  add column resumed_from uuid,
  add column resumed_at_step text,
  add constraint runs_resumed_fields
    check ((resumed_from is null) = (resumed_at_step is null));

alter table pgflow.step_tasks
  add column attempts_base integer not null default 0,
  add constraint step_tasks_attempts_base_within
    check (attempts_base >= 0 and attempts_base <= attempts_count);
