//! Cancel, retry and sending a signal, each behind a confirmation form that asks for the action
//! token. The form carries a CSRF token matching its cookie; see [`crate::security`].

use axum::Form;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use maud::html;
use serde::Deserialize;
use uuid::Uuid;

use super::frame;
use crate::error::PageError;
use crate::security::{self, Refusal};
use crate::state::AppState;

/// What a confirmation form posts.
#[derive(Debug, Deserialize)]
pub(crate) struct ActionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    token: String,
    #[serde(default)]
    reason: String,
    /// A signal's payload, as JSON text (empty: `null`).
    #[serde(default)]
    payload: String,
}

impl ActionForm {
    /// Checks the form's CSRF token and action token (see [`security::check_action`]).
    pub(crate) fn check(&self, app: &AppState, headers: &HeaderMap) -> Result<(), Refusal> {
        security::check_action(&app.config.access, headers, &self.csrf, &self.token)
    }

    /// The reason typed in, if any.
    pub(crate) fn reason(&self) -> Option<&str> {
        Some(self.reason.trim()).filter(|r| !r.is_empty())
    }
}

#[derive(Clone, Copy)]
enum Action {
    Cancel,
    Retry,
}

impl Action {
    fn path(self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Retry => "retry",
        }
    }
}

/// Cancel, retry and sending a signal: a confirmation form and its POST, or, on a read-only
/// dashboard, the refusal for each.
pub(crate) fn routes(actions_enabled: bool) -> Router<AppState> {
    if actions_enabled {
        Router::new()
            .route("/runs/{run_id}/cancel", get(confirm_cancel).post(cancel))
            .route("/runs/{run_id}/retry", get(confirm_retry).post(retry))
            .route(
                "/runs/{run_id}/signal/{name}",
                get(confirm_signal).post(signal),
            )
    } else {
        Router::new()
            .route("/runs/{run_id}/cancel", get(read_only).post(read_only))
            .route("/runs/{run_id}/retry", get(read_only).post(read_only))
            .route(
                "/runs/{run_id}/signal/{name}",
                get(read_only).post(read_only),
            )
    }
}

/// `GET /runs/{id}/signal/{name}`: the payload to send, and the action token.
pub(crate) async fn confirm_signal(
    State(app): State<AppState>,
    Path((run_id, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let run_id = super::run_id_of(&run_id)?;
    let run = pgflow_runtime::engine::run(app.db(), run_id).await?;
    let (csrf, set_cookie) = security::csrf_for_form(&headers);
    let title = format!("Send signal {name}?");
    let content = html! {
        h1 { "Send signal " span.mono { (name) } "?" }
        p { "Run " a.mono href=(format!("/runs/{run_id}")) { (run_id) } " of "
            (run.flow_slug) " is " (super::badge(run.shown_status())) "." }
        p { "The step that waits for it runs with this payload (JSON; empty is null). A run \
             receives a signal once: this cannot be undone." }
        form.confirm method="post" action=(format!("/runs/{run_id}/signal/{name}")) {
            input type="hidden" name="csrf" value=(csrf);
            label { "Payload " textarea name="payload" rows="6" cols="60" spellcheck="false" {} }
            label { "Action token "
                input type="password" name="token" required autocomplete="current-password"; }
            button type="submit" { "Send the signal" }
            " " a href=(format!("/runs/{run_id}")) { "Back" }
        }
    };
    let mut response = Html(frame(&app, &title, content).into_string()).into_response();
    if let Some(cookie) = set_cookie {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

/// `POST /runs/{id}/signal/{name}`.
pub(crate) async fn signal(
    State(app): State<AppState>,
    Path((run_id, name)): Path<(Uuid, String)>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, PageError> {
    form.check(&app, &headers)?;
    let payload: serde_json::Value = match form.payload.trim() {
        "" => serde_json::Value::Null,
        text => serde_json::from_str(text)
            .map_err(|e| PageError::BadRequest(format!("the payload is not valid JSON: {e}")))?,
    };
    let outcome = app.client.signal(run_id, &name, &payload).await?;
    tracing::info!(%run_id, signal = name.as_str(), outcome = outcome.as_str(), "signal from the dashboard");
    Ok(Redirect::to(&format!("/runs/{run_id}")).into_response())
}

/// `GET /runs/{id}/cancel`.
pub(crate) async fn confirm_cancel(
    State(app): State<AppState>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    confirm(&app, super::run_id_of(&run_id)?, &headers, Action::Cancel).await
}

/// `GET /runs/{id}/retry`.
pub(crate) async fn confirm_retry(
    State(app): State<AppState>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    confirm(&app, super::run_id_of(&run_id)?, &headers, Action::Retry).await
}

async fn confirm(
    app: &AppState,
    run_id: Uuid,
    headers: &HeaderMap,
    action: Action,
) -> Result<Response, PageError> {
    let run = pgflow_runtime::engine::run(app.db(), run_id).await?;
    let (csrf, set_cookie) = security::csrf_for_form(headers);
    let (title, explain, button) = match action {
        Action::Cancel => (
            "Cancel this run?",
            "No step of it starts any more, its queued tasks never reach a handler and a \
             running handler's result is discarded. This cannot be undone (a cancelled run can \
             be resumed as a new run from the command line).",
            "Cancel the run",
        ),
        Action::Retry => (
            "Retry this run?",
            "Its failed steps, and only they, run again with a fresh budget of attempts; \
             completed steps keep their outputs.",
            "Retry the run",
        ),
    };
    let content = html! {
        h1 { (title) }
        p { "Run " a.mono href=(format!("/runs/{run_id}")) { (run_id) } " of "
            (run.flow_slug) " is " (super::badge(run.shown_status())) "." }
        p { (explain) }
        form.confirm method="post" action=(format!("/runs/{run_id}/{}", action.path())) {
            input type="hidden" name="csrf" value=(csrf);
            @if matches!(action, Action::Cancel) {
                label { "Reason (optional) " input type="text" name="reason" maxlength="500"; }
            }
            label { "Action token "
                input type="password" name="token" required autocomplete="current-password"; }
            button.danger type="submit" { (button) }
            " " a href=(format!("/runs/{run_id}")) { "Back" }
        }
    };
    let mut response = Html(frame(app, title, content).into_string()).into_response();
    if let Some(cookie) = set_cookie {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

/// `POST /runs/{id}/cancel`.
pub(crate) async fn cancel(
    State(app): State<AppState>,
    Path(run_id): Path<Uuid>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, PageError> {
    form.check(&app, &headers)?;
    let outcome = app.client.cancel(run_id, form.reason()).await?;
    tracing::info!(%run_id, cancelled = outcome.cancelled, "cancel from the dashboard");
    Ok(Redirect::to(&format!("/runs/{run_id}")).into_response())
}

/// `POST /runs/{id}/retry`.
pub(crate) async fn retry(
    State(app): State<AppState>,
    Path(run_id): Path<Uuid>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, PageError> {
    form.check(&app, &headers)?;
    let outcome = app.client.retry(run_id).await?;
    tracing::info!(%run_id, retried = outcome.retried, "retry from the dashboard");
    Ok(Redirect::to(&format!("/runs/{run_id}")).into_response())
}

/// Any action on a read-only dashboard.
pub(crate) async fn read_only() -> PageError {
    PageError::Refused(Refusal::ReadOnly)
}
