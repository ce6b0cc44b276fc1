-- Maintenance: the ANALYZE and VACUUM work that workers do for pgflow's busy tables and its
-- queues' PGMQ tables when autovacuum is off.

-- maintained_tables: the tables workers look after when autovacuum is off (pgflow's busy
-- tables, the rate limits' among them, and the PGMQ queue tables its steps route to, lanes
-- included), with the counters
-- autovacuum's
-- thresholds read. One definition for refresh_statistics and tables_to_vacuum.
create or replace view pgflow.maintained_tables as
select c.oid::regclass as table_name,
       greatest(c.reltuples, 0) as estimated_rows,
       coalesce(st.n_mod_since_analyze, 0) as changed_since_analyze,
       coalesce(st.n_dead_tup, 0) as dead_rows
from pg_class c
join pg_namespace n on n.oid = c.relnamespace
left join pg_stat_user_tables st on st.relid = c.oid
where c.relkind in ('r', 'p')
  and ((n.nspname = 'pgflow'
        and c.relname in ('runs', 'step_states', 'step_tasks', 'rate_tokens', 'rate_waits'))
       or (n.nspname = 'pgmq'
           and c.relname in (select 'q_' || s.queue_name from pgflow.steps s
                             union all
                             select 'q_' || pgflow.lane_name(l.queue_name, l.priority)
                             from pgflow.queue_lanes l)));

-- refresh_statistics: runs ANALYZE on the maintained tables whose rows changed by more than
-- autovacuum's default analyze threshold (50 rows plus 10 % of the table) since they were last
-- analyzed. Without statistics the planner takes a grown table for a handful of rows, and
-- claims on a deep queue turn into scans of every queued task. Autovacuum does this itself, so
-- while it is on this returns at once (unless p_even_with_autovacuum). One caller at a time:
-- others return at once. Returns the tables it analyzed.
-- Locks: advisory (namespace, 1), a transaction try-lock (busy: returns at once), then each
-- table it analyzes (ANALYZE's share update exclusive lock, to the end of the transaction:
-- reads and writes do not wait for it). None when it returns because autovacuum is on.
create or replace function pgflow.refresh_statistics(p_even_with_autovacuum boolean default false)
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
-- Locks: none (reads only). Its caller (vacuum_tables in pgflow-runtime) holds advisory
-- (namespace, 2), a session try-lock, while it calls this and vacuums.
create or replace function pgflow.tables_to_vacuum(p_even_with_autovacuum boolean default false)
returns setof text
language sql
stable
as $$
  select m.table_name::text from pgflow.maintained_tables m
  where (p_even_with_autovacuum or not current_setting('autovacuum')::boolean)
    and m.dead_rows > 50 + 0.2 * m.estimated_rows
  order by m.table_name::text
$$;
