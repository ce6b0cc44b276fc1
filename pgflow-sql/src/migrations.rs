//! The `pgflow` schema's versioned migrations (tables, types, indexes, constraints): embedded
//! in the binary, applied in version order, recorded in `pgflow.schema_migrations`; then, in
//! the same transaction, the function files of [`crate::functions`].
//!
//! The files are embedded with `sqlx::migrate!`, but applied and recorded here rather than by
//! sqlx's own runner: that runner keeps its ledger in `public._sqlx_migrations`, the table the
//! user's application uses for its own migrations, and the two ledgers would then mistake each
//! other's entries for unknown versions.

use sqlx::migrate::Migrator;
use sqlx::{Connection, Executor, PgConnection, PgPool};

use crate::InstallError;

static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// The newest schema version this code carries (the version of its last migration).
pub fn code_schema_version() -> i64 {
    MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

/// The versions of every migration this code carries, in order.
pub fn code_migration_versions() -> Vec<i64> {
    MIGRATOR.iter().map(|m| m.version).collect()
}

/// How a database's `pgflow` schema relates to this code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaStatus {
    /// No pgflow schema is installed: run `pgflow install`.
    NotInstalled,
    /// The schema is older than this code: run `pgflow install` to upgrade it.
    Outdated {
        /// The newest migration applied to the database.
        database: i64,
        /// The newest migration this code carries.
        code: i64,
    },
    /// The schema is exactly what this code expects.
    Current,
    /// The schema is newer than this code: upgrade the code.
    Newer {
        /// The newest migration applied to the database.
        database: i64,
        /// The newest migration this code carries.
        code: i64,
    },
}

/// Reads the schema version of the database behind `pool` and compares it with this code.
///
/// Safe behind a transaction-mode pooler: its reads share one transaction and use unnamed
/// statements.
pub async fn check_schema(pool: &PgPool) -> Result<SchemaStatus, InstallError> {
    let mut tx = pool.begin().await?;
    ensure_schema_access(&mut tx).await?;
    let applied = applied_version(&mut tx).await?;
    tx.commit().await?;
    let database = match applied {
        None => return Ok(SchemaStatus::NotInstalled),
        Some(version) => version,
    };
    let code = code_schema_version();
    Ok(match database.cmp(&code) {
        std::cmp::Ordering::Less => SchemaStatus::Outdated { database, code },
        std::cmp::Ordering::Equal => SchemaStatus::Current,
        std::cmp::Ordering::Greater => SchemaStatus::Newer { database, code },
    })
}

/// Fails with [`InstallError::NoSchemaAccess`] when the schema exists but this login may not
/// read its version (it holds none of pgflow's roles), rather than a bare permission error.
pub(crate) async fn ensure_schema_access(conn: &mut PgConnection) -> Result<(), InstallError> {
    let (login, denied): (String, bool) = sqlx::query_as(
        "select current_user::text,
                exists (select 1 from pg_namespace n where n.nspname = 'pgflow'
                        and not has_schema_privilege(n.oid, 'usage'))
                or (to_regclass('pgflow.schema_migrations') is not null
                    and not has_table_privilege('pgflow.schema_migrations', 'select'))",
    )
    .persistent(false)
    .fetch_one(&mut *conn)
    .await?;
    if denied {
        return Err(InstallError::NoSchemaAccess { login });
    }
    Ok(())
}

/// Whether the table `name` (schema-qualified) exists: a ledger is read only once it does.
pub(crate) async fn table_exists(
    conn: &mut PgConnection,
    name: &str,
) -> Result<bool, InstallError> {
    let exists = sqlx::query_scalar("select to_regclass($1) is not null")
        .bind(name)
        .persistent(false)
        .fetch_one(&mut *conn)
        .await?;
    Ok(exists)
}

/// The newest applied migration, or `None` when the ledger does not exist.
async fn applied_version(conn: &mut PgConnection) -> Result<Option<i64>, InstallError> {
    if !table_exists(conn, "pgflow.schema_migrations").await? {
        return Ok(None);
    }
    let version: Option<i64> =
        sqlx::query_scalar("select max(version) from pgflow.schema_migrations")
            .persistent(false)
            .fetch_one(&mut *conn)
            .await?;
    Ok(version)
}

