//! [`Db`]: a pool of connections to a pgflow database, and how they reach it.
//!
//! Every engine call takes any executor; `&Db` is one. Straight to Postgres it is the pool
//! itself (statements prepared once per connection and cached). Behind a transaction-mode
//! pooler ([`Pooling::Transaction`]) each call becomes `BEGIN`, the statement unnamed, `COMMIT`:
//! the pooler then keeps one server connection for the whole exchange, where it would
//! otherwise be free to send the statement's parse and its execution to two different ones,
//! and no named statement is left behind on a server connection another client will get.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt, TryStreamExt};
use sqlx::postgres::{PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{Describe, Either, Execute, Executor, PgPool, Postgres};
use tokio_util::sync::CancellationToken;

pub use pgflow_sql::Pooling;

/// A pool of connections to a pgflow database and how they reach it ([`Pooling`]). Cheap to
/// clone (the pool is shared); `&Db` is an executor for every engine call.
///
/// A `PgPool` converts into a direct `Db`; [`Db::new`] names the pooling;
/// [`connect::db`](crate::connect::db) reads it from the URL (`?pgbouncer=true`).
#[derive(Debug, Clone)]
pub struct Db {
    pool: PgPool,
    pooling: Pooling,
    /// Stops the pool's background watch (following the primary) with the last clone.
    watch: Option<Arc<WatchGuard>>,
}

/// Cancels its token when dropped: held by every clone of a [`Db`] whose pool a background
/// task looks after, so that the task ends with the last of them.
#[derive(Debug)]
struct WatchGuard(CancellationToken);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl Db {
    /// `pool`, whose connections reach Postgres as `pooling` says.
    pub fn new(pool: PgPool, pooling: Pooling) -> Self {
        Self {
            pool,
            pooling,
            watch: None,
        }
    }

    /// This `Db`, with `stop` cancelled once its last clone is dropped.
    pub(crate) fn watched_until_dropped(mut self, stop: CancellationToken) -> Self {
        self.watch = Some(Arc::new(WatchGuard(stop)));
        self
    }

    /// The pool, for queries of your own. Behind a transaction-mode pooler, run them inside a
    /// transaction with `.persistent(false)`, as pgflow does.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// How the pool's connections reach Postgres.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Closes the pool (see [`PgPool::close`]).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

impl From<PgPool> for Db {
    fn from(pool: PgPool) -> Self {
        Self::new(pool, Pooling::Direct)
    }
}

impl From<&PgPool> for Db {
    fn from(pool: &PgPool) -> Self {
        Self::new(pool.clone(), Pooling::Direct)
    }
}

/// A query as given, but never kept as a named statement.
struct Unnamed<Q>(Q);

impl<'q, Q: Execute<'q, Postgres>> Execute<'q, Postgres> for Unnamed<Q> {
    fn sql(&self) -> &'q str {
        self.0.sql()
    }

    fn statement(&self) -> Option<&PgStatement<'q>> {
        self.0.statement()
    }

    fn take_arguments(
        &mut self,
    ) -> Result<Option<sqlx::postgres::PgArguments>, sqlx::error::BoxDynError> {
        self.0.take_arguments()
    }

    fn persistent(&self) -> bool {
        false
    }
}

/// Runs `query` in a transaction of its own with an unnamed statement, and collects what it
/// returned (a transaction-mode pooler allows nothing longer-lived).
async fn in_own_transaction<'q, Q: Execute<'q, Postgres> + 'q>(
    pool: PgPool,
    query: Q,
) -> Result<Vec<Either<PgQueryResult, PgRow>>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let results = (&mut *tx).fetch_many(Unnamed(query)).try_collect().await?;
    tx.commit().await?;
    Ok(results)
}

impl<'c> Executor<'c> for &'c Db {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.pooling {
            Pooling::Direct => self.pool.fetch_many(query),
            Pooling::Transaction => {
                futures_util::stream::once(in_own_transaction(self.pool.clone(), query))
                    .map_ok(|results| futures_util::stream::iter(results.into_iter().map(Ok)))
                    .try_flatten()
                    .boxed()
            }
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.pooling {
            Pooling::Direct => self.pool.fetch_optional(query),
            Pooling::Transaction => in_own_transaction(self.pool.clone(), query)
                .map(|results| {
                    Ok(results?.into_iter().find_map(|step| match step {
                        Either::Left(_) => None,
                        Either::Right(row) => Some(row),
                    }))
                })
                .boxed(),
        }
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.pool.describe(sql)
    }
}
