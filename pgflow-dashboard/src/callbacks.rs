//! Callback links: `POST /signals/{token}` sends the signal a callback token stands for (see
//! `pgflow::engine::signal_token`), with the request's JSON body as its payload (an empty body
//! is `null`). No login, cookie or action token: the token is the credential, so a payment
//! provider or an approval e-mail's link can complete a wait. Answers are JSON: 200 with the
//! outcome; 404 for no token of this install; 410 when the token was used, its run ended or
//! its step stopped waiting; 422 when the payload does not fit the signal's schema; 400 for a
//! body that is not JSON.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use pgflow_runtime::engine::{self, CallbackOutcome};
use pgflow_runtime::{Db, EngineError, SignalRefusal};
use serde_json::{Value, json};

/// The callback route alone, on `db`: for mounting in an application's own server (at its
/// root, or nested under a prefix of its choice).
pub fn callback_router(db: impl Into<Db>) -> Router {
    Router::new()
        .route("/signals/{token}", post(callback))
        .with_state(db.into())
}

/// `POST /signals/{token}`.
async fn callback(State(db): State<Db>, Path(token): Path<String>, body: Bytes) -> Response {
    let payload: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(payload) => payload,
            Err(error) => {
                return answer(
                    StatusCode::BAD_REQUEST,
                    &format!("the body is not JSON: {error}"),
                );
            }
        }
    };
    match engine::send_signal_by_token(&db, &token, &payload).await {
        Ok(outcome @ (CallbackOutcome::Delivered | CallbackOutcome::Kept)) => {
            tracing::info!(outcome = outcome.as_str(), "signal by callback link");
            json_answer(StatusCode::OK, &json!({ "outcome": outcome.as_str() }))
        }
        Ok(CallbackOutcome::AlreadyUsed) => answer(StatusCode::GONE, "this link was used already"),
        Ok(_) => answer(StatusCode::NOT_FOUND, "no such link"),
        Err(EngineError::SignalRefused(refused)) => match refused.reason {
            SignalRefusal::PayloadMisfit => {
                answer(StatusCode::UNPROCESSABLE_ENTITY, &refused.message)
            }
            _ => answer(StatusCode::GONE, &refused.message),
        },
        Err(EngineError::UnknownRun { .. }) => answer(StatusCode::GONE, "its run is gone"),
        Err(error) => {
            tracing::error!(%error, "a callback link failed");
            answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the signal could not be sent",
            )
        }
    }
}

fn answer(status: StatusCode, error: &str) -> Response {
    json_answer(status, &json!({ "error": error }))
}

/// A JSON answer (written by hand: the dashboard builds axum without its `json` feature).
fn json_answer(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
