//! `pgflow install` run by many processes at once, and `pgflow grant`.

use std::process::Command;

use sqlx::PgPool;

use crate::support::{database_url, install, pgflow, stderr, stdout};

#[sqlx::test(migrations = false)]
async fn ten_processes_install_at_the_same_moment(pool: PgPool) {
    let url = database_url(&pool);
    let mut running: Vec<_> = (0..10)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_pgflow"))
                .args(["install", "--database-url", &url])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn pgflow install")
        })
        .collect();
    for child in running.drain(..) {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "pgflow install failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    let migrations: i64 = sqlx::query_scalar("select count(*) from pgflow.schema_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        migrations as usize,
        pgflow::schema::code_migration_versions().len()
    );
    let pgmq_scripts: i64 = sqlx::query_scalar("select count(*) from pgmq.__pgmq_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(pgmq_scripts, 1, "PGMQ's install script ran once");
    assert_eq!(
        pgflow::schema::check_schema(&pool).await.unwrap(),
        pgflow::schema::SchemaStatus::Current
    );
}

#[sqlx::test(migrations = false)]
async fn grant_gives_a_login_its_role_and_the_cli_then_works_as_it(pool: PgPool) {
    install(&pool).await;
    let login = format!("pgflow_cli_ops_{}", std::process::id());
    sqlx::raw_sql(&format!(
        "drop role if exists {login}; create role {login} login"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let as_login =
        database_url(&pool).replacen("postgres://postgres@", &format!("postgres://{login}@"), 1);
    let as_login_run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pgflow"))
            .args(args)
            .args(["--database-url", &as_login])
            .output()
            .unwrap()
    };

    // Before the grant: one line naming the login and the command that fixes it.
    let before = as_login_run(&["status"]);
    let err = stderr(&before);
    assert!(!before.status.success());
    assert!(
        err.contains(&login) && err.contains("pgflow grant"),
        "{err}"
    );

    let granted = pgflow(&pool, &["grant", &login, "--as", "operator"]);
    assert!(granted.status.success(), "{}", stderr(&granted));
    assert!(stdout(&granted).contains("pgflow_operator"));
    let again = pgflow(&pool, &["--json", "grant", &login, "--as", "operator"]);
    assert!(
        again.status.success(),
        "granting again is fine: {}",
        stderr(&again)
    );

    let status = as_login_run(&["status"]);
    assert!(status.status.success(), "{}", stderr(&status));
    let unknown = pgflow(
        &pool,
        &["grant", "no_such_login_anywhere", "--as", "worker"],
    );
    assert!(!unknown.status.success());
    assert!(stderr(&unknown).contains("no role named `no_such_login_anywhere`"));

    sqlx::raw_sql(&format!("drop role {login}"))
        .execute(&pool)
        .await
        .unwrap();
}
