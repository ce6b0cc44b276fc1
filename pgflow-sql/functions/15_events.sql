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
--
-- Who follows a flow says so first, with subscribe_events (and renews the lease before it
-- runs out): while no live lease on a flow exists, its transitions send nothing. A notification
-- serializes its transaction's commit with every other notifying commit of the server, which
-- nobody should pay for when nobody listens. A follower re-reads the state after subscribing
-- (a transaction that looked before the lease existed may still commit without notifying).

-- subscribe_events: takes or renews the lease of p_subscriber_id on the events of each of
-- p_flow_slugs for p_seconds (10 to 3600); returns when it runs out. Drops every lease that
-- ran out.
create or replace function pgflow.subscribe_events(
  p_subscriber_id uuid, p_flow_slugs text[], p_seconds integer default 60
)
returns timestamptz
language plpgsql
as $$
declare
  v_expires_at timestamptz := now() + make_interval(secs => least(greatest(p_seconds, 10), 3600));
begin
  delete from pgflow.event_subscribers where expires_at < now();
  insert into pgflow.event_subscribers (subscriber_id, flow_slug, expires_at)
  select p_subscriber_id, f.flow_slug, v_expires_at
  from unnest(p_flow_slugs) as f(flow_slug)
  where f.flow_slug is not null
  on conflict (subscriber_id, flow_slug) do update set expires_at = excluded.expires_at;
  return v_expires_at;
end;
$$;

-- unsubscribe_events: gives up every lease of p_subscriber_id.
create or replace function pgflow.unsubscribe_events(p_subscriber_id uuid)
returns void
language sql
as $$
  delete from pgflow.event_subscribers where subscriber_id = p_subscriber_id
$$;

-- The events of run rows whose status is new (inserted, or changed by the update).
create or replace function pgflow.notify_run_events()
returns trigger
language plpgsql
as $$
begin
  -- Nobody follows any flow (the common case): one look at the small lease table, no more.
  if not exists (select 1 from pgflow.event_subscribers s where s.expires_at > now()) then
    return null;
  end if;
  if tg_op = 'INSERT' then
    perform pg_notify('pgflow_events.' || n.flow_slug,
                      json_build_object('kind', 'run', 'run_id', n.run_id,
                                        'flow_slug', n.flow_slug, 'status', n.status)::text)
    from new_rows n
    where exists (select 1 from pgflow.event_subscribers s
                  where s.flow_slug = n.flow_slug and s.expires_at > now());
  else
    perform pg_notify('pgflow_events.' || n.flow_slug,
                      json_build_object('kind', 'run', 'run_id', n.run_id,
                                        'flow_slug', n.flow_slug, 'status', n.status)::text)
    from new_rows n
    join old_rows o on o.run_id = n.run_id
    where o.status is distinct from n.status
      and exists (select 1 from pgflow.event_subscribers s
                  where s.flow_slug = n.flow_slug and s.expires_at > now());
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
  -- Nobody follows any flow (the common case): one look at the small lease table, no more.
  if not exists (select 1 from pgflow.event_subscribers s where s.expires_at > now()) then
    return null;
  end if;
  if tg_op = 'INSERT' then
    perform pg_notify('pgflow_events.' || n.flow_slug,
                      json_build_object('kind', 'step', 'run_id', n.run_id,
                                        'flow_slug', n.flow_slug, 'step_slug', n.step_slug,
                                        'status', n.status)::text)
    from new_rows n
    where n.status <> 'created'
      and exists (select 1 from pgflow.event_subscribers s
                  where s.flow_slug = n.flow_slug and s.expires_at > now());
  else
    perform pg_notify('pgflow_events.' || n.flow_slug,
                      json_build_object('kind', 'step', 'run_id', n.run_id,
                                        'flow_slug', n.flow_slug, 'step_slug', n.step_slug,
                                        'status', n.status)::text)
    from new_rows n
    join old_rows o on o.run_id = n.run_id and o.step_slug = n.step_slug
    where o.status is distinct from n.status and n.status <> 'created'
      and exists (select 1 from pgflow.event_subscribers s
                  where s.flow_slug = n.flow_slug and s.expires_at > now());
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
