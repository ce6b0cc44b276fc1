//! Errors before any command runs: a database without pgflow, an unreachable database, a
//! login without permission, and arguments clap refuses. Each is one line and an exit code.

use std::process::Command;

use sqlx::PgPool;

use crate::support::{database_url, pgflow, stderr};

#[sqlx::test(migrations = false)]
async fn commands_on_a_database_without_pgflow_say_to_install(pool: PgPool) {
    let output = pgflow(&pool, &["drain-status", "anything"]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("pgflow is not installed") && err.contains("run `pgflow install`"),
        "{err}"
    );
}

#[test]
fn bad_arguments_get_claps_whole_message_and_exit_code_2() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pgflow"))
            .args(args)
            .output()
            .unwrap()
    };
    let output = run(&["drain-status", "--frobnicate"]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.starts_with("error: unexpected argument '--frobnicate'")
            && err.contains("Usage: pgflow drain-status"),
        "{err}"
    );
    let err = stderr(&run(&["rnus"]));
    assert!(
        err.contains("tip: some similar subcommands exist: 'run', 'runs'"),
        "{err}"
    );
    let output = run(&["graph", "triage", "--format", "png"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("[possible values: mermaid, dot]"),
        "{}",
        stderr(&output)
    );
    let err = stderr(&run(&["runs", "--status", "weird"]));
    assert!(
        err.contains(
            "[possible values: scheduled, started, waiting, completed, failed, cancelled]"
        ),
        "{err}"
    );
}

#[test]
fn cli_reports_an_unreachable_database_in_one_line() {
    let output = Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args([
            "install",
            "--database-url",
            "postgres://postgres@127.0.0.1:1/postgres",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with("error: cannot connect to the database at 127.0.0.1:1/postgres"),
        "{stderr}"
    );
}

#[sqlx::test(migrations = false)]
async fn cli_reports_missing_permission_in_one_line(pool: PgPool) {
    let role = format!("pgflow_nopriv_{}", std::process::id());
    sqlx::query(&format!("drop role if exists {role}"))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(&format!("create role {role} login"))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(&format!(
        "revoke create on database \"{}\" from public",
        pool.connect_options().get_database().unwrap()
    ))
    .execute(&pool)
    .await
    .unwrap();
    let url =
        database_url(&pool).replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);

    let output = Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args(["install", "--database-url", &url])
        .output()
        .unwrap();
    sqlx::query(&format!("drop owned by {role}"))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(&format!("drop role {role}"))
        .execute(&pool)
        .await
        .unwrap();

    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("error: permission denied"), "{stderr}");
}
