//! Installation: idempotent, concurrent, refuses newer schemas; names agree with SQL.

use std::process::Command;

use pgflow::{
    InstallError, PgmqSource, SchemaStatus, code_migration_versions, code_schema_version,
};
use sqlx::PgPool;

use crate::support::database_url;

#[sqlx::test(migrations = false)]
async fn install_twice_is_a_no_op_the_second_time(pool: PgPool) {
    assert_eq!(
        pgflow::check_schema(&pool).await.unwrap(),
        SchemaStatus::NotInstalled
    );

    let first = pgflow::install(&pool).await.unwrap();
    assert_eq!(first.pgmq, PgmqSource::EmbeddedSql);
    assert_eq!(first.applied_migrations, code_migration_versions());
    assert_eq!(first.schema_version, code_schema_version());

    let second = pgflow::install(&pool).await.unwrap();
    assert!(second.applied_migrations.is_empty());
    assert_eq!(
        pgflow::check_schema(&pool).await.unwrap(),
        SchemaStatus::Current
    );

    // PGMQ is the real thing: a queue can be created and used through its own API.
    sqlx::query("select pgmq.create('smoke')")
        .execute(&pool)
        .await
        .unwrap();
    let id: i64 = sqlx::query_scalar("select * from pgmq.send('smoke', '{}'::jsonb)")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(id, 1);
}

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
    assert_eq!(migrations as usize, code_migration_versions().len());
    let pgmq_scripts: i64 = sqlx::query_scalar("select count(*) from pgmq.__pgmq_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(pgmq_scripts, 1, "PGMQ's install script ran once");
    assert_eq!(
        pgflow::check_schema(&pool).await.unwrap(),
        SchemaStatus::Current
    );
}

#[sqlx::test(migrations = false)]
async fn ten_tasks_install_concurrently_through_one_pool(pool: PgPool) {
    let installs: Vec<_> = (0..10)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { pgflow::install(&pool).await })
        })
        .collect();
    let mut applied = 0;
    for install in installs {
        applied += install.await.unwrap().unwrap().applied_migrations.len();
    }
    assert_eq!(
        applied,
        code_migration_versions().len(),
        "each migration is applied exactly once"
    );
}

#[sqlx::test(migrations = false)]
async fn a_newer_schema_is_refused(pool: PgPool) {
    pgflow::install(&pool).await.unwrap();
    let newer = code_schema_version() + 1;
    sqlx::query(
        "insert into pgflow.schema_migrations (version, description, checksum)
         values ($1, 'from the future', '\\x00')",
    )
    .bind(newer)
    .execute(&pool)
    .await
    .unwrap();

    match pgflow::install(&pool).await {
        Err(InstallError::SchemaNewer { database, code }) => {
            assert_eq!(database, newer);
            assert_eq!(code, code_schema_version());
        }
        other => panic!("expected SchemaNewer, got {other:?}"),
    }
    assert_eq!(
        pgflow::check_schema(&pool).await.unwrap(),
        SchemaStatus::Newer {
            database: newer,
            code: code_schema_version()
        }
    );
}

#[sqlx::test(migrations = false)]
async fn a_changed_migration_is_refused(pool: PgPool) {
    pgflow::install(&pool).await.unwrap();
    sqlx::query("update pgflow.schema_migrations set checksum = '\\x00' where version = (select min(version) from pgflow.schema_migrations)")
        .execute(&pool)
        .await
        .unwrap();
    assert!(matches!(
        pgflow::install(&pool).await,
        Err(InstallError::ChecksumMismatch { .. })
    ));
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

#[sqlx::test(migrations = false)]
async fn name_rules_agree_with_sql(pool: PgPool) {
    pgflow::install(&pool).await.unwrap();
    let long = "a".repeat(47);
    let too_long = "a".repeat(48);
    let names = [
        "triage",
        "triage_v2",
        "_private",
        "Triage",
        "t",
        &long,
        &too_long,
        "",
        "2fast",
        "a-b",
        "a b",
        "ünicode",
        "classify_threads",
        "q1",
        "UPPER",
    ];
    for name in names {
        let sql_slug: bool = sqlx::query_scalar("select pgflow.is_valid_slug($1)")
            .bind(name)
            .fetch_one(&pool)
            .await
            .unwrap();
        let sql_queue: bool = sqlx::query_scalar("select pgflow.is_valid_queue_name($1)")
            .bind(name)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(
            pgflow::FlowSlug::new(name).is_ok(),
            sql_slug,
            "slug {name:?}"
        );
        assert_eq!(
            pgflow::StepSlug::new(name).is_ok(),
            sql_slug,
            "slug {name:?}"
        );
        assert_eq!(
            pgflow::QueueName::new(name).is_ok(),
            sql_queue,
            "queue {name:?}"
        );
    }
}
