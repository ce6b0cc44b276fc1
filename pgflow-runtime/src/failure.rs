//! Why a step attempt failed, and the decoding and encoding of handler values that name the
//! step and parameter in their failures but never the values themselves.

use std::any::Any;
use std::fmt::Display;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::step_error::StepError;

/// Why a step attempt failed. Its text is stored as the task's error; it names the step and
/// the parameter but never contains input or output values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StepFailure {
    /// The handler returned an error (its `Display` text); the attempt is retried while the
    /// step has attempts left.
    #[error("{0}")]
    Handler(String),

    /// The handler returned [`StepError::permanent`](crate::StepError::permanent): the task
    /// fails at once, whatever attempts remain.
    #[error("{0}")]
    Permanent(String),

    /// The handler returned [`StepError::snooze`](crate::StepError::snooze): the task runs
    /// again after the delay, and the attempt is not spent.
    #[error("{reason}")]
    Snoozed {
        /// How long the task waits, in whole seconds.
        seconds: u32,
        /// Why, as the handler said.
        reason: String,
    },

    /// The task input could not be decoded into a handler parameter. Decoding the same input
    /// again gives the same answer, so the task fails at once, like [`StepFailure::Permanent`].
    #[error(
        "step `{step_slug}`: cannot decode parameter `{parameter}` as `{type_name}`{}: {reason}",
        if path.is_empty() { String::new() } else { format!(" at `{path}`") }
    )]
    Decode {
        /// The step.
        step_slug: String,
        /// The parameter (or `input` for the flow input).
        parameter: String,
        /// The Rust type expected.
        type_name: &'static str,
        /// Where in the value decoding failed (`thread.subject`, `items[2]`); empty at the top.
        path: String,
        /// What did not fit, without the offending value.
        reason: String,
    },

    /// The task input lacks a dependency's output.
    #[error("step `{step_slug}`: the task input has no output of dependency `{dependency}`")]
    MissingDependency {
        /// The step.
        step_slug: String,
        /// The dependency.
        dependency: String,
    },

    /// The worker carries no application state of the type the handler takes.
    #[error(
        "step `{step_slug}`: the worker carries no application state of type `{type_name}`; pass it to the flow's `deployment(state)`"
    )]
    StateType {
        /// The step.
        step_slug: String,
        /// The Rust type the handler takes.
        type_name: &'static str,
    },

    /// The handler's output could not be encoded as JSON.
    #[error("step `{step_slug}`: cannot encode the output of type `{type_name}` as JSON")]
    Encode {
        /// The step.
        step_slug: String,
        /// The Rust type of the output.
        type_name: &'static str,
    },

    /// The flow input could not be read from the database.
    #[error("step `{step_slug}`: cannot read the flow input: {reason}")]
    FlowInput {
        /// The step.
        step_slug: String,
        /// The database error.
        reason: String,
    },

    /// The payload of the signal the step waited for could not be read from the database (or
    /// the run has none: a task of a signal step started by hand).
    #[error("step `{step_slug}`: cannot read the payload of signal `{signal}`: {reason}")]
    Signal {
        /// The step.
        step_slug: String,
        /// The signal.
        signal: String,
        /// Why.
        reason: String,
    },

    /// The handler ran past the step's timeout.
    #[error("step `{step_slug}` timed out after {seconds} s")]
    TimedOut {
        /// The step.
        step_slug: String,
        /// The step's timeout.
        seconds: u64,
    },

    /// The handler panicked.
    #[error("step `{step_slug}` panicked: {message}")]
    Panicked {
        /// The step.
        step_slug: String,
        /// The panic message, when it is a string.
        message: String,
    },

    /// The worker has no handler for the task's flow or step.
    #[error("no handler for step `{step_slug}` of flow `{flow_slug}` in this worker")]
    NoHandler {
        /// The flow.
        flow_slug: String,
        /// The step.
        step_slug: String,
    },
}

impl StepFailure {
    /// The failure a handler's error stands for: [`StepFailure::Permanent`] for a permanent
    /// [`StepError`], else [`StepFailure::Handler`] with the error's text.
    pub fn of_handler<E: Display + 'static>(error: E) -> Self {
        match (&error as &dyn Any).downcast_ref::<StepError>() {
            Some(step_error) if step_error.snoozed_for().is_some() => Self::Snoozed {
                seconds: step_error
                    .snoozed_for()
                    .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX)),
                reason: step_error.message().to_owned(),
            },
            Some(step_error) if step_error.is_permanent() => {
                Self::Permanent(step_error.message().to_owned())
            }
            _ => Self::Handler(error.to_string()),
        }
    }

    /// Whether the task fails now instead of using its remaining attempts: a permanent
    /// handler error, or an input that cannot decode (it would not decode the next time
    /// either).
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Permanent(_) | Self::Decode { .. })
    }

    /// For a snooze: how many seconds the task waits before it runs again.
    pub fn snooze_seconds(&self) -> Option<u32> {
        match self {
            Self::Snoozed { seconds, .. } => Some(*seconds),
            _ => None,
        }
    }
}

