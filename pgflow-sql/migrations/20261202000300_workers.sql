-- Workers: one row per worker instance, subscribed to exactly one queue, carrying any number
-- of concrete flows. Worker functions group the workers of one deployable unit (a service or
-- binary); the rollout fence enables and disables them.

create table pgflow.worker_functions (
  function_name text primary key
    constraint worker_functions_name_not_blank check (length(trim(function_name)) > 0),
  enabled boolean not null default true,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

create table pgflow.workers (
  worker_id uuid primary key,
  queue_name text not null
    constraint workers_queue_name_valid check (pgflow.is_valid_queue_name(queue_name)),
  function_name text not null references pgflow.worker_functions (function_name),
  flow_slugs text[] not null,
  started_at timestamptz not null default now(),
  last_heartbeat_at timestamptz not null default now(),
  deprecated_at timestamptz,
  stopped_at timestamptz,
  constraint workers_stopped_after_start check (stopped_at is null or stopped_at >= started_at)
);

create index workers_live_by_queue_idx on pgflow.workers (queue_name) where stopped_at is null;
create index workers_live_by_function_idx on pgflow.workers (function_name)
  where stopped_at is null;

-- register_worker: records a started worker (and its function, enabled, if new). Returns false,
-- registering nothing, when the function is disabled (a rollout is in progress): the worker
-- must wait until it is enabled. Locks the function row (FOR SHARE) so that a concurrent
-- rollout either sees this worker (and deprecates it) or this call sees the function disabled.
create function pgflow.register_worker(
  p_worker_id uuid,
  p_queue_name text,
  p_function_name text,
  p_flow_slugs text[]
)
returns boolean
language plpgsql
as $$
declare
  v_enabled boolean;
begin
  insert into pgflow.worker_functions (function_name) values (p_function_name)
  on conflict (function_name) do nothing;
  select enabled into v_enabled
  from pgflow.worker_functions
  where function_name = p_function_name
  for share;
  if not v_enabled then
    return false;
  end if;
  insert into pgflow.workers (worker_id, queue_name, function_name, flow_slugs)
  values (p_worker_id, p_queue_name, p_function_name, p_flow_slugs);
  return true;
end;
$$;

-- function_enabled: whether workers of the function may start (true for an unknown function).
create function pgflow.function_enabled(p_function_name text)
returns boolean
language sql
stable
as $$
  select coalesce(
    (select enabled from pgflow.worker_functions where function_name = p_function_name), true)
$$;

-- heartbeat: records that the worker is alive; returns true when it has been deprecated (it
-- should stop polling, finish in-flight tasks and stop).
create function pgflow.heartbeat(p_worker_id uuid)
returns boolean
language sql
as $$
  update pgflow.workers
  set last_heartbeat_at = now()
  where worker_id = p_worker_id
  returning deprecated_at is not null
$$;

-- stop_worker: records that the worker has stopped.
create function pgflow.stop_worker(p_worker_id uuid)
returns void
language sql
as $$
  update pgflow.workers
  set stopped_at = now(),
      deprecated_at = coalesce(deprecated_at, now())
  where worker_id = p_worker_id and stopped_at is null
$$;

-- deprecate_workers: asks every live worker of a function to drain and stop; returns how many.
create function pgflow.deprecate_workers(p_function_name text)
returns integer
language sql
as $$
  with deprecated as (
    update pgflow.workers
    set deprecated_at = now()
    where function_name = p_function_name and stopped_at is null and deprecated_at is null
    returning 1
  )
  select count(*)::integer from deprecated
$$;

-- queue_coverage_gaps: the (flow_slug, step_slug) pairs that work on `p_queue_name` needs but
-- the supported pairs (p_flow_slugs[i], p_step_slugs[i]) lack, with what needs them:
--   active         the pair's flow is an alias's active target and routes the step here
--                  (new runs will put tasks on this queue),
--   queued_tasks   executable tasks of the pair on this queue,
--   started_tasks  recoverable tasks (they may stall and be requeued),
--   started_runs   started runs whose step of this pair has not completed yet and routes here
--                  (draining versions: the step may still put tasks on this queue).
-- Ordered by flow and step.
create function pgflow.queue_coverage_gaps(
  p_queue_name text,
  p_flow_slugs text[],
  p_step_slugs text[]
)
returns table (flow_slug text, step_slug text, active boolean, queued_tasks bigint,
               started_tasks bigint, started_runs bigint)
language sql
stable
as $$
  with supported as (
    select * from unnest(p_flow_slugs, p_step_slugs) as p(flow_slug, step_slug)
  ),
  active_pairs as (
    select s.flow_slug, s.step_slug
    from pgflow.aliases a
    join pgflow.steps s on s.flow_slug = a.flow_slug
    where s.queue_name = p_queue_name
  ),
  live_tasks as (
    select t.flow_slug, t.step_slug,
           count(*) filter (where t.status = 'queued') as queued_tasks,
           count(*) filter (where t.status = 'started') as started_tasks
    from pgflow.step_tasks t
    where t.queue_name = p_queue_name and t.status in ('queued', 'started')
    group by t.flow_slug, t.step_slug
  ),
  pending_steps as (
    select ss.flow_slug, ss.step_slug, count(*) as started_runs
    from pgflow.runs r
    join pgflow.step_states ss on ss.run_id = r.run_id
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    where r.status = 'started'
      and ss.status in ('created', 'started')
      and s.queue_name = p_queue_name
    group by ss.flow_slug, ss.step_slug
  ),
  pairs as (
    select flow_slug, step_slug from active_pairs
    union select flow_slug, step_slug from live_tasks
    union select flow_slug, step_slug from pending_steps
  )
  select p.flow_slug, p.step_slug,
         exists (select 1 from active_pairs a
                 where a.flow_slug = p.flow_slug and a.step_slug = p.step_slug),
         coalesce(l.queued_tasks, 0), coalesce(l.started_tasks, 0), coalesce(r.started_runs, 0)
  from pairs p
  left join live_tasks l on l.flow_slug = p.flow_slug and l.step_slug = p.step_slug
  left join pending_steps r on r.flow_slug = p.flow_slug and r.step_slug = p.step_slug
  where not exists (select 1 from supported s
                    where s.flow_slug = p.flow_slug and s.step_slug = p.step_slug)
  order by p.flow_slug, p.step_slug
$$;

-- maintained_tables: the tables workers look after when autovacuum is off (pgflow's busy
-- tables and the PGMQ queue tables its steps route to), with the counters autovacuum's
-- thresholds read. One definition for refresh_statistics and tables_to_vacuum.
create view pgflow.maintained_tables as
select c.oid::regclass as table_name,
       greatest(c.reltuples, 0) as estimated_rows,
       coalesce(st.n_mod_since_analyze, 0) as changed_since_analyze,
       coalesce(st.n_dead_tup, 0) as dead_rows
from pg_class c
join pg_namespace n on n.oid = c.relnamespace
left join pg_stat_user_tables st on st.relid = c.oid
where c.relkind in ('r', 'p')
  and ((n.nspname = 'pgflow' and c.relname in ('runs', 'step_states', 'step_tasks'))
       or (n.nspname = 'pgmq'
           and c.relname in (select 'q_' || s.queue_name from pgflow.steps s)));

-- refresh_statistics: runs ANALYZE on the maintained tables whose rows changed by more than
-- autovacuum's default analyze threshold (50 rows plus 10 % of the table) since they were last
-- analyzed. Without statistics the planner takes a grown table for a handful of rows, and
-- claims on a deep queue turn into scans of every queued task. Autovacuum does this itself, so
-- while it is on this returns at once (unless p_even_with_autovacuum). One caller at a time:
-- others return at once. Returns the tables it analyzed.
create function pgflow.refresh_statistics(p_even_with_autovacuum boolean default false)
returns setof text
language plpgsql
as $$
declare
  v_table regclass;
begin
  if current_setting('autovacuum')::boolean and not p_even_with_autovacuum then
    return;
  end if;
  if not pg_try_advisory_xact_lock(pgflow.lock_namespace(), 1) then
    return;
  end if;
  for v_table in
    select m.table_name from pgflow.maintained_tables m
    where m.changed_since_analyze > 50 + 0.1 * m.estimated_rows
    order by m.table_name::text
  loop
    execute format('analyze %s', v_table);
    return next v_table::text;
  end loop;
end;
$$;

-- tables_to_vacuum: the maintained tables with more dead rows than autovacuum's default vacuum
-- threshold (50 rows plus 20 % of the table). Empty while autovacuum is on (unless
-- p_even_with_autovacuum). VACUUM cannot run inside a function: workers run it for each table
-- returned, one worker at a time.
create function pgflow.tables_to_vacuum(p_even_with_autovacuum boolean default false)
returns setof text
language sql
stable
as $$
  select m.table_name::text from pgflow.maintained_tables m
  where (p_even_with_autovacuum or not current_setting('autovacuum')::boolean)
    and m.dead_rows > 50 + 0.2 * m.estimated_rows
  order by m.table_name::text
$$;
