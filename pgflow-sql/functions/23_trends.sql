-- Trends: samples of what changes over time, for the dashboard's charts (the table: migration
-- 20261231000100_queue_samples.sql).

-- sample_queues: records, for every queue, its depth, its oldest message's age and its tasks in
-- flight now (as queue_overview reads them), unless a sample was taken less than
-- p_every_seconds ago (by this or another process), and deletes the samples older than
-- p_keep_seconds. Returns how many queues it sampled (0: not due, or another process is at it).
-- Locks: an advisory transaction lock (pgflow.lock_namespace(), 5), tried and never waited for.
create or replace function pgflow.sample_queues(p_every_seconds integer default 60,
                                                p_keep_seconds integer default 86400)
returns integer
language plpgsql
as $$
declare
  v_now timestamptz := date_trunc('second', pgflow.clock());
  v_sampled integer;
begin
  if p_every_seconds < 1 or p_keep_seconds < p_every_seconds then
    raise exception 'sample_queues: sample at least every second and keep at least one period '
      '(every % s, keep % s)', p_every_seconds, p_keep_seconds
      using errcode = '22023';
  end if;
  if not pg_try_advisory_xact_lock(pgflow.lock_namespace(), 5) then
    return 0;
  end if;
  if exists (select 1 from pgflow.queue_samples s
             where s.sampled_at > v_now - make_interval(secs => p_every_seconds)) then
    return 0;
  end if;
  insert into pgflow.queue_samples (sampled_at, queue_name, depth, oldest_message_age_seconds,
                                    in_flight)
  select v_now, q.queue_name, q.depth, q.oldest_message_age_seconds, q.in_flight_tasks
  from pgflow.queue_overview() q;
  get diagnostics v_sampled = row_count;
  delete from pgflow.queue_samples s
  where s.sampled_at < v_now - make_interval(secs => p_keep_seconds);
  return v_sampled;
end;
$$;
