//! Signals: a step that waits for a named signal runs once its run receives it. Sending one is
//! a call that can be part of the caller's own transaction; timed-out waits are ended by the
//! process's timer loop.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::error::EngineError;

/// What sending a signal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum SignalOutcome {
    /// The step was waiting for it and starts now.
    Delivered,
    /// The run has not reached the step yet: the signal is kept, and the step starts without
    /// waiting once its dependencies are done.
    Kept,
    /// The run had already received this signal with an equal payload: nothing changed (a
    /// sender may repeat a send it is unsure of).
    Duplicate,
}

impl SignalOutcome {
    /// The SQL core's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Kept => "kept",
            Self::Duplicate => "duplicate",
        }
    }

    fn from_sql(word: &str) -> Result<Self, EngineError> {
        match word {
            "delivered" => Ok(Self::Delivered),
            "kept" => Ok(Self::Kept),
            "duplicate" => Ok(Self::Duplicate),
            other => Err(EngineError::InvalidArguments(format!(
                "send_signal answered `{other}`, which this release does not know; upgrade pgflow"
            ))),
        }
    }
}

/// Sends signal `name` with `payload` to run `run_id` (`pgflow.send_signal`). Through a
/// transaction, the signal is sent when it commits and never when it rolls back.
///
/// Refused, changing nothing: [`EngineError::UnknownRun`], or
/// [`EngineError::SignalRefused`] saying why (no step waits for this name, the run already
/// received it with another payload, the run ended, the step stopped waiting, or the payload
/// does not fit the signal's schema).
pub async fn send_signal<T: Serialize + ?Sized>(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
    name: &str,
    payload: &T,
) -> Result<SignalOutcome, EngineError> {
    let payload = serde_json::to_value(payload).map_err(|source| EngineError::Encode {
        what: "signal payload",
        source,
    })?;
    send_signal_value(executor, run_id, name, &payload).await
}

/// [`send_signal`] with a payload already in JSON.
pub async fn send_signal_value(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
    name: &str,
    payload: &Value,
) -> Result<SignalOutcome, EngineError> {
    let word: String = sqlx::query_scalar("select pgflow.send_signal($1, $2, $3)")
        .bind(run_id)
        .bind(name)
        .bind(payload)
        .fetch_one(executor)
        .await?;
    SignalOutcome::from_sql(&word)
}

/// The payload of the signal step `step_slug` of run `run_id` waited for
/// (`pgflow.signal_payload`); `None` when the run has not received it.
pub async fn signal_payload(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
    step_slug: &str,
) -> Result<Option<Value>, EngineError> {
    let payload = sqlx::query_scalar("select pgflow.signal_payload($1, $2)")
        .bind(run_id)
        .bind(step_slug)
        .fetch_one(executor)
        .await?;
    Ok(payload)
}

/// What one pass of [`expire_waits`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpiredWaits {
    /// How many waits it ended.
    pub expired: u32,
    /// The soonest deadline still ahead, if any wait has one.
    pub next_deadline: Option<DateTime<Utc>>,
}

/// Ends the waits whose deadline passed, at most `limit` (`pgflow.expire_waits`), each as its
/// step's `when_timed_out` says.
pub async fn expire_waits(
    executor: impl PgExecutor<'_>,
    limit: i32,
) -> Result<ExpiredWaits, EngineError> {
    let (expired, next_deadline): (i32, Option<DateTime<Utc>>) =
        sqlx::query_as("select expired, next_deadline from pgflow.expire_waits($1)")
            .bind(limit)
            .fetch_one(executor)
            .await?;
    Ok(ExpiredWaits {
        expired: u32::try_from(expired).unwrap_or(0),
        next_deadline,
    })
}

/// A run an event reached (see [`emit_events`]).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct EventDelivery {
    /// The run.
    pub run_id: Uuid,
    /// Its step that waited, and starts now.
    pub step_slug: String,
    /// The key it waited by.
    pub event_key: String,
}

/// An event's key as the SQL core compares it: a JSON string's text, or any other value's JSON
/// text (`42` for the number 42), as `#>>` reads the key of a waiting run.
pub fn event_key<K: Serialize + ?Sized>(key: &K) -> Result<String, EngineError> {
    let value = serde_json::to_value(key).map_err(|source| EngineError::Encode {
        what: "event key",
        source,
    })?;
    Ok(match value {
        Value::String(text) => text,
        other => other.to_string(),
    })
}

