-- Retention: what the engine keeps after the work is done. Runs that ended, their step states
-- and tasks (moved into the history after a while, see 12_history.sql), the PGMQ archive of
-- pgflow's queues and the rows of stopped workers stay until they are pruned; nothing else
-- ever deletes them. `prune` deletes what ended before a cutoff.

-- run_prunable: whether a run with these columns ended (completed, failed or cancelled) before
-- p_cutoff: the rule prune deletes by and prune_preview counts by.
create or replace function pgflow.run_prunable(
  p_status text,
  p_completed_at timestamptz,
  p_failed_at timestamptz,
  p_cancelled_at timestamptz,
  p_cutoff timestamptz
)
returns boolean
language sql
immutable
as $$
  select p_status in ('completed', 'failed', 'cancelled')
         and coalesce(p_completed_at, p_failed_at, p_cancelled_at) < p_cutoff
$$;

-- prune_cutoff: the time before which prune and prune_preview take what ended: pgflow.clock() less
-- p_older_than. Raises PF005 for a negative or missing p_older_than.
create or replace function pgflow.prune_cutoff(p_older_than interval)
returns timestamptz
language plpgsql
stable
as $$
begin
  if p_older_than is null or p_older_than < interval '0' then
    raise exception 'prune: older_than must be zero or more (got %)',
      coalesce(p_older_than::text, 'null')
      using errcode = 'PF005',
            hint = 'pass how long ended runs and archived messages are kept, e.g. 7 days';
  end if;
  return pgflow.clock() - p_older_than;
end;
$$;

-- drop_pruned_history: drops the partitions of history that prune detached (named
-- `<partition>_pruned`), freeing their files; returns how many tables it dropped. A prune
-- calls it first; call it right after a prune (as engine::prune_all does) to free the space
-- at once, in a transaction of its own: a drop's time is the filesystem's, and the tables are
-- no part of the history any more, so nobody waits for it.
-- Locks: the detached tables (access exclusive).
create or replace function pgflow.drop_pruned_history()
returns integer
language plpgsql
as $$
declare
  v_table text;
  v_dropped integer := 0;
begin
  for v_table in
    select c.relname from pg_class c
    where c.relnamespace = 'pgflow'::regnamespace and c.relkind = 'r'
      and c.relname ~ '_history_p[0-9]{8}_pruned$'
    order by c.relname
  loop
    execute format('drop table if exists pgflow.%I', v_table);
    v_dropped := v_dropped + 1;
  end loop;
  return v_dropped;
end;
$$;

-- pgflow_queues: the PGMQ queues that pgflow's flows route to, with their priority lanes, by
-- name (the queues whose archives prune and prune_preview take).
create or replace function pgflow.pgflow_queues()
returns table (queue_name text)
language sql
stable
as $$
  select q.queue_name
  from (select s.queue_name from pgflow.steps s
        union
        select pgflow.lane_name(l.queue_name, l.priority) from pgflow.queue_lanes l) q
  where exists (select 1 from pgmq.meta m where m.queue_name = q.queue_name)
  order by 1
$$;

-- prune: deletes, in one transaction,
--   * the days of run history (runs_history and the other history tables, see 12_history.sql)
--     that ended before the cutoff began: each day's partitions are detached whole, however
--     many runs they hold, with the idempotency keys of their runs (archived_keys), for
--     drop_pruned_history to drop (the next prune does, or the caller at once: prune_all). A
--     day goes once all of it is older than the cutoff, so an archived run is kept up to a day
--     longer than p_older_than;
--   * live runs (not archived yet) that completed, failed or were cancelled more than
--     p_older_than ago, with their step states and tasks, at most p_batch_size runs; runs
--     locked by someone else (a late result being stored) are left for the next call;
--   * archived messages of pgflow's queues archived more than p_older_than ago (a live run's
--     too: the archive is history; the queue itself is not touched), at most p_batch_size,
--     oldest first;
--   * workers that stopped more than p_older_than ago.
-- The counts it returns add up both kinds of runs, with their step states and tasks.
-- Call again while it returns p_batch_size runs or archived messages: each call is one
-- transaction of bounded size.
-- Live runs, their tasks and queued messages are never touched. One caller at a time per
-- database (a transaction advisory try-lock): a concurrent caller prunes nothing and gets
-- `busy = true`.
-- Raises PF005 for a negative or missing p_older_than or a p_batch_size below 1.
-- Spent start guards go too (see below).
-- Locks: advisory (namespace, 3); as drop_pruned_history; advisory (namespace, 4), waiting
-- for an archiving batch to end, and the history tables of each day detached (access
-- exclusive, waiting at most 5 s: lock_timeout for the rest of the transaction); then the
-- pruned runs (SKIP LOCKED), then as delete_live_runs; then spent start guards (SKIP LOCKED).
create or replace function pgflow.prune(p_older_than interval, p_batch_size integer default 10000)
returns table (
  busy boolean,
  runs bigint,
  step_states bigint,
  tasks bigint,
  archived_messages bigint,
  workers bigint
)
language plpgsql
as $$
#variable_conflict use_column
declare
  v_cutoff timestamptz;
  v_run_ids uuid[];
  v_queue text;
  v_deleted bigint;
  v_day date;
  v_table text;
  v_counts record;
