//! Following the primary among several hosts. A URL naming several hosts (see `hosts`) gives a
//! pool on the first of them that accepts a connection and is not in recovery, as libpq's
//! `target_session_attrs=read-write` picks one. A watch task then asks the pool's server every
//! second whether it is still the primary. When it is not (it is gone, or in recovery), the
//! task looks for the primary among the hosts again and points the pool at it: new connections
//! go there, and idle ones opened before are dropped instead of used. Every connection the pool
//! opens checks it reached a primary first, and wakes the watch when it did not. The engine's
//! fencing (a task's attempt number, a run's state) is what makes a result sent before the
//! failover harmless when it arrives after it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How often the watch asks the pool's server whether it is still the primary.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long one check or one host's connection may take before it counts as failed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The hosts a pool may use, and which of them it uses now.
pub(crate) struct Failover {
    hosts: Vec<PgConnectOptions>,
    state: Mutex<State>,
    /// Woken by a connection that reached a server in recovery.
    wake: Notify,
}

struct State {
    /// The host the pool connects to.
    current: usize,
    /// When the pool was last pointed at another host: connections opened before are stale.
    switched_at: Option<Instant>,
    /// Whether the watch has said, since the primary was last found, that it found none.
    reported_missing: bool,
}

/// Why no host would do, one line per host: its `host:port/database` and what it answered.
pub(crate) type Refusals = Vec<String>;

impl Failover {
    /// The failover among `hosts`, starting on the first that is a primary now.
    pub(crate) async fn find(hosts: Vec<PgConnectOptions>) -> Result<Arc<Self>, Refusals> {
        let current = find_primary(&hosts).await?;
        Ok(Arc::new(Self {
            hosts,
            state: Mutex::new(State {
                current,
                switched_at: None,
                reported_missing: false,
            }),
            wake: Notify::new(),
        }))
    }

    /// The options of the host the pool connects to.
    pub(crate) fn current(&self) -> PgConnectOptions {
        self.hosts[self.lock().current].clone()
    }

    /// `options` with the checks on every connection: a new one must reach a primary, and an
    /// idle one opened before the last switch is dropped.
    pub(crate) fn pool_options(self: &Arc<Self>, options: PgPoolOptions) -> PgPoolOptions {
        let on_connect = Arc::clone(self);
        let on_acquire = Arc::clone(self);
        options
            .after_connect(move |connection, _| {
                let failover = Arc::clone(&on_connect);
                Box::pin(async move {
                    if in_recovery(connection).await? {
                        failover.wake.notify_one();
                        return Err(sqlx::Error::Configuration(
                            "the server is in recovery (a standby), not the primary".into(),
                        ));
                    }
                    Ok(())
                })
            })
            .before_acquire(move |_, metadata| {
                let fresh = !on_acquire.opened_before_switch(metadata.age);
                Box::pin(async move { Ok(fresh) })
            })
    }

    /// Watches `pool`'s server until the pool is closed or `stop` is cancelled (see the module
    /// docs).
    pub(crate) fn watch(self: Arc<Self>, pool: PgPool, stop: CancellationToken) {
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(CHECK_EVERY) => {}
                    () = self.wake.notified() => {}
                    () = stop.cancelled() => return,
                }
                if pool.is_closed() {
                    return;
                }
                if !self.still_primary(&pool).await {
                    self.follow_primary(&pool).await;
                }
            }
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn opened_before_switch(&self, age: Duration) -> bool {
        self.lock()
            .switched_at
            .is_some_and(|switched| age > switched.elapsed())
    }

    /// Whether the pool's server answers, in time, that it is not in recovery.
    async fn still_primary(&self, pool: &PgPool) -> bool {
        let check = async {
            let mut connection = pool.acquire().await?;
            in_recovery(&mut connection).await
        };
        matches!(
            tokio::time::timeout(CHECK_TIMEOUT, check).await,
            Ok(Ok(false))
        )
    }

    /// Finds the primary among the hosts and points the pool at it if it moved.
    async fn follow_primary(&self, pool: &PgPool) {
        match find_primary(&self.hosts).await {
            Ok(found) => {
                let mut state = self.lock();
                state.reported_missing = false;
                if found != state.current {
                    let from = pgflow_sql::connection_target(&self.hosts[state.current]);
                    let to = pgflow_sql::connection_target(&self.hosts[found]);
                    pool.set_connect_options(self.hosts[found].clone());
                    state.current = found;
                    state.switched_at = Some(Instant::now());
                    tracing::warn!(%from, %to, "the primary moved; the pool now connects to it");
                }
            }
            Err(refusals) => {
                let mut state = self.lock();
                if !state.reported_missing {
                    state.reported_missing = true;
                    tracing::warn!(
                        hosts = %refusals.join("; "),
                        "no host is the primary now; looking again every second"
                    );
                }
            }
        }
    }
}

/// The index of the first of `hosts` that accepts a connection in time and is not in recovery,
/// or what each answered.
pub(super) async fn find_primary(hosts: &[PgConnectOptions]) -> Result<usize, Refusals> {
    let mut refusals = Vec::new();
    for (index, options) in hosts.iter().enumerate() {
        let target = pgflow_sql::connection_target(options);
        let asked = tokio::time::timeout(CHECK_TIMEOUT, async {
            let mut connection = PgConnection::connect_with(options).await?;
            let in_recovery = in_recovery(&mut connection).await;
            let _ = connection.close().await;
            in_recovery
        })
        .await;
        match asked {
            Ok(Ok(false)) => return Ok(index),
            Ok(Ok(true)) => refusals.push(format!("{target}: a standby (in recovery)")),
            Ok(Err(error)) => refusals.push(format!("{target}: {error}")),
            Err(_) => refusals.push(format!(
                "{target}: no answer within {} s",
                CHECK_TIMEOUT.as_secs()
            )),
        }
    }
    Err(refusals)
}

async fn in_recovery(connection: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("select pg_is_in_recovery()")
        .fetch_one(connection)
        .await
}
