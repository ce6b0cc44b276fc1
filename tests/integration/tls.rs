//! TLS against a real server: a cluster of its own started with `ssl = on`, a certificate
//! authority and a server certificate made for the test with `openssl`, and a `pg_hba.conf`
//! that refuses every connection without TLS. The client, the installer and a worker connect
//! with `sslmode=require` and with `verify-full` against the test's CA; a wrong CA is refused.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use pgflow::{Client, ConnectError, EngineError, Worker};
use serde_json::json;

use crate::cluster::Cluster;

#[pgflow::flow(slug = "over_tls")]
pub mod over_tls {
    #[step]
    pub async fn echo(input: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(input)
    }
}

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (Debian: apt-get install openssl)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA named `name` (`<name>.crt`, `<name>.key`) in `dir`.
fn make_ca(dir: &Path, name: &str) {
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
    );
}

/// `server.crt` / `server.key` for `localhost` and 127.0.0.1, signed by the CA `ca`.
fn make_server_certificate(dir: &Path) {
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName = DNS:localhost, IP:127.0.0.1\n",
    )
    .unwrap();
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
    );
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
    );
    // The server refuses a key that others can read.
    let mut permissions = std::fs::metadata(dir.join("server.key"))
        .unwrap()
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o600);
    std::fs::set_permissions(dir.join("server.key"), permissions).unwrap();
}

/// A started cluster that accepts TLS connections only.
fn tls_only_cluster() -> Cluster {
    let cluster = Cluster::init().expect("initdb");
    make_ca(&cluster.dir, "ca");
    make_ca(&cluster.dir, "other_ca");
    make_server_certificate(&cluster.dir);
    std::fs::write(
        cluster.dir.join("data/pg_hba.conf"),
        "local all all trust\n\
         hostssl all all 127.0.0.1/32 trust\n\
         hostnossl all all 127.0.0.1/32 reject\n",
    )
    .unwrap();
    let file = |name: &str| cluster.dir.join(name).display().to_string();
    let settings = [
        "ssl=on".to_owned(),
        format!("ssl_cert_file={}", file("server.crt")),
        format!("ssl_key_file={}", file("server.key")),
    ];
    cluster
        .start_with(&settings)
        .expect("start the TLS cluster")
}

#[tokio::test]
async fn clients_workers_and_the_installer_connect_over_tls() {
    let cluster = tls_only_cluster();
    let base = format!("postgres://postgres@localhost:{}/postgres", cluster.port);
    let ca = cluster.dir.join("ca.crt").display().to_string();
    let other_ca = cluster.dir.join("other_ca.crt").display().to_string();

    // Without TLS the server refuses (so what follows really runs over TLS).
    let error = Client::connect(&format!("{base}?sslmode=disable"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            EngineError::Connect(ConnectError::Unreachable { .. })
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("no encryption"), "{error}");

    // sslmode=require: encrypted, the certificate is not checked.
    let required = format!("{base}?sslmode=require");
    pgflow::install_url(&required)
        .await
        .expect("install over TLS");
    let client = Client::connect(&required).await.unwrap();
    let ssl: bool = sqlx::query_scalar("select ssl from pg_stat_ssl where pid = pg_backend_pid()")
        .fetch_one(client.pool())
        .await
        .unwrap();
    assert!(ssl, "the connection is encrypted");

    // verify-full with the server's CA: a worker and a run, end to end.
    let verified = format!("{base}?sslmode=verify-full&sslrootcert={ca}");
    let worker = Worker::start_on(over_tls::deployment(), verified.as_str())
        .await
        .expect("a worker connects with verify-full");
    let output = over_tls::start(&client, &json!({"over": "tls"}))
        .await
        .unwrap()
        .wait(&client, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(output.echo, json!({"over": "tls"}));
    worker.shutdown();
    worker.wait().await.unwrap();

    // verify-full against another CA: refused, and the error says why.
    let error = Client::connect(&format!(
        "{base}?sslmode=verify-full&sslrootcert={other_ca}"
    ))
    .await
    .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains(&format!("localhost:{}/postgres", cluster.port))
            && text.to_lowercase().contains("certificate"),
        "{text}"
    );
}
