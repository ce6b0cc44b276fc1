//! Where the examples get Postgres: `DATABASE_URL` if set; else the local server (`PGHOST` and
//! `PGPORT`, default 127.0.0.1:5432, user `postgres`) if one answers there; else a throwaway
//! cluster started from this machine's Postgres binaries in a temporary directory (removed at
//! exit). `PGFLOW_EXAMPLE_DATABASE=embedded` forces the throwaway cluster. Each example works in
//! a database of its own, created afresh.

use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};

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
pub struct Database {
    /// A pool on the example's own database.
    pub pool: PgPool,
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
    pub fn is_throwaway(&self) -> bool {
        self._cluster.is_some()
    }
}

/// Connects to a fresh copy of database `name`.
pub async fn fresh(name: &str, max_connections: u32) -> Result<Database, Error> {
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
            let cluster = Cluster::start()?;
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
    let mut admin = server.connect().await.map_err(|e| {
        format!(
            "cannot reach Postgres at {}:{} ({e}); start it or set DATABASE_URL",
            server.get_host(),
            server.get_port()
        )
    })?;
    sqlx::query(&format!("drop database if exists {name} with (force)"))
        .execute(&mut admin)
        .await?;
    sqlx::query(&format!("create database {name}"))
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

/// A Postgres cluster in a temporary directory, stopped and removed on drop.
struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// `initdb` and the server refuse to run as root; then they run as `postgres`.
    as_postgres: bool,
}

impl Cluster {
    fn start() -> Result<Self, Error> {
        let bin = postgres_bin().ok_or(
            "no Postgres found: DATABASE_URL is unset, nothing answers on PGHOST:PGPORT \
             (default 127.0.0.1:5432), and no Postgres binaries are installed; install them (Debian/Ubuntu: `sudo apt install \
             postgresql`) or set DATABASE_URL",
        )?;
        let as_postgres = is_root();
        let dir = std::env::temp_dir().join(format!("pgflow-example-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let cluster = Self {
            dir,
            bin,
            port,
            as_postgres,
        };
        if as_postgres {
            cluster.run(
                "chown",
                &[
                    "-R".into(),
                    "postgres".into(),
                    cluster.dir.display().to_string(),
                ],
                false,
            )?;
        }
        let data = cluster.dir.join("data").display().to_string();
        cluster.run(
            "initdb",
            &[
                "-D".into(),
                data.clone(),
                "-U".into(),
                "postgres".into(),
                "--auth=trust".into(),
                "-E".into(),
                "UTF8".into(),
            ],
            true,
        )?;
        cluster.run(
            "pg_ctl",
            &[
                "-D".into(),
                data,
                "-l".into(),
                cluster.dir.join("server.log").display().to_string(),
                "-o".into(),
                format!(
                    "-p {} -c listen_addresses=127.0.0.1 -k {}",
                    cluster.port,
                    cluster.dir.display()
                ),
                "-w".into(),
                "start".into(),
            ],
            true,
        )?;
        Ok(cluster)
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs a Postgres program (from the bin dir when `postgres_tool`), as `postgres` if needed.
    fn run(&self, program: &str, args: &[String], postgres_tool: bool) -> Result<(), Error> {
        let program_path = if postgres_tool {
            self.bin.join(program).display().to_string()
        } else {
            program.to_owned()
        };
        let mut command = if self.as_postgres && postgres_tool {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", &program_path]);
            c
        } else {
            Command::new(&program_path)
        };
        // The cluster's own port is passed explicitly; the caller's libpq settings must not
        // steer the tools.
        let output = command
            .args(args)
            .env_remove("PGHOST")
            .env_remove("PGPORT")
            .output()?;
        if !output.status.success() {
            return Err(format!(
                "`{program}` failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )
            .into());
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.dir.join("data").display().to_string();
        let _ = self.run(
            "pg_ctl",
            &[
                "-D".into(),
                data,
                "-m".into(),
                "immediate".into(),
                "stop".into(),
            ],
            true,
        );
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The directory holding `initdb` and `pg_ctl`: on PATH, else the newest Debian install.
fn postgres_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
    });
    on_path.or_else(|| {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
            .filter(|bin| bin.join("initdb").is_file())
            .collect();
        versions.sort_by_key(|p| {
            p.parent()
                .and_then(Path::file_name)
                .and_then(|v| v.to_str())
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(0)
        });
        versions.pop()
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
