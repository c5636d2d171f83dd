//! How long to wait between attempts to reach the server again.

use std::time::Duration;

/// The first wait after a failure.
const FIRST: Duration = Duration::from_millis(50);
/// The longest wait: a server that comes back is noticed within this.
const LONGEST: Duration = Duration::from_secs(5);

/// Waits that double from 50 ms up to 5 s, and start over after a success.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: FIRST }
    }
}

impl Backoff {
    /// The wait before the next attempt.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (wait * 2).min(LONGEST);
        wait
    }

    /// Starts over at the first wait, after a success.
    pub(crate) fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_longest_and_start_over_after_a_success() {
        let mut backoff = Backoff::default();
        let waits: Vec<u128> = (0..10).map(|_| backoff.next_wait().as_millis()).collect();
        assert_eq!(
            waits,
            [50, 100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]
        );
        backoff.reset();
        assert_eq!(backoff.next_wait(), FIRST);
    }
}
