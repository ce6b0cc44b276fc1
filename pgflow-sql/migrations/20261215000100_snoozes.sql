-- Snoozes: a handler may ask to run again later without spending an attempt
-- (`StepError::snooze`). fail_tasks takes the snooze of each report as a new last argument (its
-- old argument list is dropped here, and the function file creates the new one); the attempt's
-- history row records the outcome `snoozed`. A snoozed attempt is given back by raising the
-- task's attempts_base by one: attempts_count - attempts_base stays what counts against
-- max_attempts.

alter table pgflow.task_attempts drop constraint task_attempts_outcome_domain;
alter table pgflow.task_attempts add constraint task_attempts_outcome_domain
  check (outcome in ('failed', 'permanent', 'stalled', 'snoozed'));

drop function if exists pgflow.fail_tasks(uuid[], text[], integer[], integer[], text[],
                                          boolean[]);
