-- Idempotent starts: a run started with a caller's key records it with the name it was started
-- by (an alias or a concrete flow: the key's scope). A second start with the same key and name
-- returns that run instead of starting another, for as long as the run is kept.
--
-- start_flows, start_flow and start_alias_typed gain the key arguments, so their old
-- signatures are dropped here; the functions file creates the new ones.

alter table pgflow.runs
  add column idempotency_scope text,
  add column idempotency_key text,
  add constraint runs_idempotency_key_length
    check (length(idempotency_key) between 1 and 255),
  add constraint runs_idempotency_scoped
    check ((idempotency_key is null) = (idempotency_scope is null));

create unique index runs_idempotency_key_idx on pgflow.runs (idempotency_scope, idempotency_key)
  where idempotency_key is not null;

drop function if exists pgflow.start_flow(text, jsonb, uuid, boolean);
drop function if exists pgflow.start_flows(text, jsonb[], uuid[], boolean);
drop function if exists pgflow.start_alias_typed(text, jsonb[], text, text);