/// What [`apply_pending`] changed.
pub(crate) struct Applied {
    /// Versions of the migrations applied now.
    pub migrations: Vec<i64>,
    /// Whether the function files were applied now.
    pub functions: bool,
}

/// Applies every migration the database lacks, then the function files if they changed, all
/// in one transaction: an install that fails changes nothing.
///
/// The caller holds the installation lock, so no other installer runs concurrently.
pub(crate) async fn apply_pending(conn: &mut PgConnection) -> Result<Applied, InstallError> {
    // `Executor::execute` (a boxed, `Send` future) rather than `RawSql::execute`, whose
    // generic future is not `Send` for `&mut PgConnection`.
    (&mut *conn)
        .execute(sqlx::raw_sql(
            "create schema if not exists pgflow;
             create table if not exists pgflow.schema_migrations (
               version bigint primary key,
               description text not null,
               checksum bytea not null,
               installed_at timestamptz not null default now()
             );
             create table if not exists pgflow.schema_functions (
               singleton boolean primary key default true check (singleton),
               checksum bytea not null,
               applied_at timestamptz not null default now()
             );",
        ))
        .await?;

    let applied: Vec<(i64, Vec<u8>)> =
        sqlx::query_as("select version, checksum from pgflow.schema_migrations order by version")
            .fetch_all(&mut *conn)
            .await?;

    let code = code_schema_version();
    if let Some(&(database, _)) = applied.last()
        && database > code
    {
        return Err(InstallError::SchemaNewer { database, code });
    }
    for (version, checksum) in &applied {
        let Some(migration) = MIGRATOR.iter().find(|m| m.version == *version) else {
            return Err(InstallError::UnknownMigration { version: *version });
        };
        if checksum.as_slice() != migration.checksum.as_ref() {
            return Err(InstallError::ChecksumMismatch { version: *version });
        }
    }

    let mut tx = Connection::begin(&mut *conn).await?;
    let mut migrations = Vec::new();
    for migration in MIGRATOR.iter() {
        if applied.iter().any(|(v, _)| *v == migration.version) {
            continue;
        }
        (&mut *tx).execute(sqlx::raw_sql(&migration.sql)).await?;
        sqlx::query(
            "insert into pgflow.schema_migrations (version, description, checksum)
             values ($1, $2, $3)",
        )
        .bind(migration.version)
        .bind(&*migration.description)
        .bind(migration.checksum.as_ref())
        .execute(&mut *tx)
        .await?;
        tracing::info!(version = migration.version, description = %migration.description, "applying pgflow migration");
        migrations.push(migration.version);
    }
    let functions = crate::functions::apply_if_changed(&mut tx).await?;
    tx.commit().await?;
    Ok(Applied {
        migrations,
        functions,
    })
}

#[cfg(test)]
mod frozen {
    //! Every migration, once committed, is frozen: a database that applied it refuses an edited
    //! file (`InstallError::ChecksumMismatch`), so a change goes into a new migration instead.
    //! `migrations.lock` records each migration's checksum; this test fails when a recorded
    //! migration changes, and names the line to add when a new one is not recorded yet.

    use super::MIGRATOR;

    const LOCK: &str = include_str!("../migrations.lock");

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn no_recorded_migration_has_changed_and_every_migration_is_recorded() {
        let recorded: Vec<(i64, &str)> = LOCK
            .lines()
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(|line| {
                let (version, checksum) = line.split_once(' ').expect("`version checksum`");
                (version.parse().expect("a version number"), checksum)
            })
            .collect();
        for migration in MIGRATOR.iter() {
            let checksum = hex(&migration.checksum);
            match recorded.iter().find(|(v, _)| *v == migration.version) {
                Some((_, frozen)) => assert_eq!(
                    *frozen, checksum,
                    "migration {} ({}) changed after it was recorded in migrations.lock; a \
                     database that applied it would refuse this code. Restore it and put the \
                     change in a new migration.",
                    migration.version, migration.description
                ),
                None => panic!(
                    "migration {} ({}) is not recorded: append `{} {checksum}` to \
                     pgflow-sql/migrations.lock",
                    migration.version, migration.description, migration.version
                ),
            }
        }
        assert_eq!(
            recorded.len(),
            MIGRATOR.iter().count(),
            "migrations.lock records a migration that no longer exists"
        );
    }
}
