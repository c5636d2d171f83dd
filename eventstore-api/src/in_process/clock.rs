//! The storage's clock for backends that live in one process.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};

use crate::EventStorageError;

/// How far the storage's clock may run faster or slower than the process's monotonic clock
/// while it follows the system's clock: one part in this many.
///
/// An NTP daemon slews the system clock by at most 500 parts per million, well inside it; a
/// lease's real length changes by at most this part, far less than an elector's default
/// safety margin (a twentieth of the ttl).
pub const MAX_RATE_DIFFERENCE: i32 = 100;

/// The system's UTC clock, followed at the monotonic clock's pace.
///
/// Lease expiry is judged on this clock alone, so it must not jump. The system clock can be
/// stepped, backwards or forwards (by an administrator, by NTP at start-up, by a virtual
/// machine resumed on another host). Followed as it is, a step back would revive expired
/// leases, and a step forward would expire every live lease at once while each elector's own
/// deadline, on its monotonic clock, does not move: a second leader while the first still
/// believes it leads.
///
/// So each reading advances from the one before by the time the monotonic clock measured
/// since, give or take one part in a hundred, and within that bound comes as close to the
/// system's time as it can. Slewing, as NTP does, is followed exactly; after a step the clock
/// closes the gap at one part in a hundred (36 seconds an hour) and never goes back. Every
/// holder and contender of an in-process storage lives in the storage's process, so they all
/// measure time on the same monotonic clock as the leases.
///
/// [`StorageClock::advance`] steps it forward on purpose, as a test steps a storage's clock to
/// check that a backend judges time by this clock alone. [`StorageClock::on_tokio_time`] makes
/// one that follows tokio's clock instead, for tests and simulations that run on paused time.
#[derive(Debug, Default)]
pub struct StorageClock {
    source: Source,
    last: Mutex<Option<Reading>>,
    /// How far it was stepped forward by [`StorageClock::advance`], beyond the system's time,
    /// in nanoseconds: an atomic, so that a reading takes no second lock.
    stepped_nanos: AtomicI64,
}

/// Where a clock reads the time from.
#[derive(Debug, Clone, Copy, Default)]
enum Source {
    /// The system's clock, paced by the process's monotonic clock.
    #[default]
    System,
    /// tokio's clock, from `origin`, which it read as `origin_time`, running `skew_ppm`
    /// parts per million fast (slow when negative).
    Tokio {
        origin_time: DateTime<Utc>,
        origin: tokio::time::Instant,
        skew_ppm: i32,
    },
}

/// A reading of the clock, and when it was taken on the monotonic clock.
#[derive(Debug, Clone, Copy)]
struct Reading {
    at: DateTime<Utc>,
    taken: Instant,
}

impl StorageClock {
    /// A clock starting at the system's time.
    pub fn new() -> Self {
        StorageClock::default()
    }

    /// Now: the system's time as far as the pace of the monotonic clock since the previous
    /// reading allows (see [`StorageClock`]). Never earlier than the previous reading.
    pub fn now(&self) -> DateTime<Utc> {
        let (system, taken) = match self.source {
            Source::System => (Utc::now(), Instant::now()),
            Source::Tokio {
                origin_time,
                origin,
                skew_ppm,
            } => {
                let taken = tokio::time::Instant::now();
                let elapsed = skewed(taken.duration_since(origin), skew_ppm);
                let time = origin_time
                    .checked_add_signed(elapsed)
                    .unwrap_or(DateTime::<Utc>::MAX_UTC);
                (time, taken.into_std())
            }
        };
        let stepped = self.stepped_nanos.load(Ordering::Relaxed);
        let system = match stepped {
            0 => system,
            stepped => system
                .checked_add_signed(TimeDelta::nanoseconds(stepped))
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        };
        self.read(system, taken)
    }

    /// A clock that reads `origin_time` now and then advances exactly as tokio's clock does:
    /// under paused time (`tokio::time::pause`, `#[tokio::test(start_paused = true)]`), only
    /// when the test or simulation advances it, so that a ttl of minutes passes at once and a
    /// run repeats to the nanosecond. Outside a runtime, tokio's clock is the monotonic one.
    pub fn on_tokio_time(origin_time: DateTime<Utc>) -> Self {
        StorageClock {
            source: Source::Tokio {
                origin_time,
                origin: tokio::time::Instant::now(),
                skew_ppm: 0,
            },
            ..StorageClock::default()
        }
    }

