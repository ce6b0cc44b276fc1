//! Statistics and vacuum of pgflow's tables and queues, for servers without autovacuum; the
//! samples of the queues that the dashboard's trends read.

use sqlx::PgExecutor;

use crate::error::EngineError;

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
///
/// Behind a transaction-mode pooler it vacuums nothing (the lock needs a session of its own):
/// there, leave it to autovacuum or call this with a direct pool.
pub async fn vacuum_tables(
    db: &crate::db::Db,
    even_with_autovacuum: bool,
) -> Result<Vec<String>, EngineError> {
    if db.pooling() == crate::db::Pooling::Transaction {
        tracing::debug!("vacuum skipped: a transaction-mode pooler holds no session for its lock");
        return Ok(Vec::new());
    }
    let mut conn = db.pool().acquire().await?;
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

/// Takes the dashboard's trend samples, unless any process took them less than `every` ago
/// (`pgflow.sample_trends`): every queue's depth, oldest message's age and tasks in flight
/// now (`pgflow.queue_samples`); per flow and minute, the runs that completed and failed
/// (`pgflow.run_samples`). The last few minutes are counted again each time, so the current
/// minute shows before it is over. Deletes what is older than `keep`, the handler durations
/// the workers wrote (`pgflow.task_samples`) included. Returns whether it sampled: `false`
/// when no sample was due, or another process was at it.
pub async fn sample_trends(
    executor: impl PgExecutor<'_>,
    every: std::time::Duration,
    keep: std::time::Duration,
) -> Result<bool, EngineError> {
    let seconds = |d: std::time::Duration| i32::try_from(d.as_secs()).unwrap_or(i32::MAX);
    let sampled = sqlx::query_scalar("select pgflow.sample_trends($1, $2)")
        .bind(seconds(every).max(1))
        .bind(seconds(keep))
        .fetch_one(executor)
        .await?;
    Ok(sampled)
}
