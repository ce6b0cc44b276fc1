//! pgflow's web dashboard: the queues, workers, aliases and rollouts of a database at a glance,
//! its runs filtered and paged, each run's DAG drawn with its steps' states and kept current
//! without a reload, and cancel and retry behind a confirmation and a token.
//!
//! The `pgflow dashboard` command serves it; [`serve`] does the same inside an application.
//! Pages are rendered on the server (`maud`); a little JavaScript follows a run's events (a
//! server-sent event stream fed by pgflow's run events) and redraws the run. Every read is a
//! typed query of `pgflow_runtime::engine`; the dashboard writes no SQL.
//!
//! Security: it listens on loopback unless told otherwise; cancel and retry need the action
//! token ([`Access::Token`]) on a same-origin form carrying a CSRF token, and none are offered
//! with [`Access::ReadOnly`]; payloads are shown truncated, or not at all
//! ([`DashboardConfig::hide_payloads`]).

mod app;
mod callbacks;
mod charts;
mod config;
mod dag;
mod error;
mod live;
mod pages;
mod random;
mod replica;
mod security;
mod state;
mod throughput;

use std::net::SocketAddr;
use std::time::Duration;

use pgflow_runtime::Db;
use tokio_util::sync::CancellationToken;

pub use callbacks::callback_router;
pub use config::{Access, ActionToken, ConfigError, DashboardConfig, MIN_TOKEN_LEN};
pub use security::Refusal;

/// The dashboard for the database behind `db` as an axum router, for serving it from an
/// application's own server (mount it at the root: its links are absolute). Its throughput
/// column fills as the overview page is loaded; [`serve`] also samples in the background.
pub fn router(config: DashboardConfig, db: impl Into<Db>) -> axum::Router {
    app::routes(state::AppState::new(config, db.into(), None))
}

/// [`router`], with the pages reading from `replica` (a streaming replica of the database
/// behind `db`): cancel, retry, signals, pauses and a run page's live updates still use `db`,
/// the primary. Every page says how far behind the replica is.
pub fn router_with_replica(
    config: DashboardConfig,
    db: impl Into<Db>,
    replica: impl Into<Db>,
) -> axum::Router {
    app::routes(state::AppState::new(
        config,
        db.into(),
        Some(replica.into()),
    ))
}

/// A dashboard being served; dropping it stops it.
#[derive(Debug)]
pub struct Dashboard {
    addr: SocketAddr,
    stop: CancellationToken,
}

impl Dashboard {
    /// Where it listens (the port chosen when the configured one was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its address as a URL, `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// How often the dashboard reads every queue's message counter for its throughput column.
pub const THROUGHPUT_SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// Starts serving the dashboard for the database behind `db` at `config.listen`, in the
/// background. Fails when the address cannot be bound or (with `config.metrics`) when another
/// metrics recorder is installed in the process.
pub async fn serve(config: DashboardConfig, db: impl Into<Db>) -> std::io::Result<Dashboard> {
    serve_reading(config, db.into(), None).await
}

/// [`serve`], with the pages, the throughput readings and (with `config.metrics`) the
/// Prometheus scrape reading from `replica`, a streaming replica of the database behind `db`:
/// they put no load on the primary. Cancel, retry, signals, pauses and a run page's live
/// updates still use `db`. Every page says how far behind the replica is.
pub async fn serve_with_replica(
    config: DashboardConfig,
    db: impl Into<Db>,
    replica: impl Into<Db>,
) -> std::io::Result<Dashboard> {
    serve_reading(config, db.into(), Some(replica.into())).await
}

async fn serve_reading(
    config: DashboardConfig,
    db: Db,
    replica: Option<Db>,
) -> std::io::Result<Dashboard> {
    let reads = replica.clone().unwrap_or_else(|| db.clone());
    let stop = CancellationToken::new();
    let state = state::AppState::new(config.clone(), db, replica);
    throughput::spawn_sampler(
        reads.clone(),
        state.throughput.clone(),
        THROUGHPUT_SAMPLE_EVERY,
        stop.clone(),
    );
    let mut routes = app::routes(state);
    if config.metrics {
        routes = routes.merge(pgflow_runtime::metrics::prometheus_router(reads)?);
    }
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "the dashboard listens beyond loopback: anyone who reaches this address sees runs, \
             workers and (unless --hide-payloads) payload previews"
        );
    }
    let stopped = stop.clone();
    tokio::spawn(async move {
        let served = axum::serve(listener, routes)
            .with_graceful_shutdown(async move { stopped.cancelled().await })
            .await;
        if let Err(error) = served {
            tracing::error!(%error, "the dashboard stopped");
        }
    });
    tracing::info!(
        %addr,
        read_only = !config.actions_enabled(),
        hide_payloads = config.hide_payloads,
        "serving the pgflow dashboard"
    );
    Ok(Dashboard { addr, stop })
}
