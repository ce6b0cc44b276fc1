-- Concurrency caps (issue 38): a step may cap how many of its tasks hold a slot at once across
-- every worker and process (concurrency_limit), per key when concurrency_key_path names where
-- the key is read (the flow input, `input`, or one of its dependencies, then field names; the
-- key is the value there as text, and a missing one is the key '').
--
-- The tasks of a capped step are created 'queued' without a message and held in held_tasks, in
-- the order they were held, until a slot of their key is free; releasing a task makes it the
-- holder of a slot (a row of cap_slots: a key has one row per unit of its limit) and gives it
-- its message. A task holds its slot until it ends (completed, failed, skipped or cancelled):
-- through its retries, its snoozes and a requeue after its worker died, so no other task takes
-- the slot while a stalled one may still be running. A slot whose holder ended is free; it is
-- given to the next held task by the call that ended the holder, or else by the once-a-second
-- sweep (release_capped_tasks).
alter table pgflow.steps
  add column concurrency_limit integer
    constraint steps_concurrency_limit_positive check (concurrency_limit >= 1),
  add column concurrency_key_path text[]
    constraint steps_concurrency_key_path_valid
      check (concurrency_key_path is null
             or (cardinality(concurrency_key_path) >= 1 and concurrency_limit is not null));

-- Tasks waiting for a slot, in the order they are released (per step and key).
create table pgflow.held_tasks (
  flow_slug text not null,
  step_slug text not null,
  cap_key text not null,
  held_seq bigint generated always as identity,
  run_id uuid not null,
  task_index integer not null,
  held_at timestamptz not null default now(),
  primary key (flow_slug, step_slug, cap_key, held_seq),
  constraint held_tasks_task_key unique (run_id, step_slug, task_index),
  foreign key (run_id, step_slug, task_index)
    references pgflow.step_tasks (run_id, step_slug, task_index) on delete cascade
);

-- The slots of each capped step and key, 1 to its limit (a limit lowered later leaves the rows
-- above it unused). The holder is the task that holds the slot, if any; a slot whose holder
-- ended, or is gone, is free.
create table pgflow.cap_slots (
  flow_slug text not null,
  step_slug text not null,
  cap_key text not null,
  slot integer not null,
  run_id uuid,
  task_index integer,
  taken_at timestamptz,
  primary key (flow_slug, step_slug, cap_key, slot),
  foreign key (flow_slug, step_slug) references pgflow.steps (flow_slug, step_slug)
    on delete cascade,
  constraint cap_slots_holder_whole check (num_nulls(run_id, task_index, taken_at) in (0, 3))
);
-- The slot a task holds, found from the task (a completion frees its tasks' slots).
create unique index cap_slots_holder_key on pgflow.cap_slots (run_id, step_slug, task_index)
  where run_id is not null;
