//! A run's events as a server-sent event stream (`GET /runs/{id}/events`): `change` for every
//! run or step transition, then `end` with the final one. The run page's script redraws the run
//! on each; the payloads are pgflow's run events (ids and statuses only).

use std::convert::Infallible;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use futures_util::Stream;
use futures_util::stream;
use pgflow_runtime::events::RunEvents;
use uuid::Uuid;

use crate::error::PageError;
use crate::state::AppState;

/// A run's live events.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/runs/{run_id}/events", get(run_events))
}

/// The stream of one run's events, from its current state to its end.
pub(crate) async fn run_events(
    State(app): State<AppState>,
    Path(run_id): Path<Uuid>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, PageError> {
    let events = app.client.run_events(run_id).await?;
    let stream = stream::unfold(Some(events), move |events: Option<RunEvents>| async move {
        let mut events = events?;
        match events.next().await? {
            Ok(event) => {
                let ends = event.ends_run();
                let data = serde_json::to_string(&event).unwrap_or_default();
                let sse = Event::default()
                    .event(if ends { "end" } else { "change" })
                    .data(data);
                Some((Ok(sse), (!ends).then_some(events)))
            }
            Err(error) => {
                tracing::warn!(%run_id, %error, "following a run's events failed");
                // The browser reconnects and the new stream starts from the run's state.
                None
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
