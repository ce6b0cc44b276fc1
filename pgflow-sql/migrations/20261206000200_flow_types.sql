-- The Rust types a concrete flow takes and produces, as its worker's code names them
-- (`std::any::type_name` of the flow's input and output types), recorded when a worker compiles
-- or verifies the flow. A typed start through an alias checks them against the caller's types
-- (`start_alias_typed`), so a caller never decodes a version it was not built for. They are
-- not part of the flow's shape: a null means "never recorded" (a flow defined in SQL, or by a
-- worker older than this column).
--
-- `define_flow` gains the two type arguments, so its old signature is dropped here; the
-- functions file creates the new one.

alter table pgflow.flows
  add column input_type text,
  add column output_type text;

drop function if exists pgflow.define_flow(text, text, integer, jsonb, jsonb);

-- `fail_tasks` now also says, per task out of attempts, whether its step was skipped
-- (`when_exhausted`) rather than its run failed; its return type changes, so the old function
-- is dropped here as well and the functions file creates the new one.
drop function if exists pgflow.fail_tasks(uuid[], text[], integer[], integer[], text[], boolean[]);
