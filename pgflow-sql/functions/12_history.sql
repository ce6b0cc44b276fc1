-- History: where ended runs go once they have been over for a while, and how they come back.
-- A run that completed, failed or was cancelled more than a process's `archive_after` ago
-- (an hour by default) moves, with its step states, tasks and attempts, from the live tables
-- into the history tables, which are partitioned by the day the run ended (archive_runs; the
-- migration 20270102000100_run_history.sql says why the live tables are not). Retention takes
-- whole days of history (prune detaches them, drop_pruned_history drops them). Everything
-- that changes a run works on the live tables; an operator's retry or resume of an archived
-- run first brings it back (restore_runs), and a late result for an archived task finds no
-- task, as it would for a pruned one. Readers of ended runs read the views below, which put
-- both together.

-- The live tables and their history tables, in the order rows are written (a parent before
-- its children: the parent checks of 02_integrity.sql).
create or replace function pgflow.history_tables()
returns text[]
language sql
immutable
as $$
  select array['runs', 'step_states', 'step_tasks', 'task_attempts']
$$;

-- all_runs: every run kept, live or archived, with the columns of pgflow.runs.
create or replace view pgflow.all_runs as
select run_id, flow_slug, status, input, output, remaining_steps, started_at, completed_at,
       failed_at, idempotency_scope, idempotency_key, cancelled_at, cancel_reason, retry_count,
       resumed_from, resumed_at_step, scheduled_for, trace_context, parent_run_id,
       parent_step_slug, parent_task_index, priority
from pgflow.runs
union all
select run_id, flow_slug, status, input, output, remaining_steps, started_at, completed_at,
       failed_at, idempotency_scope, idempotency_key, cancelled_at, cancel_reason, retry_count,
       resumed_from, resumed_at_step, scheduled_for, trace_context, parent_run_id,
       parent_step_slug, parent_task_index, priority
from pgflow.runs_history;

-- all_step_states: the step states of every run kept, with the columns of pgflow.step_states.
create or replace view pgflow.all_step_states as
select run_id, step_slug, flow_slug, status, remaining_deps, initial_tasks, remaining_tasks,
       output, error_message, created_at, started_at, completed_at, failed_at, skipped_at,
       skip_reason, cancelled_at
from pgflow.step_states
union all
select run_id, step_slug, flow_slug, status, remaining_deps, initial_tasks, remaining_tasks,
       output, error_message, created_at, started_at, completed_at, failed_at, skipped_at,
       skip_reason, cancelled_at
from pgflow.step_states_history;

-- all_step_tasks: the tasks of every run kept, with the columns of pgflow.step_tasks.
create or replace view pgflow.all_step_tasks as
select run_id, step_slug, task_index, flow_slug, queue_name, message_id, status,
       attempts_count, requeue_count, output, error_message, last_worker_id, queued_at,
       started_at, completed_at, failed_at, skipped_at, cancelled_at, attempts_base, priority
from pgflow.step_tasks
union all
select run_id, step_slug, task_index, flow_slug, queue_name, message_id, status,
       attempts_count, requeue_count, output, error_message, last_worker_id, queued_at,
       started_at, completed_at, failed_at, skipped_at, cancelled_at, attempts_base, priority
from pgflow.step_tasks_history;

-- all_task_attempts: the failed attempts of every run kept, with the columns of
-- pgflow.task_attempts.
create or replace view pgflow.all_task_attempts as
select run_id, step_slug, task_index, attempt, outcome, worker_id, started_at, ended_at,
       error_message
from pgflow.task_attempts
union all
select run_id, step_slug, task_index, attempt, outcome, worker_id, started_at, ended_at,
       error_message
from pgflow.task_attempts_history;

-- live_columns: the columns of live table p_table (one of history_tables()) in order, quoted,
-- each prefixed with p_prefix and a dot when given: its history table has the same ones, plus
-- run_ended_at. For the statements that move rows between the two, so that a column a later
-- migration adds to both moves with the others.
create or replace function pgflow.live_columns(p_table text, p_prefix text default null)
returns text
language sql
stable
as $$
  select string_agg(coalesce(quote_ident(p_prefix) || '.', '') || quote_ident(a.attname), ', '
                    order by a.attnum)
  from pg_attribute a
  where a.attrelid = format('pgflow.%I', p_table)::regclass
    and a.attnum > 0 and not a.attisdropped
