//! Typed read queries for operators: what the `pgflow` command (and any other tool that shows
//! a database's state) presents. They only read; none takes a lock.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use crate::engine::{RUN_WAITING, Run};
use crate::error::EngineError;

/// An alias and the concrete flow new runs of it start on.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
pub struct AliasTarget {
    /// The alias.
    pub alias: String,
    /// Its active concrete flow.
    pub flow_slug: String,
    /// That flow's version.
    pub version: i32,
    /// When the alias moved to it.
    pub activated_at: DateTime<Utc>,
}

/// Every alias with its active flow, by alias.
pub async fn aliases(executor: impl PgExecutor<'_>) -> Result<Vec<AliasTarget>, EngineError> {
    let rows = sqlx::query_as(
        "select a.alias, a.flow_slug, f.version, a.activated_at
         from pgflow.aliases a join pgflow.flows f on f.flow_slug = a.flow_slug
         order by a.alias",
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// One PGMQ queue at a glance.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct QueueOverview {
    /// The queue.
    pub queue_name: String,
    /// Messages waiting in it.
    pub depth: i64,
    /// Age of its oldest waiting message, in seconds (`None` when it is empty).
    pub oldest_message_age_seconds: Option<i32>,
    /// Messages ever sent to it (PGMQ's counter; two readings give its rate).
    pub total_messages: i64,
    /// Tasks of the queue that workers have claimed and not finished.
    pub in_flight_tasks: i64,
    /// Workers serving it that are live by the one liveness rule (`pgflow.worker_is_live`:
    /// not stopped, heard from within 30 s), alive or draining.
    pub live_workers: i64,
    /// Whether it is paused: no worker claims from it until it is resumed.
    pub paused: bool,
    /// Its cap of tasks running at once across every worker, if it has one
    /// ([`set_queue_concurrency`](crate::engine::set_queue_concurrency)).
    pub concurrency: Option<i32>,
}

/// Every PGMQ queue of the database, by name, with its depth, its message counter, the tasks in
/// flight on it and its live workers.
pub async fn queues(executor: impl PgExecutor<'_>) -> Result<Vec<QueueOverview>, EngineError> {
    let rows = sqlx::query_as("select * from pgflow.queue_overview()")
        .fetch_all(executor)
        .await?;
    Ok(rows)
}

/// Where the server stands as a streaming replica, read from it alone (the primary is not
/// asked): what the dashboard says of the replica its pages read from.
#[derive(Debug, Clone, Copy, PartialEq, FromRow, serde::Serialize)]
pub struct ReplicaState {
    /// Whether it is in recovery (a standby); `false`: it is a primary.
    pub in_recovery: bool,
    /// Whether it has replayed all the WAL it received (`None` when it streams none).
    pub replayed_all_received: Option<bool>,
    /// Seconds since the last transaction it replayed was committed on the primary (`None`
    /// before it replayed one).
    pub last_replay_age_seconds: Option<f64>,
}

/// Where the server behind `executor` stands as a streaming replica.
pub async fn replica_state(executor: impl PgExecutor<'_>) -> Result<ReplicaState, EngineError> {
    let state = sqlx::query_as(
        "select pg_is_in_recovery() as in_recovery,
                pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() as replayed_all_received,
                extract(epoch from clock_timestamp() - pg_last_xact_replay_timestamp())::float8
                  as last_replay_age_seconds",
    )
    .fetch_one(executor)
    .await?;
    Ok(state)
}

/// What a registered worker is doing, by the one liveness rule, which SQL holds
/// (`pgflow.worker_is_live`: not stopped and heard from within 30 s) and every command, the
/// dashboard and the rollout fence use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerLiveness {
    /// Heard from recently, serving its queue.
    Alive,
    /// Heard from recently, asked to drain and stop (deprecated), finishing its tasks.
    Draining,
    /// Not stopped, but no longer live (silent for 30 s): killed, hung or cut off. Its started
    /// tasks are recovered as stalled once their timeout has passed.
    Stale,
    /// Stopped cleanly.
    Stopped,
    /// Declared lost by the maintenance sweep: silent for ten of its heartbeat intervals (at
    /// least 60 s) without stopping; counted as stopped from then on.
    Lost,
}

impl WorkerLiveness {
    /// `alive`, `draining`, `stale`, `stopped` or `lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Alive => "alive",
            Self::Draining => "draining",
            Self::Stale => "stale",
            Self::Stopped => "stopped",
            Self::Lost => "lost",
        }
    }
}

