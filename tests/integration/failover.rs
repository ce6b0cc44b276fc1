//! Failover: a primary and a synchronous streaming standby of its own (`pg_basebackup -R`).
//! Clients and workers connect either with both hosts in the URL, or through a PgBouncer in
//! transaction mode that the operator re-points at the new primary. Runs start all the while;
//! the primary crashes (`-m immediate`) and the standby is promoted. Every run whose start was
//! acknowledged completes with the right output, no task's handler runs again after its
//! completion was acknowledged (nor any attempt twice), nothing is stuck, and every worker
//! heartbeats on the new primary within 10 s, without a restart (with the hosts in the URL,
//! every client's pool points there too).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pgflow::{Client, Context, ProcessConfig, Worker};
use pgflow_testkit::{Cluster, PgBouncer};
use sqlx::PgPool;
use uuid::Uuid;

/// Every handler run: (run, step, attempt).
static EXECUTIONS: Mutex<Vec<(Uuid, String, i32)>> = Mutex::new(Vec::new());

fn executed(ctx: &Context) {
    EXECUTIONS
        .lock()
        .unwrap()
        .push((ctx.run_id(), ctx.step_slug().to_string(), ctx.attempt()));
}

#[pgflow::flow(slug = "failover_v1", input = u32)]
pub mod failover_v1 {
    use super::*;

    #[step(timeout = 3)]
    pub async fn double(input: u32, ctx: Context) -> Result<u32, String> {
        executed(&ctx);
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(input * 2)
    }

    #[step(depends_on = [double], timeout = 3)]
    pub async fn label(double: u32, ctx: Context) -> Result<String, String> {
        executed(&ctx);
        Ok(format!("#{double}"))
    }
}

/// Runs blocking cluster work off the runtime's threads.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work).await.unwrap()
}

