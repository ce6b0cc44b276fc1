-- Start guards (issue 38): a start may carry keys that hold back other starts of the same flow
-- (alias) with the same key. A throttle key lets one run start per window; the starts that
-- meet an open window are refused, or dropped (they get the window's run back), as the caller
-- chooses. A singleton key lets one run of the key go at a time; a start that meets a going
-- one is refused. A debounce key makes one run of starts that come close together: the run
-- waits (deferred_runs) until a window has passed since the last start, with that start's
-- input. One row per scope (the alias, or the concrete flow without one), kind and
-- key: a row whose window has ended, or whose run has ended, is free, and the next start with
-- its key takes it over (see take_start_guards).
create table pgflow.start_guards (
  scope text not null,
  kind text not null
    constraint start_guards_kind_valid check (kind in ('throttle', 'singleton', 'debounce')),
  key text not null constraint start_guards_key_length check (length(key) between 1 and 255),
  run_id uuid not null,
  ends_at timestamptz,
  taken_at timestamptz not null default now(),
  primary key (scope, kind, key),
  constraint start_guards_window check ((kind = 'singleton') = (ends_at is null))
);

-- The start functions take the guards (a JSON object, so later guards add no argument).
drop function if exists pgflow.start_flows(text, jsonb[], uuid[], boolean, text[], text,
                                           timestamptz, text, boolean, smallint);
drop function if exists pgflow.start_alias_typed(text, jsonb[], text, text, text[],
                                                 timestamptz, text, uuid[], smallint);

-- Runs whose start a debounce deferred: they exist (`started`, `scheduled_for` their begin)
-- with no step state yet, and begin at begins_at (begin_deferred_runs), unless a later start
-- with their key defers them again.
create table pgflow.deferred_runs (
  run_id uuid primary key references pgflow.runs (run_id) on delete cascade,
  begins_at timestamptz not null
);
create index deferred_runs_due_idx on pgflow.deferred_runs (begins_at);
