-- Input schemas and keys scoped by alias.
--
-- A flow may record a JSON Schema of its input (#[flow(check_input)]); starts that are not
-- typed by the flow's own input type are checked against it (start_flows, input_misfit).
-- define_flow takes it as a new last argument and start_flows takes p_check_input;
-- start_alias_typed takes p_run_ids (so that its caller can tell a new run from a key's
-- existing one). Their old argument lists are dropped here, and the function files create the
-- new ones.
--
-- Idempotency keys are scoped by the alias of the flow started, no longer by the name the
-- caller gave, so the alias and each of its versions share one set of keys. A run's stored
-- scope becomes its flow's alias, except where that alias already holds the key (the double
-- start this change stops): then the earliest run takes the alias's key and the others keep
-- their old scope.

alter table pgflow.flows add column input_schema jsonb
  constraint flows_input_schema_is_schema
    check (input_schema is null or jsonb_typeof(input_schema) in ('object', 'boolean'));

drop function if exists pgflow.define_flow(text, text, integer, jsonb, jsonb, text, text);
drop function if exists pgflow.start_flows(text, jsonb[], uuid[], boolean, text[], text,
                                           timestamptz, text);
drop function if exists pgflow.start_alias_typed(text, jsonb[], text, text, text[], timestamptz,
                                                 text);

with movable as (
  select distinct on (f.alias, r.idempotency_key) r.run_id, f.alias
  from pgflow.runs r
  join pgflow.flows f on f.flow_slug = r.flow_slug
  where r.idempotency_key is not null
    and r.idempotency_scope <> f.alias
    and not exists (select 1 from pgflow.runs o
                    where o.idempotency_scope = f.alias
                      and o.idempotency_key = r.idempotency_key)
  order by f.alias, r.idempotency_key, r.started_at, r.run_id
)
update pgflow.runs r
set idempotency_scope = m.alias
from movable m
where r.run_id = m.run_id;
