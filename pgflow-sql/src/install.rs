//! Installing PGMQ and the `pgflow` schema.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use crate::{InstallError, functions, ledger, migrations};

/// Second key of the session advisory lock that serializes installers (the first key is
/// pgflow's lock namespace, as in the SQL core).
const INSTALL_LOCK: (i32, i32) = (1_885_824_620, 1);

/// Where the database's PGMQ came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PgmqSource {
    /// The server's `pgmq` extension (created now or before).
    Extension,
    /// PGMQ's own SQL, applied by the `pgmq` crate's embedded installer.
    EmbeddedSql,
}

impl PgmqSource {
    /// A stable name for machine-readable output: `extension` or `embedded_sql`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Extension => "extension",
            Self::EmbeddedSql => "embedded_sql",
        }
    }

    /// What it is, for people: `the pgmq extension` or `PGMQ's embedded SQL`.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Extension => "the pgmq extension",
            Self::EmbeddedSql => "PGMQ's embedded SQL",
        }
    }
}

/// What [`install`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstallReport {
    /// How PGMQ is provided in this database.
    pub pgmq: PgmqSource,
    /// The pgflow migrations applied by this call (empty when the schema was current).
    pub applied_migrations: Vec<i64>,
    /// Whether this call applied the function files (`functions/*.sql`): on a new install, and
    /// whenever they differ from the ones the database last got.
    pub applied_functions: bool,
    /// The schema version the database is at now.
    pub schema_version: i64,
}

/// Installs or upgrades PGMQ and the `pgflow` schema in the database behind `pool`.
///
/// Idempotent, and safe when many processes call it at once: installers take turns on a
/// session advisory lock held on a connection of their own (so `pool` may be small). Refuses
/// a database whose `pgflow` schema is newer than this code ([`InstallError::SchemaNewer`]).
pub async fn install(pool: &PgPool) -> Result<InstallReport, InstallError> {
    let options: PgConnectOptions = (*pool.connect_options()).clone();
    let mut lock_conn = options
        .connect()
        .await
        .map_err(|e| InstallError::connect(&options, e))?;
    sqlx::query("select pg_advisory_lock($1, $2)")
        .bind(INSTALL_LOCK.0)
        .bind(INSTALL_LOCK.1)
        .execute(&mut lock_conn)
        .await?;

    let result = install_locked(&mut lock_conn, &options).await;

    // Closing the connection releases the lock even if the unlock fails.
    let _ = sqlx::query("select pg_advisory_unlock($1, $2)")
        .bind(INSTALL_LOCK.0)
        .bind(INSTALL_LOCK.1)
        .execute(&mut lock_conn)
        .await;
    let _ = Connection::close(lock_conn).await;
    result
}

/// Connects to `database_url` and runs [`install`]: the form a CLI or a deploy script wants.
///
/// A URL with `pgbouncer=true` (a transaction-mode pooler) is refused with
/// [`InstallError::ThroughTransactionPooler`]: install through the direct URL.
pub async fn install_url(database_url: &str) -> Result<InstallReport, InstallError> {
    let (database_url, pooling) =
        crate::split_pooling(database_url).map_err(|reason| InstallError::Connect {
            target: "(URL)".to_owned(),
            source: sqlx::Error::Configuration(reason.into()),
        })?;
    if pooling == crate::Pooling::Transaction {
        return Err(InstallError::ThroughTransactionPooler);
    }
    let options: PgConnectOptions = database_url.parse().map_err(|e| InstallError::Connect {
        target: "(unparsable URL)".to_owned(),
        source: e,
    })?;
    // Connect once up front: a pool would retry an unreachable server until its timeout.
    let probe = options
        .connect()
        .await
        .map_err(|e| InstallError::connect(&options, e))?;
    let _ = Connection::close(probe).await;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_lazy_with(options);
    let report = install(&pool).await;
    pool.close().await;
    report
}

