//! Leases on live run events (`functions/16_events.sql`): the triggers notify a flow's channel
//! only while someone holds a live lease on it.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::error::EngineError;

/// Takes or renews `subscriber`'s lease on the events of each of `flow_slugs` for `seconds`
/// (10 to 3600); returns when it runs out.
pub async fn subscribe_events(
    executor: impl PgExecutor<'_>,
    subscriber: Uuid,
    flow_slugs: &[String],
    seconds: i32,
) -> Result<DateTime<Utc>, EngineError> {
    let expires_at = sqlx::query_scalar("select pgflow.subscribe_events($1, $2, $3)")
        .bind(subscriber)
        .bind(flow_slugs)
        .bind(seconds)
        .fetch_one(executor)
        .await?;
    Ok(expires_at)
}

/// Gives up every lease of `subscriber`.
pub async fn unsubscribe_events(
    executor: impl PgExecutor<'_>,
    subscriber: Uuid,
) -> Result<(), EngineError> {
    sqlx::query("select pgflow.unsubscribe_events($1)")
        .bind(subscriber)
        .execute(executor)
        .await?;
    Ok(())
}
