//! The storage's clock for backends that live in one process.

use std::sync::Mutex;

use chrono::{DateTime, Utc};

/// The system's UTC clock, made non-decreasing.
///
/// Lease expiry is judged on this clock alone. A wall clock can step backwards (NTP); a lease
/// clock that did would revive expired leases, so every reading is at least the one before.
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