    /// A clock like [`StorageClock::on_tokio_time`] that runs `skew_ppm` parts per million
    /// fast against tokio's clock (slow when negative): a storage whose clock ticks at another
    /// rate than its clients', as a simulation checks the electors against. An elector's
    /// safety margin covers a rate difference of one part in [`MAX_RATE_DIFFERENCE`], so that
    /// is the most this accepts either way.
    ///
    /// # Errors
    /// [`EventStorageError::InvalidInput`] for a skew beyond one part in
    /// [`MAX_RATE_DIFFERENCE`] (10,000 ppm).
    pub fn on_skewed_tokio_time(
        origin_time: DateTime<Utc>,
        skew_ppm: i32,
    ) -> Result<Self, EventStorageError> {
        let most = PPM / MAX_RATE_DIFFERENCE;
        if skew_ppm.unsigned_abs() > most.unsigned_abs() {
            return Err(EventStorageError::invalid(
                "clock skew",
                format!("{skew_ppm} ppm"),
                format!(
                    "must be within ±{most} ppm (one part in {MAX_RATE_DIFFERENCE}), the rate \
                     difference an elector's safety margin covers"
                ),
            ));
        }
        let mut clock = StorageClock::on_tokio_time(origin_time);
        if let Source::Tokio { skew_ppm: skew, .. } = &mut clock.source {
            *skew = skew_ppm;
        }
        Ok(clock)
    }

    /// Steps the clock forward by `by` at once (a negative `by` counts as zero: the clock
    /// never goes back): every later reading is `by` later than it would have been. For tests
    /// of what a storage judges by its clock (lease expiry, the times it stamps); a storage
    /// in use is never stepped.
    pub fn advance(&self, by: TimeDelta) {
        let by = by.max(TimeDelta::zero());
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Beyond ±292 years a step saturates; no test steps that far.
        let nanos = by.num_nanoseconds().unwrap_or(i64::MAX);
        let _ = self
            .stepped_nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |stepped| {
                Some(stepped.saturating_add(nanos))
            });
        if let Some(reading) = last.as_mut() {
            reading.at = reading.at.checked_add_signed(by).unwrap_or(reading.at);
        }
    }

    /// The reading for a system time of `system`, taken at `taken` on the monotonic clock.
    fn read(&self, system: DateTime<Utc>, taken: Instant) -> DateTime<Utc> {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let reading = match *last {
            None => Reading { at: system, taken },
            Some(last) => Reading {
                at: follow(last, system, taken),
                taken: taken.max(last.taken),
            },
        };
        *last = Some(reading);
        reading.at
    }
}

/// Parts in a million.
const PPM: i32 = 1_000_000;

/// `elapsed` on a clock running `skew_ppm` parts per million fast.
fn skewed(elapsed: Duration, skew_ppm: i32) -> TimeDelta {
    let nanos = elapsed.as_nanos() * u128::from((PPM + skew_ppm).unsigned_abs()) / 1_000_000;
    i64::try_from(nanos).map_or(TimeDelta::MAX, TimeDelta::nanoseconds)
}

