-- Live run and step events: a Postgres notification for every run and step transition, which
-- any client language can LISTEN to.
--
-- Channel: `pgflow_events.<flow_slug>` (the run's concrete flow), so a client follows one flow,
-- or one run of it by filtering on run_id. Payload (JSON, ids and statuses only, never inputs,
-- outputs or errors):
--   {"kind": "run",  "run_id": "<uuid>", "flow_slug": "...", "status": "started|completed|failed|cancelled"}
--   {"kind": "step", "run_id": "<uuid>", "flow_slug": "...", "step_slug": "...",
--    "status": "started|completed|failed|skipped|cancelled"}
-- A run's events arrive in the order its transactions committed; within one transaction, step
-- events come before the run event they led to. Postgres delivers a notification only to
-- sessions listening when it commits, so a client re-reads the state after (re)connecting.
-- A step's `created` state sends nothing (every step of a new run is created with it).

-- The events of run rows whose status is new (inserted, or changed by the update).
create or replace function pgflow.notify_run_events()
returns trigger
language plpgsql
as $$
begin
  if tg_op = 'INSERT' then
    perform pg_notify('pgflow_events.' || n.flow_slug,
                      json_build_object('kind', 'run', 'run_id', n.run_id,
                                        'flow_slug', n.flow_slug, 'status', n.status)::text)
    from new_rows n;
  else
    perform pg_notify('pgflow_events.' || n.flow_slug,
                      json_build_object('kind', 'run', 'run_id', n.run_id,
                                        'flow_slug', n.flow_slug, 'status', n.status)::text)
    from new_rows n
    join old_rows o on o.run_id = n.run_id
    where o.status is distinct from n.status;
  end if;
  return null;
end;
$$;

-- The events of step rows whose status is new and not `created`.
create or replace function pgflow.notify_step_events()
returns trigger
language plpgsql
as $$
begin
  if tg_op = 'INSERT' then
    perform pg_notify('pgflow_events.' || n.flow_slug,
                      json_build_object('kind', 'step', 'run_id', n.run_id,
                                        'flow_slug', n.flow_slug, 'step_slug', n.step_slug,
                                        'status', n.status)::text)
    from new_rows n
    where n.status <> 'created';
  else
    perform pg_notify('pgflow_events.' || n.flow_slug,
                      json_build_object('kind', 'step', 'run_id', n.run_id,
                                        'flow_slug', n.flow_slug, 'step_slug', n.step_slug,
                                        'status', n.status)::text)
    from new_rows n
    join old_rows o on o.run_id = n.run_id and o.step_slug = n.step_slug
    where o.status is distinct from n.status and n.status <> 'created';
  end if;
  return null;
end;
$$;

create or replace trigger runs_events_insert
  after insert on pgflow.runs
  referencing new table as new_rows
  for each statement execute function pgflow.notify_run_events();

create or replace trigger runs_events_update
  after update on pgflow.runs
  referencing old table as old_rows new table as new_rows
  for each statement execute function pgflow.notify_run_events();

create or replace trigger step_states_events_insert
  after insert on pgflow.step_states
  referencing new table as new_rows
  for each statement execute function pgflow.notify_step_events();

create or replace trigger step_states_events_update
  after update on pgflow.step_states
  referencing old table as old_rows new table as new_rows
  for each statement execute function pgflow.notify_step_events();
