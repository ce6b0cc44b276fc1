//! A real PgBouncer (Debian's `pgbouncer` package) in transaction mode in front of a Postgres
//! server, on a free port of 127.0.0.1, with its files in a temporary directory; stopped and
//! removed on drop.
//!
//! Every database of the server is reachable through it (`* = ...`), logins are trusted as the
//! server trusts them, and each (database, user) pair gets a small pool of server connections,
//! so many client connections share few server connections, as behind a managed pooler.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// A running PgBouncer in `pool_mode = transaction`.
pub struct PgBouncer {
    /// Its directory (configuration, log, pid file).
    pub dir: PathBuf,
    /// The port it listens on (127.0.0.1 only).
    pub port: u16,
    child: Child,
}

impl PgBouncer {
    /// Starts PgBouncer in transaction mode in front of the server at
    /// `upstream_host:upstream_port`, with at most `server_connections` server connections per
    /// (database, user). Fails when the `pgbouncer` binary is missing (CI installs it; Debian:
    /// `apt-get install pgbouncer`).
    pub fn start_transaction_mode(
        upstream_host: &str,
        upstream_port: u16,
        server_connections: u32,
    ) -> Result<Self, Error> {
        let binary = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .find(|path| std::path::Path::new(path).exists())
            .ok_or(
                "pgbouncer is not installed; install it (Debian/Ubuntu: `apt-get install \
                 pgbouncer`; .ci/run does)",
            )?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir =
            std::env::temp_dir().join(format!("pgflow-pgbouncer-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let auth_file = dir.join("users.txt");
        std::fs::write(&auth_file, "\"postgres\" \"\"\n")?;
        let config = dir.join("pgbouncer.ini");
        std::fs::write(
            &config,
            format!(
                "[databases]\n\
                 * = host={upstream_host} port={upstream_port}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {auth}\n\
                 pool_mode = transaction\n\
                 default_pool_size = {server_connections}\n\
                 min_pool_size = 0\n\
                 reserve_pool_size = 0\n\
                 max_client_conn = 500\n\
                 server_reset_query =\n\
                 server_login_retry = 1\n\
                 ignore_startup_parameters = extra_float_digits,options\n\
                 logfile = {log}\n\
                 pidfile = {pid}\n",
                auth = auth_file.display(),
                log = dir.join("pgbouncer.log").display(),
                pid = dir.join("pgbouncer.pid").display(),
            ),
        )?;
        // PgBouncer refuses to run as root: as root it runs as `postgres`.
        let mut command = Command::new(binary);
        if crate::cluster::is_root() {
            Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&dir)
                .status()?;
            command.args(["-u", "postgres"]);
        }
        let child = command
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {binary}: {e}"))?;
        let mut bouncer = Self { dir, port, child };
        bouncer.wait_until_listening()?;
        Ok(bouncer)
    }

    /// A URL for `user` on `database` through this PgBouncer, with `pgbouncer=true` so pgflow
    /// knows it is behind a transaction-mode pooler.
    pub fn url(&self, user: &str, database: &str) -> String {
        format!(
            "postgres://{user}@127.0.0.1:{}/{database}?pgbouncer=true",
            self.port
        )
    }

    /// Points PgBouncer at another server, as an operator does after a failover: rewrites
    /// the `[databases]` entry and reloads the configuration (`SIGHUP`). New server
    /// connections go to `upstream_host:upstream_port`; those to the old server are closed as
    /// they fail. (`server_login_retry = 1` in its configuration: with the default 15 s,
    /// PgBouncer refuses every client for 15 s after the old server's login failed.)
    pub fn repoint(&self, upstream_host: &str, upstream_port: u16) -> Result<(), Error> {
        let config = self.dir.join("pgbouncer.ini");
        let text = std::fs::read_to_string(&config)?;
        let repointed: Vec<String> = text
            .lines()
            .map(|line| {
                if line.starts_with("* = host=") {
                    format!("* = host={upstream_host} port={upstream_port}")
                } else {
                    line.to_owned()
                }
            })
            .collect();
        std::fs::write(&config, repointed.join("\n") + "\n")?;
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()?;
        if !status.success() {
            return Err(format!("could not send SIGHUP to pgbouncer: {status}").into());
        }
        Ok(())
    }

    /// What PgBouncer logged so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }

    fn wait_until_listening(&mut self) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Err(format!("pgbouncer exited at start ({status}): {}", self.log()).into());
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("pgbouncer did not listen within 10 s: {}", self.log()).into())
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
