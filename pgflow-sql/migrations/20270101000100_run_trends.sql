-- Run and task trends (issue 40): how many runs of each flow completed and failed in each
-- minute, and how long each step's handlers took in each minute, for the dashboard's charts.
-- Kept a day: a chart reads at most 1,440 rows a flow or step, however many runs the history
-- holds. Like the queue samples, the run counts are taken once a minute by one process's
-- maintenance (pgflow.sample_trends, which replaces sample_queues). The durations are measured
-- by the workers, which add them up in memory and write them at each maintenance pass
-- (pgflow.add_task_durations): a task's completion writes nothing more.

-- The passes of the sampler, one row each: when the last one was (the next is due a period
-- later), and from which minute it counted the runs and tasks again. The earliest
-- `counted_from` is where the charts' data begins: a minute after it with no row had no runs.
create table pgflow.trend_passes (
  sampled_at timestamptz primary key,
  counted_from timestamptz not null
);

-- Runs that ended in a minute, per flow. Cancelled runs are not counted: a person ended them.
create table pgflow.run_samples (
  minute timestamptz not null,
  flow_slug text not null,
  completed integer not null,
  failed integer not null,
  primary key (minute, flow_slug)
);

-- Tasks whose handler succeeded in a period, per step, and a histogram of how long their
-- handlers ran: `buckets[i]` (1-based) counts the durations in bucket i - 1 of the workers'
-- scale (a quarter of a doubling wide from 0.1 ms, so a percentile read from it is within
-- about 9 %). Every process adds its own counts to the period's row. Each duration is counted
-- in a minute (`period_seconds` 60) and in ten minutes (600): a day's chart reads 144 rows a
-- step, not 1,440 (decoding a day of minutes' histograms took 20-40 ms of the page).
create table pgflow.task_samples (
  period_seconds integer not null check (period_seconds in (60, 600)),
  period_start timestamptz not null,
  flow_slug text not null,
  step_slug text not null,
  completed integer not null,
  buckets integer[] not null,
  primary key (period_seconds, period_start, flow_slug, step_slug)
);

-- The sampler finds the runs that ended in the last few minutes. A run enters this index when
-- it completes or fails (an update that was never heap-only: its status is in the predicates
-- of the other partial indexes), so starting a run and every step before its end pay nothing.
create index runs_ended_idx on pgflow.runs ((coalesce(completed_at, failed_at)))
  where status in ('completed', 'failed');

-- The queue sampler is now part of sample_trends; its samples and table stay as they are.
drop function if exists pgflow.sample_queues(integer, integer);
