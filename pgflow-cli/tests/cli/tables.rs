//! Tables on a real terminal: under a pseudo-terminal (`script`) that reports no size, as some
//! CI runners and `docker run -t` do, or a narrow one, cells never wrap: headers stay whole and
//! ids are never broken; a long line overflows instead.

use std::process::Command;

use pgflow::Client;
use sqlx::PgPool;

use crate::support::{database_url, install, triage_v1};

/// `pgflow <args>` on a pseudo-terminal of `columns` columns (0: no size reported), with its
/// colour codes and carriage returns taken out.
fn pgflow_on_a_terminal(pool: &PgPool, columns: u16, args: &str) -> String {
    let command = format!(
        "stty cols {columns} rows 0; exec {} {args} --database-url {}",
        env!("CARGO_BIN_EXE_pgflow"),
        database_url(pool)
    );
    let output = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("TERM", "xterm")
        .env_remove("NO_COLOR")
        .output()
        .expect("run `script` (util-linux)");
    assert!(output.status.success(), "{output:?}");
    without_escapes(&String::from_utf8_lossy(&output.stdout))
}

/// `text` without ANSI escape sequences (colours, bold) and carriage returns.
fn without_escapes(text: &str) -> String {
    let mut plain = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                // CSI: ESC [ parameters, ended by a letter.
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            '\r' => {}
            c => plain.push(c),
        }
    }
    plain
}

#[sqlx::test(migrations = false)]
async fn tables_never_wrap_on_a_terminal_of_unknown_or_narrow_width(pool: PgPool) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&triage_v1::deployment()).await.unwrap();
    let mut run_ids = Vec::new();
    for _ in 0..2 {
        run_ids.push(
            pgflow::engine::start_flow(&pool, "triage_v1", &serde_json::json!({"thread": 1}))
                .await
                .unwrap()
                .run_id,
        );
    }

    for columns in [0, 40] {
        let text = pgflow_on_a_terminal(&pool, columns, "runs");
        let header = text.lines().next().unwrap_or_default();
        assert_eq!(
            header.split_whitespace().collect::<Vec<_>>(),
            ["RUN", "FLOW", "STATUS", "STARTED", "TOOK"],
            "{columns} columns: the header is whole, on one line:\n{text}"
        );
        for run_id in &run_ids {
            assert!(
                text.lines()
                    .any(|line| line.starts_with(&run_id.to_string())),
                "{columns} columns: run {run_id} is whole, at the start of its line:\n{text}"
            );
        }
        assert_eq!(text.lines().count(), 3, "{columns} columns:\n{text}");
    }
}
