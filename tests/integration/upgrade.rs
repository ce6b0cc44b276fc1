//! Upgrades: a database installed by a released version, brought up to date by today's
//! `install`, has exactly the catalog of a fresh install (tables, columns, constraints,
//! indexes, triggers, types, views, and every function's signature, settings and body), and
//! its runs in flight complete, move into the history and are pruned by the day.
//!
//! Each released schema is a checked-in dump in `schemas/` (made by `schemas/dump.sh`): the
//! schema of a fresh install of that version with the rows of the installers' ledgers.

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, Executor, PgPool};

/// The first released schema: the baseline.
const BASELINE: &str = include_str!("schemas/20261204000100.sql");

/// `(kind, name, definition)` of everything in schema `pgflow`.
const CATALOG: &str = include_str!("schemas/catalog.sql");

type Catalog = Vec<(String, String, String)>;

/// Everything a database's pgflow schema consists of, and what its ledgers record.
#[derive(Debug, PartialEq)]
struct Installed {
    catalog: Catalog,
    migrations: Vec<(i64, Vec<u8>)>,
    functions_checksum: Vec<u8>,
}

/// Asserts that two installs are the same, naming only what differs.
fn assert_same(upgraded: &Installed, fresh: &Installed) {
    let only_in = |a: &Catalog, b: &Catalog| -> Catalog {
        a.iter().filter(|row| !b.contains(row)).cloned().collect()
    };
    assert_eq!(
        (
            only_in(&upgraded.catalog, &fresh.catalog),
            only_in(&fresh.catalog, &upgraded.catalog)
        ),
        (vec![], vec![]),
        "(only after the upgrade, only in a fresh install)"
    );
    assert_eq!(upgraded, fresh, "the ledgers differ");
}

async fn installed(pool: &PgPool) -> Installed {
    Installed {
        catalog: sqlx::query_as(CATALOG).fetch_all(pool).await.unwrap(),
        migrations: sqlx::query_as(
            "select version, checksum from pgflow.schema_migrations order by version",
        )
        .fetch_all(pool)
        .await
        .unwrap(),
        functions_checksum: sqlx::query_scalar("select checksum from pgflow.schema_functions")
            .fetch_one(pool)
            .await
            .unwrap(),
    }
}

/// Restores `dump` into the database behind `pool`, on a connection of its own (the dump
/// empties that session's search path).
async fn restore(pool: &PgPool, dump: &str) {
    let mut conn = pool.connect_options().connect().await.unwrap();
    conn.execute(sqlx::raw_sql(dump)).await.unwrap();
    conn.close().await.unwrap();
}

