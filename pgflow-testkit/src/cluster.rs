//! A throwaway Postgres cluster: `initdb` into a temporary directory, `pg_ctl start` on a free
//! port of 127.0.0.1, stopped and removed on drop. The examples fall back to one when no server
//! answers; tests start their own when they need server settings of their own (TLS).
//!
//! As root, `initdb` and the server refuse to run, so they run as `postgres` and the directory
//! is given to that user.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What went wrong starting or running a cluster, as text for the caller to report.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// A Postgres cluster in a temporary directory, stopped and removed on drop.
pub struct Cluster {
    /// Its directory: `data/` holds the cluster, files next to it are the caller's.
    pub dir: PathBuf,
    /// Where `initdb` and `pg_ctl` come from.
    pub bin: PathBuf,
    /// The port the server listens on (127.0.0.1 only).
    pub port: u16,
    as_postgres: bool,
    started: bool,
}

impl Cluster {
    /// A cluster with default settings, started.
    pub fn start() -> Result<Self, Error> {
        let mut cluster = Self::init()?;
        cluster.run_server(&[])?;
        cluster.started = true;
        Ok(cluster)
    }

    /// A new cluster, not started: write its files (`data/pg_hba.conf`, certificates) first,
    /// then [`Cluster::start_with`].
    pub fn init() -> Result<Self, Error> {
        let bin = postgres_bin().ok_or(
            "no Postgres binaries are installed; install them (Debian/Ubuntu: `sudo apt install \
             postgresql`) or set DATABASE_URL",
        )?;
        let as_postgres = is_root();
        let (dir, port) = fresh_dir_and_port("pgflow-cluster")?;
        let cluster = Self {
            dir,
            bin,
            port,
            as_postgres,
            started: false,
        };
        cluster.give_to_server()?;
        cluster.run(
            "initdb",
            &[
                "-D".into(),
                cluster.data_dir(),
                "-U".into(),
                "postgres".into(),
                "--auth=trust".into(),
                "-E".into(),
                "UTF8".into(),
            ],
            true,
        )?;
        Ok(cluster)
    }

    /// Starts the cluster made by [`Cluster::init`] with extra server settings (`name=value`).
    pub fn start_with(mut self, settings: &[String]) -> Result<Self, Error> {
        self.give_to_server()?;
        self.run_server(settings)?;
        self.started = true;
        Ok(self)
    }

    /// Restarts the server in place (`pg_ctl restart -m <mode>`: `fast` or `immediate`, the
    /// latter a crash as far as the server's clients and its recovery go), keeping its port
    /// and settings; returns once it accepts connections again.
    pub fn restart(&self, mode: &str) -> Result<(), Error> {
        self.run(
            "pg_ctl",
            &[
                "-D".into(),
                self.data_dir(),
                // The server's output goes to the log, never to this process's pipes (which
                // would then stay open as long as the server runs).
                "-l".into(),
                self.dir.join("server.log").display().to_string(),
                "-m".into(),
                mode.into(),
                "-w".into(),
                "restart".into(),
            ],
            true,
        )
    }

    /// A streaming standby of `primary`, started: a base backup of it (`pg_basebackup -R`,
    /// which also writes the connection to the primary) in a directory of its own, on a port
    /// of its own, with `settings` (`name=value`) added to its `postgresql.auto.conf`. Returns
    /// once it accepts connections.
    pub fn standby_of(primary: &Cluster, settings: &[String]) -> Result<Self, Error> {
        let (dir, port) = fresh_dir_and_port("pgflow-standby")?;
        let mut standby = Self {
            dir,
            bin: primary.bin.clone(),
            port,
            as_postgres: primary.as_postgres,
            started: false,
        };
        standby.give_to_server()?;
        standby.run(
            "pg_basebackup",
            &[
                "-D".into(),
                standby.data_dir(),
                "-h".into(),
                "127.0.0.1".into(),
                "-p".into(),
                primary.port.to_string(),
                "-U".into(),
                "postgres".into(),
                "-R".into(),
                "-X".into(),
                "stream".into(),
                "-c".into(),
                "fast".into(),
            ],
            true,
        )?;
        if !settings.is_empty() {
            let auto = standby.dir.join("data/postgresql.auto.conf");
            let mut text = std::fs::read_to_string(&auto).unwrap_or_default();
            for setting in settings {
                text.push_str(setting);
                text.push('\n');
            }
            std::fs::write(&auto, text)?;
        }
        standby.give_to_server()?;
        standby.run_server(&[])?;
        standby.started = true;
        Ok(standby)
    }

