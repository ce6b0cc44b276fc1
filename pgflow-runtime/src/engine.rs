//! Typed calls into the SQL core (schema `pgflow`). This is the only module that writes SQL.
//!
//! Every function takes any executor (a pool, a connection or a transaction), so callers can
//! make a call part of their own transaction.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use crate::definition::FlowDefinition;
use crate::error::EngineError;
use crate::names::{FlowSlug, QueueName, StepSlug};

/// What compiling a definition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileStatus {
    /// The flow did not exist and was created.
    Compiled,
    /// The flow existed with the same shape (its options were brought up to date).
    Verified,
}

/// The state of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum RunStatus {
    /// Some steps are still to run.
    Started,
    /// Every step completed; the run has its output.
    Completed,
    /// A step ran out of attempts (or could not start); the run stopped.
    Failed,
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct Run {
    /// The run's id.
    pub run_id: Uuid,
    /// The concrete flow it runs (fixed for its lifetime).
    pub flow_slug: String,
    /// Its state.
    pub status: RunStatus,
    /// The flow input it was started with.
    pub input: Value,
    /// For a completed run: an object of the leaf steps' outputs keyed by step slug.
    pub output: Option<Value>,
    /// Steps not yet completed.
    pub remaining_steps: i32,
    /// When it was started.
    pub started_at: DateTime<Utc>,
    /// When it completed.
    pub completed_at: Option<DateTime<Utc>>,
    /// When it failed.
    pub failed_at: Option<DateTime<Utc>>,
}

/// A task claimed by a worker, with everything needed to run its handler.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct ClaimedTask {
    /// The concrete flow recorded on the task.
    pub flow_slug: String,
    /// The step to run.
    pub step_slug: String,
    /// The run it belongs to.
    pub run_id: Uuid,
    /// 0 for a single step; the element index for a map step.
    pub task_index: i32,
    /// Its PGMQ message.
    pub message_id: i64,
    /// The queue snapshot of the task.
    pub queue_name: String,
    /// This attempt's number (1 for the first).
    pub attempt: i32,
    /// How long the handler may run, in seconds.
    pub timeout_seconds: i32,
    /// The handler input: the flow input (root single step), the element (map step), or an
    /// object of the dependencies' outputs keyed by step slug.
    pub input: Value,
}

/// A finished handler's output for one task attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskCompletion {
    /// The task's run.
    pub run_id: Uuid,
    /// The task's step.
    pub step_slug: String,
    /// The task's index.
    pub task_index: i32,
    /// The attempt that produced the output.
    pub attempt: i32,
    /// The output, stored exactly.
    pub output: Value,
}

impl TaskCompletion {
    /// The completion of `task`'s current attempt with `output`.
    pub fn of(task: &ClaimedTask, output: Value) -> Self {
        Self {
            run_id: task.run_id,
            step_slug: task.step_slug.clone(),
            task_index: task.task_index,
            attempt: task.attempt,
            output,
        }
    }
}

/// A failed handler attempt for one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFailure {
    /// The task's run.
    pub run_id: Uuid,
    /// The task's step.
    pub step_slug: String,
    /// The task's index.
    pub task_index: i32,
    /// The attempt that failed.
    pub attempt: i32,
    /// What went wrong (stored, shown to operators; never a message body).
    pub error_message: String,
}

impl TaskFailure {
    /// The failure of `task`'s current attempt with `error_message`.
    pub fn of(task: &ClaimedTask, error_message: impl Into<String>) -> Self {
        Self {
            run_id: task.run_id,
            step_slug: task.step_slug.clone(),
            task_index: task.task_index,
            attempt: task.attempt,
            error_message: error_message.into(),
        }
    }
}

/// What happened to one reported failure.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct FailureOutcome {
    /// The task's run.
    pub run_id: Uuid,
    /// The task's step.
    pub step_slug: String,
    /// The task's index.
    pub task_index: i32,
    /// Whether the task will be tried again.
    pub will_retry: bool,
    /// After how many seconds the retry becomes visible.
    pub retry_delay_seconds: Option<i32>,
}

