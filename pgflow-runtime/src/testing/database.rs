//! A throwaway database for one test: a copy of a template database that has pgflow and the
//! test clock installed (made once per server and version of this code), dropped at the end.
//! A copy takes a fraction of an install's time.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection};

use crate::testing::TestError;

/// Where a test's databases are made when `DATABASE_URL` is unset: the local server, as the
/// project's own tests use it.
pub(crate) const LOCAL_SERVER: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Connections the test's client keeps at most: its workers' calls and the test's own queries
/// (the client's listener has a connection of its own). Few, since each new session plans
/// pgflow's functions again on first use (about 20 ms for a start).
const MAX_CONNECTIONS: u32 = 5;

/// The prefix of the template databases' names.
const TEMPLATE_PREFIX: &str = "pgflow_testkit_template_";

/// A database made for one test: its name and how to reach it and its server.
#[derive(Debug, Clone)]
pub(crate) struct Throwaway {
    /// Its name (`pgflow_test_` and 16 hexadecimal digits).
    pub(crate) name: String,
    /// The server's maintenance database, from which it is created and dropped.
    server: PgConnectOptions,
    /// The database itself.
    pub(crate) options: PgConnectOptions,
}

impl Throwaway {
    /// Creates a database with a new name on the server at `server_url` (any database of the
    /// server; the role must be allowed to create databases).
    pub(crate) async fn create(server_url: &str) -> Result<Self, TestError> {
        let server = PgConnectOptions::from_str(server_url)
            .map_err(|source| TestError::ServerUrl { source })?
            .disable_statement_logging();
        let name = format!(
            "pgflow_test_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..16]
        );
        let unreachable = |source| TestError::Server {
            server: pgflow_sql::connection_target(&server),
            source,
        };
        let mut conn = PgConnection::connect_with(&server)
            .await
            .map_err(unreachable)?;
        let template = template_name();
        ensure_template(&mut conn, &server, &template).await?;
        sqlx::raw_sql(&format!("create database {name} template {template}"))
            .execute(&mut conn)
            .await
            .map_err(unreachable)?;
        let _ = conn.close().await;
        let options = server.clone().database(&name);
        Ok(Self {
            name,
            server,
            options,
        })
    }

    /// A pool on the database.
    pub(crate) async fn pool(&self) -> Result<sqlx::PgPool, TestError> {
        PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .connect_with(self.options.clone())
            .await
            .map_err(TestError::Database)
    }

    /// Drops the database, ending the sessions still on it.
    pub(crate) async fn drop_database(&self) -> Result<(), TestError> {
        let mut conn = PgConnection::connect_with(&self.server)
            .await
            .map_err(TestError::Database)?;
        sqlx::raw_sql(&format!(
            "drop database if exists {} with (force)",
            self.name
        ))
        .execute(&mut conn)
        .await
        .map_err(TestError::Database)?;
        let _ = conn.close().await;
        Ok(())
    }
}

/// The template's name for this code: its migrations, function files and test clock.
fn template_name() -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    pgflow_sql::code_migration_versions().hash(&mut hasher);
    pgflow_sql::code_functions_checksum().hash(&mut hasher);
    crate::testing::clock::TEST_CLOCK_SQL.hash(&mut hasher);
    format!("{TEMPLATE_PREFIX}{:016x}", hasher.finish())
}

/// Makes the template `template` on the server of `conn` unless it exists: a database with
/// pgflow and the test clock installed and nothing else. One maker at a time per server (a
/// session advisory lock); the templates of other versions of this code are dropped then.
async fn ensure_template(
    conn: &mut PgConnection,
    server: &PgConnectOptions,
    template: &str,
) -> Result<(), TestError> {
    sqlx::query("select pg_advisory_lock(hashtext('pgflow_testkit_template'))")
        .execute(&mut *conn)
        .await
        .map_err(TestError::Database)?;
    let made = make_template(conn, server, template).await;
    let unlocked = sqlx::query("select pg_advisory_unlock(hashtext('pgflow_testkit_template'))")
        .execute(&mut *conn)
        .await
        .map_err(TestError::Database);
    made.and(unlocked.map(|_| ()))
}

/// The work of [`ensure_template`], under its lock.
async fn make_template(
    conn: &mut PgConnection,
    server: &PgConnectOptions,
    template: &str,
) -> Result<(), TestError> {
    let exists: bool =
        sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
            .bind(template)
            .fetch_one(&mut *conn)
            .await
            .map_err(TestError::Database)?;
    if exists {
        return Ok(());
    }
    let stale: Vec<String> = sqlx::query_scalar(
        "select datname from pg_database where starts_with(datname, $1) and datname <> $2",
    )
    .bind(TEMPLATE_PREFIX)
    .bind(template)
    .fetch_all(&mut *conn)
    .await
    .map_err(TestError::Database)?;
    for name in stale {
        for statement in [
            format!("alter database {name} is_template false"),
            format!("drop database if exists {name} with (force)"),
        ] {
            let _ = sqlx::raw_sql(&statement).execute(&mut *conn).await;
        }
    }
    let building = format!("{template}_building");
    execute_each(
        conn,
        [
            format!("drop database if exists {building} with (force)"),
            format!("create database {building}"),
        ],
    )
    .await?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(server.clone().database(&building))
        .await
        .map_err(TestError::Database)?;
    let installed = async {
        pgflow_sql::install(&pool).await?;
        crate::testing::clock::install(&pool.clone().into()).await
    }
    .await;
    pool.close().await;
    installed?;
    execute_each(
        conn,
        [
            format!("alter database {building} rename to {template}"),
            format!("alter database {template} is_template true"),
        ],
    )
    .await
}

/// Runs each statement alone, in order: a database is neither created, dropped nor renamed in
/// a transaction, which several statements in one query would make.
async fn execute_each(
    conn: &mut PgConnection,
    statements: impl IntoIterator<Item = String>,
) -> Result<(), TestError> {
    for statement in statements {
        sqlx::raw_sql(&statement)
            .execute(&mut *conn)
            .await
            .map_err(TestError::Database)?;
    }
    Ok(())
}
