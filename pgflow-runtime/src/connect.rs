//! Opening a pool from a connection URL, for clients and workers alike.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};

/// Why a connection URL gave no pool. Neither variant prints the URL itself, which may hold a
/// password; [`ConnectError::Unreachable`] names the server as `host:port/database`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL does not parse as a Postgres connection URL.
    #[error(
        "the database URL is not a valid Postgres URL ({source}); expected \
         postgres://user[:password]@host[:port]/database[?sslmode=require]"
    )]
    InvalidUrl {
        /// sqlx's parse error.
        #[source]
        source: sqlx::Error,
    },
    /// The server did not accept a connection.
    #[error("cannot connect to Postgres at {target}: {source}")]
    Unreachable {
        /// The server, as `host:port/database`.
        target: String,
        /// sqlx's error.
        #[source]
        source: sqlx::Error,
    },
}

/// `url` as Postgres connect options. sqlx reads any scheme; a URL of another database
/// (`mysql://...`) is refused here rather than tried as Postgres.
pub(crate) fn parse_url(url: &str) -> Result<PgConnectOptions, sqlx::Error> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if !matches!(scheme, Some("postgres" | "postgresql")) {
        return Err(sqlx::Error::Configuration(
            "the scheme must be postgres:// or postgresql://".into(),
        ));
    }
    PgConnectOptions::from_str(url)
}

/// A pool of at most `max_connections` on `url`. One connection is tried first, once, so an
/// unreachable server or a refused login fails at once with its cause (a pool would retry it
/// until its acquire timeout, 30 s, and then report only the timeout).
pub async fn pool(url: &str, max_connections: u32) -> Result<PgPool, ConnectError> {
    let options = parse_url(url).map_err(|source| ConnectError::InvalidUrl { source })?;
    let target = pgflow_sql::connection_target(&options);
    let unreachable = |source| ConnectError::Unreachable {
        target: target.clone(),
        source,
    };
    let probe = PgConnection::connect_with(&options)
        .await
        .map_err(unreachable)?;
    let _ = probe.close().await;
    PgPoolOptions::new()
        .max_connections(max_connections)
        .connect_with(options)
        .await
        .map_err(unreachable)
}
