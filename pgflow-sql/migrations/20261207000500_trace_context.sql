-- Trace propagation: a run records the W3C trace context (`traceparent`, and `tracestate` after
-- a newline when there is one) of the span that started it, and claims hand it to workers, so
-- that every task of the run continues the caller's trace.
--
-- start_flows, start_flow and start_alias_typed gain p_trace_context, and start_tasks and
-- read_and_start_tasks return it: their signatures change, so the old ones are dropped here.

alter table pgflow.runs
  add column trace_context text
    constraint runs_trace_context_length check (length(trace_context) <= 1024);

drop function if exists pgflow.start_flow(text, jsonb, uuid, boolean, text, timestamptz);
drop function if exists pgflow.start_flows(text, jsonb[], uuid[], boolean, text[], text,
                                           timestamptz);
drop function if exists pgflow.start_alias_typed(text, jsonb[], text, text, text[], timestamptz);
drop function if exists pgflow.read_and_start_tasks(text, uuid, text[], text[], integer, integer);
drop function if exists pgflow.start_tasks(text, bigint[], uuid, text[], text[]);
