-- The history of a task's attempts that did not succeed, one row per attempt: the error its
-- handler returned (`failed`), or the note that no result came back in time (`stalled`: its
-- worker stopped or lost the database). `step_tasks` keeps only the latest error; this table
-- is what `pgflow run <id>` shows as a task's attempt history.
--
-- Rows are written by `fail_tasks` and `requeue_stalled_tasks` (functions/06 and 07) from the
-- task's own row, and deleted with their run by `prune`. An attempt is numbered as the claim
-- that started it numbered it (`step_tasks.attempts_count`), so a task has at most one row per
-- attempt. A successful attempt writes nothing here: the task's row says when it completed.
create table pgflow.task_attempts (
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null,
  attempt integer not null
    constraint task_attempts_attempt_positive check (attempt >= 1),
  outcome text not null
    constraint task_attempts_outcome_domain check (outcome in ('failed', 'stalled')),
  worker_id uuid,
  started_at timestamptz,
  ended_at timestamptz not null default now(),
  error_message text not null,
  primary key (run_id, step_slug, task_index, attempt)
);
