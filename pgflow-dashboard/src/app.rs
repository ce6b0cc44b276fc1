//! The dashboard's routes and the state every handler shares.

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use pgflow_runtime::{Client, Db};

use crate::config::DashboardConfig;
use crate::throughput::Throughput;
use crate::{live, pages};

/// What every handler reads.
#[derive(Clone)]
pub struct AppState {
    /// Reads and run control, with one shared listener for run events.
    pub client: Client,
    /// The operator's choices.
    pub config: Arc<DashboardConfig>,
    /// Recent readings of the queues' message counters.
    pub throughput: Arc<Throughput>,
}

impl AppState {
    /// State for a dashboard of the database behind `db`.
    pub fn new(config: DashboardConfig, db: Db) -> Self {
        Self {
            client: Client::new(db),
            config: Arc::new(config),
            throughput: Arc::new(Throughput::default()),
        }
    }

    /// The database.
    pub fn db(&self) -> &Db {
        self.client.db()
    }
}

/// The routes, with their state.
pub(crate) fn routes(state: AppState) -> Router {
    let mut routes = Router::new()
        .route("/", get(pages::overview::page))
        .route("/runs", get(pages::runs::page))
        .route("/runs/{run_id}", get(pages::run::page))
        .route("/runs/{run_id}/body", get(pages::run::body))
        .route("/runs/{run_id}/events", get(live::run_events))
        .route("/flows/{flow_slug}", get(pages::flow::page))
        .route("/assets/app.css", get(stylesheet))
        .route("/assets/app.js", get(script));
    routes = if state.config.actions_enabled() {
        routes
            .route(
                "/runs/{run_id}/cancel",
                get(pages::actions::confirm_cancel).post(pages::actions::cancel),
            )
            .route(
                "/runs/{run_id}/retry",
                get(pages::actions::confirm_retry).post(pages::actions::retry),
            )
    } else {
        routes
            .route(
                "/runs/{run_id}/cancel",
                get(pages::actions::read_only).post(pages::actions::read_only),
            )
            .route(
                "/runs/{run_id}/retry",
                get(pages::actions::read_only).post(pages::actions::read_only),
            )
    };
    routes
        .fallback(pages::not_found)
        .layer(axum::middleware::map_response(security_headers))
        .with_state(state)
}

/// Headers every answer carries: only this origin's scripts and styles (the DAG's SVG brings
/// an inline style element), no framing, no MIME sniffing, no referrer leaving the dashboard (`same-origin`: with `no-referrer` a
/// browser sends `Origin: null` on the action forms, which the cross-site check refuses).
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
             frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

async fn stylesheet() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../assets/app.css"),
    )
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../assets/app.js"),
    )
}
