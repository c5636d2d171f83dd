//! The storage's clock for backends that live in one process.

use std::sync::Mutex;

use chrono::{DateTime, Utc};

/// The system's UTC clock, made non-decreasing.
///
/// Lease expiry is judged on this clock alone. A wall clock can step backwards (NTP); a lease
/// clock that did would revive expired leases, so every reading is at least the one before.
///
/// A step forward is taken as it comes: every live lease loses the step at once, while each
/// elector's own deadline, on the monotonic clock, does not move, so another contender may
/// lead while the old holder still believes it does, for up to its ttl. Its fenced writes are
/// refused; unfenced ones are not. Keep the system clock slewed rather than stepped while the
/// process runs (chrony and ntpd step only at boot by default). Judging leases on the
/// monotonic clock instead would leave the stored timestamps behind real time after every
/// step or suspend.
#[derive(Debug, Default)]
pub struct StorageClock {
    last: Mutex<Option<DateTime<Utc>>>,
}

impl StorageClock {
    /// A clock starting at the system's time.
    pub fn new() -> Self {
        StorageClock::default()
    }

    /// Now: the system's time, or the previous reading if the system's clock went back.
    pub fn now(&self) -> DateTime<Utc> {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = last.map_or_else(Utc::now, |last| last.max(Utc::now()));
        *last = Some(now);
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_never_decrease() {
        let clock = StorageClock::new();
        let mut previous = clock.now();
        for _ in 0..1000 {
            let now = clock.now();
            assert!(now >= previous);
            previous = now;
        }
    }
}
