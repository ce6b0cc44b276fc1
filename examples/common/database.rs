//! Where the examples get Postgres: `DATABASE_URL` if set; else the local server (`PGHOST` and
//! `PGPORT`, default 127.0.0.1:5432, user `postgres`) if one answers there; else a throwaway
//! cluster started from this machine's Postgres binaries in a temporary directory (removed at
//! exit; `pgflow_testkit::Cluster`). `PGFLOW_EXAMPLE_DATABASE=embedded` forces the throwaway
//! cluster. Each example works in a database of its own, created afresh: `<name>_<user>` (the
//! login user of this machine, so that two people sharing a server do not drop each other's),
//! or `PGFLOW_EXAMPLE_DB` when set.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};

use pgflow_testkit::Cluster;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The local server's address: libpq's `PGHOST` and `PGPORT`, default `127.0.0.1:5432`.
fn local_server() -> (String, String) {
    let var = |name: &str, default: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| default.to_owned())
    };
    (var("PGHOST", "127.0.0.1"), var("PGPORT", "5432"))
}

/// A fresh database for an example, and what provides it.
pub(crate) struct Database {
    /// A pool on the example's own database.
    pub pool: PgPool,
    /// The database's name.
    #[allow(dead_code)] // not every example prints it
    pub name: String,
    /// Which server this is, for the example to say.
    pub description: String,
    /// A URL of the example's database for the `pgflow` command (no password).
    #[allow(dead_code)] // not every example prints it
    pub url: String,
    /// Kept alive (and stopped on drop) when the server is a throwaway cluster.
    _cluster: Option<Cluster>,
}

impl Database {
    /// Whether the server is a throwaway cluster, gone when the example exits.
    #[allow(dead_code)] // not every example asks
    pub(crate) fn is_throwaway(&self) -> bool {
        self._cluster.is_some()
    }
}

/// The database an example named `base` works in: `PGFLOW_EXAMPLE_DB`, else `<base>_<user>`
/// (the user's name lowercased, other characters than `a-z0-9_` dropped), else `base`.
pub(crate) fn database_name(base: &str) -> String {
    if let Ok(name) = std::env::var("PGFLOW_EXAMPLE_DB") {
        let name = name.trim().to_owned();
        if !name.is_empty() {
            return name;
        }
    }
    let user: String = ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
        .or_else(|| {
            let id = std::process::Command::new("id").arg("-un").output().ok()?;
            Some(String::from_utf8_lossy(&id.stdout).trim().to_owned())
        })
        .unwrap_or_default()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if user.is_empty() {
        base.to_owned()
    } else {
        format!("{base}_{user}")
    }
}

/// Connects to a fresh copy of the database [`database_name`] gives for `base`.
pub(crate) async fn fresh(base: &str, max_connections: u32) -> Result<Database, Error> {
    let name = database_name(base);
    let name = name.as_str();
    let forced = std::env::var("PGFLOW_EXAMPLE_DATABASE").is_ok_and(|v| v == "embedded");
    let (host, port) = local_server();
    let (url, description, cluster) = match std::env::var("DATABASE_URL") {
        Ok(url) if !forced => (url, "the server at DATABASE_URL".to_owned(), None),
        _ if !forced && answers(&format!("{host}:{port}")) => (
            format!("postgres://postgres@{host}:{port}/postgres"),
            format!("the local server on {host}:{port} (DATABASE_URL is unset)"),
            None,
        ),
        _ => {
            let cluster = Cluster::start().map_err(|e| {
                format!(
                    "DATABASE_URL is unset and nothing answers on {host}:{port}, so a throwaway \
                     cluster was tried: {e}"
                )
            })?;
            let description = format!(
                "a throwaway cluster in {} (Postgres from {}; DATABASE_URL is unset and nothing \
                 answers on {host}:{port})",
                cluster.dir.display(),
                cluster.bin.display()
            );
            (cluster.url(), description, Some(cluster))
        }
    };
    let server: PgConnectOptions = url.parse()?;
    // Dropping a database (with its connections) and creating one may take a second or more:
    // that is expected here, so sqlx's "slow statement" warning is left out for this connection.
    let mut admin = server
        .clone()
        .disable_statement_logging()
        .connect()
        .await
        .map_err(|e| {
            format!(
                "cannot reach Postgres at {}:{} ({e}); start it or set DATABASE_URL",
                server.get_host(),
                server.get_port()
            )
        })?;
    sqlx::query(&format!(r#"drop database if exists "{name}" with (force)"#))
        .execute(&mut admin)
        .await?;
    sqlx::query(&format!(r#"create database "{name}""#))
        .execute(&mut admin)
        .await?;
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .connect_with(server.clone().database(name))
        .await?;
    let url = format!(
        "postgres://{}@{}:{}/{name}",
        server.get_username(),
        server.get_host(),
        server.get_port()
    );
    Ok(Database {
        pool,
        name: name.to_owned(),
        url,
        description: format!(
            "{description}, database `{name}` at {}:{}",
            server.get_host(),
            server.get_port()
        ),
        _cluster: cluster,
    })
}

fn answers(address: &str) -> bool {
    address
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok())
}
