//! Least privilege: logins holding pgflow_worker, pgflow_client or pgflow_operator do their
//! whole job, and every other thing each tries is refused; a login with no pgflow role gets
//! an error that names the role to grant.
//!
//! Roles are cluster-wide, so each test's logins carry its database's name and are dropped at
//! the end.

use std::time::Duration;

use pgflow::engine;
use pgflow::{Client, EngineError, PgflowRole, ProcessConfig, Worker, WorkerConfig};
use pgflow::{Start, StartOptions};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::support::install;

#[pgflow::flow(slug = "guarded_v1", alias = "guarded", input = u32)]
pub mod guarded_v1 {
    #[step(queue = "guarded")]
    pub async fn double(input: u32) -> Result<u32, String> {
        Ok(input * 2)
    }

    #[step(depends_on = [double], queue = "guarded")]
    pub async fn describe(double: u32) -> Result<String, String> {
        Ok(format!("doubled: {double}"))
    }
}

/// Logins of one test, one per pgflow role and one with none, dropped with [`Logins::drop_all`].
struct Logins {
    prefix: String,
}

impl Logins {
    async fn create(pool: &PgPool) -> Self {
        // Short and unique to the test database (names longer than 63 bytes are cut).
        let prefix: String =
            sqlx::query_scalar("select 'pgflow_test_' || left(md5(current_database()), 12)")
                .fetch_one(pool)
                .await
                .unwrap();
        let logins = Self { prefix };
        for (suffix, role) in [
            ("worker", Some(PgflowRole::Worker)),
            ("client", Some(PgflowRole::Client)),
            ("operator", Some(PgflowRole::Operator)),
            ("nobody", None),
        ] {
            let login = logins.name(suffix);
            sqlx::raw_sql(&format!(
                "drop role if exists {login}; create role {login} login"
            ))
            .execute(pool)
            .await
            .unwrap();
            if let Some(role) = role {
                pgflow::grant_role(pool, &login, role).await.unwrap();
            }
        }
        logins
    }

    fn name(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.prefix)
    }

    /// A pool of the test database, connected as the login `suffix`.
    async fn pool(&self, admin: &PgPool, suffix: &str) -> PgPool {
        let options = (*admin.connect_options())
            .clone()
            .username(&self.name(suffix));
        PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .unwrap()
    }

    async fn drop_all(self, admin: &PgPool) {
        for suffix in ["worker", "client", "operator", "nobody"] {
            sqlx::raw_sql(&format!("drop role if exists {}", self.name(suffix)))
                .execute(admin)
                .await
                .unwrap();
        }
    }
}

/// Runs `sql` as the role behind `pool` and asserts Postgres refused it for want of a
/// privilege.
async fn refused(pool: &PgPool, who: &str, sql: &str) {
    let result = sqlx::raw_sql(sql).execute(pool).await;
    let code = result
        .as_ref()
        .err()
        .and_then(|e| e.as_database_error())
        .and_then(|db| db.code().map(|c| c.into_owned()));
    assert_eq!(
        code.as_deref(),
        Some("42501"),
        "{who} must not run `{sql}`: {result:?}"
    );
}

/// A call of every overload of `pgflow.<name>` with NULL arguments: refused before it runs,
/// whatever its arguments would have been.
async fn calls_of(admin: &PgPool, schema: &str, name: &str) -> Vec<String> {
    let signatures: Vec<Vec<String>> = sqlx::query_scalar(
        "select array(select format_type(t, null) from unnest(p.proargtypes) t)
         from pg_proc p where p.pronamespace = $1::regnamespace and p.proname = $2",
    )
    .bind(schema)
    .bind(name)
    .fetch_all(admin)
    .await
    .unwrap();
    assert!(!signatures.is_empty(), "{schema}.{name} exists");
    signatures
        .into_iter()
        .map(|types| {
            let args: Vec<String> = types.iter().map(|t| format!("null::{t}")).collect();
            format!("select {schema}.{name}({})", args.join(", "))
        })
        .collect()
}

/// Asserts the role behind `pool` may not call any overload of any of `names` in `schema`.
async fn may_not_call(admin: &PgPool, pool: &PgPool, who: &str, schema: &str, names: &[&str]) {
    for name in names {
        for call in calls_of(admin, schema, name).await {
            refused(pool, who, &call).await;
        }
    }
}

/// What no role may do with the tables, PGMQ or the schema's code.
async fn may_not_touch_tables_queues_or_code(admin: &PgPool, pool: &PgPool, who: &str) {
    for sql in [
        "delete from pgflow.runs",
        "update pgflow.step_tasks set output = '\"forged\"'",
        "update pgflow.aliases set flow_slug = 'guarded_v1'",
        "update pgflow.steps set queue_name = 'elsewhere'",
        "insert into pgflow.flows (flow_slug) values ('forged')",
        "delete from pgflow.workers",
        "select * from pgmq.q_guarded",
        "create function pgflow.forged() returns int language sql as 'select 1'",
        "alter function pgflow.complete_tasks(uuid[], text[], integer[], integer[], jsonb[]) \
         security invoker",
    ] {
        refused(pool, who, sql).await;
    }
    may_not_call(
        admin,
        pool,
        who,
        "pgmq",
        &[
            "send",
            "create",
            "drop_queue",
            "read",
            "archive",
            "purge_queue",
        ],
    )
    .await;
}

