//! The `pgflow` schema's functions, views and triggers: `functions/NN_<area>.sql`, embedded in
//! the binary and applied after the versioned migrations, in the same transaction, whenever
//! their combined checksum differs from the one recorded in `pgflow.schema_functions` (the
//! "repeatable migration" of Flyway's `R__` scripts). Each file is written with `create or
//! replace`, so applying it again changes nothing; `functions/README.md` says which changes
//! also need a versioned migration.

use sha2::{Digest, Sha256};
use sqlx::{Executor, PgConnection};

use crate::{InstallError, ledger};

/// One embedded function file.
#[derive(Debug, Clone, Copy)]
pub struct FunctionFile {
    /// Its file name, e.g. `04_progression.sql`; files are applied in this order.
    pub name: &'static str,
    /// Its SQL.
    pub sql: &'static str,
}

macro_rules! function_files {
    ($($name:literal),* $(,)?) => {
        &[$(FunctionFile { name: $name, sql: include_str!(concat!("../functions/", $name)) }),*]
    };
}

/// Every function file, in the order they are applied. A unit test checks that this list is
/// exactly the `.sql` files of `functions/`, sorted by name.
pub static FUNCTION_FILES: &[FunctionFile] = function_files![
    "01_support.sql",
    "02_integrity.sql",
    "03_definitions.sql",
    "04_progression.sql",
    "05_input_checks.sql",
    "05_starts.sql",
    "06_claims.sql",
    "07_completion.sql",
    "08_recovery.sql",
    "09_workers.sql",
    "10_maintenance.sql",
    "11_aliases_rollouts.sql",
    "12_history.sql",
    "12_retention.sql",
    "13_inspection.sql",
    "14_run_control.sql",
    "15_schedules.sql",
    "16_events.sql",
    "17_flow_control.sql",
    "18_signals.sql",
    "19_subflows.sql",
    "20_concurrency_caps.sql",
    "21_rate_limits.sql",
    "22_queue_caps.sql",
    "23_trends.sql",
    "99_privileges.sql",
];

/// The SHA-256 of every function file's name and text, in order: what the ledger records.
pub fn code_functions_checksum() -> Vec<u8> {
    let mut hasher = Sha256::new();
    for file in FUNCTION_FILES {
        hasher.update(file.name.as_bytes());
        hasher.update([0]);
        hasher.update(file.sql.as_bytes());
        hasher.update([0]);
    }
    hasher.finalize().to_vec()
}

/// Whether the database's functions are the ones this code carries (`false` as well when
/// pgflow is not installed). The versioned schema fixes every function's signature, so a
/// difference means another release's bodies; `install` brings them in line.
/// Safe behind a transaction-mode pooler, as [`crate::check_schema`] is.
pub async fn functions_current(pool: &sqlx::PgPool) -> Result<bool, InstallError> {
    let mut tx = pool.begin().await?;
    let recorded = ledger::functions_checksum(&mut tx).await?;
    tx.commit().await?;
    Ok(recorded.as_deref() == Some(code_functions_checksum().as_slice()))
}

/// Applies every function file and records their checksum, unless the recorded checksum is
/// already this code's. Runs inside the caller's install transaction, after the migrations.
/// Returns whether the files were applied.
pub(crate) async fn apply_if_changed(conn: &mut PgConnection) -> Result<bool, InstallError> {
    let checksum = code_functions_checksum();
    if ledger::functions_checksum(conn).await?.as_deref() == Some(checksum.as_slice()) {
        return Ok(false);
    }
    for file in FUNCTION_FILES {
        (&mut *conn)
            .execute(sqlx::raw_sql(file.sql))
            .await
            .map_err(|source| InstallError::function_file(file.name, source))?;
    }
    ledger::record_functions(conn, &checksum).await?;
    tracing::info!(files = FUNCTION_FILES.len(), "applied pgflow functions");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_list_is_every_sql_file_of_the_directory_in_name_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("functions");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .expect("functions/ exists")
            .map(|entry| entry.expect("readable entry").file_name())
            .map(|name| name.to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".sql"))
            .collect();
        on_disk.sort();
        let embedded: Vec<&str> = FUNCTION_FILES.iter().map(|f| f.name).collect();
        assert_eq!(embedded, on_disk);
    }
}
