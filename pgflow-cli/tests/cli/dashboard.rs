//! `pgflow dashboard`: it serves its pages and metrics, prints its token, and refuses a short
//! one.

use std::process::Command;

use sqlx::PgPool;

use crate::support::{database_url, install, pgflow, stderr, triage_v1};

/// A plain HTTP/1.0 GET: the status line and the body.
fn http_get(addr: &str, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

#[sqlx::test(migrations = false)]
async fn dashboard_serves_prints_its_token_and_refuses_a_short_one(pool: PgPool) {
    use pgflow::FlowSpec;
    use std::io::{BufRead, BufReader};
    install(&pool).await;
    pgflow::engine::compile_flow(&pool, &triage_v1::Flow::definition())
        .await
        .unwrap();
    let url = database_url(&pool);

    let short = pgflow(&pool, &["dashboard", "--token", "short"]);
    assert_eq!(short.status.code(), Some(2), "{}", stderr(&short));
    assert!(stderr(&short).contains("at least 16"), "{}", stderr(&short));

    let mut child = Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args([
            "--database-url",
            &url,
            "dashboard",
            "--listen",
            "127.0.0.1:0",
            "--metrics",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first
        .strip_prefix("pgflow dashboard at http://")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_owned();
    let token_line = lines.next().unwrap().unwrap();
    let token = token_line.rsplit(": ").next().unwrap();
    assert_eq!(
        token.len(),
        64,
        "a generated token is printed: {token_line}"
    );

    let (status, body) = http_get(&addr, "/");
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("Overview") && body.contains("actions need the token"));
    let (status, body) = http_get(&addr, "/metrics");
    assert!(status.contains("200"), "{status}");
    assert!(
        body.contains("pgflow_queue_depth{queue=\"classify_threads\"} 0"),
        "the scrape lacks the queue's depth: {body}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
