//! The Prometheus scrape endpoint (feature `prometheus`): installs the
//! `metrics-exporter-prometheus` recorder for the process (once) and serves its text format at
//! `GET /metrics` over axum, reading the database gauges before each scrape.

use std::net::SocketAddr;
use std::sync::OnceLock;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;

use crate::db::Db;

/// The process's recorder: the first call installs it (unless the application installed
/// another recorder first, which is an error naming that).
fn handle() -> Result<PrometheusHandle, std::io::Error> {
    static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets(&[
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0,
                ])
                .map_err(|e| e.to_string())?
                .install_recorder()
                .map_err(|e| {
                    format!(
                        "cannot install the Prometheus recorder ({e}); another metrics \
                         recorder is installed in this process: serve that one instead"
                    )
                })?;
            Ok(handle)
        })
        .clone()
        .map_err(std::io::Error::other)
}

/// A running scrape endpoint; dropping it stops it.
#[derive(Debug)]
pub struct PrometheusServer {
    addr: SocketAddr,
    stop: CancellationToken,
}

impl PrometheusServer {
    /// Where it listens (the port chosen when the address gave port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[derive(Clone)]
struct Scrape {
    handle: PrometheusHandle,
    db: Db,
}

/// Serves the process's metrics at `http://<addr>/metrics` in Prometheus's text format,
/// installing the recorder on first use. Each scrape first reads the database gauges on `db`
/// (see [`record_database_gauges`](super::record_database_gauges)); when that read fails the
/// scrape still answers, without fresh gauges, and the failure is logged. One endpoint per
/// process serves every worker and client in it.
pub async fn serve_prometheus(
    addr: SocketAddr,
    db: impl Into<Db>,
) -> Result<PrometheusServer, std::io::Error> {
    let app = prometheus_router(db)?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stopped.cancelled().await })
            .await;
        if let Err(error) = served {
            tracing::error!(%error, "the Prometheus endpoint stopped");
        }
    });
    tracing::info!(%addr, "serving Prometheus metrics at /metrics");
    Ok(PrometheusServer { addr, stop })
}

/// The scrape endpoint as an axum router (`GET /metrics`), for a server of the application's own
/// (the dashboard merges it into its routes); installs the recorder on first use, as
/// [`serve_prometheus`] does.
pub fn prometheus_router(db: impl Into<Db>) -> Result<Router, std::io::Error> {
    let state = Scrape {
        handle: handle()?,
        db: db.into(),
    };
    Ok(Router::new()
        .route("/metrics", get(scrape))
        .with_state(state))
}

async fn scrape(State(state): State<Scrape>) -> impl IntoResponse {
    if let Err(error) = super::record_database_gauges(&state.db).await {
        tracing::warn!(%error, "reading the database gauges for a scrape failed");
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.handle.render(),
    )
}
