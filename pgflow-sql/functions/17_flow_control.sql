-- Flow control: what holds work back. A paused queue is claimed from by no one (read_and_start_tasks,
-- start_tasks and the claims of complete_and_claim_tasks check pgflow.paused_queues); its
-- messages stay, runs keep starting and tasks keep being queued on it, and resuming picks them
-- all up. Operators pause and resume.

-- pause_queue: pauses the queue p_queue_name, which a flow must route to. Claims that began
-- before the pause committed finish; none begins after. Returns false when it was already
-- paused (its time and reason are kept). Raises PF015 for a queue no flow routes to.
-- Locks: the queue's row of paused_queues.
create or replace function pgflow.pause_queue(p_queue_name text, p_reason text default null)
returns boolean
language plpgsql
as $$
declare
  v_paused boolean;
begin
  if not exists (select 1 from pgflow.steps s where s.queue_name = p_queue_name) then
    raise exception 'no flow routes to a queue `%`; `pgflow status` lists the queues',
      coalesce(p_queue_name, '<null>')
      using errcode = 'PF015',
            detail = jsonb_build_object('queue_name', p_queue_name)::text;
  end if;
  insert into pgflow.paused_queues (queue_name, reason)
  values (p_queue_name, pgflow.bounded_error(p_reason))
  on conflict (queue_name) do nothing;
  get diagnostics v_paused = row_count;
  return v_paused;
end;
$$;

-- resume_queue: lets workers claim from p_queue_name again and wakes the idle ones. Returns
-- false when it was not paused.
-- Locks: the queue's row of paused_queues.
create or replace function pgflow.resume_queue(p_queue_name text)
returns boolean
language plpgsql
as $$
declare
  v_resumed boolean;
begin
  delete from pgflow.paused_queues q where q.queue_name = p_queue_name;
  get diagnostics v_resumed = row_count;
  if v_resumed then
    perform pgflow.notify_queue(p_queue_name);
  end if;
  return v_resumed;
end;
$$;