/// What a fresh install of today's code consists of, from a database of its own next to the
/// test's (dropped afterwards).
async fn fresh_install(pool: &PgPool) -> Installed {
    // The test database's name is as long as Postgres allows: a suffix would be cut off.
    let name = format!("pgflow_fresh_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("create database {name}"))
        .execute(pool)
        .await
        .unwrap();
    let options: PgConnectOptions = (*pool.connect_options()).clone().database(&name);
    let fresh = PgPool::connect_with(options).await.unwrap();
    pgflow::install(&fresh).await.unwrap();
    let state = installed(&fresh).await;
    fresh.close().await;
    sqlx::query(&format!("drop database {name} with (force)"))
        .execute(pool)
        .await
        .unwrap();
    state
}

#[sqlx::test(migrations = false)]
async fn an_install_of_the_baseline_upgrades_to_exactly_a_fresh_install(pool: PgPool) {
    restore(&pool, BASELINE).await;
    pgflow::install(&pool).await.unwrap();
    let upgraded = installed(&pool).await;
    let fresh = fresh_install(&pool).await;
    assert!(
        upgraded.catalog.len() > 200,
        "the catalog query sees the schema"
    );
    assert_same(&upgraded, &fresh);
}

#[sqlx::test(migrations = false)]
async fn function_bodies_of_an_older_release_are_replaced_at_install(pool: PgPool) {
    // An install of today's schema version, then what an older release of that version would
    // have left: another body of one function, and the checksum of its own function files.
    pgflow::install(&pool).await.unwrap();
    sqlx::query(
        r"do $$
          begin
            execute regexp_replace(
              pg_get_functiondef('pgflow.prune(interval, integer)'::regprocedure),
              '\$function\$', e'$function$\n-- the body of an older release\n');
          end $$",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("update pgflow.schema_functions set checksum = '\\x0123'")
        .execute(&pool)
        .await
        .unwrap();
    assert!(!pgflow::schema::functions_current(&pool).await.unwrap());
    let before = installed(&pool).await;

    let report = pgflow::install(&pool).await.unwrap();
    assert!(report.applied_migrations.is_empty());
    assert!(report.applied_functions);
    assert!(pgflow::schema::functions_current(&pool).await.unwrap());
    let upgraded = installed(&pool).await;
    let fresh = fresh_install(&pool).await;
    assert_ne!(before.catalog, fresh.catalog, "the older body differs");
    assert_same(&upgraded, &fresh);

    // Installing again finds nothing to do.
    let again = pgflow::install(&pool).await.unwrap();
    assert!(again.applied_migrations.is_empty() && !again.applied_functions);
}

#[sqlx::test(migrations = false)]
async fn a_database_of_a_pre_release_build_is_refused_and_left_as_it_was(pool: PgPool) {
    pgflow::install(&pool).await.unwrap();
    // A pre-release build recorded migrations that were squashed into the baseline since.
    sqlx::query(
        "insert into pgflow.schema_migrations (version, description, checksum)
         values (20261202000100, 'schema', '\\x00')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let error = refused_and_left_as_it_was(&pool).await;
    assert!(
        matches!(
            error,
            pgflow::InstallError::UnknownMigration {
                version: 20261202000100
            }
        ),
        "{error:?}"
    );
}

#[sqlx::test(migrations = false)]
async fn a_database_of_a_build_before_the_squash_is_told_to_drop_its_schema(pool: PgPool) {
    pgflow::install(&pool).await.unwrap();
    // What a build from before the last squash left: the baseline with another checksum, and
    // later migrations that are not a newer release but squashed ones.
    sqlx::raw_sql(
        "update pgflow.schema_migrations set checksum = '\\x00';
         insert into pgflow.schema_migrations (version, description, checksum)
         values (20261211000100, 'straight completion', '\\x00')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let error = refused_and_left_as_it_was(&pool).await;
    assert!(
        matches!(error, pgflow::InstallError::ChecksumMismatch { .. }),
        "not told to upgrade to a newer build: {error:?}"
    );
}

/// Installs over a database a pre-release build left: asserts the install is refused with the
/// advice to drop the schema and changes nothing; returns the refusal.
async fn refused_and_left_as_it_was(pool: &PgPool) -> pgflow::InstallError {
    let before = installed(pool).await;
    let error = pgflow::install(pool).await.unwrap_err();
    assert!(
        error.to_string().contains("drop schema pgflow cascade"),
        "{error}"
    );
    assert_eq!(installed(pool).await, before);
    error
}

/// The flow whose runs the baseline dump carries in flight (see `schemas/dump.sh`): `first`
/// adds one to the run's input, `second` multiplies that by ten.
#[pgflow::flow(slug = "upgrade_relay", input = i64)]
pub mod upgrade_relay {
    #[step]
    pub async fn first(input: i64) -> Result<i64, String> {
        Ok(input + 1)
    }

    #[step(depends_on = [first])]
    pub async fn second(first: i64) -> Result<i64, String> {
        Ok(first * 10)
    }
}

#[sqlx::test(migrations = false)]
async fn runs_in_flight_at_an_upgrade_complete_after_it(pool: PgPool) {
    // The dump holds three runs of `upgrade_relay` (inputs 1, 2, 3), one of them with its first
    // task claimed by a worker of the old release that is gone, the others queued.
    restore(&pool, BASELINE).await;
    let in_flight: Vec<(i64, String)> = sqlx::query_as(
        "select (r.input)::bigint, t.status from pgflow.runs r
         join pgflow.step_tasks t on t.run_id = r.run_id
         where r.flow_slug = 'upgrade_relay' order by 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        in_flight,
        vec![
            (1, "started".to_owned()),
            (2, "queued".to_owned()),
            (3, "queued".to_owned())
        ],
        "the dump carries runs in flight"
    );

    pgflow::install(&pool).await.unwrap();
    // The claimed task's worker is gone: long past its timeout, the sweep requeues it.
    sqlx::query(
        "update pgflow.step_tasks set started_at = now() - interval '1 hour'
         where status = 'started'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let client = pgflow::Client::with_config(
        pool.clone(),
        pgflow::ProcessConfig::new()
            .stalled_check_interval(std::time::Duration::from_millis(100))
            .stalled_grace(std::time::Duration::ZERO),
    );
    let worker = pgflow::Worker::start_with(
        upgrade_relay::deployment(),
        crate::support::worker_config(upgrade_relay::Queue::UpgradeRelay, &pool)
            .connection(&client),
    )
    .await
    .unwrap();
    let ended = crate::support::eventually(30, async || {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from pgflow.runs
             where flow_slug = 'upgrade_relay' and status = 'started'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
            == 0
    })
    .await;
    worker.shutdown();
    worker.wait().await.unwrap();
    assert!(ended, "every run in flight ended");

    let outcomes: Vec<(i64, String, serde_json::Value)> = sqlx::query_as(
        "select (input)::bigint, status, output from pgflow.runs
         where flow_slug = 'upgrade_relay' order by 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let expected = |input: i64| {
        (
            input,
            "completed".to_owned(),
            serde_json::json!({ "second": (input + 1) * 10 }),
        )
    };
    assert_eq!(outcomes, vec![expected(1), expected(2), expected(3)]);
    // Each task ran once, except the one the gone worker held: it ran again after the upgrade.
    let attempts: Vec<(i64, String, i32)> = sqlx::query_as(
        "select (r.input)::bigint, t.step_slug, t.attempts_count from pgflow.runs r
         join pgflow.step_tasks t on t.run_id = r.run_id
         where r.flow_slug = 'upgrade_relay' order by 1, 2",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        attempts,
        vec![
            (1, "first".to_owned(), 2),
            (1, "second".to_owned(), 1),
            (2, "first".to_owned(), 1),
            (2, "second".to_owned(), 1),
            (3, "first".to_owned(), 1),
            (3, "second".to_owned(), 1),
        ]
    );

    // Runs that ended before the upgrade or after it move into the history once they are old
    // enough (here: ended two days ago), read as they did, and a prune drops their day whole.
    sqlx::query(
        "update pgflow.runs
         set started_at = started_at - interval '2 days',
             completed_at = completed_at - interval '2 days'
         where flow_slug = 'upgrade_relay'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let hour = std::time::Duration::from_secs(3600);
    let moved = pgflow::engine::archive_all(&pool, hour, 100, 60 * hour)
        .await
        .unwrap();
    assert_eq!(moved, 3);
    let archived: Vec<(i64, String, serde_json::Value)> = sqlx::query_as(
        "select (input)::bigint, status, output from pgflow.all_runs
         where flow_slug = 'upgrade_relay' order by 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(archived, vec![expected(1), expected(2), expected(3)]);
    let pruned = pgflow::engine::prune_all(&pool, 24 * hour, 100)
        .await
        .unwrap();
    assert_eq!((pruned.runs, pruned.tasks), (3, 6), "{pruned:?}");
    let left: i64 = sqlx::query_scalar("select count(*) from pgflow.all_step_tasks")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
}
