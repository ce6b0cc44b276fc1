//! The `pgflow` schema's versioned migrations (tables, types, indexes, constraints): embedded
//! in the binary, applied in version order and recorded in `pgflow.schema_migrations` (see
//! [`crate::ledger`]); the installer then applies the function files of [`crate::functions`] in
//! the same transaction.
//!
//! The files are embedded with `sqlx::migrate!`, but applied and recorded here rather than by
//! sqlx's own runner: that runner keeps its ledger in `public._sqlx_migrations`, the table the
//! user's application uses for its own migrations, and the two ledgers would then mistake each
//! other's entries for unknown versions.

use sqlx::migrate::Migrator;
use sqlx::{Executor, PgConnection, PgPool};

use crate::{InstallError, ledger};

static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// The newest schema version this code carries (the version of its last migration).
pub fn code_schema_version() -> i64 {
    MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

/// The versions of every migration this code carries, in order.
pub fn code_migration_versions() -> Vec<i64> {
    MIGRATOR.iter().map(|m| m.version).collect()
}

/// The SQL of each migration, in version order (for the contract's checks of the functions a
/// migration defines: the row rules and the engine's clock).
#[cfg(test)]
pub(crate) fn migration_sources() -> impl Iterator<Item = &'static str> {
    MIGRATOR.iter().map(|m| m.sql.as_ref())
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
    let applied = ledger::applied_version(&mut tx).await?;
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

/// Refuses a database whose ledger `applied` (version, checksum) this code cannot build on: a
/// migration this code carries whose file differs (checked first: a database of a pre-release
/// build whose migrations were squashed since records the baseline with another checksum, and
/// later versions that are not newer releases), a newer schema, or a migration this code does
/// not carry.
pub(crate) fn check_applied(applied: &[(i64, Vec<u8>)]) -> Result<(), InstallError> {
    for (version, checksum) in applied {
        if let Some(migration) = MIGRATOR.iter().find(|m| m.version == *version)
            && checksum.as_slice() != migration.checksum.as_ref()
        {
            return Err(InstallError::ChecksumMismatch { version: *version });
        }
    }
    let code = code_schema_version();
    if let Some(&(database, _)) = applied.last()
        && database > code
    {
        return Err(InstallError::SchemaNewer { database, code });
    }
    if let Some((version, _)) = applied
        .iter()
        .find(|(version, _)| !MIGRATOR.iter().any(|m| m.version == *version))
    {
        return Err(InstallError::UnknownMigration { version: *version });
    }
    Ok(())
}

/// Applies, in version order, every migration not in `applied`, recording each in the ledger;
/// returns their versions. Runs inside the caller's install transaction.
pub(crate) async fn apply_missing(
    conn: &mut PgConnection,
    applied: &[(i64, Vec<u8>)],
) -> Result<Vec<i64>, InstallError> {
    let mut migrations = Vec::new();
    for migration in MIGRATOR.iter() {
        if applied.iter().any(|(v, _)| *v == migration.version) {
            continue;
        }
        (&mut *conn).execute(sqlx::raw_sql(&migration.sql)).await?;
        ledger::record_migration(
            conn,
            migration.version,
            &migration.description,
            migration.checksum.as_ref(),
        )
        .await?;
        tracing::info!(version = migration.version, description = %migration.description, "applying pgflow migration");
        migrations.push(migration.version);
    }
    Ok(migrations)
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
