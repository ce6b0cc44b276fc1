//! Lost workers: a worker that went silent without stopping (SIGKILL, a lost host) is declared
//! lost by a live worker's maintenance sweep after ten of its heartbeat intervals (at least
//! 60 s), shown as lost, told to stop if it comes back, and pruned by retention.

use std::time::Duration;

use pgflow::engine;
use pgflow::names::QueueName;
use pgflow::{Client, ProcessConfig, Worker, WorkerConfig};
use pgflow_runtime::admin::inspect::{self, WorkerFilter, WorkerLiveness};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::{eventually, install, worker_config};

#[pgflow::flow(slug = "lost_sweep")]
pub mod lost_sweep {
    #[step(queue = "lost_sweep")]
    pub async fn only(input: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(input)
    }
}

/// Registers a worker that is not running, silent for `silent` seconds.
async fn silent_worker(pool: &PgPool, heartbeat: Duration, silent: i32) -> Uuid {
    let worker_id = Uuid::new_v4();
    let queue = QueueName::new("lost_sweep").unwrap();
    assert!(
        engine::register_worker(
            pool,
            worker_id,
            &queue,
            "crashed",
            &["lost_sweep".to_owned()],
            heartbeat
        )
        .await
        .unwrap()
    );
    sqlx::query(
        "update pgflow.workers set started_at = now() - make_interval(secs => $2 + 1),
                last_heartbeat_at = now() - make_interval(secs => $2)
         where worker_id = $1",
    )
    .bind(worker_id)
    .bind(f64::from(silent))
    .execute(pool)
    .await
    .unwrap();
    worker_id
}

async fn liveness_of(pool: &PgPool, worker_id: Uuid) -> WorkerLiveness {
    inspect::workers(pool, WorkerFilter::All)
        .await
        .unwrap()
        .into_iter()
        .find(|w| w.worker_id == worker_id)
        .expect("the worker is registered")
        .liveness()
}

#[sqlx::test(migrations = false)]
async fn a_silent_worker_is_declared_lost_told_to_stop_and_pruned(pool: PgPool) {
    install(&pool).await;
    // Silent for 70 s: lost with a 1 s heartbeat (the 60 s floor), not with a 10 s one (100 s).
    let crashed = silent_worker(&pool, Duration::from_secs(1), 70).await;
    let slow = silent_worker(&pool, Duration::from_secs(10), 70).await;

    let sweeping = Client::with_config(
        pool.clone(),
        ProcessConfig::new().stalled_check_interval(Duration::from_millis(100)),
    );
    let config: WorkerConfig<_> =
        worker_config(lost_sweep::Queue::LostSweep, &pool).connection(&sweeping);
    let worker = Worker::start_with(lost_sweep::deployment(), config)
        .await
        .unwrap();
    assert!(
        eventually(10, async || liveness_of(&pool, crashed).await
            == WorkerLiveness::Lost)
        .await,
        "the sweep declared the crashed worker lost"
    );
    assert_eq!(
        liveness_of(&pool, slow).await,
        WorkerLiveness::Stale,
        "ten of its own intervals have not passed"
    );
    let live = inspect::workers(&pool, WorkerFilter::NotStopped)
        .await
        .unwrap();
    assert_eq!(
        live.iter()
            .map(|w| w.function_name.as_str())
            .collect::<Vec<_>>(),
        ["crashed", "tests"],
        "a lost worker no longer counts as running; the live one is untouched"
    );
    assert!(live.iter().all(|w| w.worker_id != crashed));

    // A lost worker that comes back is told to drain and stop.
    assert!(
        engine::heartbeat(&pool, crashed, &[])
            .await
            .unwrap()
            .deprecated
    );
    worker.shutdown();
    worker.wait().await.unwrap();

    // Retention prunes it like a stopped worker, once its end is older than the cutoff.
    sqlx::query(
        "update pgflow.workers set stopped_at = stopped_at - interval '2 days',
                lost_at = lost_at - interval '2 days',
                started_at = started_at - interval '2 days'
         where worker_id = $1",
    )
    .bind(crashed)
    .execute(&pool)
    .await
    .unwrap();
    let pruned = engine::prune_all(&pool, Duration::from_secs(86_400), 100)
        .await
        .unwrap();
    assert_eq!(pruned.workers, 1);
    let left: Vec<Uuid> = sqlx::query_scalar("select worker_id from pgflow.workers")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert!(!left.contains(&crashed), "{left:?}");
    assert!(left.contains(&slow));
}