$$;

-- history_partition: the name of the partition of history table `<p_table>_history` that
-- holds the runs that ended on p_day (UTC).
create or replace function pgflow.history_partition(p_table text, p_day date)
returns text
language sql
immutable
as $$
  select p_table || '_history_p' || to_char(p_day, 'YYYYMMDD')
$$;

-- history_day: the day (UTC) whose history partitions hold a run that ended at p_ended_at.
create or replace function pgflow.history_day(p_ended_at timestamptz)
returns date
language sql
immutable
as $$
  select (p_ended_at at time zone 'UTC')::date
$$;

-- history_partition_days: the days that have partitions of the history (read from the
-- partitions of runs_history; the other three history tables have the same ones).
create or replace function pgflow.history_partition_days()
returns table (day date)
language sql
stable
as $$
  select to_date(substring(c.relname from '_p([0-9]{8})$'), 'YYYYMMDD')
  from pg_inherits i
  join pg_class c on c.oid = i.inhrelid
  where i.inhparent = 'pgflow.runs_history'::regclass
$$;

-- ensure_history_days: makes the partitions of the four history tables for each of p_days
-- that has none yet, waiting at most 5 s for the readers of a history table (lock_timeout for
-- the rest of the transaction): a reader that comes after queues behind it meanwhile.
-- Locks: each history table a partition is made for (access exclusive, to the end of the
-- transaction; nothing on the hot path reads them).
create or replace function pgflow.ensure_history_days(p_days date[])
returns void
language plpgsql
as $$
declare
  v_day date;
  v_table text;
begin
  foreach v_day in array coalesce(p_days, array[]::date[]) loop
    foreach v_table in array pgflow.history_tables() loop
      continue when to_regclass(format('pgflow.%I', pgflow.history_partition(v_table, v_day)))
                    is not null;
      perform set_config('lock_timeout', '5s', true);
      execute format('create table pgflow.%I partition of pgflow.%I for values from (%L) to (%L)',
                     pgflow.history_partition(v_table, v_day), v_table || '_history',
                     v_day::timestamp at time zone 'UTC',
                     (v_day + 1)::timestamp at time zone 'UTC');
    end loop;
  end loop;
end;
$$;

-- delete_live_runs: deletes runs from the live tables with their attempts, signals, tasks,
-- step states and places in singleton lines; returns how many of each it deleted. For prune
-- and archive_runs, which hold the runs' locks.
-- Locks: the runs' tasks, step states and places in singleton lines (line order), then the runs.
create or replace function pgflow.delete_live_runs(p_run_ids uuid[])
returns table (runs bigint, step_states bigint, tasks bigint)
language plpgsql
as $$
#variable_conflict use_column
begin
  delete from pgflow.task_attempts a where a.run_id = any(p_run_ids);
  delete from pgflow.signals sg where sg.run_id = any(p_run_ids);
  delete from pgflow.step_tasks t where t.run_id = any(p_run_ids);
  get diagnostics tasks = row_count;
  delete from pgflow.step_states ss where ss.run_id = any(p_run_ids);
  get diagnostics step_states = row_count;
  -- Runs cancelled in a singleton key's line leave it in line order, the order in which
  -- begin_deferred_runs clears a line.
  delete from pgflow.singleton_waits w
  where w.ctid = any(array(select x.ctid from pgflow.singleton_waits x
                           where x.run_id = any(p_run_ids)
                           order by x.scope, x.key, x.wait_seq
                           for update));
  delete from pgflow.singleton_runs sr where sr.run_id = any(p_run_ids);
  delete from pgflow.runs r where r.run_id = any(p_run_ids);
  get diagnostics runs = row_count;
  return next;
end;
$$;

-- parent_is_live: whether a run's parent (p_parent_run_id; null: it has none) is in the live
-- tables. (A SQL function Postgres inlines into the statement that calls it.)
create or replace function pgflow.parent_is_live(p_parent_run_id uuid)
returns boolean
language sql
stable
as $$
  select p_parent_run_id is not null
         and exists (select 1 from pgflow.runs p where p.run_id = p_parent_run_id)
