//! Pausing and resuming a queue or a flow from the overview, each behind a confirmation form
//! that asks for the action token (the same checks as cancel and retry; see
//! [`crate::security`]).

use axum::Form;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use maud::html;
use pgflow_runtime::engine;

use super::actions::{ActionForm, read_only};
use super::frame;
use crate::error::PageError;
use crate::security;
use crate::state::AppState;

/// What is paused or resumed.
#[derive(Clone, Copy)]
enum Target {
    Queue,
    Flow,
}

impl Target {
    fn path(self) -> &'static str {
        match self {
            Self::Queue => "queues",
            Self::Flow => "flows",
        }
    }
}

/// The pause and resume forms and their POSTs, or, on a read-only dashboard, the refusal for
/// each.
pub(crate) fn routes(actions_enabled: bool) -> Router<AppState> {
    if actions_enabled {
        Router::new()
            .route(
                "/queues/{name}/pause",
                get(confirm_queue_pause).post(queue_pause),
            )
            .route(
                "/queues/{name}/resume",
                get(confirm_queue_resume).post(queue_resume),
            )
            .route(
                "/flows/{name}/pause",
                get(confirm_flow_pause).post(flow_pause),
            )
            .route(
                "/flows/{name}/resume",
                get(confirm_flow_resume).post(flow_resume),
            )
    } else {
        Router::new()
            .route("/queues/{name}/pause", get(read_only).post(read_only))
            .route("/queues/{name}/resume", get(read_only).post(read_only))
            .route("/flows/{name}/pause", get(read_only).post(read_only))
            .route("/flows/{name}/resume", get(read_only).post(read_only))
    }
}

/// `GET /queues/{name}/pause`.
async fn confirm_queue_pause(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    confirm(&app, Target::Queue, &name, true, &headers)
}

/// `GET /queues/{name}/resume`.
async fn confirm_queue_resume(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    confirm(&app, Target::Queue, &name, false, &headers)
}

/// `GET /flows/{name}/pause`.
async fn confirm_flow_pause(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    confirm(&app, Target::Flow, &name, true, &headers)
}

/// `GET /flows/{name}/resume`.
async fn confirm_flow_resume(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    confirm(&app, Target::Flow, &name, false, &headers)
}

fn confirm(
    app: &AppState,
    target: Target,
    name: &str,
    pause: bool,
    headers: &HeaderMap,
) -> Response {
    let (csrf, set_cookie) = security::csrf_for_form(headers);
    let what = match target {
        Target::Queue => format!("queue {name}"),
        Target::Flow => format!("flow {name}"),
    };
    let (title, explain) = match (target, pause) {
        (Target::Queue, true) => (
            format!("Pause {what}?"),
            "No worker claims from it until it is resumed. Runs keep starting and tasks keep \
             queueing on it; tasks already running finish.",
        ),
        (Target::Flow, true) => (
            format!("Pause {what}?"),
            "No worker runs a task of it until it is resumed: a worker that meets one parks \
             it. Runs keep starting, other flows on its queues run on, and tasks already \
             running finish.",
        ),
        (_, false) => (
            format!("Resume {what}?"),
            "Workers claim its tasks again, starting with those that waited.",
        ),
    };
    let verb = if pause { "pause" } else { "resume" };
    let action = format!("/{}/{name}/{verb}", target.path());
    let content = html! {
        h1 { (title) }
        p { (explain) }
        form.confirm method="post" action=(action) {
            input type="hidden" name="csrf" value=(csrf);
            @if pause {
                label { "Reason (optional) " input type="text" name="reason" maxlength="500"; }
            }
            label { "Action token "
                input type="password" name="token" required autocomplete="current-password"; }
            button.danger type="submit" { @if pause { "Pause" } @else { "Resume" } }
            " " a href="/" { "Back" }
        }
    };
    let mut response = Html(frame(app, &title, content).into_string()).into_response();
    if let Some(cookie) = set_cookie {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// `POST /queues/{name}/pause`.
async fn queue_pause(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, PageError> {
    act(&app, &headers, &form, Target::Queue, &name, true).await
}

/// `POST /queues/{name}/resume`.
async fn queue_resume(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, PageError> {
    act(&app, &headers, &form, Target::Queue, &name, false).await
}

/// `POST /flows/{name}/pause`.
async fn flow_pause(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, PageError> {
    act(&app, &headers, &form, Target::Flow, &name, true).await
}

/// `POST /flows/{name}/resume`.
async fn flow_resume(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, PageError> {
    act(&app, &headers, &form, Target::Flow, &name, false).await
}

/// Checks the form, then pauses or resumes `name`, and goes back to the overview.
async fn act(
    app: &AppState,
    headers: &HeaderMap,
    form: &ActionForm,
    target: Target,
    name: &str,
    pause: bool,
) -> Result<Response, PageError> {
    form.check(app, headers)?;
    let db = app.db();
    let changed = match (target, pause) {
        (Target::Queue, true) => engine::pause_queue(db, name, form.reason()).await?,
        (Target::Queue, false) => engine::resume_queue(db, name).await?,
        (Target::Flow, true) => engine::pause_flow(db, name, form.reason()).await?,
        (Target::Flow, false) => engine::resume_flow(db, name).await?,
    };
    tracing::info!(
        target = target.path(),
        name,
        pause,
        changed,
        "pause or resume from the dashboard"
    );
    Ok(Redirect::to("/").into_response())
}
