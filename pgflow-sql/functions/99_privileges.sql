-- Privileges: who may do what. Applied last, after every function exists, and again whenever
-- the function files change (a `create or replace` resets a function's SECURITY and SET
-- clauses, so they are set here, after it).
--
-- Three group roles (NOLOGIN), shared by every database of the cluster that has pgflow; a login
-- role gets one with `pgflow grant <login> --as worker|client|operator` (or `grant
-- pgflow_worker to <login>`):
--
--   pgflow_worker    registers, beats and stops workers, compiles or verifies and activates
--                    its flows, claims, completes and fails tasks, requeues stalled ones and
--                    runs the statistics maintenance. It reads no table: handler inputs reach
--                    it only through the claim.
--   pgflow_client    starts runs and reads runs, their steps, tasks and outputs, and the flow
--                    definitions.
--   pgflow_operator  everything a client may, plus aliases, rollouts, drain status, worker
--                    deprecation, retention (prune), deploying flows and the worker and queue
--                    overviews.
--
-- Every entry point runs as the schema's owner (SECURITY DEFINER) with a pinned search_path,
-- so no role but the owner needs, or has, any privilege on the tables for writing; PUBLIC has
-- nothing on the pgflow schema, its functions or PGMQ. An installer that may not create roles
-- (neither superuser nor CREATEROLE) installs without them and says so; the entry points are
-- then for the owner alone until someone who may creates the roles and installs again.

do $privileges$
declare
  v_role text;
  v_function record;
  v_may_create_roles boolean;
  v_roles_exist boolean;