/// The reading after `last` for a system time of `system`, taken at `taken`: `system`, held
/// within one part in [`MAX_RATE_DIFFERENCE`] of the monotonic time elapsed since `last`.
fn follow(last: Reading, system: DateTime<Utc>, taken: Instant) -> DateTime<Utc> {
    // Readings taken out of order by racing threads count as taken at the same instant.
    let elapsed =
        TimeDelta::from_std(taken.saturating_duration_since(last.taken)).unwrap_or(TimeDelta::MAX);
    let leeway = elapsed / MAX_RATE_DIFFERENCE;
    let earliest = last.at.checked_add_signed(elapsed - leeway);
    let latest = last.at.checked_add_signed(elapsed + leeway);
    match (earliest, latest) {
        (Some(earliest), Some(latest)) => system.clamp(earliest, latest),
        // Beyond the calendar's end: nothing a lease could be judged by.
        _ => last.at.max(system),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A clock whose first reading was `start`, taken at the returned instant.
    fn started_at(start: DateTime<Utc>) -> (StorageClock, Instant) {
        let clock = StorageClock::new();
        let taken = Instant::now();
        assert_eq!(clock.read(start, taken), start);
        (clock, taken)
    }

    fn start() -> DateTime<Utc> {
        "2026-12-05T10:00:00Z".parse().unwrap()
    }

    fn seconds(n: i64) -> TimeDelta {
        TimeDelta::seconds(n)
    }

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

    #[test]
    fn a_system_clock_that_keeps_pace_is_followed_exactly() {
        let (clock, first) = started_at(start());
        for second in 1..=10 {
            let taken = first + Duration::from_secs(second);
            let system = start() + seconds(second as i64);
            assert_eq!(clock.read(system, taken), system);
        }
    }

    #[test]
    fn a_slewed_system_clock_is_followed_exactly() {
        // 500 parts per million fast, as fast as NTP slews.
        let (clock, first) = started_at(start());
        let taken = first + Duration::from_secs(100);
        let system = start() + seconds(100) + TimeDelta::milliseconds(50);
        assert_eq!(clock.read(system, taken), system);
    }

    #[test]
    fn a_step_forward_does_not_expire_leases_early() {
        let (clock, first) = started_at(start());
        // An hour's step, seen ten seconds later: the clock moves ten seconds and a tenth.
        let taken = first + Duration::from_secs(10);
        let stepped = start() + seconds(3600 + 10);
        assert_eq!(
            clock.read(stepped, taken),
            start() + seconds(10) + TimeDelta::milliseconds(100)
        );
        // It keeps closing the gap at one part in a hundred, and reaches the system's time.
        let taken = first + Duration::from_secs(20);
        assert_eq!(
            clock.read(start() + seconds(3600 + 20), taken),
            start() + seconds(20) + TimeDelta::milliseconds(200)
        );
        let later = Duration::from_secs(3600 * 101);
        let system = start() + TimeDelta::from_std(later).unwrap() + seconds(3600);
        assert_eq!(clock.read(system, first + later), system);
    }

    #[test]
    fn a_step_back_does_not_revive_expired_leases() {
        let (clock, first) = started_at(start());
        let taken = first + Duration::from_secs(10);
        let stepped = start() - seconds(3600 - 10);
        assert_eq!(
            clock.read(stepped, taken),
            start() + seconds(10) - TimeDelta::milliseconds(100)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_on_tokio_time_advances_exactly_as_the_paused_clock_does() {
        let origin = start();
        let clock = StorageClock::on_tokio_time(origin);
        assert_eq!(clock.now(), origin);
        tokio::time::advance(std::time::Duration::from_secs(3600)).await;
        assert_eq!(clock.now(), origin + seconds(3600));
        clock.advance(seconds(10));
        assert_eq!(
            clock.now(),
            origin + seconds(3610),
            "a step adds to tokio's time"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_skewed_clock_on_tokio_time_runs_at_its_rate_within_the_bound() {
        let origin = start();
        let fast = StorageClock::on_skewed_tokio_time(origin, 10_000).unwrap();
        let slow = StorageClock::on_skewed_tokio_time(origin, -5_000).unwrap();
        tokio::time::advance(std::time::Duration::from_secs(1000)).await;
        assert_eq!(fast.now(), origin + seconds(1010));
        assert_eq!(slow.now(), origin + seconds(995));
        for skew in [10_001, -10_001, i32::MIN] {
            let refused = StorageClock::on_skewed_tokio_time(origin, skew).unwrap_err();
            assert!(
                refused.to_string().contains("clock skew"),
                "{skew}: {refused}"
            );
        }
    }

    #[test]
    fn a_step_forward_moves_every_later_reading_at_once() {
        let clock = StorageClock::new();
        let before = clock.now();
        clock.advance(TimeDelta::hours(1));
        let after = clock.now();
        assert!(
            after >= before + TimeDelta::hours(1),
            "{before} then {after}"
        );
        assert!(after < before + TimeDelta::hours(1) + TimeDelta::seconds(10));
        clock.advance(TimeDelta::hours(-5));
        assert!(clock.now() >= after, "a step back is no step");
    }

    #[test]
    fn readings_taken_out_of_order_do_not_go_back() {
        let (clock, first) = started_at(start());
        let taken = first + Duration::from_secs(10);
        let reading = clock.read(start() + seconds(10), taken);
        // A thread that read the clocks earlier but took the lock later.
        let late = clock.read(start() + seconds(5), first + Duration::from_secs(5));
        assert_eq!(late, reading);
    }
}
