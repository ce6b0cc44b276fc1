//! Claiming queued tasks: what a worker may run, and the tasks it gets.

use serde_json::Value;
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use crate::definition::FlowDefinition;
use crate::error::EngineError;
use crate::names::{FlowSlug, QueueName, StepSlug};

/// A task claimed by a worker, with everything needed to run its handler.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct ClaimedTask {
    /// The concrete flow recorded on the task.
    pub flow_slug: FlowSlug,
    /// The step to run.
    pub step_slug: StepSlug,
    /// The run it belongs to.
    pub run_id: Uuid,
    /// 0 for a single step; the element index for a map step.
    pub task_index: i32,
    /// Its PGMQ message; `None` for a task claimed when its dependency completed (see
    /// [`complete_and_claim_tasks`](super::complete_and_claim_tasks)), which never had one.
    pub message_id: Option<i64>,
    /// The queue snapshot of the task.
    pub queue_name: QueueName,
    /// This attempt's number (1 for the first).
    pub attempt: i32,
    /// How long the handler may run, in seconds.
    pub timeout_seconds: i32,
    /// The handler input: the flow input (root single step), the element (map step), or an
    /// object of the dependencies' outputs keyed by step slug.
    pub input: Value,
    /// The W3C trace context its run was started in, if any (see `pgflow::trace`).
    pub trace_context: Option<String>,
}

impl ClaimedTask {
    /// The attempt this claim started: all a result needs to be stored.
    pub fn key(&self) -> TaskKey {
        TaskKey {
            flow_slug: self.flow_slug.clone(),
            run_id: self.run_id,
            step_slug: self.step_slug.clone(),
            task_index: self.task_index,
            attempt: self.attempt,
        }
    }
}

/// What one claim got: the tasks to run, the stale messages it archived (messages with no
/// queued task behind them: sent by hand, for an unknown run, or left over), and how many tasks
/// it sent back to wait for a rate token.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Claim {
    /// The claimed tasks, in message order.
    pub tasks: Vec<ClaimedTask>,
    /// The ids of the stale messages, in order.
    pub stale_message_ids: Vec<i64>,
    /// Tasks whose message the claim read but that it sent back to wait for a token of their
    /// step's rate limit: work that was there, not run yet.
    pub deferred: usize,
}

/// A row of a claim: a claimed task, or (with only `message_id` set) a stale message.
#[derive(FromRow)]
pub(super) struct ClaimRow {
    flow_slug: Option<FlowSlug>,
    step_slug: Option<StepSlug>,
    run_id: Option<Uuid>,
    task_index: Option<i32>,
    message_id: Option<i64>,
    queue_name: Option<QueueName>,
    attempt: Option<i32>,
    timeout_seconds: Option<i32>,
    input: Option<Value>,
    trace_context: Option<String>,
}

/// What a claim row stands for.
pub(super) enum ClaimedRow {
    /// A claimed task.
    Task(ClaimedTask),
    /// A stale message (no queued task behind it), by id.
    Stale(i64),
    /// A task sent back to wait for a rate token (run, step, task and queue, no flow).
    Deferred,
    /// Neither: a row that only carries a call's other figures.
    Empty,
}

impl ClaimRow {
    /// The task or stale message this row stands for.
    pub(super) fn into_claimed(self) -> ClaimedRow {
        match (self.flow_slug, self.step_slug, self.run_id, self.queue_name) {
            (Some(flow_slug), Some(step_slug), Some(run_id), Some(queue_name)) => {
                ClaimedRow::Task(ClaimedTask {
                    flow_slug,
                    step_slug,
                    run_id,
                    task_index: self.task_index.unwrap_or_default(),
                    message_id: self.message_id,
                    queue_name,
                    attempt: self.attempt.unwrap_or_default(),
                    timeout_seconds: self.timeout_seconds.unwrap_or_default(),
                    input: self.input.unwrap_or(Value::Null),
                    trace_context: self.trace_context,
                })
            }
            (None, Some(_), Some(_), Some(_)) => ClaimedRow::Deferred,
            _ => self.message_id.map_or(ClaimedRow::Empty, ClaimedRow::Stale),
        }
    }
}

impl Claim {
    fn from_rows(rows: Vec<ClaimRow>) -> Self {
        let mut claim = Self::default();
        for row in rows {
            match row.into_claimed() {
                ClaimedRow::Task(task) => claim.tasks.push(task),
                ClaimedRow::Stale(message_id) => claim.stale_message_ids.push(message_id),
                ClaimedRow::Deferred => claim.deferred += 1,
                ClaimedRow::Empty => {}
            }
        }
        claim
    }
}