/// A stalled task found by [`requeue_stalled_tasks`].
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct StalledTask {
    /// The task's run.
    pub run_id: Uuid,
    /// The task's step.
    pub step_slug: String,
    /// The task's index.
    pub task_index: i32,
    /// The task's queue.
    pub queue_name: String,
    /// The task's message as it now stands (a requeued task's new one).
    pub message_id: i64,
    /// `true`: queued again; `false`: stalled too often and failed for good.
    pub requeued: bool,
}

/// The exact `(flow_slug, step_slug)` pairs a worker can run, as the claim takes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SupportedPairs {
    flow_slugs: Vec<String>,
    step_slugs: Vec<String>,
}

impl SupportedPairs {
    /// No pairs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one pair.
    pub fn insert(&mut self, flow: &FlowSlug, step: &StepSlug) {
        self.flow_slugs.push(flow.as_str().to_owned());
        self.step_slugs.push(step.as_str().to_owned());
    }

    /// Every step of `flow` routed to `queue`.
    pub fn routed_to(flow: &FlowDefinition, queue: &QueueName) -> Self {
        let mut pairs = Self::new();
        pairs.extend_routed_to(flow, queue);
        pairs
    }

    /// Adds every step of `flow` routed to `queue`.
    pub fn extend_routed_to(&mut self, flow: &FlowDefinition, queue: &QueueName) {
        for step in flow.steps.iter().filter(|s| &flow.queue_of(s) == queue) {
            self.insert(&flow.slug, &step.slug);
        }
    }

    /// The pairs as `(flow_slug, step_slug)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.flow_slugs
            .iter()
            .map(String::as_str)
            .zip(self.step_slugs.iter().map(String::as_str))
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.flow_slugs.is_empty()
    }
}

/// Compiles `flow` (creating it and its queues) or verifies it against the stored definition.
pub async fn compile_flow(
    executor: impl PgExecutor<'_>,
    flow: &FlowDefinition,
) -> Result<CompileStatus, EngineError> {
    let status: String = sqlx::query_scalar("select pgflow.define_flow($1, $2, $3, $4, $5)")
        .bind(flow.slug.as_str())
        .bind(flow.alias.as_str())
        .bind(i32::try_from(flow.version).unwrap_or(i32::MAX))
        .bind(flow.options_json())
        .bind(flow.steps_json())
        .fetch_one(executor)
        .await?;
    Ok(if status == "compiled" {
        CompileStatus::Compiled
    } else {
        CompileStatus::Verified
    })
}

/// Starts one run with `input`. `name` is an alias (the run starts on its active version, and
/// keeps it) or a concrete flow slug.
pub async fn start_flow(
    executor: impl PgExecutor<'_>,
    name: &str,
    input: &Value,
) -> Result<Run, EngineError> {
    let mut runs = start_flows_as(executor, name, std::slice::from_ref(input), true).await?;
    runs.pop().ok_or_else(|| EngineError::UnknownFlow {
        flow_slug: name.to_owned(),
    })
}

/// Starts one run per input, in one transaction; the runs come back in input order. `name` is
/// an alias or a concrete flow slug, as for [`start_flow`].
pub async fn start_flows(
    executor: impl PgExecutor<'_>,
    name: &str,
    inputs: &[Value],
) -> Result<Vec<Run>, EngineError> {
    start_flows_as(executor, name, inputs, true).await
}

/// Starts runs of exactly the concrete flow `flow_slug` (never resolved as an alias).
pub async fn start_concrete_flows(
    executor: impl PgExecutor<'_>,
    flow_slug: &str,
    inputs: &[Value],
) -> Result<Vec<Run>, EngineError> {
    start_flows_as(executor, flow_slug, inputs, false).await
}

async fn start_flows_as(
    executor: impl PgExecutor<'_>,
    name: &str,
    inputs: &[Value],
    resolve_alias: bool,
) -> Result<Vec<Run>, EngineError> {
    let runs = sqlx::query_as::<_, Run>("select * from pgflow.start_flows($1, $2, null, $3)")
        .bind(name)
        .bind(inputs)
        .bind(resolve_alias)
        .fetch_all(executor)
        .await?;
    Ok(runs)
}

