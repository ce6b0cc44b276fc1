//! Pruning what ended long ago: runs with their steps and tasks, archived messages, stopped
//! workers; and archiving, which moves ended runs into the history that pruning drops a day at
//! a time.

use sqlx::{FromRow, PgExecutor};

use crate::error::EngineError;

/// What one call of [`prune`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromRow)]
#[non_exhaustive]
pub struct Pruned {
    /// Another caller was pruning the same database at that moment; this call deleted nothing.
    pub busy: bool,
    /// Runs that had ended (completed, failed or cancelled) before the cutoff.
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

/// What [`prune_all`] with `older_than` would delete, counted, deleting nothing
/// (`pgflow.prune_preview`); `busy` is false.
pub async fn prune_preview(
    executor: impl PgExecutor<'_>,
    older_than: std::time::Duration,
) -> Result<Pruned, EngineError> {
    let preview = sqlx::query_as::<_, Pruned>("select * from pgflow.prune_preview($1)")
        .bind(older_than)
        .fetch_one(executor)
        .await?;
    Ok(preview)
}

/// [`prune`] again and again, `batch_size` rows of each kind per transaction (so that no
/// transaction holds many locks or writes much for long), until nothing older than
/// `older_than` is left or another caller is pruning, then [`drop_pruned_history`]. Returns
/// the totals.
pub async fn prune_all<'c>(
    pool: impl PgExecutor<'c> + Copy,
    older_than: std::time::Duration,
    batch_size: i32,
) -> Result<Pruned, EngineError> {
    let mut total = Pruned::default();
    loop {
        let pruned = prune(pool, older_than, batch_size).await?;
        total.add(pruned);
        if pruned.busy || !pruned.is_full(batch_size) {
            drop_pruned_history(pool).await?;
            return Ok(total);
        }
    }
}

/// Drops the days of history a [`prune`] detached, freeing their files, in a transaction of
/// its own (`pgflow.drop_pruned_history`; [`prune_all`] calls it last, and each prune first):
/// the time is the filesystem's, and nobody waits for it. Returns the tables dropped.
pub async fn drop_pruned_history(executor: impl PgExecutor<'_>) -> Result<i32, EngineError> {
    let dropped = sqlx::query_scalar("select pgflow.drop_pruned_history()")
        .fetch_one(executor)
        .await?;
    Ok(dropped)
}

/// What one call of [`archive_runs`] moved into the history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromRow)]
#[non_exhaustive]
pub struct Archived {
    /// Another caller was archiving at that moment; this call moved nothing.
    pub busy: bool,
    /// Runs moved, with their step states, tasks and attempts.
    pub runs: i64,
}

/// Moves runs that ended more than `after` ago, at most `batch_size`,
/// from the live tables into the history partitioned by the day they ended
/// (`pgflow.archive_runs`), in one transaction. Readers still find them (the `all_*` views);
/// [`prune`] then drops them a day at a time. One caller per database at a time; a
/// concurrent call moves nothing and says `busy`. Call again while it moves `batch_size`.
/// The dashboard's trends count the last minutes' runs from the live tables: runs archived
/// within 15 minutes of their end may be missing from them (a process waits
/// [`MIN_ARCHIVE_AFTER`](crate::process::MIN_ARCHIVE_AFTER) at least).
pub async fn archive_runs(
    executor: impl PgExecutor<'_>,
    after: std::time::Duration,
    batch_size: i32,
) -> Result<Archived, EngineError> {
    let archived = sqlx::query_as::<_, Archived>("select * from pgflow.archive_runs($1, $2)")
        .bind(after)
        .bind(batch_size)
        .fetch_one(executor)
        .await?;
    Ok(archived)
}

/// [`archive_runs`] again and again, `batch_size` runs per transaction, until none ended more
/// than `after` ago is left, another caller is archiving, or `budget` has passed (the rest
/// waits for the next call). Returns the runs moved.
pub async fn archive_all<'c>(
    pool: impl PgExecutor<'c> + Copy,
    after: std::time::Duration,
    batch_size: i32,
    budget: std::time::Duration,
) -> Result<i64, EngineError> {
    let began = std::time::Instant::now();
    let mut moved = 0;
    loop {
        let archived = archive_runs(pool, after, batch_size).await?;
        moved += archived.runs;
        if archived.busy || archived.runs < i64::from(batch_size) || began.elapsed() >= budget {
            return Ok(moved);
        }
    }
}
