//! The `pgflow` binary over TLS, against a cluster of its own that refuses every connection
//! without it (`pgflow_testkit::tls`): `sslmode=require` and `verify-full` work, a plain
//! connection and a certificate from another authority are refused with a message that says
//! which server and why.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

use pgflow_testkit::tls::tls_only_cluster;

fn pgflow(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args(args)
        .args(["--database-url", url])
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn the_command_connects_with_sslmode_require_and_verify_full() {
    let tls = tls_only_cluster().expect("start the TLS cluster");
    let base = tls.base_url();
    let target = format!("localhost:{}/postgres", tls.cluster.port);

    // A plain connection is refused by the server: what follows really runs over TLS.
    let plain = pgflow(&format!("{base}?sslmode=disable"), &["status"]);
    assert!(!plain.status.success());
    let message = text(&plain);
    assert!(
        message.contains(&target) && message.contains("no encryption"),
        "{message}"
    );

    let install = pgflow(&format!("{base}?sslmode=require"), &["install"]);
    assert!(install.status.success(), "{}", text(&install));

    let status = pgflow(&tls.verify_full_url(), &["status", "--json"]);
    assert!(status.status.success(), "{}", text(&status));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["queues"], serde_json::json!([]), "{status}");

    let wrong_ca = pgflow(
        &format!(
            "{base}?sslmode=verify-full&sslrootcert={}",
            tls.other_ca.display()
        ),
        &["status"],
    );
    assert!(!wrong_ca.status.success());
    let message = text(&wrong_ca);
    assert!(
        message.contains(&target) && message.to_lowercase().contains("certificate"),
        "{message}"
    );
}
