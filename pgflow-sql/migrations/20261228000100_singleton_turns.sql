-- Singleton starts that wait their turn (issue 38): a start whose singleton key is held by a
-- run still going may wait instead of being refused ({"singleton": {"keys": [...], "wait":
-- true}}). Its run is created at once, with no step state (as a debounced run before its
-- window ends), and joins its key's line; when the key's run has ended, the head of the line
-- takes the key and begins (begin_deferred_runs, once a second in every process with a
-- worker). A run cancelled while in line never begins and leaves the line.

-- Each key's line, in the order its runs joined it. A run in line is `started` with no step
-- state; the row goes when it begins, and with its run (prune and delete_flow delete it: no
-- foreign key, so that updates of runs check none).
create table pgflow.singleton_waits (
  scope text not null,
  key text not null,
  wait_seq bigint generated always as identity,
  run_id uuid not null,
  waiting_since timestamptz not null default now(),
  primary key (scope, key, wait_seq),
  constraint singleton_waits_run_key unique (run_id)
);

-- The runs started with a singleton key, and the key: a retry of one that lost its key
-- meanwhile (retry_runs) takes the key back only when it is free. Deleted with its run, as a
-- line's row is.
create table pgflow.singleton_runs (
  run_id uuid primary key,
  scope text not null,
  key text not null
);

-- take_start_guards says which inputs have a singleton key, and which join its line.
drop function if exists pgflow.take_start_guards(text, text, jsonb, uuid[], jsonb[]);
