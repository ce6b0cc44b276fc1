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

    /// The service said when to try again (an HTTP 429's or 503's `Retry-After`): run the
    /// task again `delay` from now without spending an attempt, as [`snooze`](Self::snooze)
    /// does, with that reason recorded. [`parse_retry_after`](Self::parse_retry_after) reads
    /// the header.
    ///
    /// ```
    /// use std::time::Duration;
    /// use pgflow::StepError;
    ///
    /// fn call(status: u16, retry_after: Option<&str>) -> Result<&'static str, StepError> {
    ///     if status == 429 {
    ///         let delay = retry_after
    ///             .and_then(StepError::parse_retry_after)
    ///             .unwrap_or(Duration::from_secs(30));
    ///         return Err(StepError::retry_after(delay));
    ///     }
    ///     Ok("sent")
    /// }
    ///
    /// let error = call(429, Some("120")).unwrap_err();
    /// assert_eq!(error.snoozed_for(), Some(Duration::from_secs(120)));
    /// assert!(!error.is_permanent());
    /// ```
    pub fn retry_after(delay: std::time::Duration) -> Self {
        let seconds = delay
            .as_secs()
            .saturating_add(u64::from(delay.subsec_nanos() > 0));
        Self::snooze(
            delay,
            format_args!("the service asked to be called again in {seconds} s (Retry-After)"),
        )
    }

    /// How long an HTTP `Retry-After` value asks to wait: a number of seconds (`120`) or an
    /// HTTP date (`Wed, 21 Oct 2026 07:28:00 GMT`; a date that has passed is no wait). `None`
    /// for anything else.
    pub fn parse_retry_after(value: &str) -> Option<std::time::Duration> {
        let value = value.trim();
        if let Ok(seconds) = value.parse::<u64>() {
            return Some(std::time::Duration::from_secs(seconds));
        }
        let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
        Some(
            (at.with_timezone(&chrono::Utc) - chrono::Utc::now())
                .to_std()
                .unwrap_or_default(),
        )
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        assert_eq!(
            StepError::parse_retry_after(" 120 "),
            Some(Duration::from_secs(120))
        );
        let in_a_minute = (chrono::Utc::now() + chrono::Duration::seconds(90)).to_rfc2822();
        let wait = StepError::parse_retry_after(&in_a_minute).unwrap();
        assert!(
            wait > Duration::from_secs(80) && wait <= Duration::from_secs(90),
            "{wait:?}"
        );
        assert_eq!(
            StepError::parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO),
            "a date that has passed"
        );
        assert_eq!(StepError::parse_retry_after("soon"), None);
        assert_eq!(StepError::parse_retry_after("-5"), None);

        let error = StepError::retry_after(Duration::from_millis(1500));
        assert_eq!(error.snoozed_for(), Some(Duration::from_secs(2)));
        assert!(error.message().contains("Retry-After"), "{error}");
    }
}
