//! Errors of installation and schema checks.

/// Why installing pgflow (or checking its schema) failed.
#[derive(Debug, thiserror::Error)]
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

    /// The role lacks a privilege the installation needs.
    #[error(
        "permission denied while installing pgflow ({0}); connect as a role that may create \
         schemas and tables in this database (for example the database owner)"
    )]
    PermissionDenied(String),

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

    /// A migration applied to the database differs from the one this code carries.
    #[error(
        "pgflow migration {version} in the database differs from this code's copy; the schema \
         was changed by hand or by another build of pgflow"
    )]
    ChecksumMismatch {
        /// The migration's version.
        version: i64,
    },

    /// Any other database error.
    #[error(transparent)]
    Database(sqlx::Error),
}

impl InstallError {
    /// A connection error, naming where the connection went.
    pub(crate) fn connect(options: &sqlx::postgres::PgConnectOptions, source: sqlx::Error) -> Self {
        Self::Connect {
            target: format!(
                "{}:{}/{}",
                options.get_host(),
                options.get_port(),
                options.get_database().unwrap_or("(default database)")
            ),
            source,
        }
    }
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
