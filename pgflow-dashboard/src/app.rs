//! The dashboard's router: the routes of each page module, the assets and the headers every
//! answer carries.

use crate::state::AppState;
use crate::{live, pages};
use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The routes, with their state: each page module brings its own; the callback links (which
/// carry their own credential) unless the dashboard is read-only.
pub(crate) fn routes(state: AppState) -> Router {
    let actions_enabled = state.config.actions_enabled();
    let callbacks = if actions_enabled {
        crate::callbacks::callback_router(state.db().clone())
    } else {
        Router::new()
    };
    Router::new()
        .merge(pages::overview::routes())
        .merge(pages::runs::routes())
        .merge(pages::run::routes())
        .merge(pages::flow::routes())
        .merge(pages::actions::routes(actions_enabled))
        .merge(pages::pauses::routes(actions_enabled))
        .merge(live::routes())
        .route("/assets/app.css", get(stylesheet))
        .route("/assets/app.js", get(script))
        .fallback(pages::not_found)
        .layer(axum::middleware::map_response(security_headers))
        .with_state(state)
        .merge(callbacks)
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