/// A worker as registered.
#[derive(Debug, Clone, PartialEq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct WorkerEntry {
    /// The worker's id.
    pub worker_id: Uuid,
    /// The queue it serves.
    pub queue_name: String,
    /// Its worker function (the deployment unit a rollout fences).
    pub function_name: String,
    /// The concrete flows in its registry.
    pub flow_slugs: Vec<String>,
    /// Its last heartbeat.
    pub last_heartbeat_at: DateTime<Utc>,
    /// Seconds since its last heartbeat, by the database's clock.
    pub heartbeat_age_seconds: f64,
    /// It has been asked to drain and stop.
    pub deprecated: bool,
    /// It has stopped.
    pub stopped: bool,
    /// When the maintenance sweep declared it lost (it is then stopped too).
    pub lost_at: Option<DateTime<Utc>>,
    /// Whether it is live by the one liveness rule (`pgflow.worker_is_live`).
    pub live: bool,
}

impl WorkerEntry {
    /// What the worker is doing, by the one liveness rule.
    pub fn liveness(&self) -> WorkerLiveness {
        if self.lost_at.is_some() {
            WorkerLiveness::Lost
        } else if self.stopped {
            WorkerLiveness::Stopped
        } else if !self.live {
            WorkerLiveness::Stale
        } else if self.deprecated {
            WorkerLiveness::Draining
        } else {
            WorkerLiveness::Alive
        }
    }
}

/// Which workers [`workers`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerFilter {
    /// Every worker ever registered (until pruned).
    All,
    /// Workers that have not stopped.
    NotStopped,
    /// Live workers (`pgflow.worker_is_live`), alive or draining.
    Live,
}

/// Workers by queue, oldest first.
pub async fn workers(
    executor: impl PgExecutor<'_>,
    filter: WorkerFilter,
) -> Result<Vec<WorkerEntry>, EngineError> {
    let (include_stopped, live_only) = match filter {
        WorkerFilter::All => (true, false),
        WorkerFilter::NotStopped => (false, false),
        WorkerFilter::Live => (false, true),
    };
    let rows = sqlx::query_as(
        "select worker_id, queue_name, function_name, flow_slugs, last_heartbeat_at,
                extract(epoch from pgflow.clock() - last_heartbeat_at)::float8 as heartbeat_age_seconds,
                deprecated_at is not null as deprecated, stopped_at is not null as stopped,
                lost_at, pgflow.worker_is_live(stopped_at, last_heartbeat_at) as live
         from pgflow.workers
         where ($1 or stopped_at is null)
           and (not $2 or pgflow.worker_is_live(stopped_at, last_heartbeat_at))
         order by queue_name, started_at",
    )
    .bind(include_stopped)
    .bind(live_only)
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// Whether the server runs autovacuum (the engine's plans rely on current statistics; without
/// it, workers analyze and vacuum pgflow's tables themselves).
pub async fn autovacuum_enabled(executor: impl PgExecutor<'_>) -> Result<bool, EngineError> {
    let enabled = sqlx::query_scalar("select current_setting('autovacuum')::boolean")
        .fetch_one(executor)
        .await?;
    Ok(enabled)
}

/// What a name the operator typed stands for: a concrete flow, or an alias and the concrete flow
/// it points at now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowName {
    /// A concrete flow's slug.
    Concrete(String),
    /// An alias, and its active concrete flow.
    Alias {
        /// The alias.
        alias: String,
        /// The concrete flow new runs of it start on.
        flow_slug: String,
    },
}

impl FlowName {
    /// The concrete flow it names now.
    pub fn flow_slug(&self) -> &str {
        match self {
            Self::Concrete(slug)
            | Self::Alias {
                flow_slug: slug, ..
            } => slug,
        }
    }
}

/// Resolves `name` as a concrete flow first, then as an alias; `None` when it is neither.
pub async fn resolve_flow_name(
    executor: impl PgExecutor<'_>,
    name: &str,
) -> Result<Option<FlowName>, EngineError> {
    let row: Option<(bool, String)> = sqlx::query_as(
        "select true, flow_slug from pgflow.flows where flow_slug = $1
         union all
         select false, flow_slug from pgflow.aliases where alias = $1
         order by 1 desc limit 1",
    )
    .bind(name)
    .fetch_optional(executor)
    .await?;
    Ok(row.map(|(concrete, flow_slug)| {
        if concrete {
            FlowName::Concrete(flow_slug)
        } else {
            FlowName::Alias {
                alias: name.to_owned(),
                flow_slug,
            }
        }
    }))
}

/// The alias the concrete flow `flow_slug` belongs to (for life), `None` when it is not defined.
pub async fn flow_alias(
    executor: impl PgExecutor<'_>,
    flow_slug: &str,
) -> Result<Option<String>, EngineError> {
    let alias = sqlx::query_scalar("select alias from pgflow.flows where flow_slug = $1")
        .bind(flow_slug)
        .fetch_optional(executor)
        .await?;
    Ok(alias)
}