$$;

-- archive_runs: moves the runs that ended (completed, failed or cancelled) more than p_after
-- ago, at most p_batch_size, oldest end first, from the live tables into the history, in one
-- transaction: each with its step states, tasks and attempts, its idempotency key into
-- archived_keys, and the counts of its day into history_days; the partitions of the days they
-- ended are made when missing. A child run is moved only once its parent is not live any
-- more. What only a live run needs goes with it as prune deletes it: the signals it received,
-- its place in a singleton line and the singleton key it held (a retried archived run does not
-- take its key back). Runs a late result holds at the moment are left for the next call.
-- Call again while it returns p_batch_size runs.
-- One caller at a time per database (a transaction advisory try-lock): a concurrent caller
-- moves nothing and gets `busy = true`. The processes archive 15 minutes after the end at the
-- earliest (ProcessConfig::archive_after): the trends count the last minutes' runs from the
-- live table, and miss those archived sooner.
-- Raises PF005 for a negative or missing p_after or a p_batch_size below 1.
-- Locks: advisory (namespace, 4), then the runs (SKIP LOCKED), then as ensure_history_days,
-- then as delete_live_runs.
create or replace function pgflow.archive_runs(p_after interval, p_batch_size integer default 5000)
returns table (busy boolean, runs bigint)
language plpgsql
as $$
#variable_conflict use_column
declare
  v_cutoff timestamptz;
  v_run_ids uuid[];
  v_table text;
begin
  if p_after is null or p_after < interval '0' then
    raise exception 'archive_runs: after must be zero or more (got %)',
      coalesce(p_after::text, 'null')
      using errcode = 'PF005',
            hint = 'pass how long after their end runs stay in the live tables, e.g. 1 hour';
  end if;
  if p_batch_size is null or p_batch_size < 1 then
    raise exception 'archive_runs: batch_size must be at least 1 (got %)',
      coalesce(p_batch_size::text, 'null')
      using errcode = 'PF005';
  end if;

  busy := not pg_try_advisory_xact_lock(pgflow.lock_namespace(), 4);
  runs := 0;
  if busy then
    return next;
    return;
  end if;
  v_cutoff := pgflow.clock() - p_after;

  -- The runs that ended longest ago, through the indexes of their ends; the conditions again
  -- on the locked rows, so that a run retried meanwhile is left live. A child run stays live
  -- as long as its parent is: a parent that waits for its children reads them, its siblings
  -- among them, from the live table when each of them ends.
  select array_agg(x.run_id) into v_run_ids
  from (select r.run_id from pgflow.runs r
        where r.run_id in ((select e.run_id from pgflow.runs e
                            where e.status in ('completed', 'failed')
                              and coalesce(e.completed_at, e.failed_at) < v_cutoff
                              and not pgflow.parent_is_live(e.parent_run_id)
                            order by coalesce(e.completed_at, e.failed_at)
                            limit p_batch_size)
                           union all
                           (select c.run_id from pgflow.runs c
                            where c.status = 'cancelled' and c.cancelled_at < v_cutoff
                              and not pgflow.parent_is_live(c.parent_run_id)
                            order by c.cancelled_at
                            limit p_batch_size))
          and r.status in ('completed', 'failed', 'cancelled')
          and coalesce(r.completed_at, r.failed_at, r.cancelled_at) < v_cutoff
          and not pgflow.parent_is_live(r.parent_run_id)
        order by r.run_id
        limit p_batch_size
        for update skip locked) x;
  if v_run_ids is null then
    return next;
    return;
  end if;

  perform pgflow.ensure_history_days(array(
    select distinct pgflow.history_day(coalesce(r.completed_at, r.failed_at, r.cancelled_at))
    from pgflow.runs r where r.run_id = any(v_run_ids)));

  insert into pgflow.history_days as d (day, runs, step_states, tasks)
  select b.day, count(*), sum(b.step_states), sum(b.tasks)
  from (select pgflow.history_day(coalesce(r.completed_at, r.failed_at, r.cancelled_at)) as day,
               (select count(*) from pgflow.step_states ss where ss.run_id = r.run_id)
                 as step_states,
               (select count(*) from pgflow.step_tasks t where t.run_id = r.run_id) as tasks
        from pgflow.runs r where r.run_id = any(v_run_ids)) b
  group by b.day
  on conflict (day) do update
  set runs = d.runs + excluded.runs, step_states = d.step_states + excluded.step_states,
      tasks = d.tasks + excluded.tasks;

  foreach v_table in array pgflow.history_tables() loop
    execute format(
      'insert into pgflow.%1$I (%2$s, run_ended_at)
       select %3$s, coalesce(r.completed_at, r.failed_at, r.cancelled_at)
       from pgflow.%4$I x join pgflow.runs r on r.run_id = x.run_id
       where x.run_id = any($1)',
      v_table || '_history', pgflow.live_columns(v_table), pgflow.live_columns(v_table, 'x'),
      v_table)
      using v_run_ids;
  end loop;

  insert into pgflow.archived_keys (idempotency_scope, idempotency_key, run_id, run_ended_at)
  select r.idempotency_scope, r.idempotency_key, r.run_id,
         coalesce(r.completed_at, r.failed_at, r.cancelled_at)
  from pgflow.runs r
  where r.run_id = any(v_run_ids) and r.idempotency_key is not null;

  select d.runs into runs from pgflow.delete_live_runs(v_run_ids) d;
  return next;
