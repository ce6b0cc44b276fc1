-- Reads for the dashboard (and any tool that lists runs): a page of runs, newest first, of one
-- flow, of every flow, of one status, or within a time range, stays a short index walk however
-- many ended runs the tables hold.
--
-- A page of every flow's runs walks this index once per flow and merges (flows are few, runs
-- are many), so one index serves both the per-flow and the all-flows listing. Neither column
-- ever changes, so a run's status updates stay heap-only.
create index runs_flow_started_idx on pgflow.runs (flow_slug, started_at, run_id);

-- Failed and cancelled runs are few among many completed ones: filtering the listing above by
-- them would walk every completed run. A run enters this index only when it fails or is
-- cancelled, so starting and completing runs pay nothing for it.
create index runs_unsuccessful_idx on pgflow.runs (flow_slug, status, started_at, run_id)
  where status in ('failed', 'cancelled');

-- queue_overview gains each queue's total of messages ever sent (for throughput, read twice) and
-- its live workers; its return type changes, so the old function is dropped here and the
-- functions file creates the new one.
drop function if exists pgflow.queue_overview();