/// How the clients reach the database.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Route {
    /// Both hosts in the URL: the clients find the primary themselves.
    Hosts,
    /// One PgBouncer in transaction mode, re-pointed at the new primary after the promotion.
    PgBouncer,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_loses_no_acknowledged_run_and_clients_follow_the_new_primary() {
    failover_under_load(Route::Hosts).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_behind_a_repointed_pgbouncer_loses_no_acknowledged_run() {
    failover_under_load(Route::PgBouncer).await;
}

async fn failover_under_load(route: Route) {
    // A primary that acknowledges a commit only once its standby has it.
    let (mut primary, standby) = blocking(|| {
        let primary = Cluster::init().unwrap();
        std::fs::write(
            primary.dir.join("data/postgresql.auto.conf"),
            "synchronous_standby_names = '*'\n",
        )
        .unwrap();
        let primary = primary.start_with(&[]).unwrap();
        // Promoted, the standby waits for no standby of its own.
        let standby =
            Cluster::standby_of(&primary, &["synchronous_standby_names = ''".to_owned()]).unwrap();
        (primary, standby)
    })
    .await;
    pgflow::install_url(&primary.url()).await.unwrap();
    let primary_port = primary.port;
    let bouncer = match route {
        Route::Hosts => None,
        Route::PgBouncer => Some(
            blocking(move || PgBouncer::start_transaction_mode("127.0.0.1", primary_port, 8))
                .await
                .unwrap(),
        ),
    };
    let url = match &bouncer {
        None => format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres",
            primary.port, standby.port
        ),
        // No listen URL: behind the pooler, idle workers poll.
        Some(bouncer) => bouncer.url("postgres", "postgres"),
    };
    let config = ProcessConfig::default()
        .stalled_check_interval(Duration::from_secs(1))
        .stalled_grace(Duration::from_secs(1));
    // Two processes' clients, two workers each, and a client that starts runs.
    let mut clients = Vec::new();
    let mut workers = Vec::new();
    for _ in 0..2 {
        let client = Client::connect_with(&url, config.clone()).await.unwrap();
        for _ in 0..2 {
            workers.push(
                Worker::start_on(failover_v1::deployment(), &client)
                    .await
                    .unwrap(),
            );
        }
        clients.push(client);
    }
    let starter = Client::connect(&url).await.unwrap();
    clients.push(starter.clone());

    // Start runs one after another until told to stop; keep those whose start returned.
    let stop = Arc::new(AtomicBool::new(false));
    let starting = {
        let (starter, stop) = (starter.clone(), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            let mut refused = 0;
            let mut input = 0;
            while !stop.load(Ordering::Relaxed) {
                input += 1;
                match failover_v1::start(&starter, &input).await {
                    Ok(run) => acknowledged.push((run, input)),
                    Err(_) => refused += 1,
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (acknowledged, refused)
        })
    };

    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The crash, then the promotion.
    let standby = blocking(move || {
        primary.stop("immediate").unwrap();
        standby.promote().unwrap();
        (standby, primary)
    })
    .await;
    let (standby, _old_primary) = standby;
    if let Some(bouncer) = &bouncer {
        bouncer.repoint("127.0.0.1", standby.port).unwrap();
    }
    let promoted = Instant::now();
    let new_primary = PgPool::connect(&standby.url()).await.unwrap();
    let promoted_at: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("select now()")
        .fetch_one(&new_primary)
        .await
        .unwrap();

    // Every client points at the new primary, and every worker heartbeats there, within 10 s.
    loop {
        // Behind PgBouncer the clients keep their one host, the pooler's.
        let moved = route == Route::PgBouncer
            || clients
                .iter()
                .all(|c| c.pool().connect_options().get_port() == standby.port);
        let beating: i64 = sqlx::query_scalar(
            "select count(*) from pgflow.workers
             where stopped_at is null and last_heartbeat_at > $1",
        )
        .bind(promoted_at)
        .fetch_one(&new_primary)
        .await
        .unwrap();
        if moved && beating >= 4 {
            break;
        }
        assert!(
            promoted.elapsed() < Duration::from_secs(10),
            "10 s after the promotion: clients moved {moved}, workers heartbeating there \
             {beating} of 4{}",
            bouncer
                .as_ref()
                .map(|b| format!("; PgBouncer's log:\n{}", b.log()))
                .unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "{route:?}: every client and worker on the new primary {:.1} s after the promotion",
        promoted.elapsed().as_secs_f64()
    );

    // Starts go on against the new primary for a while.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let (acknowledged, refused) = starting.await.unwrap();
    println!(
        "{route:?}: {} starts acknowledged, {refused} refused during the failover",
        acknowledged.len()
    );
    assert!(
        acknowledged.len() > 50,
        "too few runs started to prove anything"
    );

    // Every acknowledged run completes with its output.
    for (run, input) in &acknowledged {
        let output = run
            .wait(&starter, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("run {} (input {input}): {e}", run.run_id()));
        assert_eq!(output.label, format!("#{}", input * 2));
    }

    // No attempt ran twice, and the attempt that completed a task was its last.
    let tasks: Vec<(Uuid, String, String, i32)> =
        sqlx::query_as("select run_id, step_slug, status, attempts_count from pgflow.step_tasks")
            .fetch_all(&new_primary)
            .await
            .unwrap();
    let executions = EXECUTIONS.lock().unwrap().clone();
    let mut per_attempt: HashMap<(Uuid, String, i32), usize> = HashMap::new();
    for (run, step, attempt) in executions {
        *per_attempt.entry((run, step, attempt)).or_default() += 1;
    }
    let acknowledged_ids: std::collections::HashSet<Uuid> =
        acknowledged.iter().map(|(run, _)| run.run_id()).collect();
    for (run, step, status, attempts) in &tasks {
        if !acknowledged_ids.contains(run) {
            continue;
        }
        assert_eq!(status, "completed", "{run}/{step}");
        for ((r, s, attempt), times) in &per_attempt {
            if r == run && s == step {
                assert_eq!(
                    *times, 1,
                    "{run}/{step} attempt {attempt} ran {times} times"
                );
                assert!(
                    attempt <= attempts,
                    "{run}/{step} ran attempt {attempt} after attempt {attempts} completed it"
                );
            }
        }
    }
    // Nothing is stuck: the runs whose start committed but was not acknowledged end too, and
    // nothing is left queued, started or in the queue.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: (i64, i64, i64) = sqlx::query_as(
            "select (select count(*) from pgflow.runs where status <> 'completed'),
                    (select count(*) from pgflow.step_tasks where status in ('queued', 'started')),
                    (select count(*) from pgmq.q_failover_v1)",
        )
        .fetch_one(&new_primary)
        .await
        .unwrap();
        if left == (0, 0, 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "(runs not completed, tasks queued or started, messages) left: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    for worker in workers {
        worker.shutdown();
        worker.wait().await.unwrap();
    }
}

#[sqlx::test(migrations = false)]
async fn the_watch_over_several_hosts_ends_with_the_last_handle_of_its_pool(pool: PgPool) {
    // One server named twice: a URL of several hosts, so the pool gets its watch.
    let options = pool.connect_options();
    let host = format!("{}:{}", options.get_host(), options.get_port());
    let app = format!("pgflow_watch_{}", std::process::id());
    let url = format!(
        "postgres://{}@{host},{host}/{}?application_name={app}",
        options.get_username(),
        options.get_database().unwrap()
    );
    let count = || async {
        let n: i64 =
            sqlx::query_scalar("select count(*) from pg_stat_activity where application_name = $1")
                .bind(&app)
                .fetch_one(&pool)
                .await
                .unwrap();
        n
    };
    let db = pgflow::connect::db(&url, 2).await.unwrap();
    let clone = db.clone();
    sqlx::query("select 1").execute(&db).await.unwrap();
    assert!(count().await >= 1);
    drop(db);
    // A clone still holds it: the watch goes on, and so does the pool.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    sqlx::query("select 1").execute(&clone).await.unwrap();
    drop(clone);
    // The last handle is gone: the watch ends, and the pool's connections with it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while count().await > 0 {
        assert!(
            Instant::now() < deadline,
            "the pool's connections outlived every handle: the watch still holds it"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
