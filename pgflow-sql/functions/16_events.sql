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
-- Locks: the expired event_subscribers rows (delete), then the subscriber's rows of the
-- flows (insert or update).
create or replace function pgflow.subscribe_events(
  p_subscriber_id uuid, p_flow_slugs text[], p_seconds integer default 60
)
returns timestamptz
language plpgsql
as $$
declare
  v_expires_at timestamptz := pgflow.clock() + make_interval(secs => least(greatest(p_seconds, 10), 3600));
begin
  delete from pgflow.event_subscribers where expires_at < pgflow.clock();
  insert into pgflow.event_subscribers (subscriber_id, flow_slug, expires_at)
  select p_subscriber_id, f.flow_slug, v_expires_at
  from unnest(p_flow_slugs) as f(flow_slug)
  where f.flow_slug is not null
  on conflict (subscriber_id, flow_slug) do update set expires_at = excluded.expires_at;
  return v_expires_at;
end;
$$;

-- unsubscribe_events: gives up every lease of p_subscriber_id.
-- Locks: the subscriber's event_subscribers rows (delete).
create or replace function pgflow.unsubscribe_events(p_subscriber_id uuid)
returns void
language sql
as $$
  delete from pgflow.event_subscribers where subscriber_id = p_subscriber_id
$$;

-- The payload of a run's event and of a step's (see the top of this file).
create or replace function pgflow.run_event_payload(p_run_id uuid, p_flow_slug text,
                                                    p_status text)
returns text
language sql
stable
as $$
  select json_build_object('kind', 'run', 'run_id', p_run_id, 'flow_slug', p_flow_slug,
                           'status', p_status)::text
$$;

create or replace function pgflow.step_event_payload(p_run_id uuid, p_flow_slug text,
                                                     p_step_slug text, p_status text)
returns text
language sql
stable
as $$
  select json_build_object('kind', 'step', 'run_id', p_run_id, 'flow_slug', p_flow_slug,
                           'step_slug', p_step_slug, 'status', p_status)::text
$$;

-- The events of run rows whose status the update changed.
create or replace function pgflow.notify_run_events()
returns trigger
language plpgsql
as $$
begin
  -- Nobody follows any flow (the common case): one look at the small lease table, no more.
  if not exists (select 1 from pgflow.event_subscribers s where s.expires_at > pgflow.clock()) then
    return null;
  end if;
  perform pg_notify('pgflow_events.' || n.flow_slug,
                    pgflow.run_event_payload(n.run_id, n.flow_slug, n.status))
  from new_rows n
  join old_rows o on o.run_id = n.run_id
  where o.status is distinct from n.status
    and exists (select 1 from pgflow.event_subscribers s
                where s.flow_slug = n.flow_slug and s.expires_at > pgflow.clock());
  return null;
end;
$$;

-- The events of step rows whose status the update changed, to anything but `created`.
create or replace function pgflow.notify_step_events()
returns trigger
language plpgsql
as $$
begin
  -- Nobody follows any flow (the common case): one look at the small lease table, no more.
  if not exists (select 1 from pgflow.event_subscribers s where s.expires_at > pgflow.clock()) then
    return null;
  end if;
  perform pg_notify('pgflow_events.' || n.flow_slug,
                    pgflow.step_event_payload(n.run_id, n.flow_slug, n.step_slug, n.status))
  from new_rows n
  join old_rows o on o.run_id = n.run_id and o.step_slug = n.step_slug
  where o.status is distinct from n.status and n.status <> 'created'
    and exists (select 1 from pgflow.event_subscribers s
                where s.flow_slug = n.flow_slug and s.expires_at > pgflow.clock());
  return null;
end;
$$;

-- The events of runs just created, then of their steps created past `created` (started root
-- steps, or the steps a resume keeps): what an insert trigger would send, without the cost of
-- one (two statement triggers with transition tables cost a one-run start about 4%, paid by
-- every start while nobody follows anything). start_flows and resume_run call it right after
-- their inserts, before anything moves the new rows on.
create or replace function pgflow.notify_new_runs(p_run_ids uuid[])
returns void
language plpgsql
as $$
begin
  if not exists (select 1 from pgflow.event_subscribers s where s.expires_at > pgflow.clock()) then
    return;
  end if;
  perform pg_notify('pgflow_events.' || r.flow_slug,
                    pgflow.run_event_payload(r.run_id, r.flow_slug, r.status))
  from unnest(p_run_ids) with ordinality as ids(run_id, ordinality)
  join pgflow.runs r on r.run_id = ids.run_id
  where exists (select 1 from pgflow.event_subscribers s
                where s.flow_slug = r.flow_slug and s.expires_at > pgflow.clock())
  order by ids.ordinality;
  perform pg_notify('pgflow_events.' || ss.flow_slug,
                    pgflow.step_event_payload(ss.run_id, ss.flow_slug, ss.step_slug, ss.status))
  from unnest(p_run_ids) with ordinality as ids(run_id, ordinality)
  join pgflow.step_states ss on ss.run_id = ids.run_id
  join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
  where ss.status <> 'created'
    and exists (select 1 from pgflow.event_subscribers e
                where e.flow_slug = ss.flow_slug and e.expires_at > pgflow.clock())
  order by ids.ordinality, s.step_index;
end;
$$;

-- Inserts send their events through notify_new_runs (earlier versions had insert triggers).
drop trigger if exists runs_events_insert on pgflow.runs;
drop trigger if exists step_states_events_insert on pgflow.step_states;

create or replace trigger runs_events_update
  after update on pgflow.runs
  referencing old table as old_rows new table as new_rows
  for each statement execute function pgflow.notify_run_events();

create or replace trigger step_states_events_update
  after update on pgflow.step_states
  referencing old table as old_rows new table as new_rows
  for each statement execute function pgflow.notify_step_events();
