//! TLS against a real server: a cluster of its own started with `ssl = on`, a certificate
//! authority and a server certificate made for the test with `openssl`, and a `pg_hba.conf`
//! that refuses every connection without TLS. The client, the installer and a worker connect
//! with `sslmode=require` and with `verify-full` against the test's CA; a wrong CA is refused.

use std::time::Duration;

use pgflow::{Client, ConnectError, EngineError, Worker};
use serde_json::json;

use pgflow_testkit::tls::tls_only_cluster;

#[pgflow::flow(slug = "over_tls")]
pub mod over_tls {
    #[step]
    pub async fn echo(input: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(input)
    }
}

#[tokio::test]
async fn clients_workers_and_the_installer_connect_over_tls() {
    let tls = tls_only_cluster().expect("start the TLS cluster");
    let base = tls.base_url();
    let other_ca = tls.other_ca.display().to_string();

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
    let verified = tls.verify_full_url();
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
        text.contains(&format!("localhost:{}/postgres", tls.cluster.port))
            && text.to_lowercase().contains("certificate"),
        "{text}"
    );
}
