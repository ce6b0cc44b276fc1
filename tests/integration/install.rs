//! Installation: idempotent, concurrent, refuses newer schemas; names agree with SQL. (The
//! `pgflow install` command's own tests are in `pgflow-cli/tests/cli/`.)

use pgflow::InstallError;
use pgflow::schema::{PgmqSource, SchemaStatus, code_migration_versions, code_schema_version};
use sqlx::PgPool;

#[sqlx::test(migrations = false)]
async fn install_twice_is_a_no_op_the_second_time(pool: PgPool) {
    assert_eq!(
        pgflow::schema::check_schema(&pool).await.unwrap(),
        SchemaStatus::NotInstalled
    );

    let first = pgflow::install(&pool).await.unwrap();
    assert_eq!(first.pgmq, PgmqSource::EmbeddedSql);
    assert_eq!(first.applied_migrations, code_migration_versions());
    assert_eq!(first.schema_version, code_schema_version());

    let second = pgflow::install(&pool).await.unwrap();
    assert!(second.applied_migrations.is_empty());
    assert_eq!(
        pgflow::schema::check_schema(&pool).await.unwrap(),
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
        pgflow::schema::check_schema(&pool).await.unwrap(),
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
            pgflow::names::FlowSlug::new(name).is_ok(),
            sql_slug,
            "slug {name:?}"
        );
        assert_eq!(
            pgflow::names::StepSlug::new(name).is_ok(),
            sql_slug,
            "slug {name:?}"
        );
        assert_eq!(
            pgflow::names::QueueName::new(name).is_ok(),
            sql_queue,
            "queue {name:?}"
        );
    }
}

#[sqlx::test(migrations = false)]
async fn a_pgmq_without_pop_is_refused_naming_what_it_lacks(pool: PgPool) {
    pgflow::install(&pool).await.unwrap();
    // What an older PGMQ looks like to pgflow: no `pop(queue, qty)`, which claims call. PGMQ's
    // embedded installer applies only its scripts that are new, so installing again keeps it so.
    sqlx::query("drop function pgmq.pop(text, integer)")
        .execute(&pool)
        .await
        .unwrap();
    let error = pgflow::install(&pool).await.unwrap_err();
    assert!(
        matches!(&error, InstallError::PgmqTooOld { function } if function == "pop(text,integer)"),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("pgmq.pop(text,integer)") && text.contains("alter extension pgmq update"),
        "{text}"
    );
}
