//! What a page answers when it cannot show what was asked.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::html;
use pgflow_runtime::EngineError;

use crate::security::Refusal;

/// Why a page or an action failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PageError {
    /// Reading or changing the database failed.
    #[error(transparent)]
    Engine(EngineError),
    /// The run, flow or page does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A filter or form field is not valid.
    #[error("{0}")]
    BadRequest(String),
    /// The engine refused the action in the state the run is in (a signal it does not wait
    /// for, or one it already received).
    #[error("{0}")]
    Conflict(String),
    /// An action was refused.
    #[error(transparent)]
    Refused(#[from] Refusal),
}

impl From<EngineError> for PageError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::UnknownRun { run_id } => Self::NotFound(format!("no run {run_id}")),
            EngineError::UnknownFlow { flow_slug } => {
                Self::NotFound(format!("no flow or alias named `{flow_slug}`"))
            }
            EngineError::SignalRefused(refused) => Self::Conflict(refused.message),
            other => Self::Engine(other),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let status = match &self {
            Self::Engine(error) => {
                tracing::error!(%error, "a dashboard page failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Refused(_) => StatusCode::FORBIDDEN,
        };
        let title = status.canonical_reason().unwrap_or("Error");
        let body = html! {
            (maud::DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    title { (title) " · pgflow" }
                    link rel="stylesheet" href="/assets/app.css";
                }
                body {
                    header.top { a.brand href="/" { "pgflow" } }
                    main {
                        h1 { (title) }
                        p.error-message role="alert" { (self.to_string()) }
                        p { a href="/" { "Back to the overview" } }
                    }
                }
            }
        };
        (status, Html(body.into_string())).into_response()
    }
}
