//! pgflow's three group roles (created by the install, see `functions/99_privileges.sql`) and
//! granting one to a login.

use sqlx::PgPool;

use crate::InstallError;

/// One of pgflow's group roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgflowRole {
    /// `pgflow_worker`: runs workers (register, claim, complete, fail, maintenance).
    Worker,
    /// `pgflow_client`: starts runs and reads runs and their outputs.
    Client,
    /// `pgflow_operator`: a client that also manages aliases, rollouts, drains, workers and
    /// retention.
    Operator,
}

impl PgflowRole {
    /// The role's name in the database.
    pub fn name(self) -> &'static str {
        match self {
            Self::Worker => "pgflow_worker",
            Self::Client => "pgflow_client",
            Self::Operator => "pgflow_operator",
        }
    }
}

/// Makes `login` a member of `role` (`grant pgflow_worker to login`); granting it again
/// changes nothing. Run it as the installer (or any role that may grant `role`).
pub async fn grant_role(pool: &PgPool, login: &str, role: PgflowRole) -> Result<(), InstallError> {
    let exists: (bool, bool) = sqlx::query_as(
        "select exists (select 1 from pg_roles where rolname = $1),
                exists (select 1 from pg_roles where rolname = $2)",
    )
    .bind(role.name())
    .bind(login)
    .fetch_one(pool)
    .await?;
    match exists {
        (false, _) => {
            return Err(InstallError::RoleMissing {
                role: role.name().to_owned(),
            });
        }
        (true, false) => {
            return Err(InstallError::UnknownLogin {
                login: login.to_owned(),
            });
        }
        (true, true) => {}
    }
    // Both names are quoted by the server (`%I`).
    let statement: String = sqlx::query_scalar("select format('grant %I to %I', $1, $2)")
        .bind(role.name())
        .bind(login)
        .fetch_one(pool)
        .await?;
    sqlx::raw_sql(&statement).execute(pool).await?;
    Ok(())
}
