//! Ids for new events: UUIDv7 (RFC 9562) drawn with one call to the system's random source per
//! millisecond instead of one per event.
//!
//! Within a millisecond the 74 random bits are a counter that starts at a random value and
//! counts up (RFC 9562, section 6.2, method 2: monotonic random), so ids of one store sort in
//! the order they were made, and a batch of a hundred events costs one random draw, not a
//! hundred system calls.

use chrono::{DateTime, Utc};
use eventstore_api::EventId;
use uuid::{Builder, Uuid};

/// The bits after the timestamp that are neither version nor variant.
const RANDOM_BITS: u32 = 74;

/// Makes event ids for one writer.
#[derive(Debug, Default)]
pub(crate) struct EventIds {
    millis: u64,
    /// The 74 random bits of the last id: `rand_a` (12 bits) above `rand_b` (62 bits).
    counter: u128,
}

impl EventIds {
    /// A new id, stamped with `now` or, when ids made earlier carry a later time, theirs.
    pub(crate) fn next(&mut self, now: DateTime<Utc>) -> EventId {
        let millis = u64::try_from(now.timestamp_millis()).unwrap_or_default();
        if millis > self.millis {
            self.millis = millis;
            self.counter = fresh_counter();
        } else {
            self.counter += 1;
            if self.counter >> RANDOM_BITS != 0 {
                // The counter ran out within one millisecond: borrow the next one.
                self.millis += 1;
                self.counter = fresh_counter();
            }
        }
        let rand_a = (self.counter >> 62) as u16;
        let rand_b = self.counter as u64 & ((1 << 62) - 1);
        let mut bytes = [0u8; 10];
        bytes[..2].copy_from_slice(&rand_a.to_be_bytes());
        bytes[2..].copy_from_slice(&rand_b.to_be_bytes());
        EventId(Builder::from_unix_timestamp_millis(self.millis, &bytes).into_uuid())
    }
}

/// A random start for a millisecond's counter, its top bit clear so that it can count up
/// more than 2^73 times before it runs out.
fn fresh_counter() -> u128 {
    Uuid::new_v4().as_u128() & ((1 << (RANDOM_BITS - 1)) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use uuid::Version;

    #[test]
    fn ids_are_version_7_unique_and_ascending_within_and_across_milliseconds() {
        let mut ids = EventIds::default();
        let start = Utc::now();
        let mut made = Vec::new();
        for step in 0..3_000i64 {
            // Three milliseconds, a thousand ids each, and a clock that once steps back.
            let now = start + chrono::Duration::milliseconds(step / 1000 - i64::from(step == 2500));
            made.push(ids.next(now).0);
        }
        assert!(made
            .iter()
            .all(|id| id.get_version() == Some(Version::SortRand)));
        assert_eq!(made.iter().collect::<HashSet<_>>().len(), made.len());
        assert!(made.windows(2).all(|pair| pair[0] < pair[1]), "ids ascend");
        let (seconds, _) = made[0].get_timestamp().unwrap().to_unix();
        assert_eq!(seconds, start.timestamp() as u64);
    }

    #[test]
    fn a_counter_that_runs_out_moves_to_the_next_millisecond() {
        let mut ids = EventIds::default();
        let now = Utc::now();
        let first = ids.next(now);
        ids.counter = (1 << RANDOM_BITS) - 1;
        let next = ids.next(now);
        assert!(next.0 > first.0);
        assert_eq!(ids.millis, now.timestamp_millis() as u64 + 1);
    }
}