/// A run's state as listings show and filter it (see [`crate::engine::shown_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShownState {
    /// Started for a later time that has not come yet.
    Scheduled,
    /// Going (not waiting for its time, and not [waiting](Self::Waiting)).
    Started,
    /// Going, with a step that waits (for a signal, an event or the end of a sleep) and none
    /// running or queued (see [`Run::waiting`]).
    Waiting,
    /// Completed.
    Completed,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl ShownState {
    /// `scheduled`, or the status's own name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Started => "started",
            Self::Waiting => "waiting",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// The newest runs, at most `limit` (at least one), of one flow and in one shown state if
/// given. `flow` is a concrete flow or an alias (then: runs of every version of the alias).
pub async fn recent_runs(
    executor: impl PgExecutor<'_>,
    flow_slug: Option<&str>,
    state: Option<ShownState>,
    limit: i64,
) -> Result<Vec<Run>, EngineError> {
    let status = state.map(|s| match s {
        ShownState::Scheduled | ShownState::Waiting => "started",
        other => other.as_str(),
    });
    let (scheduled, waiting) = match state {
        Some(ShownState::Scheduled) => (Some(true), None),
        Some(ShownState::Started) => (Some(false), Some(false)),
        Some(ShownState::Waiting) => (Some(false), Some(true)),
        _ => (None, None),
    };
    // The newest runs of each flow through its index of start times (live and archived runs
    // alike), merged: flows are few, runs are many. The status is a literal of a closed set, so
    // that the planner can prove the partial index of failed and cancelled runs.
    let status = status.map_or_else(|| "true".to_owned(), |s| format!("r.status = '{s}'"));
    let rows = sqlx::query_as(&format!(
        "select r.* from pgflow.flows f
         cross join lateral (
           select r.*, {RUN_WAITING} as waiting from pgflow.all_runs r
           where r.flow_slug = f.flow_slug and {status}
             and ($3::boolean is null or coalesce(r.scheduled_for > pgflow.clock(), false) = $3)
             and ($4::boolean is null or {RUN_WAITING} = $4)
           order by r.started_at desc, r.run_id desc limit $2) r
         where $1::text is null or f.flow_slug = $1 or f.alias = $1
         order by r.started_at desc, r.run_id desc limit $2"
    ))
    .bind(flow_slug)
    .bind(limit.max(1))
    .bind(scheduled)
    .bind(waiting)
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// One step of a run, with its tasks' attempts and first error.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct RunStep {
    /// The step.
    pub step_slug: String,
    /// Its state in the run (`created`, `waiting`, `started`, `completed`, `failed`,
    /// `skipped`, `cancelled`).
    pub status: String,
    /// Why it was skipped (`condition_unmet`, `handler_failed`, `dependency_skipped`,
    /// `timed_out`).
    pub skip_reason: Option<String>,
    /// The queue its tasks go to.
    pub queue_name: String,
    /// How many tasks it has (`None` until it started).
    pub tasks: Option<i32>,
    /// The highest attempt of any of its tasks.
    pub max_attempt: Option<i32>,
    /// How many of its tasks a worker holds now.
    pub running_tasks: i32,
    /// The step's error, or else the first error of one of its tasks.
    pub error: Option<String>,
    /// When its first task started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it completed, failed, was skipped or cancelled.
    pub ended_at: Option<DateTime<Utc>>,
    /// Its output (`None` until it completed).
    pub output: Option<serde_json::Value>,
    /// The size of its output as JSON text, in bytes (`None` until it completed).
    pub output_bytes: Option<i32>,
}

impl RunStep {
    /// Its state as people are shown it: `queued` for a started step none of whose tasks a
    /// worker holds, else its status (see [`crate::engine::shown_step_status`]).
    pub fn shown_status(&self) -> &str {
        crate::engine::shown_step_status(&self.status, self.running_tasks)
    }
}

/// The runs whose id starts with `prefix` (hex digits, dashes ignored, as a run id is
/// printed), at most `limit`, by id. An empty or non-hex prefix matches none.
pub async fn runs_with_id_prefix(
    executor: impl PgExecutor<'_>,
    prefix: &str,
    limit: i64,
) -> Result<Vec<Uuid>, EngineError> {
    let digits: String = prefix.chars().filter(|c| *c != '-').collect();
    if digits.is_empty() || digits.len() > 32 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return Ok(Vec::new());
    }
    let bound = |fill: char| {
        let mut text = digits.to_ascii_lowercase();
        text.extend(std::iter::repeat_n(fill, 32 - digits.len()));
        Uuid::parse_str(&text)
    };
    let (Ok(lowest), Ok(highest)) = (bound('0'), bound('f')) else {
        return Ok(Vec::new());
    };
    let ids = sqlx::query_scalar(
        "select run_id from pgflow.all_runs where run_id between $1 and $2 order by run_id limit $3",
    )
    .bind(lowest)
    .bind(highest)
    .bind(limit.max(1))
    .fetch_all(executor)
    .await?;
    Ok(ids)
}

/// A step of a run that waits: for a signal, an event by key, or the end of a sleep.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct RunWait {
    /// The step.
    pub step_slug: String,
    /// What it waits for: `signal` (by run id), `event` (by key), `sleep` or `subflow` (its
    /// child runs).
    pub reason: String,
    /// The signal it waits for (`None` for a sleep).
    pub signal_name: Option<String>,
    /// The key an event reaches it by, when it waits by key.
    pub signal_key: Option<String>,
    /// When it began to wait.
    pub waiting_since: DateTime<Utc>,
    /// When its wait ends: a sleep's wake time, or when a wait for a signal times out
    /// (`None`: it waits for ever).
    pub deadline: Option<DateTime<Utc>>,
}