begin
  select r.rolsuper or r.rolcreaterole into v_may_create_roles
  from pg_roles r where r.rolname = current_user;

  foreach v_role in array array['pgflow_worker', 'pgflow_client', 'pgflow_operator'] loop
    if not exists (select 1 from pg_roles where rolname = v_role) and v_may_create_roles then
      begin
        execute format('create role %I nologin', v_role);
      exception when duplicate_object or unique_violation then
        null; -- another database's installer created it meanwhile
      end;
    end if;
  end loop;

  select count(*) = 3 into v_roles_exist
  from pg_roles
  where rolname in ('pgflow_worker', 'pgflow_client', 'pgflow_operator');
  if not v_roles_exist then
    raise notice 'pgflow: the roles pgflow_worker, pgflow_client and pgflow_operator do not '
      'exist and % may not create them; pgflow works for its owner only until a role with '
      'CREATEROLE installs again', current_user;
  end if;

  -- PUBLIC gets nothing: not the schemas, not the functions.
  revoke all on schema pgflow from public;
  revoke all on all functions in schema pgflow from public;
  revoke all on all tables in schema pgflow from public;
  alter default privileges in schema pgflow revoke execute on functions from public;
  if exists (select 1 from pg_namespace where nspname = 'pgmq'
             and pg_has_role(current_user, nspowner, 'usage')) then
    revoke all on schema pgmq from public;
    revoke all on all functions in schema pgmq from public;
    alter default privileges in schema pgmq revoke execute on functions from public;
  end if;

  -- Each entry point: run as the owner, resolving names only in the schemas it was written
  -- for (pg_temp last, so no temporary object can stand in for one of them).
  for v_function in
    select p.oid::regprocedure as signature,
           case
             when p.proname in ('define_flow', 'activate_flow', 'define_schedule') then
               array['pgflow_worker', 'pgflow_operator']
             when p.proname = 'clock' then
               array['pgflow_worker', 'pgflow_client', 'pgflow_operator']
             when p.proname = 'signal_token' then
               array['pgflow_worker', 'pgflow_client']
             when p.proname in ('register_worker', 'heartbeat', 'function_enabled',
                                'stop_worker', 'mark_lost_workers', 'queue_coverage_gaps',
                                'read_and_start_tasks', 'start_tasks', 'complete_tasks',
                                'next_message_in',
                                'complete_and_claim_tasks', 'claims_at_release', 'fail_tasks',
                                'stored_completions', 'requeue_stalled_tasks',
                                'refresh_statistics', 'tables_to_vacuum', 'lock_namespace',
                                'schedules_to_fire', 'fire_schedule', 'request_wakeups',
                                'withdraw_wakeups', 'expire_waits', 'signal_payload',
                                'settle_subflows', 'release_capped_tasks',
                                'begin_deferred_runs', 'sample_trends',
                                'add_task_durations', 'archive_runs') then
               array['pgflow_worker']
             when p.proname in ('start_flows', 'start_flow', 'start_alias_typed',
                                'waits_its_turn',
                                'run_step_states', 'subscribe_events',
                                'unsubscribe_events', 'send_signal', 'emit_events',
                                'emit_event', 'send_signal_by_token') then
               array['pgflow_client']
             when p.proname in ('set_alias', 'alias_state', 'drain_status', 'begin_rollout',
                                'functions_serving_queues', 'rollout_progress',
                                'finish_rollout', 'deprecate_workers', 'prune', 'prune_preview',
                                'drop_pruned_history',
                                'queue_overview', 'cancel_runs', 'cancel_matching', 'retry_runs',
                                'retry_matching', 'resume_run', 'resume_matching',
                                'delete_flow', 'pause_schedule', 'delete_schedule',
                                'trigger_schedule', 'schedule_list', 'worker_is_live',
                                'pause_queue', 'resume_queue', 'pause_flow',
                                'resume_flow', 'set_priority_aging',
                                'set_queue_concurrency') then
               array['pgflow_operator']
           end as roles
    from pg_proc p
    where p.pronamespace = 'pgflow'::regnamespace
  loop
    continue when v_function.roles is null;
    -- A constant, the engine's clock and a rule over a row's own columns, harmless to run as
    -- the caller; as SECURITY DEFINER they could not be inlined into the queries that use them.
    -- The maintenance functions name tables as `regclass` text, which must stay
    -- schema-qualified: their path holds no schema of ours.
    if v_function.signature::text not in (
         'pgflow.lock_namespace()', 'pgflow.clock()',
         'pgflow.worker_is_live(timestamp with time zone,timestamp with time zone)') then
      execute format('alter function %s security definer set search_path = %s',
                     v_function.signature,
                     case when v_function.signature::text like any (array[
                            'pgflow.refresh_statistics(%', 'pgflow.tables_to_vacuum(%'])
                          then 'pg_catalog, pg_temp'
                          else 'pg_catalog, pgflow, pgmq, pg_temp' end);
    end if;
    if v_roles_exist then
      foreach v_role in array v_function.roles loop
        execute format('grant execute on function %s to %I', v_function.signature, v_role);
      end loop;
    end if;
  end loop;

  if v_roles_exist then
    grant usage on schema pgflow to pgflow_worker, pgflow_client, pgflow_operator;
    -- Every part checks the schema version before it starts.
    grant select on pgflow.schema_migrations, pgflow.schema_functions
      to pgflow_worker, pgflow_client, pgflow_operator;
    -- Clients read runs and what they produced, and the definitions they ran.
    grant select on pgflow.runs, pgflow.step_states, pgflow.step_tasks, pgflow.task_attempts,
                    pgflow.flows, pgflow.steps, pgflow.deps, pgflow.aliases, pgflow.waits,
                    pgflow.signals, pgflow.held_tasks, pgflow.cap_slots, pgflow.paused_flows,
                    pgflow.parked_tasks, pgflow.queue_lanes, pgflow.queue_aging,
                    pgflow.start_guards, pgflow.deferred_runs, pgflow.singleton_waits,
                    pgflow.singleton_runs, pgflow.rate_keys, pgflow.rate_tokens,
                    pgflow.rate_waits, pgflow.queue_caps, pgflow.queue_slots,
                    pgflow.queue_samples, pgflow.trend_passes, pgflow.run_samples,
                    pgflow.task_samples, pgflow.runs_history, pgflow.step_states_history,
                    pgflow.step_tasks_history, pgflow.task_attempts_history,
                    pgflow.archived_keys, pgflow.history_days, pgflow.all_runs,
                    pgflow.all_step_states, pgflow.all_step_tasks, pgflow.all_task_attempts
      to pgflow_client;
    -- Operators are clients too, and read the workers, rollouts and alias history.
    if not pg_has_role('pgflow_operator', 'pgflow_client', 'member') then
      begin
        grant pgflow_client to pgflow_operator;
      exception when insufficient_privilege then
        raise notice 'pgflow: % may not make pgflow_operator a member of pgflow_client; run '
          '`grant pgflow_client to pgflow_operator` as a role with CREATEROLE', current_user;
      end;
    end if;
    grant select on pgflow.workers, pgflow.worker_functions, pgflow.rollouts,
                    pgflow.alias_history
      to pgflow_operator;
  end if;
end
$privileges$;
