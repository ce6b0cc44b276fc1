//! The PGMQ ceiling under pgflow's per-call method (issue 21): what the message queue alone
//! does on this server when clients send one message per call while consumers take them.
//!
//! Every run a client starts one at a time needs at least what this measures: one committed
//! send from the client, and a share of one committed read-and-archive from a worker. pgflow
//! adds its own rows (run, step state, task) and the completion on top, so this row is the
//! yardstick of the per-call rows, as `limit (pgmq)` is of the batch-start ones.
//!
//! Kept generous: a consumer reads and archives in one statement (one commit per batch), and
//! sleeps 5 ms when it finds nothing (where a worker would wait for a notification).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::PgPool;

use crate::{CLIENTS, CpuClock, Error, Row, client_pools, commits, database, warm_up_size};

const QUEUE: &str = "bench_limit_per_call";

/// Sends `messages` one per call from [`CLIENTS`] connections while `workers` consumers read
/// and archive batches of `batch`; the row's figures are messages per second.
pub(crate) async fn per_call_limit(
    messages: usize,
    workers: usize,
    batch: usize,
) -> Result<Row, Error> {
    let pool = database("pgflow_bench").await?;
    sqlx::query("select pgmq.create($1)")
        .bind(QUEUE)
        .execute(&pool)
        .await?;
    let clients = client_pools(&pool, CLIENTS).await?;
    let messages = messages - messages % CLIENTS;
    let warm_up = warm_up_size(messages);
    cycle(&pool, &clients, warm_up - warm_up % CLIENTS, workers, batch).await?;
    sqlx::raw_sql(&format!("vacuum analyze pgmq.q_{QUEUE}"))
        .execute(&pool)
        .await?;

    let before = commits(&pool).await?;
    let cpu = CpuClock::now();
    let started = Instant::now();
    cycle(&pool, &clients, messages, workers, batch).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu.and_then(|c| c.elapsed());
    let after = commits(&pool).await?;
    for client in clients {
        client.close().await;
    }
    Ok(Row::of_messages(
        "limit per call (pgmq)",
        (workers, batch),
        messages,
        seconds,
        after - before,
        cpu,
    ))
}

/// One timed (or warm-up) cycle: `messages` sent one per call, and taken, each exactly once.
async fn cycle(
    pool: &PgPool,
    clients: &[PgPool],
    messages: usize,
    workers: usize,
    batch: usize,
) -> Result<(), Error> {
    let taken = Arc::new(AtomicUsize::new(0));
    let consumers: Vec<_> = (0..workers)
        .map(|_| {
            let pool = pool.clone();
            let taken = taken.clone();
            tokio::spawn(async move {
                while taken.load(Ordering::Relaxed) < messages {
                    let archived: i64 = sqlx::query_scalar(
                        "select count(*) from pgmq.archive($1, array(
                           select msg_id from pgmq.read($1, 30, $2)))",
                    )
                    .bind(QUEUE)
                    .bind(batch as i32)
                    .fetch_one(&pool)
                    .await?;
                    if archived == 0 {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    taken.fetch_add(archived as usize, Ordering::Relaxed);
                }
                Ok::<_, sqlx::Error>(())
            })
        })
        .collect();
    let senders: Vec<_> = clients
        .iter()
        .map(|client| {
            let client = client.clone();
            tokio::spawn(async move {
                for n in 0..messages / CLIENTS {
                    sqlx::query("select pgmq.send($1, $2)")
                        .bind(QUEUE)
                        .bind(json!({ "n": n }))
                        .execute(&client)
                        .await?;
                }
                Ok::<_, sqlx::Error>(())
            })
        })
        .collect();
    for sender in senders {
        sender.await??;
    }
    for consumer in consumers {
        consumer.await??;
    }
    assert_eq!(
        taken.load(Ordering::Relaxed),
        messages,
        "limit per call: every message taken exactly once"
    );
    Ok(())
}