impl RunWait {
    /// Whether it sleeps (its deadline is its wake time) rather than waits for a signal.
    pub fn sleeps(&self) -> bool {
        self.reason == "sleep"
    }
}

/// What a wait `w` (a row of `pgflow.waits`) waits for, as listings and gauges name it.
const WAIT_REASON: &str = "(case when w.kind in ('sleep', 'subflow') then w.kind \
      when w.signal_key is not null then 'event' else 'signal' end)";

/// How many steps of one flow wait, for one reason.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct WaitingSteps {
    /// The concrete flow.
    pub flow_slug: String,
    /// `signal` (by run id), `event` (by key), `sleep` or `subflow`; or `turn` for runs that
    /// wait in a singleton key's line (they have no step yet: `steps` is 0).
    pub reason: String,
    /// How many of its steps wait now.
    pub steps: i64,
    /// How many of its runs have a step that waits now.
    pub runs: i64,
}

/// The steps waiting now, per flow and reason, with a zero for every flow and reason with none
/// (so that a gauge fed from it falls back to zero).
pub async fn waiting_steps(
    executor: impl PgExecutor<'_>,
) -> Result<Vec<WaitingSteps>, EngineError> {
    let rows = sqlx::query_as(&format!(
        "select f.flow_slug, r.reason, count(w.run_id) as steps,
                count(distinct w.run_id) as runs
         from pgflow.flows f
         cross join (values ('signal'), ('event'), ('sleep'), ('subflow')) as r(reason)
         left join pgflow.waits w on w.flow_slug = f.flow_slug and {WAIT_REASON} = r.reason
         group by f.flow_slug, r.reason
         union all
         select f.flow_slug, 'turn', 0,
                (select count(*) from pgflow.singleton_waits l
                 join pgflow.runs x on x.run_id = l.run_id
                 where x.flow_slug = f.flow_slug and x.status = 'started')
         from pgflow.flows f
         order by 1, 2"
    ))
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// The tasks that hold a slot of the cap of step `s` (a row of `pgflow.steps`), for the key
/// `key` (an SQL expression) or, without one, for every key: slots whose holder has not ended,
/// as `pgflow.release_held_tasks` decides.
fn cap_running(key: Option<&str>) -> String {
    let of_key = key.map_or_else(String::new, |key| format!("and cs.cap_key = {key}"));
    format!(
        "(select count(*) from pgflow.cap_slots cs \
          where cs.flow_slug = s.flow_slug and cs.step_slug = s.step_slug {of_key} \
            and exists (select 1 from pgflow.step_tasks t \
                        where t.run_id = cs.run_id and t.step_slug = cs.step_slug \
                          and t.task_index = cs.task_index \
                          and t.status in ('queued', 'started')))"
    )
}

/// Tasks of a held-back step that wait, `h` being a row of `pgflow.held_tasks`: those whose task
/// is still queued (a task cancelled while held leaves its row until the next sweep).
const HELD_LIVE: &str = "exists (select 1 from pgflow.step_tasks t \
      where t.run_id = h.run_id and t.step_slug = h.step_slug and t.task_index = h.task_index \
        and t.status = 'queued')";

/// A paused flow (`pgflow.pause_flow`) and the tasks its pause holds back.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct PausedFlow {
    /// The concrete flow.
    pub flow_slug: String,
    /// Since when it is paused.
    pub paused_at: DateTime<Utc>,
    /// Why, as the pause said.
    pub reason: Option<String>,
    /// Its tasks parked by the workers that met them (they run once it is resumed).
    pub parked_tasks: i64,
}

/// The paused flows, by slug.
pub async fn paused_flows(executor: impl PgExecutor<'_>) -> Result<Vec<PausedFlow>, EngineError> {
    let rows = sqlx::query_as(
        "select p.flow_slug, p.paused_at, p.reason,
                (select count(*) from pgflow.parked_tasks k where k.flow_slug = p.flow_slug)
                  as parked_tasks
         from pgflow.paused_flows p
         order by p.flow_slug",
    )
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// A step of a run whose tasks wait for a slot of the step's concurrency cap.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct RunHold {
    /// The step.
    pub step_slug: String,
    /// The key its cap applies to ("" for a cap without `concurrency_key`, or a missing key).
    pub cap_key: String,
    /// Whether the cap applies per key (`concurrency_key`).
    pub keyed: bool,
    /// The cap: the most tasks (of the key) at once.
    pub cap: i32,
    /// How many of this run's tasks of the step wait.
    pub held: i64,
    /// How many tasks (of any run) hold the key's slots now.
    pub running: i64,
}

