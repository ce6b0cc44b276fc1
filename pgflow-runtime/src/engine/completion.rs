//! Storing the results of handler attempts: completions and failures, in batches.

use serde_json::Value;
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use super::claims::{ClaimRow, ClaimedRow};
use super::{ClaimedTask, SupportedPairs, TaskKey};
use crate::error::EngineError;
use crate::names::QueueName;

/// A finished handler's output for one task attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskCompletion {
    /// The attempt that produced the output.
    pub task: TaskKey,
    /// The output, stored exactly.
    pub output: Value,
}

impl TaskCompletion {
    /// The completion of `task`'s current attempt with `output`.
    pub fn of(task: &ClaimedTask, output: Value) -> Self {
        Self {
            task: task.key(),
            output,
        }
    }
}

/// A failed handler attempt for one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFailure {
    /// The attempt that failed.
    pub task: TaskKey,
    /// What went wrong (stored, shown to operators; never a message body).
    pub error_message: String,
    /// Whether the task fails now instead of using its remaining attempts.
    pub permanent: bool,
    /// A snooze instead of a failure: the task runs again after this many seconds, and the
    /// attempt is not spent (`permanent` is then ignored).
    pub snooze_seconds: Option<u32>,
}

impl TaskFailure {
    /// The failure of `task`'s current attempt with `error_message` (cut to
    /// [`STORED_ERROR_CHARS`](crate::failure::STORED_ERROR_CHARS) with a marker when longer);
    /// retried while attempts remain.
    pub fn of(task: &ClaimedTask, error_message: impl Into<String>) -> Self {
        Self {
            task: task.key(),
            error_message: crate::failure::bounded_owned(
                error_message.into(),
                crate::failure::STORED_ERROR_CHARS,
            ),
            permanent: false,
            snooze_seconds: None,
        }
    }

    /// The failure of `task`'s current attempt that no retry can fix: the task fails now.
    pub fn permanent(task: &ClaimedTask, error_message: impl Into<String>) -> Self {
        Self {
            permanent: true,
            ..Self::of(task, error_message)
        }
    }

    /// `task`'s current attempt asks to run again `seconds` from now, without spending the
    /// attempt; `reason` goes into its attempt history.
    pub fn snoozed(task: &ClaimedTask, seconds: u32, reason: impl Into<String>) -> Self {
        Self {
            snooze_seconds: Some(seconds),
            ..Self::of(task, reason)
        }
    }
}

/// What happened to one reported failure ([`fail_tasks`] answers each in input order).
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
#[non_exhaustive]
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
    /// For a task that will not be retried: whether its step was skipped (its
    /// `when_exhausted` says so) rather than its run failed.
    pub step_skipped: bool,
    /// Whether the report changed nothing: the attempt was no longer the task's current one
    /// (late or duplicate), or its run had ended.
    pub discarded: bool,
}

/// Task keys as the parallel arrays the SQL core takes them in (`run_ids[i]`, `step_slugs[i]`,
/// `task_indexes[i]`, `attempts[i]` name one attempt).
struct KeyColumns<'a> {
    run_ids: Vec<Uuid>,
    step_slugs: Vec<&'a str>,
    task_indexes: Vec<i32>,
    attempts: Vec<i32>,
}

impl<'a> KeyColumns<'a> {
    fn of(keys: impl Iterator<Item = &'a TaskKey>) -> Self {
        let mut columns = Self {
            run_ids: Vec::new(),
            step_slugs: Vec::new(),
            task_indexes: Vec::new(),
            attempts: Vec::new(),
        };
        for key in keys {
            columns.run_ids.push(key.run_id);
            columns.step_slugs.push(key.step_slug.as_str());
            columns.task_indexes.push(key.task_index);
            columns.attempts.push(key.attempt);
        }
        columns
    }
}

/// Records finished attempts (one call for the whole batch). Returns how many tasks were
/// completed; late or duplicate completions are ignored.
pub async fn complete_tasks(
    executor: impl PgExecutor<'_>,
    completions: &[TaskCompletion],
) -> Result<u64, EngineError> {
    let keys = KeyColumns::of(completions.iter().map(|c| &c.task));
    let count: i32 = sqlx::query_scalar("select pgflow.complete_tasks($1, $2, $3, $4, $5)")
        .bind(keys.run_ids)
        .bind(keys.step_slugs)
        .bind(keys.task_indexes)
        .bind(keys.attempts)
        .bind(completions.iter().map(|c| &c.output).collect::<Vec<_>>())
        .fetch_one(executor)
        .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// What [`complete_and_claim_tasks`] did: how many tasks it completed, and the tasks it
/// claimed among those the completions released, each for the worker of the slot it took.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CompletedAndClaimed {
    /// The number of tasks completed by the call (late or duplicate completions are not).
    pub completed: u64,
    /// The released tasks claimed (started, first attempt, no message), to run now.
    pub claimed: Vec<ClaimedAtRelease>,
}

