//! `pgflow install` and `pgflow grant`.

use serde_json::json;

use crate::failure::Failure;
use crate::output::Output;

/// Installs or upgrades PGMQ and the pgflow schema.
pub(super) async fn install(url: &str, out: &Output) -> Result<(), Failure> {
    // With several hosts in the URL, on the one that is the primary.
    let url = pgflow::connect::primary_url(url)
        .await
        .map_err(|error| Failure::runtime_chain(&error))?;
    let report = pgflow::install_url(&url)
        .await
        .map_err(|error| Failure::runtime_chain(&error))?;
    out.print(
        json!({
            "schema_version": report.schema_version,
            "applied_migrations": report.applied_migrations,
            "applied_functions": report.applied_functions,
            "pgmq": report.pgmq.as_str(),
        }),
        || {
            let applied = match (report.applied_migrations.len(), report.applied_functions) {
                (0, false) => "already up to date".to_owned(),
                (0, true) => "functions updated".to_owned(),
                (n, _) => format!(
                    "applied {} and the functions",
                    crate::output::count(n as i64, "migration", "migrations")
                ),
            };
            format!(
                "pgflow installed: schema version {} ({applied}), queues by {}",
                report.schema_version,
                report.pgmq.describe()
            )
        },
    );
    Ok(())
}

/// Gives `login` one of pgflow's roles.
pub(super) async fn grant(
    pool: &pgflow::Db,
    out: &Output,
    login: &str,
    role: pgflow::PgflowRole,
) -> Result<(), Failure> {
    pgflow::grant_role(pool.pool(), login, role)
        .await
        .map_err(|error| Failure::runtime_chain(&error))?;
    out.print(json!({ "login": login, "role": role.name() }), || {
        format!("{login} is now a member of {}", role.name())
    });
    Ok(())
}
