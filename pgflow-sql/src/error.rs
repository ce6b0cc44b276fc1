//! Errors of installation and schema checks.

/// Why installing pgflow (or checking its schema) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InstallError {
    /// The database could not be reached.
    #[error("cannot connect to the database at {target}: {source}")]
    Connect {
        /// `host:port/database` of the attempt.
        target: String,
        /// Why the connection failed.
        #[source]
        source: sqlx::Error,
    },

    /// The URL goes through a transaction-mode pooler (`pgbouncer=true`), which cannot hold
    /// the session the installation needs.
    #[error(
        "pgflow cannot be installed through a transaction-mode pooler (the URL says \
         `pgbouncer=true`): the install holds a session lock and runs DDL in one session; run \
         `pgflow install` with the database's direct URL (or a session-mode pooler), then use \
         the pooled URL for workers, clients and the other commands"
    )]
    ThroughTransactionPooler,

    /// The role lacks a privilege the installation needs.
    #[error(
        "permission denied while installing pgflow ({0}); connect as a role that may create \
         schemas and tables in this database (for example the database owner)"
    )]
    PermissionDenied(String),

    /// The connected login may not read the pgflow schema: it holds none of pgflow's roles.
    #[error(
        "login `{login}` may not use the pgflow schema of this database: grant it one of \
         pgflow's roles, as the installer: `pgflow grant {login} --as worker|client|operator`"
    )]
    NoSchemaAccess {
        /// The connected login.
        login: String,
    },

    /// pgflow's group role does not exist: the install could not create it.
    #[error(
        "the role `{role}` does not exist: run `pgflow install` as a role with CREATEROLE (or \
         superuser), which creates pgflow_worker, pgflow_client and pgflow_operator"
    )]
    RoleMissing {
        /// The group role.
        role: String,
    },

    /// The login to grant a role to does not exist.
    #[error("no role named `{login}` exists: create the login first (`create role {login} login`)")]
    UnknownLogin {
        /// The login asked for.
        login: String,
    },

    /// The database's PGMQ (typically an extension installed before pgflow) lacks a function
    /// pgflow calls: it is older than pgflow needs.
    #[error(
        "this database's PGMQ has no `pgmq.{function}`, which pgflow's claims call; update PGMQ \
         to a release that has it (for the pgmq extension: `alter extension pgmq update`, as its \
         owner) and install again"
    )]
    PgmqTooOld {
        /// The PGMQ function (with its argument types) that is missing.
        function: String,
    },

    /// PGMQ's own installer failed.
    #[error("installing PGMQ failed: {0}")]
    Pgmq(#[source] Box<dyn std::error::Error + Send + Sync>),

    /// The database holds a pgflow schema newer than this code knows.
    #[error(
        "the database's pgflow schema is at version {database}, newer than this code's \
         {code}; upgrade pgflow (this binary and your workers) instead of installing an older one"
    )]
    SchemaNewer {
        /// The newest migration applied to the database.
        database: i64,
        /// The newest migration this code carries.
        code: i64,
    },

    /// A migration applied to the database differs from the one this code carries: changed by
    /// hand, or installed by another build (a pre-release build, whose migrations were squashed
    /// into the baseline since, records the baseline with another checksum).
    #[error(
        "pgflow migration {version} in the database differs from this code's copy; the schema \
         was changed by hand or installed by another (pre-release) build of pgflow: use the \
         build that installed it, or drop the schema with `drop schema pgflow cascade` (and its \
         PGMQ queues) and install again"
    )]
    ChecksumMismatch {
        /// The migration's version.
        version: i64,
    },

    /// The database records a migration this code does not carry: it was installed by a
    /// pre-release build whose migrations were since squashed into the baseline, or by a
    /// different build of pgflow.
    #[error(
        "pgflow migration {version} in the database is not one this code carries (it was \
         installed by a pre-release or different build of pgflow); drop the schema with \
         `drop schema pgflow cascade` (and its PGMQ queues) and install again"
    )]
    UnknownMigration {
        /// The migration's version.
        version: i64,
    },

    /// A function file (`functions/NN_<area>.sql`) failed to apply; nothing was changed.
    #[error("applying pgflow's {file} failed, nothing was changed: {source}")]
    FunctionFile {
        /// The file's name.
        file: &'static str,
        /// What Postgres said.
        #[source]
        source: sqlx::Error,
    },

    /// Any other database error.
    #[error(transparent)]
    Database(sqlx::Error),
}

impl InstallError {
    /// A failure of one function file (a privilege problem stays [`Self::PermissionDenied`]).
    pub(crate) fn function_file(file: &'static str, source: sqlx::Error) -> Self {
        match Self::from(source) {
            Self::Database(source) => Self::FunctionFile { file, source },
            other => other,
        }
    }

    /// A connection error, naming where the connection went.
    pub(crate) fn connect(options: &sqlx::postgres::PgConnectOptions, source: sqlx::Error) -> Self {
        Self::Connect {
            target: connection_target(options),
            source,
        }
    }
}

/// Where `options` connect, as errors name it: `host:port/database`.
pub fn connection_target(options: &sqlx::postgres::PgConnectOptions) -> String {
    format!(
        "{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("(default database)")
    )
}

impl From<sqlx::Error> for InstallError {
    fn from(error: sqlx::Error) -> Self {
        if let Some(db) = error.as_database_error()
            && db.code().as_deref() == Some("42501")
        {
            return Self::PermissionDenied(db.message().to_owned());
        }
        Self::Database(error)
    }
}