/// A task claimed by [`complete_and_claim_tasks`], and the worker whose slot it took.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedAtRelease {
    /// The worker recorded as running it (`step_tasks.last_worker_id`).
    pub worker_id: Uuid,
    /// The task.
    pub task: ClaimedTask,
}

/// A row of `complete_and_claim_tasks` (its claimed task spread into columns): the call's
/// count, and a claimed task with its worker, or nothing.
#[derive(FromRow)]
struct CompleteAndClaimRow {
    completed: i32,
    worker_id: Option<Uuid>,
    #[sqlx(flatten)]
    task: ClaimRow,
}

/// [`complete_tasks`] for workers of `queue` with free slots, one element of `slots` per slot
/// (the id of the worker offering it): of the tasks the completions release, those visible at
/// once on `queue` and of a pair in `supported` are claimed in the same transaction (started,
/// without a PGMQ message), at most one per slot, the n-th for the n-th slot's worker, so they
/// need no send, no claim and no commit of their own. The rest are queued as
/// [`complete_tasks`] queues them. The caller runs each claimed task on its worker as it runs
/// claimed ones; a task it never reports on is recovered as stalled, as any claimed task.
pub async fn complete_and_claim_tasks(
    executor: impl PgExecutor<'_>,
    completions: &[TaskCompletion],
    queue: &QueueName,
    supported: &SupportedPairs,
    slots: &[Uuid],
) -> Result<CompletedAndClaimed, EngineError> {
    let keys = KeyColumns::of(completions.iter().map(|c| &c.task));
    let rows = sqlx::query_as::<_, CompleteAndClaimRow>(
        "select c.completed, c.worker_id, (c.task).* \
         from pgflow.complete_and_claim_tasks($1, $2, $3, $4, $5, $6, $7, $8, $9) c",
    )
    .bind(keys.run_ids)
    .bind(keys.step_slugs)
    .bind(keys.task_indexes)
    .bind(keys.attempts)
    .bind(completions.iter().map(|c| &c.output).collect::<Vec<_>>())
    .bind(queue.as_str())
    .bind(&supported.flow_slugs)
    .bind(&supported.step_slugs)
    .bind(slots)
    .fetch_all(executor)
    .await?;
    let mut result = CompletedAndClaimed::default();
    for row in rows {
        result.completed = u64::try_from(row.completed).unwrap_or(0);
        if let (Some(worker_id), ClaimedRow::Task(task)) = (row.worker_id, row.task.into_claimed())
        {
            result.claimed.push(ClaimedAtRelease { worker_id, task });
        }
    }
    Ok(result)
}

/// How many of `completions` are stored: their task is completed by the attempt that produced
/// them. After a retried [`complete_tasks`] call this tells apart completions an earlier try
/// stored (its reply lost with the connection) from ones that came too late.
pub async fn count_stored_completions(
    executor: impl PgExecutor<'_>,
    completions: &[TaskCompletion],
) -> Result<u64, EngineError> {
    let keys = KeyColumns::of(completions.iter().map(|c| &c.task));
    let count: i64 = sqlx::query_scalar("select pgflow.stored_completions($1, $2, $3, $4)")
        .bind(keys.run_ids)
        .bind(keys.step_slugs)
        .bind(keys.task_indexes)
        .bind(keys.attempts)
        .fetch_one(executor)
        .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// Records failed attempts (one call for the whole batch): retried with backoff while
/// attempts remain and the failure is not permanent, otherwise the task, its step and its run
/// fail. Returns one outcome per failure, in the order given (a late or duplicate report's is
/// [`discarded`](FailureOutcome::discarded)).
pub async fn fail_tasks(
    executor: impl PgExecutor<'_>,
    failures: &[TaskFailure],
) -> Result<Vec<FailureOutcome>, EngineError> {
    let keys = KeyColumns::of(failures.iter().map(|f| &f.task));
    let outcomes = sqlx::query_as::<_, FailureOutcome>(
        "select * from pgflow.fail_tasks($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(keys.run_ids)
    .bind(keys.step_slugs)
    .bind(keys.task_indexes)
    .bind(keys.attempts)
    .bind(
        failures
            .iter()
            .map(|f| f.error_message.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(failures.iter().map(|f| f.permanent).collect::<Vec<_>>())
    .bind(
        failures
            .iter()
            .map(|f| {
                f.snooze_seconds
                    .map(|s| i32::try_from(s).unwrap_or(i32::MAX))
            })
            .collect::<Vec<_>>(),
    )
    .fetch_all(executor)
    .await?;
    Ok(outcomes)
}