/// One attempt of one task: the run, the step, the task's index and the attempt's number, with
/// the concrete flow recorded on the task (for the labels of what is reported about it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaskKey {
    /// The concrete flow recorded on the task.
    pub flow_slug: FlowSlug,
    /// The task's run.
    pub run_id: Uuid,
    /// The task's step.
    pub step_slug: StepSlug,
    /// 0 for a single step; the element index for a map step.
    pub task_index: i32,
    /// The attempt's number (1 for the first).
    pub attempt: i32,
}

/// The exact `(flow_slug, step_slug)` pairs a worker can run, as the claim takes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SupportedPairs {
    pub(super) flow_slugs: Vec<String>,
    pub(super) step_slugs: Vec<String>,
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
        for step in flow.steps_routed_to(queue) {
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
) -> Result<Claim, EngineError> {
    let rows =
        sqlx::query_as::<_, ClaimRow>("select * from pgflow.start_tasks($1, $2, $3, $4, $5)")
            .bind(queue.as_str())
            .bind(message_ids)
            .bind(worker_id)
            .bind(&supported.flow_slugs)
            .bind(&supported.step_slugs)
            .fetch_all(executor)
            .await?;
    Ok(Claim::from_rows(rows))
}

/// Takes up to `quantity` visible messages off `queue` (PGMQ's `pop`: they are deleted, not
/// archived; the task rows are the record) and claims their tasks, in one transaction: when
/// the batch is refused ([`EngineError::UnsupportedTasks`]) nothing happened, and every message
/// is on the queue as it was. A stale message (no queued task behind it) is removed too, and
/// listed in [`Claim::stale_message_ids`].
pub async fn read_and_start_tasks(
    executor: impl PgExecutor<'_>,
    queue: &QueueName,
    worker_id: Uuid,
    supported: &SupportedPairs,
    quantity: i32,
) -> Result<Claim, EngineError> {
    let rows = sqlx::query_as::<_, ClaimRow>(
        "select * from pgflow.read_and_start_tasks($1, $2, $3, $4, $5)",
    )
    .bind(queue.as_str())
    .bind(worker_id)
    .bind(&supported.flow_slugs)
    .bind(&supported.step_slugs)
    .bind(quantity)
    .fetch_all(executor)
    .await?;
    Ok(Claim::from_rows(rows))
}

/// How long until the next message of `queue` (or of one of its priority lanes) is visible:
/// zero when one is visible now, `None` when the queue has none or is paused. Counted by the
/// database's clock. A message due later is a task sent back to wait for a rate token, a
/// retry's backoff or a start delay; a due message wakes nobody, so a worker of a rate-limited
/// step asks this before it goes idle.
pub async fn next_message_in(
    executor: impl PgExecutor<'_>,
    queue: &QueueName,
) -> Result<Option<std::time::Duration>, EngineError> {
    let seconds: Option<f64> = sqlx::query_scalar("select pgflow.next_message_in($1)")
        .bind(queue.as_str())
        .fetch_one(executor)
        .await?;
    Ok(seconds.map(|s| std::time::Duration::from_secs_f64(s.max(0.0))))
}

/// How many tasks a completion call may claim for a worker when a task of one of its pairs
/// completes (see [`claims_at_release`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleasedClaims {
    /// The completed task's concrete flow.
    pub flow_slug: FlowSlug,
    /// The completed task's step.
    pub step_slug: StepSlug,
    /// At most this many; `None` when any number (a map dependent has one task per element).
    pub at_most: Option<u32>,
}

/// A row of `claims_at_release`.
#[derive(FromRow)]
struct ReleasedClaimsRow {
    flow_slug: FlowSlug,
    step_slug: StepSlug,
    at_most: Option<i32>,
}

/// For the pairs in `supported` whose completion may release tasks a completion call claims
/// for a worker of `queue` (see [`complete_and_claim_tasks`](super::complete_and_claim_tasks)),
/// how many at most, by the rule the claim itself follows; the other pairs are absent. A worker
/// sizes the slots it offers a completion call by it.
pub async fn claims_at_release(
    executor: impl PgExecutor<'_>,
    queue: &QueueName,
    supported: &SupportedPairs,
) -> Result<Vec<ReleasedClaims>, EngineError> {
    let rows = sqlx::query_as::<_, ReleasedClaimsRow>(
        "select * from pgflow.claims_at_release($1, $2, $3)",
    )
    .bind(queue.as_str())
    .bind(&supported.flow_slugs)
    .bind(&supported.step_slugs)
    .fetch_all(executor)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| ReleasedClaims {
            flow_slug: row.flow_slug,
            step_slug: row.step_slug,
            at_most: row.at_most.and_then(|n| u32::try_from(n).ok()),
        })
        .collect())
}
