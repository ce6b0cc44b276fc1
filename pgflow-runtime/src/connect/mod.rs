//! Opening a pool from a connection URL, for clients and workers alike; with several hosts in
//! the URL, on the primary among them, following it when it moves (`failover`).

mod failover;
mod hosts;

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};

use crate::db::{Db, Pooling};

/// Why a connection URL gave no pool. Neither variant prints the URL itself, which may hold a
/// password; [`ConnectError::Unreachable`] names the server as `host:port/database`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL does not parse as a Postgres connection URL.
    #[error(
        "the database URL is not a valid Postgres URL ({source}); expected \
         postgres://user[:password]@host[:port]/database[?sslmode=require][&pgbouncer=true]"
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
    /// The URL names several hosts and none of them is a primary that accepts a connection.
    #[error(
        "none of the URL's hosts is a primary that accepts a connection ({}); start or promote \
         one, or check the URL",
        hosts.join("; ")
    )]
    NoPrimary {
        /// Each host, as `host:port/database`, and what it answered.
        hosts: Vec<String>,
    },
}

/// The URL of each host `url` names (see `hosts`), or why they cannot be read.
fn split_hosts(url: &str) -> Result<Vec<String>, ConnectError> {
    hosts::split_hosts(url).map_err(|reason| ConnectError::InvalidUrl {
        source: sqlx::Error::Configuration(reason.into()),
    })
}

/// `url` as Postgres connect options and the pooling it names (`?pgbouncer=true`, removed from
/// the options). sqlx reads any scheme; a URL of another database (`mysql://...`) is refused
/// here rather than tried as Postgres.
pub(crate) fn parse_url(url: &str) -> Result<(PgConnectOptions, Pooling), sqlx::Error> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if !matches!(scheme, Some("postgres" | "postgresql")) {
        return Err(sqlx::Error::Configuration(
            "the scheme must be postgres:// or postgresql://".into(),
        ));
    }
    let (url, pooling) = pgflow_sql::split_pooling(url)
        .map_err(|reason| sqlx::Error::Configuration(reason.into()))?;
    Ok((PgConnectOptions::from_str(&url)?, pooling))
}

/// A pool of at most `max_connections` on `url`, with the pooling the URL names
/// (`?pgbouncer=true` behind a transaction-mode pooler). One connection is tried first, once,
/// so an unreachable server or a refused login fails at once with its cause (a pool would
/// retry it until its acquire timeout, 30 s, and then report only the timeout).
///
/// A URL may name several hosts, as libpq writes them
/// (`postgres://app@db1:5432,db2:5432/app`, optionally with
/// `target_session_attrs=read-write`): the pool then connects to the first that is the
/// primary (it accepts a connection and is not in recovery), checks every second that it
/// still is, and after a failover connects to the new primary without a restart (see
/// docs/operations/connecting.md, Failover).
pub async fn db(url: &str, max_connections: u32) -> Result<Db, ConnectError> {
    let hosts = split_hosts(url)?;
    if hosts.len() > 1 {
        return db_following_primary(&hosts, max_connections).await;
    }
    let (options, pooling) =
        parse_url(&hosts[0]).map_err(|source| ConnectError::InvalidUrl { source })?;
    let target = pgflow_sql::connection_target(&options);
    let unreachable = |source| ConnectError::Unreachable {
        target: target.clone(),
        source,
    };
    let probe = PgConnection::connect_with(&options)
        .await
        .map_err(unreachable)?;
    let _ = probe.close().await;
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .connect_with(options)
        .await
        .map_err(unreachable)?;
    Ok(Db::new(pool, pooling))
}

/// `url` as it names one host: `url` itself when it names one, else the URL of the host that is
/// the primary now (it accepts a connection and is not in recovery), for tools that take one
/// host, such as the installer (`pgflow install` passes its URL through this).
pub async fn primary_url(url: &str) -> Result<String, ConnectError> {
    let mut urls = split_hosts(url)?;
    if urls.len() == 1 {
        return Ok(urls.remove(0));
    }
    let mut hosts = Vec::with_capacity(urls.len());
    for url in &urls {
        let (options, _) = parse_url(url).map_err(|source| ConnectError::InvalidUrl { source })?;
        hosts.push(options);
    }
    let primary = failover::find_primary(&hosts)
        .await
        .map_err(|hosts| ConnectError::NoPrimary { hosts })?;
    Ok(urls[primary].clone())
}

/// A pool on the primary among the hosts of `urls` (one URL each), following it when it moves.
async fn db_following_primary(urls: &[String], max_connections: u32) -> Result<Db, ConnectError> {
    let mut hosts = Vec::with_capacity(urls.len());
    let mut pooling = None;
    for url in urls {
        let (options, host_pooling) =
            parse_url(url).map_err(|source| ConnectError::InvalidUrl { source })?;
        hosts.push(options);
        pooling = Some(host_pooling);
    }
    let failover = failover::Failover::find(hosts)
        .await
        .map_err(|hosts| ConnectError::NoPrimary { hosts })?;
    let pool = failover
        .pool_options(PgPoolOptions::new().max_connections(max_connections))
        .connect_lazy_with(failover.current());
    // The watch ends with the pool, or with the last clone of the Db.
    let stop = tokio_util::sync::CancellationToken::new();
    std::sync::Arc::clone(&failover).watch(pool.clone(), stop.clone());
    Ok(Db::new(pool, pooling.unwrap_or(Pooling::Direct)).watched_until_dropped(stop))
}