/// Claims the queued tasks behind `message_ids` (messages of `queue` the worker already read)
/// and archives those messages.
/// Fails with [`EngineError::UnsupportedTasks`], changing nothing, when any of them is of a
/// pair outside `supported`.
pub async fn start_tasks(
    executor: impl PgExecutor<'_>,
    queue: &QueueName,
    message_ids: &[i64],
    worker_id: Uuid,
    supported: &SupportedPairs,
) -> Result<Vec<ClaimedTask>, EngineError> {
    let tasks =
        sqlx::query_as::<_, ClaimedTask>("select * from pgflow.start_tasks($1, $2, $3, $4, $5)")
            .bind(queue.as_str())
            .bind(message_ids)
            .bind(worker_id)
            .bind(&supported.flow_slugs)
            .bind(&supported.step_slugs)
            .fetch_all(executor)
            .await?;
    Ok(tasks)
}

/// Reads up to `quantity` visible messages of `queue` (hidden from other readers for
/// `visibility_timeout_seconds`) and claims their tasks, archiving the messages, in one
/// transaction: when the batch is refused
/// ([`EngineError::UnsupportedTasks`]) the read is undone too and every message stays as it was.
pub async fn read_and_start_tasks(
    executor: impl PgExecutor<'_>,
    queue: &QueueName,
    worker_id: Uuid,
    supported: &SupportedPairs,
    quantity: i32,
    visibility_timeout_seconds: i32,
) -> Result<Vec<ClaimedTask>, EngineError> {
    let tasks = sqlx::query_as::<_, ClaimedTask>(
        "select * from pgflow.read_and_start_tasks($1, $2, $3, $4, $5, $6)",
    )
    .bind(queue.as_str())
    .bind(worker_id)
    .bind(&supported.flow_slugs)
    .bind(&supported.step_slugs)
    .bind(quantity)
    .bind(visibility_timeout_seconds)
    .fetch_all(executor)
    .await?;
    Ok(tasks)
}

