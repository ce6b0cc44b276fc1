//! The one backoff every retry loop of the runtime uses: a pause that doubles after each
//! failure, up to a ceiling, and starts over after a success.

use std::time::Duration;

/// The first pause after a failed database call or connection.
const FIRST: Duration = Duration::from_millis(50);

/// The longest pause between retries of a failed database call or connection.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Pauses between retries: 50 ms, doubled after each failure, at most [`MAX_BACKOFF`].
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: FIRST }
    }
}

impl Backoff {
    /// The pause before the next retry; the one after it is twice as long (up to the ceiling).
    pub(crate) fn next_pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = (self.next * 2).min(MAX_BACKOFF);
        pause
    }

    /// After a success: the next failure pauses the shortest time again.
    pub(crate) fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_ceiling_and_start_over_after_a_success() {
        let mut backoff = Backoff::default();
        let pauses: Vec<u64> = (0..9)
            .map(|_| backoff.next_pause().as_millis() as u64)
            .collect();
        assert_eq!(pauses, [50, 100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        backoff.reset();
        assert_eq!(backoff.next_pause(), Duration::from_millis(50));
    }
}