impl RunHold {
    /// Why its tasks wait, in words: "key `acme` is at its cap of 2 (2 running)".
    pub fn reason(&self) -> String {
        let whose = if self.keyed {
            format!("key `{}` is", self.cap_key)
        } else {
            "the step is".to_owned()
        };
        format!(
            "{whose} at its cap of {} ({} running)",
            self.cap, self.running
        )
    }
}

/// The steps of a run whose tasks wait for a slot of their step's concurrency cap, in the flow's
/// step order.
pub async fn run_holds(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
) -> Result<Vec<RunHold>, EngineError> {
    let rows = sqlx::query_as(&format!(
        "select h.step_slug, h.cap_key, s.concurrency_key_path is not null as keyed,
                s.concurrency_limit as cap, count(*) as held, {running} as running
         from pgflow.held_tasks h
         join pgflow.steps s on s.flow_slug = h.flow_slug and s.step_slug = h.step_slug
         where h.run_id = $1 and s.concurrency_limit is not null and {HELD_LIVE}
         group by s.flow_slug, s.step_slug, s.step_index, h.step_slug, h.cap_key,
                  s.concurrency_key_path, s.concurrency_limit
         order by s.step_index, h.cap_key",
        running = cap_running(Some("h.cap_key")),
    ))
    .bind(run_id)
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// One key of a capped step: its cap, the tasks holding its slots, and those waiting for one.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct CapUse {
    /// The concrete flow.
    pub flow_slug: String,
    /// The capped step.
    pub step_slug: String,
    /// The key ("" for a cap without `concurrency_key`, or a missing key).
    pub cap_key: String,
    /// Whether the cap applies per key.
    pub keyed: bool,
    /// The cap.
    pub cap: i32,
    /// Tasks holding the key's slots now.
    pub running: i64,
    /// Tasks waiting for one.
    pub held: i64,
    /// Since when the longest-waiting of them waits.
    pub oldest_held_at: Option<DateTime<Utc>>,
}

/// The keys of capped steps that have tasks running or waiting, those with the most waiting
/// first, at most `limit`.
pub async fn cap_use(
    executor: impl PgExecutor<'_>,
    limit: i64,
) -> Result<Vec<CapUse>, EngineError> {
    let rows = sqlx::query_as(&format!(
        "select * from (
           select s.flow_slug, s.step_slug, k.cap_key,
                  s.concurrency_key_path is not null as keyed, s.concurrency_limit as cap,
                  {running} as running,
                  (select count(*) from pgflow.held_tasks h
                   where h.flow_slug = s.flow_slug and h.step_slug = s.step_slug
                     and h.cap_key = k.cap_key and {HELD_LIVE}) as held,
                  (select min(h.held_at) from pgflow.held_tasks h
                   where h.flow_slug = s.flow_slug and h.step_slug = s.step_slug
                     and h.cap_key = k.cap_key and {HELD_LIVE}) as oldest_held_at
           from pgflow.steps s
           cross join lateral (
             select cs.cap_key from pgflow.cap_slots cs
             where cs.flow_slug = s.flow_slug and cs.step_slug = s.step_slug
             union
             select h.cap_key from pgflow.held_tasks h
             where h.flow_slug = s.flow_slug and h.step_slug = s.step_slug
           ) k
           where s.concurrency_limit is not null
         ) u
         where u.running > 0 or u.held > 0
         order by u.held desc, u.running desc, u.flow_slug, u.step_slug, u.cap_key
         limit $1",
        running = cap_running(Some("k.cap_key")),
    ))
    .bind(limit.max(1))
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// The tasks of one capped step, over all its keys: those holding a slot and those waiting.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct HeldTasks {
    /// The concrete flow.
    pub flow_slug: String,
    /// The capped step.
    pub step_slug: String,
    /// Tasks holding a slot now.
    pub running: i64,
    /// Tasks waiting for one.
    pub held: i64,
}

/// Every capped step with its running and waiting tasks (zero included, so that a gauge fed
/// from it falls back to zero).
pub async fn held_tasks(executor: impl PgExecutor<'_>) -> Result<Vec<HeldTasks>, EngineError> {
    let rows = sqlx::query_as(&format!(
        "select s.flow_slug, s.step_slug, {running} as running,
                (select count(*) from pgflow.held_tasks h
                 where h.flow_slug = s.flow_slug and h.step_slug = s.step_slug
                   and {HELD_LIVE}) as held
         from pgflow.steps s
         where s.concurrency_limit is not null
         order by s.flow_slug, s.step_slug",
        running = cap_running(None),
    ))
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// A rate limit's period in words: `500ms`, `1s`, `2m`, `1h`, `1d`, or milliseconds when it is
/// no whole number of a larger unit.
pub fn period_text(period_ms: i32) -> String {
    let ms = i64::from(period_ms);
    [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ]
    .into_iter()
    .find(|(unit, _)| ms >= *unit && ms % unit == 0)
    .map_or_else(
        || format!("{ms}ms"),
        |(unit, name)| format!("{}{name}", ms / unit),
    )
}

/// A step of a run whose tasks wait for a token of the step's rate limit.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct RunRateWait {
    /// The step.
    pub step_slug: String,
    /// The key its limit applies to ("" for a limit without `rate_key`, or a missing key).
    pub rate_key: String,
    /// Whether the limit applies per key (`rate_key`).
    pub keyed: bool,
    /// The most starts (of the key) per period.
    pub rate_limit: i32,
    /// The period, in milliseconds.
    pub period_ms: i32,
    /// How many of this run's tasks of the step wait.
    pub waiting: i64,
    /// When the first of them is due to be claimed again (none: all wait in the key's line
    /// for a token to be sent for).
    pub next_due_at: Option<DateTime<Utc>>,
}