#[sqlx::test(migrations = false)]
async fn each_role_does_its_job_and_nothing_else(admin: PgPool) {
    install(&admin).await;
    let logins = Logins::create(&admin).await;
    let worker_pool = logins.pool(&admin, "worker").await;
    let client_pool = logins.pool(&admin, "client").await;
    let operator_pool = logins.pool(&admin, "operator").await;

    // The worker login runs whole flows: compiles, activates, claims, completes, sweeps.
    let worker = Worker::start_with(
        guarded_v1::deployment(),
        WorkerConfig::new(guarded_v1::Queue::Guarded)
            .connection(Client::with_config(
                worker_pool.clone(),
                ProcessConfig::new().stalled_check_interval(Duration::from_millis(200)),
            ))
            .poll_interval(Duration::from_millis(100))
            .heartbeat_interval(Duration::from_millis(100))
            .function_name("tests"),
    )
    .await
    .unwrap();

    // The client login starts runs and reads their outputs.
    let client = Client::new(client_pool.clone());
    let run = guarded_v1::start(&client, &21).await.unwrap();
    let output = run.wait(&client, Duration::from_secs(20)).await.unwrap();
    assert_eq!(output.describe, "doubled: 42");
    let through_alias = client
        .start(
            Start::named("guarded"),
            &serde_json::json!(1),
            StartOptions::new(),
        )
        .await;
    assert!(through_alias.is_ok(), "{through_alias:?}");
    // ... and signals runs and emits events (this flow waits for none: the refusal is the SQL
    // core's, not a permission's).
    match client.signal(run.run_id(), "approval", &true).await {
        Err(EngineError::SignalRefused(refused)) => {
            assert_eq!(refused.reason, pgflow::SignalRefusal::UnknownSignal)
        }
        other => panic!("a client may signal: {other:?}"),
    }
    let reached = client.emit_event("paid", "o-1", &true).await.unwrap();
    assert!(reached.is_empty());

    // The operator login manages aliases, drains, rollouts, workers and retention.
    engine::set_alias(&operator_pool, "guarded", "guarded_v1")
        .await
        .unwrap();
    engine::drain_status(&operator_pool, "guarded_v1", Some("guarded"))
        .await
        .unwrap();
    let rollout = engine::begin_rollout(&operator_pool, &["nobody_runs_this".to_owned()])
        .await
        .unwrap();
    engine::finish_rollout(&operator_pool, rollout)
        .await
        .unwrap();
    pgflow_runtime::admin::inspect::queues(&operator_pool)
        .await
        .unwrap();
    engine::prune(&operator_pool, Duration::from_secs(3600), 100)
        .await
        .unwrap();
    // ... and run control.
    let victim = client
        .start(
            Start::named("guarded"),
            &serde_json::json!(2),
            StartOptions::new(),
        )
        .await
        .unwrap();
    let cancelled = engine::cancel_runs(&operator_pool, &[victim.run_id()], Some("test"))
        .await
        .unwrap();
    assert_eq!(cancelled.len(), 1);
    engine::cancel_matching(&operator_pool, &engine::RunFilter::all(), None, true)
        .await
        .unwrap();
    let retried = engine::retry_runs(&operator_pool, &[victim.run_id()])
        .await
        .unwrap();
    assert!(!retried[0].retried, "a cancelled run is not retried");
    engine::resume_run(&operator_pool, victim.run_id(), "double")
        .await
        .unwrap();
    engine::retry_matching(&operator_pool, &engine::RunFilter::all(), true)
        .await
        .unwrap();
    // ... and schedules.
    let schedule = pgflow::Schedule::new("guarded_hourly", "guarded", "0 0 * * * *");
    engine::define_schedule(&operator_pool, &schedule)
        .await
        .unwrap();
    engine::pause_schedule(&operator_pool, "guarded_hourly", true)
        .await
        .unwrap();
    engine::schedule_list(&operator_pool).await.unwrap();
    engine::delete_schedule(&operator_pool, "guarded_hourly")
        .await
        .unwrap();

    // What each must not do.
    for (who, pool) in [
        ("worker", &worker_pool),
        ("client", &client_pool),
        ("operator", &operator_pool),
    ] {
        may_not_touch_tables_queues_or_code(&admin, pool, who).await;
    }
    for sql in [
        "select input from pgflow.runs",
        "select output from pgflow.step_states",
        "select output from pgflow.step_tasks",
        "select count(*) from pgflow.aliases",
    ] {
        refused(&worker_pool, "worker", sql).await;
    }
    may_not_call(
        &admin,
        &worker_pool,
        "worker",
        "pgflow",
        &[
            "set_alias",
            "deprecate_workers",
            "begin_rollout",
            "finish_rollout",
            "prune",
            "start_flows",
            "cancel_runs",
            "cancel_matching",
            "retry_runs",
            "resume_run",
            "pause_schedule",
            "delete_schedule",
            "trigger_schedule",
            "send_signal",
            "emit_event",
            "emit_events",
            "send_signal_by_token",
        ],
    )
    .await;
    refused(&client_pool, "client", "select * from pgflow.workers").await;
    may_not_call(
        &admin,
        &client_pool,
        "client",
        "pgflow",
        &[
            "complete_tasks",
            "complete_and_claim_tasks",
            "fail_tasks",
            "read_and_start_tasks",
            "start_tasks",
            "register_worker",
            "define_flow",
            "set_alias",
            "deprecate_workers",
            "begin_rollout",
            "prune",
            "cancel_runs",
            "cancel_matching",
            "runs_matching",
            "retry_runs",
            "retry_matching",
            "resume_run",
            "resume_matching",
            "define_schedule",
            "fire_schedule",
            "pause_schedule",
            "expire_waits",
            "signal_payload",
        ],
    )
    .await;
    may_not_call(
        &admin,
        &operator_pool,
        "operator",
        "pgflow",
        &[
            "complete_tasks",
            "complete_and_claim_tasks",
            "fail_tasks",
            "read_and_start_tasks",
            "register_worker",
            "requeue_stalled_tasks",
        ],
    )
    .await;

    worker.shutdown();
    worker.wait().await.unwrap();
    for pool in [worker_pool, client_pool, operator_pool] {
        pool.close().await;
    }
    logins.drop_all(&admin).await;
}