end;
$$;

-- uncount_history: takes archived runs p_run_ids, with their step states and tasks, off the
-- counts of their days (history_days), before they leave the history other than by a dropped
-- day (restored, or deleted with their flow).
-- Locks: the days' rows of history_days.
create or replace function pgflow.uncount_history(p_run_ids uuid[])
returns void
language sql
as $$
  update pgflow.history_days d
  set runs = d.runs - b.runs, step_states = d.step_states - b.step_states,
      tasks = d.tasks - b.tasks
  from (select pgflow.history_day(h.run_ended_at) as day, count(*) as runs,
               sum((select count(*) from pgflow.step_states_history ss
                    where ss.run_id = h.run_id and ss.run_ended_at = h.run_ended_at))
                 as step_states,
               sum((select count(*) from pgflow.step_tasks_history t
                    where t.run_id = h.run_id and t.run_ended_at = h.run_ended_at)) as tasks
        from pgflow.runs_history h where h.run_id = any(p_run_ids)
        group by 1) b
  where d.day = b.day
$$;

-- restore_runs: brings the runs among p_run_ids that are archived back into the live tables,
-- as they were, with their step states, tasks and attempts (their keys leave archived_keys
-- and their day's counts drop); with p_with_children, the archived descendants of every run
-- among p_run_ids (live or archived) too, so that a retried or resumed parent finds its
-- children as it left them. For the run control that changes ended runs (retry, resume). The
-- runs stay ended: the archiving takes them again once they are old enough. Returns the runs
-- it brought back.
-- Locks: the history rows it moves.
create or replace function pgflow.restore_runs(p_run_ids uuid[], p_with_children boolean)
returns setof uuid
language plpgsql
as $$
declare
  v_run_ids uuid[];
  v_table text;
begin
  with recursive tree(run_id) as (
    select u.run_id from unnest(p_run_ids) u(run_id)
    union
    select c.run_id from tree join pgflow.all_runs c on c.parent_run_id = tree.run_id
    where p_with_children
  )
  select array_agg(h.run_id order by h.run_id) into v_run_ids
  from pgflow.runs_history h
  where h.run_id in (select t.run_id from tree t);
  if v_run_ids is null then
    return;
  end if;

  perform pgflow.uncount_history(v_run_ids);
  foreach v_table in array pgflow.history_tables() loop
    execute format(
      'with moved as (delete from pgflow.%1$I h where h.run_id = any($1) returning %2$s)
       insert into pgflow.%3$I (%2$s) select %2$s from moved',
      v_table || '_history', pgflow.live_columns(v_table), v_table)
      using v_run_ids;
  end loop;
  delete from pgflow.archived_keys k where k.run_id = any(v_run_ids);
  return query select unnest(v_run_ids);
end;
$$;
