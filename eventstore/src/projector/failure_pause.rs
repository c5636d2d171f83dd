//! How long a projector pauses after a storage failure that may pass before it runs again.

use std::time::Duration;

use crate::elector::jittered;

/// The pause after a first failure; each further failure in a row doubles it.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause, so that a projector is back within seconds of the storage.
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// Failures in a row, and the pause they call for.
#[derive(Debug, Default)]
pub(crate) struct FailurePause {
    failures_in_a_row: u32,
}

impl FailurePause {
    /// Counts a failure; the pause before running again, shortened at random so that the
    /// projectors of a fleet do not all come back in one burst after a failover.
    pub(crate) fn after_failure(&mut self) -> Duration {
        let doublings = self.failures_in_a_row.min(16);
        self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
        jittered(
            FIRST_PAUSE
                .saturating_mul(1 << doublings)
                .min(LONGEST_PAUSE),
        )
    }

    /// A run succeeded: the next failure pauses briefly again.
    pub(crate) fn reset(&mut self) {
        self.failures_in_a_row = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_from_the_first_to_the_longest_and_start_over_after_a_success() {
        let mut pause = FailurePause::default();
        let pauses: Vec<Duration> = (0..10).map(|_| pause.after_failure()).collect();
        let within = |pause: Duration, base: Duration| pause <= base && pause >= base.mul_f64(0.8);
        assert!(within(pauses[0], FIRST_PAUSE), "{pauses:?}");
        assert!(within(pauses[1], FIRST_PAUSE * 2), "{pauses:?}");
        assert!(within(pauses[9], LONGEST_PAUSE), "{pauses:?}");
        pause.reset();
        assert!(within(pause.after_failure(), FIRST_PAUSE));
    }
}