#[sqlx::test(migrations = false)]
async fn a_login_without_a_pgflow_role_is_told_which_to_grant(admin: PgPool) {
    install(&admin).await;
    let logins = Logins::create(&admin).await;
    let nobody = logins.pool(&admin, "nobody").await;
    let operatorless = logins.pool(&admin, "client").await;

    let error = pgflow::schema::check_schema(&nobody).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains(&logins.name("nobody")) && text.contains("pgflow grant"),
        "{text}"
    );
    may_not_touch_tables_queues_or_code(&admin, &nobody, "a login with no role").await;

    // A client asking for an operator's function is told it needs pgflow_operator.
    let error = engine::set_alias(&operatorless, "guarded", "guarded_v1")
        .await
        .unwrap_err();
    match &error {
        EngineError::PermissionDenied { advice, .. } => {
            assert!(advice.contains("pgflow_operator"), "{advice}");
            assert!(advice.contains("pgflow grant"), "{advice}");
        }
        other => panic!("expected a permission error, got {other:?}"),
    }

    // A worker started with that login refuses at once, naming the login and the fix.
    let error = Worker::start_with(
        guarded_v1::deployment(),
        WorkerConfig::new(guarded_v1::Queue::Guarded)
            .connection(nobody.clone())
            .function_name("tests"),
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("pgflow grant"), "{error}");

    nobody.close().await;
    operatorless.close().await;
    logins.drop_all(&admin).await;
}

/// The grants an install leaves in the catalog are exactly the table "Entry points and their
/// roles" of `pgflow-sql/functions/README.md` (which a denied call's advice reads): a grant
/// added in `99_privileges.sql` without its row, or a row without its grant, fails here.
#[sqlx::test]
async fn the_catalog_grants_exactly_the_documented_entry_points(pool: PgPool) {
    install(&pool).await;
    // Every overload of a pgflow function, with the pgflow roles granted EXECUTE on it directly.
    let granted: Vec<(String, Vec<String>)> = sqlx::query_as(
        "select p.oid::regprocedure::text,
                coalesce(array_agg(r.rolname::text order by r.rolname::text)
                           filter (where r.rolname is not null), '{}')
         from pg_proc p
         left join lateral aclexplode(p.proacl) acl on acl.privilege_type = 'EXECUTE'
         left join pg_roles r on r.oid = acl.grantee
                             and r.rolname in ('pgflow_worker', 'pgflow_client', 'pgflow_operator')
         where p.pronamespace = 'pgflow'::regnamespace
         group by p.oid",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let documented = pgflow_sql::entry_points();
    let mut problems = Vec::new();
    for (signature, roles) in &granted {
        let name = signature
            .trim_start_matches("pgflow.")
            .split('(')
            .next()
            .unwrap();
        let mut expected: Vec<String> = documented
            .iter()
            .find(|entry| entry.function == name)
            .map(|entry| entry.roles.iter().map(|r| (*r).to_owned()).collect())
            .unwrap_or_default();
        expected.sort();
        if *roles != expected {
            problems.push(format!(
                "{signature}: granted to {roles:?}, documented for {expected:?}"
            ));
        }
    }
    for entry in &documented {
        let exists = granted
            .iter()
            .any(|(signature, _)| signature.starts_with(&format!("pgflow.{}(", entry.function)));
        if !exists {
            problems.push(format!(
                "{}: documented, but no such function",
                entry.function
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the grants differ from \"Entry points and their roles\" in \
         pgflow-sql/functions/README.md:\n{}",
        problems.join("\n")
    );
}
