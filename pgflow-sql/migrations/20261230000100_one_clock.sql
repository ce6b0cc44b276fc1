-- One clock (issue 40): every time the engine records or compares (a task's start, a worker's
-- heartbeat, a retry's or a start's due time, a cron schedule's next tick, a wait's deadline,
-- a window, a sleep) reads pgflow.clock(), the transaction's now(). Here it is now() and
-- nothing else, inlined into every query that calls it, so it costs nothing. A test kit
-- (pgflow's `testing` feature) replaces it, in its own throwaway database only, with one that
-- adds an offset the test moves forward, so that an hour's retry delay passes at once through
-- the same SQL as production.
--
-- PGMQ's visibility times (`vt`) are not engine time: PGMQ reads and sets them from the
-- server's clock itself. A test clock's advance moves them back by the same amount.
--
-- In a migration rather than a function file because column defaults name it, as constraints
-- name the row rules: it must exist before the function files, and never be dropped.
-- Locks: none.
create or replace function pgflow.clock()
returns timestamptz
language sql
stable
parallel safe
as $$
  select now()
$$;

comment on function pgflow.clock() is
  'pgflow''s engine time: now(), or a test clock''s shifted time in a test database';

-- The defaults that recorded now() record the engine's time. The ledgers of migrations and
-- function files keep the server's time: they say when an install ran.
do $defaults$
declare
  v_column record;
begin
  for v_column in
    select c.oid::regclass as table_name, a.attname as column_name
    from pg_attrdef d
    join pg_class c on c.oid = d.adrelid
    join pg_attribute a on a.attrelid = d.adrelid and a.attnum = d.adnum
    where c.relnamespace = 'pgflow'::regnamespace
      and c.relname not in ('schema_migrations', 'schema_functions')
      and pg_get_expr(d.adbin, d.adrelid) = 'now()'
    order by 1, 2
  loop
    execute format('alter table %s alter column %I set default pgflow.clock()',
                   v_column.table_name, v_column.column_name);
  end loop;
end
$defaults$;
