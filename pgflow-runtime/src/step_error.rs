//! The error type a step handler can return when it wants to say whether a failed attempt is
//! worth retrying.

use std::fmt;

/// A failed step attempt, with whether it may be retried.
///
/// Any `E: Display` works as a handler's error type and is always retried while attempts
/// remain. Return `StepError` to decide per failure: [`StepError::permanent`] fails the task
/// at once, whatever attempts remain (a declined card, a malformed document: trying again
/// cannot help), and [`StepError::retry`] is an ordinary failed attempt. Any
/// `std::error::Error` converts into a retryable `StepError`, so `?` works in a handler that
/// returns `Result<T, StepError>`.
///
/// ```
/// use pgflow::StepError;
///
/// fn charge(card_declined: bool) -> Result<u32, StepError> {
///     if card_declined {
///         return Err(StepError::permanent("card declined; retrying will not help"));
///     }
///     let cents: u32 = "1250".parse()?; // a ParseIntError would be retried
///     Ok(cents)
/// }
///
/// assert!(charge(true).unwrap_err().is_permanent());
/// assert_eq!(charge(false).unwrap(), 1250);
/// ```
///
/// For a text of your own, write `StepError::retry("...")` (or `StepError::permanent`):
/// `Err("text".into())` and `Err("text")?` do not compile, since `StepError` cannot also convert
/// from `&str` or `String` (Rust's coherence rules: `std` could one day make them errors, and
/// the two conversions would then overlap). A handler that only ever fails with a text can
/// return `Result<T, String>` instead.
///
/// `StepError` does not implement `std::error::Error` itself: that would conflict with the
/// conversion from every error type that `?` relies on.
pub struct StepError {
    message: String,
    permanent: bool,
    snooze: Option<std::time::Duration>,
}

/// The longest snooze, in seconds (PGMQ's delay is a 32-bit number of seconds).
const LONGEST_SNOOZE_SECONDS: u64 = i32::MAX as u64;

impl StepError {
    /// A failed attempt that is retried while the step has attempts left.
    pub fn retry(message: impl fmt::Display) -> Self {
        Self {
            message: message.to_string(),
            permanent: false,
            snooze: None,
        }
    }

    /// A failure that no retry can fix: the task fails now and its remaining attempts are not
    /// used.
    pub fn permanent(message: impl fmt::Display) -> Self {
        Self {
            permanent: true,
            ..Self::retry(message)
        }
    }

    /// Not a failure: run the task again `delay` from now (to the second, rounded up), without
    /// spending an attempt, as often as the handler asks. The wait holds no worker slot and
    /// survives restarts (the task is queued with a delayed message); cancelling the run ends
    /// it. `reason` is recorded in the task's attempt history (outcome `snoozed`). Use it for
    /// "not yet": a rate limit's window, a resource still being prepared, a poll of a slow job.
    ///
    /// ```
    /// use std::time::Duration;
    /// use pgflow::StepError;
    ///
    /// fn check(ready: bool) -> Result<&'static str, StepError> {
    ///     if !ready {
    ///         return Err(StepError::snooze(Duration::from_secs(30), "the export is not ready"));
    ///     }
    ///     Ok("exported")
    /// }
    ///
    /// assert_eq!(check(false).unwrap_err().snoozed_for(), Some(Duration::from_secs(30)));
    /// ```
    pub fn snooze(delay: std::time::Duration, reason: impl fmt::Display) -> Self {
        let seconds = delay
            .as_secs()
            .saturating_add(u64::from(delay.subsec_nanos() > 0))
            .min(LONGEST_SNOOZE_SECONDS);
        Self {
            snooze: Some(std::time::Duration::from_secs(seconds)),
            ..Self::retry(reason)
        }
    }

    /// Whether this failure skips the remaining attempts.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    /// How long the task waits before it runs again, for a [`snooze`](Self::snooze).
    pub fn snoozed_for(&self) -> Option<std::time::Duration> {
        self.snooze
    }

    /// The text stored as the task's error.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepError")
            .field("message", &self.message)
            .field("permanent", &self.permanent)
            .field("snooze", &self.snooze)
            .finish()
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for StepError {
    fn from(error: E) -> Self {
        Self::retry(error)
    }
}