async fn install_locked(
    conn: &mut PgConnection,
    options: &PgConnectOptions,
) -> Result<InstallReport, InstallError> {
    // Postgres tells of every `if exists` and `if not exists` it skipped, and PGMQ's SQL and
    // the migrations hold many: an install says what it did in one line instead. (The session
    // is the installer's own, closed after it.)
    sqlx::query("set client_min_messages = warning")
        .execute(&mut *conn)
        .await?;
    let pgmq = install_pgmq(conn, options).await?;
    require_pgmq_functions(conn).await?;
    let applied = apply_pending(conn).await?;
    let schema_version = crate::code_schema_version();
    tracing::info!(
        pgmq = pgmq.as_str(),
        migrations = applied.migrations.len(),
        functions = applied.functions,
        schema_version,
        "pgflow installed"
    );
    Ok(InstallReport {
        pgmq,
        applied_migrations: applied.migrations,
        applied_functions: applied.functions,
        schema_version,
    })
}

/// What [`apply_pending`] changed.
struct Applied {
    /// Versions of the migrations applied now.
    migrations: Vec<i64>,
    /// Whether the function files were applied now.
    functions: bool,
}

/// Applies every migration the database lacks, then the function files if they changed, all
/// in one transaction: an install that fails changes nothing.
///
/// The caller holds the installation lock, so no other installer runs concurrently.
async fn apply_pending(conn: &mut PgConnection) -> Result<Applied, InstallError> {
    ledger::create(conn).await?;
    let applied = ledger::applied_migrations(conn).await?;
    migrations::check_applied(&applied)?;
    let mut tx = Connection::begin(&mut *conn).await?;
    let migrations = migrations::apply_missing(&mut tx, &applied).await?;
    let functions = functions::apply_if_changed(&mut tx).await?;
    tx.commit().await?;
    Ok(Applied {
        migrations,
        functions,
    })
}

/// The PGMQ functions pgflow calls that an older PGMQ lacks (an extension installed before
/// pgflow is kept as it is; PGMQ's embedded SQL always has them).
const REQUIRED_PGMQ_FUNCTIONS: &[&str] = &["pop(text,integer)"];

/// Refuses a PGMQ without [`REQUIRED_PGMQ_FUNCTIONS`]: pgflow's functions would install, and
/// every claim would fail.
async fn require_pgmq_functions(conn: &mut PgConnection) -> Result<(), InstallError> {
    for function in REQUIRED_PGMQ_FUNCTIONS {
        let present: bool = sqlx::query_scalar("select to_regprocedure($1) is not null")
            .bind(format!("pgmq.{function}"))
            .fetch_one(&mut *conn)
            .await?;
        if !present {
            return Err(InstallError::PgmqTooOld {
                function: (*function).to_owned(),
            });
        }
    }
    Ok(())
}

/// PGMQ: keep an installed extension; otherwise keep SQL-installed PGMQ up to date; otherwise
/// prefer the server's extension, falling back to PGMQ's embedded SQL.
async fn install_pgmq(
    conn: &mut PgConnection,
    options: &PgConnectOptions,
) -> Result<PgmqSource, InstallError> {
    let (extension_installed, schema_exists, extension_available): (bool, bool, bool) =
        sqlx::query_as(
            "select exists (select 1 from pg_extension where extname = 'pgmq'),
                    exists (select 1 from pg_namespace where nspname = 'pgmq'),
                    exists (select 1 from pg_available_extensions where name = 'pgmq')",
        )
        .fetch_one(&mut *conn)
        .await?;

    if extension_installed {
        return Ok(PgmqSource::Extension);
    }
    if !schema_exists && extension_available {
        sqlx::query("create extension if not exists pgmq")
            .execute(&mut *conn)
            .await?;
        return Ok(PgmqSource::Extension);
    }

    // The embedded installer takes a pool; give it one connection of its own, as quiet as
    // the install's own.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(
            options
                .clone()
                .options([("client_min_messages", "warning")]),
        )
        .await
        .map_err(|e| InstallError::connect(options, e))?;
    let result = pgmq::install::install_sql_from_embedded(&pool).await;
    pool.close().await;
    result.map_err(|error| match error {
        pgmq::errors::PgmqError::DatabaseError(db) => InstallError::from(db),
        other => InstallError::Pgmq(Box::new(other)),
    })?;
    Ok(PgmqSource::EmbeddedSql)
}
