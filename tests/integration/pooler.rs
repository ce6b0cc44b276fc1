//! Behind a real PgBouncer in transaction mode (Debian's `pgbouncer`, started by the test):
//! clients and workers with `?pgbouncer=true` run whole flows while many client connections
//! share two server connections; the listener takes the direct URL or, without one, workers
//! poll; the install refuses the pooled URL and names the direct one.

use std::time::Duration;

use pgflow::{Client, ProcessConfig, Worker, WorkerConfig};
use pgflow_testkit::PgBouncer;
use sqlx::PgPool;

use crate::support::{database_url, install, listening_sessions};

#[pgflow::flow(slug = "bounced_v1", input = u32)]
pub mod bounced_v1 {
    /// Splits the input into that many ones-and-indexes.
    #[step(queue = "bounce_front")]
    pub async fn split(input: u32) -> Result<Vec<u32>, String> {
        Ok((1..=input).collect())
    }

    #[step(depends_on = [split], map = split, queue = "bounce_back")]
    pub async fn square(item: u32) -> Result<u32, String> {
        Ok(item * item)
    }

    #[step(depends_on = [square], queue = "bounce_front")]
    pub async fn total(square: Vec<u32>) -> Result<u32, String> {
        Ok(square.iter().sum())
    }
}

/// PgBouncer in front of the test database's server, two server connections per database.
fn bouncer(pool: &PgPool) -> PgBouncer {
    let options = pool.connect_options();
    PgBouncer::start_transaction_mode(options.get_host(), options.get_port(), 2)
        .expect("start pgbouncer (CI installs it: apt-get install pgbouncer)")
}

fn pooled_url(bouncer: &PgBouncer, pool: &PgPool) -> String {
    let options = pool.connect_options();
    bouncer.url(
        options.get_username(),
        options.get_database().expect("test database name"),
    )
}

fn expected_total(input: u32) -> u32 {
    (1..=input).map(|i| i * i).sum()
}

#[sqlx::test(migrations = false)]
async fn a_whole_flow_runs_through_a_transaction_mode_pgbouncer(pool: PgPool) {
    install(&pool).await;
    let bouncer = bouncer(&pool);
    let pooled = pooled_url(&bouncer, &pool);

    // Ten client connections and two workers of four each share two server connections.
    let client = Client::connect(&pooled).await.unwrap();
    assert_eq!(client.db().pooling(), pgflow::Pooling::Transaction);
    // The front worker listens through a direct URL; the back one polls.
    let listening = Client::with_config(
        pgflow::connect::db(&pooled, 4).await.unwrap(),
        ProcessConfig::new().listen_url(database_url(&pool)),
    );
    let front = WorkerConfig::new(bounced_v1::Queue::BounceFront)
        .connection(&listening)
        .poll_interval(Duration::from_millis(200))
        .heartbeat_interval(Duration::from_millis(200))
        .function_name("tests");
    let back = WorkerConfig::new(bounced_v1::Queue::BounceBack)
        .database_url(pooled.clone())
        .poll_interval(Duration::from_millis(100))
        .heartbeat_interval(Duration::from_millis(200))
        .function_name("tests");
    let front = Worker::start_with(bounced_v1::deployment(), front)
        .await
        .unwrap();
    let back = Worker::start_with(bounced_v1::deployment(), back)
        .await
        .unwrap();

    let mut handles = Vec::new();
    for input in 1..=30 {
        handles.push((input, bounced_v1::start(&client, &input).await.unwrap()));
    }
    for (input, handle) in handles {
        let output = handle
            .wait(&client, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("run {input}: {e}\npgbouncer log:\n{}", bouncer.log()));
        assert_eq!(output.total, expected_total(input), "run {input}");
    }

    // The front worker listens on the direct URL; the back one, with no listen URL behind a
    // transaction-mode pooler, polls and listens nowhere.
    assert_eq!(listening_sessions(&pool).await, 1);

    // Run-level reads and the typed inspection work through the pooler too.
    let run = bounced_v1::start(&client, &3).await.unwrap();
    let output = run.wait(&client, Duration::from_secs(30)).await.unwrap();
    assert_eq!(output.total, 14);
    let stored = pgflow::engine::run(client.db(), run.run_id())
        .await
        .unwrap();
    assert_eq!(stored.status, pgflow::RunStatus::Completed);

    front.shutdown();
    back.shutdown();
    front.wait().await.unwrap();
    back.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn the_install_refuses_a_pooled_url_and_names_the_direct_one(pool: PgPool) {
    let bouncer = bouncer(&pool);
    let error = pgflow::install_url(&pooled_url(&bouncer, &pool))
        .await
        .unwrap_err();
    assert!(
        matches!(error, pgflow::InstallError::ThroughTransactionPooler),
        "{error:?}"
    );
    assert!(error.to_string().contains("direct URL"), "{error}");
}

#[sqlx::test(migrations = false)]
async fn a_listen_url_through_the_pooler_is_refused(pool: PgPool) {
    install(&pool).await;
    let bouncer = bouncer(&pool);
    let pooled = pooled_url(&bouncer, &pool);
    let client = Client::with_config(
        pgflow::connect::db(&pooled, 4).await.unwrap(),
        ProcessConfig::new().listen_url(pooled),
    );
    let config = WorkerConfig::new(bounced_v1::Queue::BounceFront)
        .connection(&client)
        .function_name("tests");
    let error = Worker::start_with(bounced_v1::deployment(), config)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("LISTEN needs a session"),
        "{error}"
    );
}

#[sqlx::test(migrations = false)]
async fn a_pooler_the_url_does_not_declare_is_named_in_the_error(pool: PgPool) {
    install(&pool).await;
    let options = pool.connect_options();
    // One server connection: the second client's first named statement meets the first's.
    let bouncer = PgBouncer::start_transaction_mode(options.get_host(), options.get_port(), 1)
        .expect("start pgbouncer");
    let undeclared = pooled_url(&bouncer, &pool).replace("?pgbouncer=true", "");
    Client::new(pool.clone())
        .deploy(&bounced_v1::deployment())
        .await
        .unwrap();
    pgflow::engine::activate_flow(&pool, "bounced_v1")
        .await
        .unwrap();

    let first = Client::connect(&undeclared).await.unwrap();
    let second = Client::connect(&undeclared).await.unwrap();
    assert_eq!(first.db().pooling(), pgflow::Pooling::Direct);
    bounced_v1::start(&first, &1).await.unwrap();
    let error = bounced_v1::start(&second, &1).await.unwrap_err();
    assert!(
        matches!(error, pgflow::EngineError::UndeclaredPooler { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("add `pgbouncer=true`"),
        "{error}"
    );
}