/// Delivers event `name` with `payload` to every run waiting for it by `key`
/// (`pgflow.emit_event`), in one statement; through a transaction, when it commits. Returns the
/// runs it reached (none is no error). Only runs waiting now are reached: an event is not kept
/// for runs that reach their wait later.
///
/// [`EngineError::SignalRefused`] (payload misfit) when the payload does not fit the schema of
/// a step it would reach; nothing is delivered then.
pub async fn emit_event<P: Serialize + ?Sized>(
    executor: impl PgExecutor<'_>,
    name: &str,
    key: &str,
    payload: &P,
) -> Result<Vec<EventDelivery>, EngineError> {
    let payload = serde_json::to_value(payload).map_err(|source| EngineError::Encode {
        what: "event payload",
        source,
    })?;
    emit_events(executor, name, &[(key.to_owned(), payload)]).await
}

/// [`emit_event`] for many keys at once (`pgflow.emit_events`), each with its payload; a key
/// given twice delivers its last payload.
pub async fn emit_events(
    executor: impl PgExecutor<'_>,
    name: &str,
    events: &[(String, Value)],
) -> Result<Vec<EventDelivery>, EngineError> {
    let (keys, payloads): (Vec<&str>, Vec<&Value>) = events
        .iter()
        .map(|(key, payload)| (key.as_str(), payload))
        .unzip();
    let delivered = sqlx::query_as::<_, EventDelivery>(
        "select run_id, step_slug, event_key from pgflow.emit_events($1, $2, $3)",
    )
    .bind(name)
    .bind(keys)
    .bind(payloads)
    .fetch_all(executor)
    .await?;
    Ok(delivered)
}

/// The callback token of signal `name` of run `run_id` (`pgflow.signal_token`): whoever holds
/// it may send that signal to that run once, with no credentials of their own
/// ([`send_signal_by_token`], the dashboard's `POST /signals/{token}`). Unguessable: it
/// carries a MAC under a secret that never leaves the database.
///
/// [`EngineError::UnknownRun`], or [`EngineError::SignalRefused`] (unknown signal) for a name
/// no step of the run's flow waits for.
pub async fn signal_token(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
    name: &str,
) -> Result<String, EngineError> {
    let token = sqlx::query_scalar("select pgflow.signal_token($1, $2)")
        .bind(run_id)
        .bind(name)
        .fetch_one(executor)
        .await?;
    Ok(token)
}

/// What sending a signal by its callback token did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallbackOutcome {
    /// The step was waiting for it and starts now.
    Delivered,
    /// The run has not reached the step yet: the signal is kept for it.
    Kept,
    /// The token was used before (the run received this signal with this payload): nothing
    /// changed.
    AlreadyUsed,
    /// No token of this install: malformed, or forged.
    Unknown,
}

impl CallbackOutcome {
    /// Its name, as an answer says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Kept => "kept",
            Self::AlreadyUsed => "already_used",
            Self::Unknown => "unknown",
        }
    }
}

/// Sends the signal the callback token `token` stands for, with `payload`
/// (`pgflow.send_signal_by_token`). Refusals as [`send_signal`]'s: the run ended, the step
/// stopped waiting (its wait timed out), or the payload does not fit.
pub async fn send_signal_by_token(
    executor: impl PgExecutor<'_>,
    token: &str,
    payload: &Value,
) -> Result<CallbackOutcome, EngineError> {
    let word: String = sqlx::query_scalar("select pgflow.send_signal_by_token($1, $2)")
        .bind(token)
        .bind(payload)
        .fetch_one(executor)
        .await?;
    match word.as_str() {
        "delivered" => Ok(CallbackOutcome::Delivered),
        "kept" => Ok(CallbackOutcome::Kept),
        "used" => Ok(CallbackOutcome::AlreadyUsed),
        "unknown" => Ok(CallbackOutcome::Unknown),
        other => Err(EngineError::InvalidArguments(format!(
            "send_signal_by_token answered `{other}`, which this release does not know; \
             upgrade pgflow"
        ))),
    }
}