    /// Promotes a standby to primary (`pg_ctl promote -w`); returns once it accepts writes.
    pub fn promote(&self) -> Result<(), Error> {
        self.run(
            "pg_ctl",
            &["-D".into(), self.data_dir(), "-w".into(), "promote".into()],
            true,
        )
    }

    /// Stops the server (`pg_ctl stop -m <mode>`: `immediate` is a crash); its directory stays
    /// until the cluster is dropped.
    pub fn stop(&mut self, mode: &str) -> Result<(), Error> {
        self.run(
            "pg_ctl",
            &[
                "-D".into(),
                self.data_dir(),
                "-m".into(),
                mode.into(),
                "-w".into(),
                "stop".into(),
            ],
            true,
        )?;
        self.started = false;
        Ok(())
    }

    /// `data/` of the cluster, as a string for the tools.
    pub fn data_dir(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    /// A URL for user `postgres` on database `postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Gives everything in the directory to the server's user (when it is not this user).
    pub fn give_to_server(&self) -> Result<(), Error> {
        if self.as_postgres {
            self.run(
                "chown",
                &[
                    "-R".into(),
                    "postgres".into(),
                    self.dir.display().to_string(),
                ],
                false,
            )?;
        }
        Ok(())
    }

    fn run_server(&self, settings: &[String]) -> Result<(), Error> {
        let mut options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {}",
            self.port,
            self.dir.display()
        );
        for setting in settings {
            options.push_str(&format!(" -c {setting}"));
        }
        self.run(
            "pg_ctl",
            &[
                "-D".into(),
                self.data_dir(),
                "-l".into(),
                self.dir.join("server.log").display().to_string(),
                "-o".into(),
                options,
                "-w".into(),
                "start".into(),
            ],
            true,
        )
        .map_err(|e| {
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            format!("{e}; server log:\n{log}").into()
        })
    }

    /// Runs a program (a Postgres tool from the bin dir when `postgres_tool`), as `postgres`
    /// when this process is root.
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
        if self.started {
            let _ = self.run(
                "pg_ctl",
                &[
                    "-D".into(),
                    self.data_dir(),
                    "-m".into(),
                    "immediate".into(),
                    "stop".into(),
                ],
                true,
            );
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new directory under the temporary one, named `<prefix>-<pid>-<n>`, and a free port of
/// 127.0.0.1 for a server.
fn fresh_dir_and_port(prefix: &str) -> Result<(PathBuf, u16), Error> {
    let unique = format!(
        "{prefix}-{}-{}",
        std::process::id(),
        TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()
    );
    let dir = std::env::temp_dir().join(unique);
    std::fs::create_dir_all(&dir)?;
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    Ok((dir, port))
}

/// The tools a cluster needs, all from one install.
const TOOLS: [&str; 3] = ["initdb", "pg_ctl", "pg_basebackup"];

/// The directory holding every one of [`TOOLS`]: on PATH, else the newest Debian install.
fn postgres_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).find(|dir| TOOLS.iter().all(|tool| dir.join(tool).is_file()))
    });
    on_path.or_else(|| {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
            .filter(|bin| TOOLS.iter().all(|tool| bin.join(tool).is_file()))
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

pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
