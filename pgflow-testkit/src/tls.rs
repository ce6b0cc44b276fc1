//! A cluster that accepts TLS connections only: a certificate authority and a server
//! certificate for `localhost` and 127.0.0.1, made with `openssl`, `ssl = on`, and a
//! `pg_hba.conf` with `hostssl ... trust` and `hostnossl ... reject`. A second, unrelated
//! authority is made next to it, for tests of a certificate that must be refused.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Cluster, Error};

/// A started TLS-only cluster and the files a client needs to check its certificate.
pub struct TlsCluster {
    /// The cluster; stopped and removed on drop.
    pub cluster: Cluster,
    /// The authority that signed the server's certificate (`sslrootcert` for `verify-full`).
    pub ca: PathBuf,
    /// An authority that signed nothing of this server's: `verify-full` with it must fail.
    pub other_ca: PathBuf,
}

impl TlsCluster {
    /// A URL for user `postgres` on database `postgres` at `localhost` (the name in the
    /// server's certificate), without an `sslmode`.
    pub fn base_url(&self) -> String {
        format!(
            "postgres://postgres@localhost:{}/postgres",
            self.cluster.port
        )
    }

    /// The URL with `sslmode=verify-full` against the server's own authority.
    pub fn verify_full_url(&self) -> String {
        format!(
            "{}?sslmode=verify-full&sslrootcert={}",
            self.base_url(),
            self.ca.display()
        )
    }
}

/// Starts a cluster that refuses every connection without TLS.
pub fn tls_only_cluster() -> Result<TlsCluster, Error> {
    let cluster = Cluster::init()?;
    make_ca(&cluster.dir, "ca")?;
    make_ca(&cluster.dir, "other_ca")?;
    make_server_certificate(&cluster.dir)?;
    std::fs::write(
        cluster.dir.join("data/pg_hba.conf"),
        "local all all trust\n\
         hostssl all all 127.0.0.1/32 trust\n\
         hostnossl all all 127.0.0.1/32 reject\n",
    )?;
    let file = |name: &str| cluster.dir.join(name).display().to_string();
    let settings = [
        "ssl=on".to_owned(),
        format!("ssl_cert_file={}", file("server.crt")),
        format!("ssl_key_file={}", file("server.key")),
    ];
    let (ca, other_ca) = (cluster.dir.join("ca.crt"), cluster.dir.join("other_ca.crt"));
    let cluster = cluster.start_with(&settings)?;
    Ok(TlsCluster {
        cluster,
        ca,
        other_ca,
    })
}

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) -> Result<(), Error> {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("cannot run openssl (Debian: apt-get install openssl): {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    Ok(())
}

/// A self-signed authority named `name` (`<name>.crt`, `<name>.key`) in `dir`.
fn make_ca(dir: &Path, name: &str) -> Result<(), Error> {
    let (key, crt, subject) = (
        format!("{name}.key"),
        format!("{name}.crt"),
        format!("/CN=pgflow test {name}"),
    );
    openssl(
        dir,
        &[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", &key, "-out",
            &crt, "-subj", &subject,
        ],
    )
}

/// `server.crt` / `server.key` for `localhost` and 127.0.0.1, signed by `ca`.
fn make_server_certificate(dir: &Path) -> Result<(), Error> {
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName = DNS:localhost, IP:127.0.0.1\n",
    )?;
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
    )?;
    // The server refuses a key that others can read.
    let mut permissions = std::fs::metadata(dir.join("server.key"))?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o600);
    std::fs::set_permissions(dir.join("server.key"), permissions)?;
    Ok(())
}