/// Records finished attempts (one call for the whole batch). Returns how many tasks were
/// completed; late or duplicate completions are ignored.
pub async fn complete_tasks(
    executor: impl PgExecutor<'_>,
    completions: &[TaskCompletion],
) -> Result<u64, EngineError> {
    let count: i32 = sqlx::query_scalar("select pgflow.complete_tasks($1, $2, $3, $4, $5)")
        .bind(completions.iter().map(|c| c.run_id).collect::<Vec<_>>())
        .bind(
            completions
                .iter()
                .map(|c| c.step_slug.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(completions.iter().map(|c| c.task_index).collect::<Vec<_>>())
        .bind(completions.iter().map(|c| c.attempt).collect::<Vec<_>>())
        .bind(completions.iter().map(|c| &c.output).collect::<Vec<_>>())
        .fetch_one(executor)
        .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// Records failed attempts (one call for the whole batch): retried with backoff while
/// attempts remain, otherwise the task, its step and its run fail.
pub async fn fail_tasks(
    executor: impl PgExecutor<'_>,
    failures: &[TaskFailure],
) -> Result<Vec<FailureOutcome>, EngineError> {
    let outcomes =
        sqlx::query_as::<_, FailureOutcome>("select * from pgflow.fail_tasks($1, $2, $3, $4, $5)")
            .bind(failures.iter().map(|f| f.run_id).collect::<Vec<_>>())
            .bind(
                failures
                    .iter()
                    .map(|f| f.step_slug.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(failures.iter().map(|f| f.task_index).collect::<Vec<_>>())
            .bind(failures.iter().map(|f| f.attempt).collect::<Vec<_>>())
            .bind(
                failures
                    .iter()
                    .map(|f| f.error_message.as_str())
                    .collect::<Vec<_>>(),
            )
            .fetch_all(executor)
            .await?;
    Ok(outcomes)
}

/// Puts back tasks whose worker stalled: started longer ago than their timeout plus
/// `grace_seconds`. Each task is requeued at most `max_requeues` times, then fails for good.
/// Only one caller per database does the work at a time; concurrent callers get nothing.
pub async fn requeue_stalled_tasks(
    executor: impl PgExecutor<'_>,
    grace_seconds: i32,
    max_requeues: i32,
) -> Result<Vec<StalledTask>, EngineError> {
    let tasks =
        sqlx::query_as::<_, StalledTask>("select * from pgflow.requeue_stalled_tasks($1, $2)")
            .bind(grace_seconds)
            .bind(max_requeues)
            .fetch_all(executor)
            .await?;
    Ok(tasks)
}

/// Runs `ANALYZE` on pgflow's busy tables and its queues' PGMQ tables that changed by more
/// than autovacuum's default threshold since their last analysis, when autovacuum is off (or
/// `even_with_autovacuum`). One caller at a time; returns the tables analyzed.
pub async fn refresh_statistics(
    executor: impl PgExecutor<'_>,
    even_with_autovacuum: bool,
) -> Result<Vec<String>, EngineError> {
    let tables = sqlx::query_scalar("select * from pgflow.refresh_statistics($1)")
        .bind(even_with_autovacuum)
        .fetch_all(executor)
        .await?;
    Ok(tables)
}

/// Runs `VACUUM` on pgflow's busy tables and its queues' PGMQ tables that hold more dead rows
/// than autovacuum's default threshold, when autovacuum is off (or `even_with_autovacuum`).
/// One caller at a time (a session advisory lock, released before returning); returns the
/// tables vacuumed.
pub async fn vacuum_tables(
    pool: &sqlx::PgPool,
    even_with_autovacuum: bool,
) -> Result<Vec<String>, EngineError> {
    let mut conn = pool.acquire().await?;
    let locked: bool =
        sqlx::query_scalar("select pg_try_advisory_lock(pgflow.lock_namespace(), 2)")
            .fetch_one(&mut *conn)
            .await?;
    if !locked {
        return Ok(Vec::new());
    }
    let vacuumed = vacuum_listed_tables(&mut conn, even_with_autovacuum).await;
    sqlx::query("select pg_advisory_unlock(pgflow.lock_namespace(), 2)")
        .execute(&mut *conn)
        .await?;
    vacuumed
}

/// Vacuums what `pgflow.tables_to_vacuum` lists, on one connection (outside a transaction).
async fn vacuum_listed_tables(
    conn: &mut sqlx::PgConnection,
    even_with_autovacuum: bool,
) -> Result<Vec<String>, EngineError> {
    let tables: Vec<String> = sqlx::query_scalar("select * from pgflow.tables_to_vacuum($1)")
        .bind(even_with_autovacuum)
        .fetch_all(&mut *conn)
        .await?;
    for table in &tables {
        // The names come from `regclass` output: quoted where they need to be.
        // Without bind arguments sqlx uses the simple query protocol, as VACUUM needs.
        let statement = format!("vacuum {table}");
        sqlx::Executor::execute(&mut *conn, statement.as_str()).await?;
    }
    Ok(tables)
}

/// What one call of [`prune`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromRow)]
pub struct Pruned {
    /// Another caller was pruning the same database at that moment; this call deleted nothing.
    pub busy: bool,
    /// Runs that had ended (completed or failed) before the cutoff.
    pub runs: i64,
    /// Their step states.
    pub step_states: i64,
    /// Their tasks.
    pub tasks: i64,
    /// Messages of pgflow's queues archived before the cutoff (PGMQ's `a_<queue>` tables).
    pub archived_messages: i64,
    /// Workers that stopped before the cutoff.
    pub workers: i64,
}

impl Pruned {
    /// Whether the call that returned this deleted a whole batch of runs or archived
    /// messages: more may be left to prune.
    pub fn is_full(&self, batch_size: i32) -> bool {
        let batch = i64::from(batch_size);
        self.runs >= batch || self.archived_messages >= batch
    }

    /// Adds another call's counts to these (`busy` if either was).
    pub fn add(&mut self, other: Pruned) {
        self.busy |= other.busy;
        self.runs += other.runs;
        self.step_states += other.step_states;
        self.tasks += other.tasks;
        self.archived_messages += other.archived_messages;
        self.workers += other.workers;
    }
}

/// Deletes what ended more than `older_than` ago, in one transaction: completed and failed
/// runs with their step states and tasks, and archived messages of pgflow's queues (at most
/// `batch_size` of each), and stopped workers. Live runs and queued messages are never
/// touched. One caller per database at a time; a concurrent call deletes nothing and says
/// `busy`. Call again while [`Pruned::is_full`], or use [`prune_all`].
pub async fn prune(
    executor: impl PgExecutor<'_>,
    older_than: std::time::Duration,
    batch_size: i32,
) -> Result<Pruned, EngineError> {
    let pruned = sqlx::query_as::<_, Pruned>("select * from pgflow.prune($1, $2)")
        .bind(older_than)
        .bind(batch_size)
        .fetch_one(executor)
        .await?;
    Ok(pruned)
}

/// [`prune`] again and again, `batch_size` rows of each kind per transaction (so that no
/// transaction holds many locks or writes much for long), until nothing older than
/// `older_than` is left or another caller is pruning. Returns the totals.
pub async fn prune_all(
    pool: &sqlx::PgPool,
    older_than: std::time::Duration,
    batch_size: i32,
) -> Result<Pruned, EngineError> {
    let mut total = Pruned::default();
    loop {
        let pruned = prune(pool, older_than, batch_size).await?;
        total.add(pruned);
        if pruned.busy || !pruned.is_full(batch_size) {
            return Ok(total);
        }
    }
}

/// The flow input a run was started with.
pub async fn run_input(executor: impl PgExecutor<'_>, run_id: Uuid) -> Result<Value, EngineError> {
    let input = sqlx::query_scalar("select input from pgflow.runs where run_id = $1")
        .bind(run_id)
        .fetch_optional(executor)
        .await?;
    input.ok_or_else(|| EngineError::UnknownRun { run_id })
}

/// A run by id.
pub async fn run(executor: impl PgExecutor<'_>, run_id: Uuid) -> Result<Run, EngineError> {
    let run = sqlx::query_as::<_, Run>("select * from pgflow.runs where run_id = $1")
        .bind(run_id)
        .fetch_optional(executor)
        .await?;
    run.ok_or_else(|| EngineError::UnknownRun { run_id })
}

/// The error of the step that failed a run, if any.
pub async fn run_error(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
) -> Result<Option<(String, String)>, EngineError> {
    let failed = sqlx::query_as(
        "select step_slug, coalesce(error_message, 'failed') from pgflow.step_states
         where run_id = $1 and status = 'failed' order by failed_at limit 1",
    )
    .bind(run_id)
    .fetch_optional(executor)
    .await?;
    Ok(failed)
}

/// A `(flow_slug, step_slug)` pair that work on a queue needs and a registry lacks.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct CoverageGap {
    /// The concrete flow.
    pub flow_slug: String,
    /// Its step routed to the queue.
    pub step_slug: String,
    /// The flow is an alias's active target: new runs will need the pair.
    pub active: bool,
    /// Queued (executable) tasks of the pair on the queue.
    pub queued_tasks: i64,
    /// Started (recoverable) tasks of the pair on the queue.
    pub started_tasks: i64,
    /// Started runs whose step of the pair has not completed (draining work).
    pub started_runs: i64,
}

/// The pairs that work on `queue` needs but `supported` lacks.
pub async fn queue_coverage_gaps(
    executor: impl PgExecutor<'_>,
    queue: &QueueName,
    supported: &SupportedPairs,
) -> Result<Vec<CoverageGap>, EngineError> {
    let gaps =
        sqlx::query_as::<_, CoverageGap>("select * from pgflow.queue_coverage_gaps($1, $2, $3)")
            .bind(queue.as_str())
            .bind(&supported.flow_slugs)
            .bind(&supported.step_slugs)
            .fetch_all(executor)
            .await?;
    Ok(gaps)
}

/// Records a started worker of `function_name` on `queue` carrying `flow_slugs`. Returns
/// `false`, registering nothing, when the function is disabled by a rollout.
pub async fn register_worker(
    executor: impl PgExecutor<'_>,
    worker_id: Uuid,
    queue: &QueueName,
    function_name: &str,
    flow_slugs: &[String],
) -> Result<bool, EngineError> {
    let registered = sqlx::query_scalar("select pgflow.register_worker($1, $2, $3, $4)")
        .bind(worker_id)
        .bind(queue.as_str())
        .bind(function_name)
        .bind(flow_slugs)
        .fetch_one(executor)
        .await?;
    Ok(registered)
}

/// Whether workers of `function_name` may start (no rollout has disabled it).
pub async fn function_enabled(
    executor: impl PgExecutor<'_>,
    function_name: &str,
) -> Result<bool, EngineError> {
    let enabled = sqlx::query_scalar("select pgflow.function_enabled($1)")
        .bind(function_name)
        .fetch_one(executor)
        .await?;
    Ok(enabled)
}

/// Records a heartbeat; returns whether the worker has been deprecated.
pub async fn heartbeat(
    executor: impl PgExecutor<'_>,
    worker_id: Uuid,
) -> Result<bool, EngineError> {
    let deprecated: Option<bool> = sqlx::query_scalar("select pgflow.heartbeat($1)")
        .bind(worker_id)
        .fetch_one(executor)
        .await?;
    Ok(deprecated.unwrap_or(true))
}

/// Records that a worker stopped.
pub async fn stop_worker(
    executor: impl PgExecutor<'_>,
    worker_id: Uuid,
) -> Result<(), EngineError> {
    sqlx::query("select pgflow.stop_worker($1)")
        .bind(worker_id)
        .execute(executor)
        .await?;
    Ok(())
}

/// Asks every live worker of `function_name` to drain and stop; returns how many were asked.
pub async fn deprecate_workers(
    executor: impl PgExecutor<'_>,
    function_name: &str,
) -> Result<i32, EngineError> {
    let count = sqlx::query_scalar("select pgflow.deprecate_workers($1)")
        .bind(function_name)
        .fetch_one(executor)
        .await?;
    Ok(count)
}

/// The channel a queue's idle workers listen on for new messages.
pub fn queue_channel(queue: &QueueName) -> String {
    format!("pgflow.{}", queue.as_str())
}

/// A concrete flow's standing within its alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// This call moved the alias to the flow.
    Activated,
    /// The flow already was the alias's target.
    Active,
    /// Another (newer, or explicitly set) version is the target.
    Inactive,
}

impl Activation {
    fn from_sql(text: &str) -> Self {
        match text {
            "activated" => Self::Activated,
            "active" => Self::Active,
            _ => Self::Inactive,
        }
    }

    /// `activated`, `active` or `inactive`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Activated => "activated",
            Self::Active => "active",
            Self::Inactive => "inactive",
        }
    }
}

/// Moves the flow's alias to it if it is newer than the alias's target (never backwards).
pub async fn activate_flow(
    executor: impl PgExecutor<'_>,
    flow_slug: &str,
) -> Result<Activation, EngineError> {
    let state: String = sqlx::query_scalar("select pgflow.activate_flow($1)")
        .bind(flow_slug)
        .fetch_one(executor)
        .await?;
    Ok(Activation::from_sql(&state))
}

/// Whether the flow is its alias's target (`Active`) or not (`Inactive`); changes nothing.
pub async fn alias_state(
    executor: impl PgExecutor<'_>,
    flow_slug: &str,
) -> Result<Activation, EngineError> {
    let state: String = sqlx::query_scalar("select pgflow.alias_state($1)")
        .bind(flow_slug)
        .fetch_one(executor)
        .await?;
    Ok(Activation::from_sql(&state))
}

/// Points `alias` at `flow_slug` (an operator's explicit move, rollbacks included). Returns
/// the previous target.
pub async fn set_alias(
    executor: impl PgExecutor<'_>,
    alias: &str,
    flow_slug: &str,
) -> Result<Option<String>, EngineError> {
    let previous = sqlx::query_scalar("select pgflow.set_alias($1, $2)")
        .bind(alias)
        .bind(flow_slug)
        .fetch_one(executor)
        .await?;
    Ok(previous)
}

/// Whether a concrete flow can leave the registries of a queue (or of all queues).
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
pub struct DrainStatus {
    /// The concrete flow.
    pub flow_slug: String,
    /// The queue asked about (`None`: every queue).
    pub queue_name: Option<String>,
    /// The flow is its alias's active target (new runs start on it).
    pub active: bool,
    /// Started runs that can still reach the queue.
    pub started_runs: i64,
    /// Queued tasks of the flow on the queue.
    pub queued_tasks: i64,
    /// Started tasks of the flow on the queue.
    pub started_tasks: i64,
    /// Steps of those runs, not completed yet, that route to the queue.
    pub pending_steps: Vec<String>,
    /// Nothing of the flow can reach the queue any more.
    pub safe_to_remove: bool,
}

/// Reports whether `flow_slug` can be removed from the registries of `queue` (or of all).
pub async fn drain_status(
    executor: impl PgExecutor<'_>,
    flow_slug: &str,
    queue: Option<&str>,
) -> Result<DrainStatus, EngineError> {
    let status = sqlx::query_as::<_, DrainStatus>("select * from pgflow.drain_status($1, $2)")
        .bind(flow_slug)
        .bind(queue)
        .fetch_one(executor)
        .await?;
    Ok(status)
}

/// A rollout record.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
pub struct Rollout {
    /// Its id.
    pub rollout_id: i64,
    /// The worker functions it disabled.
    pub function_names: Vec<String>,
    /// Those that were enabled when it began (enabled again when it finishes).
    pub enabled_before: Vec<String>,
    /// `open` or `finished`.
    pub status: String,
    /// When it began.
    pub begun_at: DateTime<Utc>,
    /// When it finished.
    pub finished_at: Option<DateTime<Utc>>,
}

/// A worker a rollout still waits for.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
pub struct LiveWorker {
    /// The worker.
    pub worker_id: Uuid,
    /// Its function.
    pub function_name: String,
    /// Its queue.
    pub queue_name: String,
    /// Its last heartbeat.
    pub last_heartbeat_at: DateTime<Utc>,
}

/// Records which functions are enabled, disables them and deprecates their live workers.
pub async fn begin_rollout(
    executor: impl PgExecutor<'_>,
    function_names: &[String],
) -> Result<i64, EngineError> {
    let id = sqlx::query_scalar("select pgflow.begin_rollout($1)")
        .bind(function_names)
        .fetch_one(executor)
        .await?;
    Ok(id)
}

/// The functions with live workers on any of `queues`.
pub async fn functions_serving_queues(
    executor: impl PgExecutor<'_>,
    queues: &[String],
) -> Result<Vec<String>, EngineError> {
    let names = sqlx::query_scalar("select pgflow.functions_serving_queues($1)")
        .bind(queues)
        .fetch_one(executor)
        .await?;
    Ok(names)
}

/// The workers of a rollout's functions that are still running (silent for longer than
/// `stale_after_seconds` counts as gone).
pub async fn rollout_progress(
    executor: impl PgExecutor<'_>,
    rollout_id: i64,
    stale_after_seconds: f64,
) -> Result<Vec<LiveWorker>, EngineError> {
    let workers = sqlx::query_as::<_, LiveWorker>(
        "select * from pgflow.rollout_progress($1, make_interval(secs => $2))",
    )
    .bind(rollout_id)
    .bind(stale_after_seconds)
    .fetch_all(executor)
    .await?;
    Ok(workers)
}

/// Enables exactly the functions that were enabled when the rollout began; returns them.
pub async fn finish_rollout(
    executor: impl PgExecutor<'_>,
    rollout_id: i64,
) -> Result<Vec<String>, EngineError> {
    let names = sqlx::query_scalar("select pgflow.finish_rollout($1)")
        .bind(rollout_id)
        .fetch_one(executor)
        .await?;
    Ok(names)
}

/// Rollouts, open ones first, newest first.
pub async fn rollouts(
    executor: impl PgExecutor<'_>,
    open_only: bool,
) -> Result<Vec<Rollout>, EngineError> {
    let rows = sqlx::query_as::<_, Rollout>(
        "select * from pgflow.rollouts where not $1 or status = 'open'
         order by status = 'open' desc, rollout_id desc",
    )
    .bind(open_only)
    .fetch_all(executor)
    .await?;
    Ok(rows)
}
