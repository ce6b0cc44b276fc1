-- Trends: what changes over time, sampled once a minute for the dashboard's charts (the tables:
-- migrations 20261231000100_queue_samples.sql and 20270101000100_run_trends.sql).

-- sample_trends: unless a pass ran less than p_every_seconds ago (in this or another process),
-- records a pass and
-- * every queue's depth, oldest message's age and tasks in flight now (as queue_overview reads
--   them);
-- * per flow and minute, the runs that completed and failed. The minutes from two before the
--   last pass (at most 15 minutes back) to the current one are counted again, so a transaction
--   that ended a run late in a minute and committed after the last pass is counted, and the
--   current minute is shown before it is over;
-- and deletes what is older than p_keep_seconds. Returns whether it sampled (false: not due, or
-- another process is at it).
-- Locks: an advisory transaction lock (pgflow.lock_namespace(), 5), tried and never waited for.
create or replace function pgflow.sample_trends(p_every_seconds integer default 60,
                                                p_keep_seconds integer default 86400)
returns boolean
language plpgsql
set jit = off
as $$
declare
  v_now timestamptz := date_trunc('second', pgflow.clock());
  v_last timestamptz;
  v_from timestamptz;
begin
  if p_every_seconds < 1 or p_keep_seconds < p_every_seconds then
    raise exception 'sample_trends: sample at least every second and keep at least one period '
      '(every % s, keep % s)', p_every_seconds, p_keep_seconds
      using errcode = '22023';
  end if;
  if not pg_try_advisory_xact_lock(pgflow.lock_namespace(), 5) then
    return false;
  end if;
  select max(p.sampled_at) into v_last from pgflow.trend_passes p;
  if v_last > v_now - make_interval(secs => p_every_seconds) then
    return false;
  end if;
  v_from := greatest(date_trunc('minute', coalesce(v_last, v_now)) - interval '2 minutes',
                     date_trunc('minute', v_now) - interval '15 minutes');
  insert into pgflow.trend_passes (sampled_at, counted_from) values (v_now, v_from);

  insert into pgflow.queue_samples (sampled_at, queue_name, depth, oldest_message_age_seconds,
                                    in_flight)
  select v_now, q.queue_name, q.depth, q.oldest_message_age_seconds, q.in_flight_tasks
  from pgflow.queue_overview() q
  -- Only when a pass's record was deleted by hand within the second: the newer reading wins.
  on conflict (sampled_at, queue_name) do update
    set depth = excluded.depth,
        oldest_message_age_seconds = excluded.oldest_message_age_seconds,
        in_flight = excluded.in_flight;

  delete from pgflow.run_samples s where s.minute >= v_from;
  insert into pgflow.run_samples (minute, flow_slug, completed, failed)
  select date_trunc('minute', coalesce(r.completed_at, r.failed_at)), r.flow_slug,
         count(*) filter (where r.status = 'completed'),
         count(*) filter (where r.status = 'failed')
  from pgflow.runs r
  where r.status in ('completed', 'failed')
    and coalesce(r.completed_at, r.failed_at) >= v_from
  group by 1, 2;

  delete from pgflow.trend_passes p
  where p.sampled_at < v_now - make_interval(secs => p_keep_seconds);
  delete from pgflow.queue_samples s
  where s.sampled_at < v_now - make_interval(secs => p_keep_seconds);
  delete from pgflow.run_samples s
  where s.minute < v_now - make_interval(secs => p_keep_seconds);
  delete from pgflow.task_samples s
  where s.period_start < v_now - make_interval(secs => p_keep_seconds);
  return true;
end;
$$;

-- add_task_durations: adds the handler durations a worker process measured since its last call
-- to the current minute's and ten minutes' rows of each step (creating them). p_steps is a JSON
-- array of {"flow": slug, "step": slug, "completed": n, "buckets": [count, ...]}, the buckets on
-- the workers' scale (migration 20270101000100); counts add up bucket by bucket, a shorter
-- array counting as zeros past its end; each step at most once per call. Returns how many
-- steps it added to.
-- Locks: the rows of each step's current periods in pgflow.task_samples (processes adding to
-- the same step at once take turns; each holds them for its own short transaction).
create or replace function pgflow.add_task_durations(p_steps jsonb)
returns integer
language plpgsql
as $$
declare
  v_added integer;
begin
  if jsonb_typeof(p_steps) is distinct from 'array' then
    raise exception 'add_task_durations: expected a JSON array of steps, got %',
      coalesce(jsonb_typeof(p_steps), 'null')
      using errcode = '22023';
  end if;
  insert into pgflow.task_samples as t (period_seconds, period_start, flow_slug, step_slug,
                                        completed, buckets)
  select p.seconds,
         date_bin(make_interval(secs => p.seconds), pgflow.clock(), timestamptz 'epoch'),
         d.flow, d.step, d.completed, d.buckets
  from jsonb_to_recordset(p_steps) as d(flow text, step text, completed integer,
                                         buckets integer[]),
       (values (60), (600)) as p(seconds)
  on conflict (period_seconds, period_start, flow_slug, step_slug) do update
    set completed = t.completed + excluded.completed,
        buckets = (select array_agg(coalesce(a, 0) + coalesce(b, 0) order by n)
                   from unnest(t.buckets, excluded.buckets) with ordinality as u(a, b, n));
  get diagnostics v_added = row_count;
  return v_added / 2;
end;
$$;
