-- Retry policy beyond exponential backoff:
--
-- * `opt_max_delay` caps the delay before a retry (seconds; null: no cap). Without it, a
--   base delay of 1 s reaches more than an hour by the 13th attempt.
-- * `opt_jitter` shortens each delay by a random part of up to that percentage, so tasks
--   that failed together (an outage of the service they call) do not all come back together.
--   A flow's jitter defaults to 0; a step's null means "the flow's".
-- * A handler can fail an attempt for good (`StepError::permanent`): the task fails at once,
--   whatever attempts remain, and its history row says `permanent`.
--
-- `fail_tasks` gains a per-task "permanent" flag, so its old signature is dropped here; the
-- functions file creates the new one.

alter table pgflow.flows
  add column opt_max_delay integer
    constraint flows_max_delay_positive check (opt_max_delay >= 1),
  add column opt_jitter integer not null default 0
    constraint flows_jitter_percent check (opt_jitter between 0 and 100);

alter table pgflow.steps
  add column opt_max_delay integer
    constraint steps_max_delay_positive check (opt_max_delay >= 1),
  add column opt_jitter integer
    constraint steps_jitter_percent check (opt_jitter between 0 and 100);

alter table pgflow.task_attempts
  drop constraint task_attempts_outcome_domain,
  add constraint task_attempts_outcome_domain
    check (outcome in ('failed', 'permanent', 'stalled'));

drop function if exists pgflow.fail_tasks(uuid[], text[], integer[], integer[], text[]);