impl RunRateWait {
    /// Why its tasks wait, in words: "key `acme` is at its rate limit of 10 per 1s".
    pub fn reason(&self) -> String {
        let whose = if self.keyed {
            format!("key `{}` is", self.rate_key)
        } else {
            "the step is".to_owned()
        };
        format!(
            "{whose} at its rate limit of {} per {}",
            self.rate_limit,
            period_text(self.period_ms)
        )
    }
}

/// Rate-limited tasks that wait, `w` being a row of `pgflow.rate_waits`: those whose task is
/// still queued (one cancelled while it waited leaves its row until the next sweep).
const RATE_WAIT_LIVE: &str = "exists (select 1 from pgflow.step_tasks t \
      where t.run_id = w.run_id and t.step_slug = w.step_slug and t.task_index = w.task_index \
        and t.status = 'queued')";

/// The steps of a run whose tasks wait for a token of their step's rate limit, in the flow's
/// step order.
pub async fn run_rate_waits(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
) -> Result<Vec<RunRateWait>, EngineError> {
    let rows = sqlx::query_as(&format!(
        "select w.step_slug, w.rate_key, s.rate_key_path is not null as keyed, s.rate_limit,
                s.rate_period_ms as period_ms, count(*) as waiting, min(w.due_at) as next_due_at
         from pgflow.rate_waits w
         join pgflow.steps s on s.flow_slug = w.flow_slug and s.step_slug = w.step_slug
         where w.run_id = $1 and s.rate_limit is not null and {RATE_WAIT_LIVE}
         group by s.step_index, w.step_slug, w.rate_key, s.rate_key_path, s.rate_limit,
                  s.rate_period_ms
         order by s.step_index, w.rate_key"
    ))
    .bind(run_id)
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// One key of a rate-limited step: its limit, its starts in the last period, and the tasks
/// waiting for a token.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct RateUse {
    /// The flow's alias (its versions share the limit), or the concrete flow without one.
    pub scope: String,
    /// The limited step.
    pub step_slug: String,
    /// The key ("" for a limit without `rate_key`, or a missing key).
    pub rate_key: String,
    /// Whether the limit applies per key.
    pub keyed: bool,
    /// The most starts per period (as the key's last claim read it).
    pub rate_limit: i32,
    /// The period, in milliseconds.
    pub period_ms: i32,
    /// Starts of the key in the last period.
    pub started: i64,
    /// Tasks waiting for a token.
    pub waiting: i64,
    /// Since when the longest-waiting of them waits.
    pub oldest_waiting_since: Option<DateTime<Utc>>,
}

/// The keys of rate-limited steps with starts in their last period or tasks waiting, those with
/// the most waiting first, at most `limit`.
pub async fn rate_use(
    executor: impl PgExecutor<'_>,
    limit: i64,
) -> Result<Vec<RateUse>, EngineError> {
    let rows = sqlx::query_as(&format!(
        "select * from (
           select k.scope, k.step_slug, k.rate_key,
                  exists (select 1 from pgflow.steps s
                          join pgflow.flows f on f.flow_slug = s.flow_slug
                          where f.alias = k.scope and s.step_slug = k.step_slug
                            and s.rate_key_path is not null) as keyed,
                  k.rate_limit, k.rate_period_ms as period_ms,
                  (select count(*) from pgflow.rate_tokens tk
                   where tk.scope = k.scope and tk.step_slug = k.step_slug
                     and tk.rate_key = k.rate_key
                     and tk.last_start_at
                         > pgflow.clock() - make_interval(secs => k.rate_period_ms / 1000.0)) as started,
                  (select count(*) from pgflow.rate_waits w
                   where w.scope = k.scope and w.step_slug = k.step_slug
                     and w.rate_key = k.rate_key and {RATE_WAIT_LIVE}) as waiting,
                  (select min(w.waited_since) from pgflow.rate_waits w
                   where w.scope = k.scope and w.step_slug = k.step_slug
                     and w.rate_key = k.rate_key and {RATE_WAIT_LIVE}) as oldest_waiting_since
           from pgflow.rate_keys k
         ) u
         where u.started > 0 or u.waiting > 0
         order by u.waiting desc, u.started desc, u.scope, u.step_slug, u.rate_key
         limit $1"
    ))
    .bind(limit.max(1))
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// The tasks of one rate-limited step that wait for a token, over all its keys.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct RateWaiting {
    /// The concrete flow.
    pub flow_slug: String,
    /// The limited step.
    pub step_slug: String,
    /// Tasks waiting for a token.
    pub waiting: i64,
}

