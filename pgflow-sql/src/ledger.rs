//! What a database records of its pgflow installs: `pgflow.schema_migrations` (each versioned
//! migration applied, with its checksum) and `pgflow.schema_functions` (the checksum of the
//! function files last applied). [`crate::migrations`] and [`crate::functions`] read and write
//! their ledger here; the installer ([`crate::install`]) creates both.

use sqlx::{Executor, PgConnection};

use crate::InstallError;

/// Creates the schema and both ledgers when they are missing.
pub(crate) async fn create(conn: &mut PgConnection) -> Result<(), InstallError> {
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
    Ok(())
}

/// Whether the table `name` (schema-qualified) exists: a ledger is read only once it does.
async fn table_exists(conn: &mut PgConnection, name: &str) -> Result<bool, InstallError> {
    let exists = sqlx::query_scalar("select to_regclass($1) is not null")
        .bind(name)
        .persistent(false)
        .fetch_one(&mut *conn)
        .await?;
    Ok(exists)
}

/// Every applied migration's version and checksum, in version order (the ledger must exist).
pub(crate) async fn applied_migrations(
    conn: &mut PgConnection,
) -> Result<Vec<(i64, Vec<u8>)>, InstallError> {
    let applied =
        sqlx::query_as("select version, checksum from pgflow.schema_migrations order by version")
            .fetch_all(&mut *conn)
            .await?;
    Ok(applied)
}

/// The newest applied migration, or `None` when the ledger does not exist.
pub(crate) async fn applied_version(conn: &mut PgConnection) -> Result<Option<i64>, InstallError> {
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

/// Records a migration as applied.
pub(crate) async fn record_migration(
    conn: &mut PgConnection,
    version: i64,
    description: &str,
    checksum: &[u8],
) -> Result<(), InstallError> {
    sqlx::query(
        "insert into pgflow.schema_migrations (version, description, checksum)
         values ($1, $2, $3)",
    )
    .bind(version)
    .bind(description)
    .bind(checksum)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The checksum recorded by the last application of the function files, if any.
pub(crate) async fn functions_checksum(
    conn: &mut PgConnection,
) -> Result<Option<Vec<u8>>, InstallError> {
    if !table_exists(conn, "pgflow.schema_functions").await? {
        return Ok(None);
    }
    let checksum = sqlx::query_scalar("select checksum from pgflow.schema_functions")
        .persistent(false)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(checksum)
}

/// Records the checksum of the function files just applied.
pub(crate) async fn record_functions(
    conn: &mut PgConnection,
    checksum: &[u8],
) -> Result<(), InstallError> {
    sqlx::query(
        "insert into pgflow.schema_functions (singleton, checksum) values (true, $1)
         on conflict (singleton) do update set checksum = excluded.checksum, applied_at = now()",
    )
    .bind(checksum)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