begin
  v_cutoff := pgflow.prune_cutoff(p_older_than);
  if p_batch_size is null or p_batch_size < 1 then
    raise exception 'prune: batch_size must be at least 1 (got %)',
      coalesce(p_batch_size::text, 'null')
      using errcode = 'PF005';
  end if;

  busy := not pg_try_advisory_xact_lock(pgflow.lock_namespace(), 3);
  runs := 0; step_states := 0; tasks := 0; archived_messages := 0; workers := 0;
  if busy then
    return next;
    return;
  end if;

  -- Whole days of history, oldest first, while all of the day is before the cutoff: each
  -- day's partitions are detached and renamed `<name>_pruned`, which takes milliseconds, and
  -- dropped by drop_pruned_history in a transaction of their own, which frees their files
  -- (most of a drop's time) while no reader of the history waits. A detach waits at most 5 s
  -- for the readers of the history before it (a long query of a dashboard, say): the readers
  -- that came after it queue behind it meanwhile. The prune then fails, and the next one takes
  -- the day. Tables a prune before left detached go first.
  perform pgflow.drop_pruned_history();
  perform pg_advisory_xact_lock(pgflow.lock_namespace(), 4);
  perform set_config('lock_timeout', '5s', true);
  for v_day in
    select p.day from pgflow.history_partition_days() p order by p.day
  loop
    exit when (v_day + 1)::timestamp at time zone 'UTC' > v_cutoff;
    foreach v_table in array pgflow.history_tables() loop
      execute format('alter table pgflow.%I detach partition pgflow.%I',
                     v_table || '_history', pgflow.history_partition(v_table, v_day));
      execute format('alter table pgflow.%I rename to %I',
                     pgflow.history_partition(v_table, v_day),
                     pgflow.history_partition(v_table, v_day) || '_pruned');
    end loop;
    with dropped as (delete from pgflow.history_days d where d.day = v_day returning d.*)
    select coalesce(sum(x.runs), 0) as runs, coalesce(sum(x.step_states), 0) as step_states,
           coalesce(sum(x.tasks), 0) as tasks
    into v_counts
    from dropped x;
    runs := runs + v_counts.runs;
    step_states := step_states + v_counts.step_states;
    tasks := tasks + v_counts.tasks;
    delete from pgflow.archived_keys k
    where k.run_ended_at < (v_day + 1)::timestamp at time zone 'UTC';
  end loop;

  -- Ended runs have no live tasks (ending a run fails its live tasks) and no queued messages;
  -- a late result for one of them locks the run first, so SKIP LOCKED leaves it to finish.
  select array_agg(r.run_id) into v_run_ids
  from (
    select r.run_id
    from pgflow.runs r
    where pgflow.run_prunable(r.status, r.completed_at, r.failed_at, r.cancelled_at, v_cutoff)
    limit p_batch_size
    for update of r skip locked
  ) r;

  if v_run_ids is not null then
    select * into v_counts from pgflow.delete_live_runs(v_run_ids);
    runs := runs + v_counts.runs;
    step_states := step_states + v_counts.step_states;
    tasks := tasks + v_counts.tasks;
  end if;

  -- PGMQ indexes every archive table by archived_at: the oldest are found by key.
  for v_queue in
    select q.queue_name from pgflow.pgflow_queues() q
  loop
    exit when archived_messages >= p_batch_size;
    execute format(
      'delete from pgmq.%1$I where msg_id in (select msg_id from pgmq.%1$I
         where archived_at < $1 order by archived_at limit $2)',
      'a_' || v_queue)
      using v_cutoff, p_batch_size - archived_messages;
    get diagnostics v_deleted = row_count;
    archived_messages := archived_messages + v_deleted;
  end loop;

  delete from pgflow.workers w where w.stopped_at < v_cutoff;
  get diagnostics workers = row_count;

  -- Start guards that hold nothing back any more and were last taken before the cutoff: a
  -- throttle or debounce window that ended before it (a debounce's run begun), a singleton
  -- key whose run ended before it, or is gone, with no run in its line. A key a start holds is
  -- left for the next prune; a start that meets a deleted key takes it as new.
  delete from pgflow.start_guards g
  where g.ctid = any(array(
    select x.ctid from pgflow.start_guards x
    where x.taken_at < v_cutoff
      and case when x.kind = 'singleton' then
                 not exists (select 1 from pgflow.runs r
                             where r.run_id = x.run_id
                               and (r.status = 'started'
                                    or coalesce(r.completed_at, r.failed_at, r.cancelled_at)
                                       >= v_cutoff))
                 and not exists (select 1 from pgflow.singleton_waits w
                                 where w.scope = x.scope and w.key = x.key)
               else x.ends_at < v_cutoff
                 and not exists (select 1 from pgflow.deferred_runs d
                                 where d.run_id = x.run_id)
          end
    limit p_batch_size
    for update skip locked));

  return next;
end;
$$;

-- prune_preview: what prune with the same p_older_than would delete over all its batches, as
-- counts, deleting nothing: ended runs (with their step states and tasks: the live ones older
-- than the cutoff, and the archived ones of the days that ended before it), archived messages
-- of pgflow's queues and stopped workers older than the cutoff. `busy` is always false. Runs a
-- late result holds at the moment are counted; prune would leave them for its next call.
-- Raises PF005 for a negative or missing p_older_than.
-- Locks: none (reads only).
create or replace function pgflow.prune_preview(p_older_than interval)
returns table (
  busy boolean,
  runs bigint,
  step_states bigint,
  tasks bigint,
  archived_messages bigint,
  workers bigint
)
language plpgsql
stable
as $$
#variable_conflict use_column
declare
  v_cutoff timestamptz;
  v_queue text;
  v_count bigint;
  v_counts record;
begin
  v_cutoff := pgflow.prune_cutoff(p_older_than);
  busy := false;

  with prunable as (
    select r.run_id from pgflow.runs r
    where pgflow.run_prunable(r.status, r.completed_at, r.failed_at, r.cancelled_at, v_cutoff)
  )
  select (select count(*) from prunable),
         (select count(*) from pgflow.step_states ss join prunable p on p.run_id = ss.run_id),
         (select count(*) from pgflow.step_tasks t join prunable p on p.run_id = t.run_id)
  into runs, step_states, tasks;

  -- The days of history prune would drop, as counted when their runs were archived.
  select coalesce(sum(d.runs), 0) as runs, coalesce(sum(d.step_states), 0) as step_states,
         coalesce(sum(d.tasks), 0) as tasks
  into v_counts
  from pgflow.history_days d
  where (d.day + 1)::timestamp at time zone 'UTC' <= v_cutoff;
  runs := runs + v_counts.runs;
  step_states := step_states + v_counts.step_states;
  tasks := tasks + v_counts.tasks;

  archived_messages := 0;
  for v_queue in
    select q.queue_name from pgflow.pgflow_queues() q
  loop
    execute format('select count(*) from pgmq.%I where archived_at < $1', 'a_' || v_queue)
      into v_count using v_cutoff;
    archived_messages := archived_messages + v_count;
  end loop;

  select count(*) into workers from pgflow.workers w where w.stopped_at < v_cutoff;
  return next;
end;
$$;