/// Every rate-limited step with its waiting tasks (zero included, so that a gauge fed from it
/// falls back to zero).
pub async fn rate_waiting(executor: impl PgExecutor<'_>) -> Result<Vec<RateWaiting>, EngineError> {
    let rows = sqlx::query_as(&format!(
        "select s.flow_slug, s.step_slug,
                (select count(*) from pgflow.rate_waits w
                 where w.flow_slug = s.flow_slug and w.step_slug = s.step_slug
                   and {RATE_WAIT_LIVE}) as waiting
         from pgflow.steps s
         where s.rate_limit is not null
         order by s.flow_slug, s.step_slug"
    ))
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// A singleton key with runs waiting their turn in its line.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct SingletonLine {
    /// The flow's alias (or concrete flow) the key belongs to.
    pub scope: String,
    /// The key.
    pub key: String,
    /// The run that holds the key, while it is going.
    pub holder_run_id: Option<Uuid>,
    /// Runs waiting in its line.
    pub waiting: i64,
    /// Since when the first of them waits.
    pub oldest_waiting_since: DateTime<Utc>,
}

/// The singleton keys with runs waiting in line, the longest lines first (at most `limit`).
pub async fn singleton_lines(
    executor: impl PgExecutor<'_>,
    limit: i64,
) -> Result<Vec<SingletonLine>, EngineError> {
    let rows = sqlx::query_as(
        "select w.scope, w.key,
                (select g.run_id from pgflow.start_guards g
                 join pgflow.runs h on h.run_id = g.run_id and h.status = 'started'
                 where g.scope = w.scope and g.kind = 'singleton' and g.key = w.key)
                  as holder_run_id,
                count(*) as waiting, min(w.waiting_since) as oldest_waiting_since
         from pgflow.singleton_waits w
         join pgflow.runs r on r.run_id = w.run_id and r.status = 'started'
         group by w.scope, w.key
         order by count(*) desc, min(w.waiting_since), w.scope, w.key
         limit $1",
    )
    .bind(limit.max(1))
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// A run that waits its turn in a singleton key's line (started with
/// `StartOptions::singleton_in_turn`).
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct RunTurn {
    /// The flow's alias (or concrete flow) the key belongs to.
    pub scope: String,
    /// The singleton key.
    pub key: String,
    /// Its place in the line: 1 begins next.
    pub place: i64,
    /// The run that holds the key, while it is going.
    pub holder_run_id: Option<Uuid>,
    /// Since when it waits.
    pub waiting_since: DateTime<Utc>,
}

/// Where a run waits its turn, if it is in a singleton key's line (its place counts the runs
/// before it that are still going).
pub async fn run_turn(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
) -> Result<Option<RunTurn>, EngineError> {
    let row = sqlx::query_as(
        "select w.scope, w.key,
                (select count(*) from pgflow.singleton_waits b
                 join pgflow.runs r on r.run_id = b.run_id and r.status = 'started'
                 where b.scope = w.scope and b.key = w.key and b.wait_seq <= w.wait_seq)
                  as place,
                (select g.run_id from pgflow.start_guards g
                 join pgflow.runs r on r.run_id = g.run_id and r.status = 'started'
                 where g.scope = w.scope and g.kind = 'singleton' and g.key = w.key)
                  as holder_run_id,
                w.waiting_since
         from pgflow.singleton_waits w
         where w.run_id = $1",
    )
    .bind(run_id)
    .fetch_optional(executor)
    .await?;
    Ok(row)
}

/// The steps of a run that wait (for a signal, an event or the end of a sleep), in the flow's
/// step order.
pub async fn run_waits(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
) -> Result<Vec<RunWait>, EngineError> {
    let rows = sqlx::query_as(&format!(
        "select w.step_slug, {WAIT_REASON} as reason, w.signal_name, w.signal_key,
                w.waiting_since, w.deadline
         from pgflow.waits w
         join pgflow.steps s on s.flow_slug = w.flow_slug and s.step_slug = w.step_slug
         where w.run_id = $1
         order by s.step_index"
    ))
    .bind(run_id)
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// The steps of a run, in the flow's step order.
pub async fn run_steps(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
) -> Result<Vec<RunStep>, EngineError> {
    let rows = sqlx::query_as(
        "select step_slug, status, skip_reason, queue_name, tasks, max_attempt, running_tasks,
                error, started_at, ended_at, output, output_bytes
         from pgflow.run_step_states($1)",
    )
    .bind(run_id)
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// One task of a run whose attempts did not all succeed: its retries, requeues and last error.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct TaskAttempts {
    /// The task's step.
    pub step_slug: String,
    /// Its index (0 for a single step, the element for a map step).
    pub task_index: i32,
    /// `queued`, `started`, `completed`, `failed`, `skipped` or `cancelled`.
    pub status: String,
    /// How many attempts it has had.
    pub attempts: i32,
    /// How often it was requeued after its worker vanished.
    pub requeues: i32,
    /// The error of its latest failed attempt.
    pub last_error: Option<String>,
    /// When it last started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it completed or failed for good.
    pub ended_at: Option<DateTime<Utc>>,
}

/// The tasks of a run that needed more than one attempt, were requeued or failed, in step and
/// task order (at most `limit`).
pub async fn troubled_tasks(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
    limit: i64,
) -> Result<Vec<TaskAttempts>, EngineError> {
    let rows = sqlx::query_as(
        "select t.step_slug, t.task_index, t.status, t.attempts_count as attempts,
                t.requeue_count as requeues, t.error_message as last_error, t.started_at,
                coalesce(t.completed_at, t.failed_at) as ended_at
         from pgflow.all_step_tasks t
         join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
         where t.run_id = $1
           and (t.attempts_count > 1 or t.requeue_count > 0 or t.error_message is not null)
         order by s.step_index, t.task_index limit $2",
    )
    .bind(run_id)
    .bind(limit.max(1))
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// One attempt of a task that did not succeed, from the run's attempt history.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct FailedAttempt {
    /// The task's step.
    pub step_slug: String,
    /// The task's index (0 for a single step, the element for a map step).
    pub task_index: i32,
    /// The attempt's number, from 1.
    pub attempt: i32,
    /// `failed` (the handler returned an error, panicked or timed out) or `stalled` (no result
    /// came back: its worker stopped or lost the database).
    pub outcome: String,
    /// The worker that ran it.
    pub worker_id: Option<Uuid>,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it failed, or when the stall was noticed.
    pub ended_at: DateTime<Utc>,
    /// What went wrong.
    pub error: String,
}

/// The attempts of a run's tasks that did not succeed, in step, task and attempt order (at
/// most `limit`). Kept until the run is pruned.
pub async fn failed_attempts(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
    limit: i64,
) -> Result<Vec<FailedAttempt>, EngineError> {
    let rows = sqlx::query_as(
        "select a.step_slug, a.task_index, a.attempt, a.outcome, a.worker_id, a.started_at,
                a.ended_at, a.error_message as error
         from pgflow.all_task_attempts a
         join pgflow.all_runs r on r.run_id = a.run_id
         join pgflow.steps s on s.flow_slug = r.flow_slug and s.step_slug = a.step_slug
         where a.run_id = $1
         order by s.step_index, a.task_index, a.attempt limit $2",
    )
    .bind(run_id)
    .bind(limit.max(1))
    .fetch_all(executor)
    .await?;
    Ok(rows)
}

/// A step of a stored flow, as a node of its graph.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
pub struct GraphStep {
    /// The step.
    pub step_slug: String,
    /// `single` or `map`.
    pub step_type: String,
    /// The queue its tasks go to.
    pub queue_name: String,
    /// Its `when` condition: the step runs only when its input contains this pattern.
    pub condition_when: Option<serde_json::Value>,
    /// Its `unless` condition: the step runs only when its input does not contain this.
    pub condition_unless: Option<serde_json::Value>,
    /// What an unmet condition does: `skip`, `skip_cascade` or `fail`.
    pub when_unmet: String,
}

/// A stored flow's DAG.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FlowGraph {
    /// Its steps, in step order (empty when the flow is not defined).
    pub steps: Vec<GraphStep>,
    /// Its edges as `(dependency, dependent)`.
    pub edges: Vec<(String, String)>,
}

/// The DAG of the concrete flow `flow_slug` (no steps when it is not defined).
pub async fn flow_graph<'c>(
    pool: impl PgExecutor<'c> + Copy,
    flow_slug: &str,
) -> Result<FlowGraph, EngineError> {
    let steps = sqlx::query_as(
        "select step_slug, step_type, queue_name, condition_when, condition_unless, when_unmet
         from pgflow.steps where flow_slug = $1 order by step_index",
    )
    .bind(flow_slug)
    .fetch_all(pool)
    .await?;
    let edges = sqlx::query_as(
        "select dep_slug, step_slug from pgflow.deps
         where flow_slug = $1 order by dep_slug, step_slug",
    )
    .bind(flow_slug)
    .fetch_all(pool)
    .await?;
    Ok(FlowGraph { steps, edges })
}

/// Each step's state in a run, as `(step_slug, status)`.
pub async fn step_states(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
) -> Result<Vec<(String, String)>, EngineError> {
    let rows =
        sqlx::query_as("select step_slug, status from pgflow.all_step_states where run_id = $1")
            .bind(run_id)
            .fetch_all(executor)
            .await?;
    Ok(rows)
}