/// Decodes `value` as `T`, describing a failure without the value itself.
pub(crate) fn decode<T: DeserializeOwned>(
    step_slug: &str,
    parameter: &str,
    value: Value,
) -> Result<T, StepFailure> {
    serde_path_to_error::deserialize(value).map_err(|error| StepFailure::Decode {
        step_slug: step_slug.to_owned(),
        parameter: parameter.to_owned(),
        type_name: std::any::type_name::<T>(),
        path: rust_path(error.path()),
        reason: redacted_reason(error.inner()),
    })
}

/// A decoding error's place as a Rust path (`thread.subject`, `items[2]`), empty at the top.
fn rust_path(path: &serde_path_to_error::Path) -> String {
    let mut text = String::new();
    for segment in path.iter() {
        match segment {
            serde_path_to_error::Segment::Seq { index } => text.push_str(&format!("[{index}]")),
            serde_path_to_error::Segment::Map { key } => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(key);
            }
            serde_path_to_error::Segment::Enum { variant } => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(variant);
            }
            serde_path_to_error::Segment::Unknown => {}
        }
    }
    text
}

/// serde's description of a decoding error with any quoted input value left out:
/// `invalid type: string "secret", expected u32` becomes `found string, expected u32`.
fn redacted_reason(error: &serde_json::Error) -> String {
    let message = error.to_string();
    let expected = message.rsplit_once(", expected ").map(|(_, e)| e);
    if let Some(found) = message.strip_prefix("invalid type: ") {
        let kind = found.split([' ', ',']).next().unwrap_or("value");
        return match expected {
            Some(e) => format!("found {kind}, expected {e}"),
            None => format!("found {kind}"),
        };
    }
    if message.starts_with("invalid value: ") || message.starts_with("invalid length ") {
        let what = message.split(':').next().unwrap_or("invalid value");
        return match expected {
            Some(e) => format!("{what}, expected {e}"),
            None => what.to_owned(),
        };
    }
    message
}

/// Encodes a handler's output.
pub(crate) fn encode<T: Serialize>(step_slug: &str, output: &T) -> Result<Value, StepFailure> {
    serde_json::to_value(output).map_err(|_| StepFailure::Encode {
        step_slug: step_slug.to_owned(),
        type_name: std::any::type_name::<T>(),
    })
}

/// The longest error text stored on a task or step, in characters, marker included (the SQL
/// core cuts longer texts from SQL callers the same way).
pub const STORED_ERROR_CHARS: usize = 8192;

/// The longest error text a worker writes into one log line, in characters, marker included.
pub const LOGGED_ERROR_CHARS: usize = 1024;

/// `text` cut to at most `max_chars` characters, with a marker saying that and how long the
/// whole text was: `… [truncated, 1048576 bytes]`. Shorter texts are returned as they are.
pub fn bounded(text: &str, max_chars: usize) -> std::borrow::Cow<'_, str> {
    if text.chars().count() <= max_chars {
        return std::borrow::Cow::Borrowed(text);
    }
    let marker = format!("… [truncated, {} bytes]", text.len());
    let keep = max_chars.saturating_sub(marker.chars().count());
    let cut = text
        .char_indices()
        .nth(keep)
        .map_or(text.len(), |(at, _)| at);
    std::borrow::Cow::Owned(format!("{}{marker}", &text[..cut]))
}

/// [`bounded`] for an owned text: a text within the limit is returned without a copy.
pub fn bounded_owned(text: String, max_chars: usize) -> String {
    match bounded(&text, max_chars) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(cut) => cut,
    }
}

#[cfg(test)]
mod bounded_tests {
    use super::bounded;

    #[test]
    fn a_long_text_is_cut_with_a_marker_naming_its_length_and_a_short_one_is_kept() {
        let long = "é".repeat(600);
        let cut = bounded(&long, 100);
        assert_eq!(cut.chars().count(), 100);
        assert!(cut.ends_with("… [truncated, 1200 bytes]"), "{cut}");
        assert!(cut.starts_with("éé"));
        assert_eq!(bounded("short", 100), "short");
        assert_eq!(
            bounded(&"x".repeat(100), 100).len(),
            100,
            "exactly the limit is kept"
        );
    }
}
