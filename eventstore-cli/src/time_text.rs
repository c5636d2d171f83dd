//! Durations and instants as an operator reads them.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde::Serializer;

/// `instant` as RFC 3339 in UTC with milliseconds, e.g. `2026-12-01T10:58:03.271Z`.
pub(crate) fn instant(instant: DateTime<Utc>) -> String {
    instant.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A length of time in at most two units: `850ms`, `12.3s`, `4m 12s`, `3h 04m`, `2d 03h`.
pub(crate) fn span(millis: i64) -> String {
    let millis = millis.unsigned_abs();
    let seconds = millis / 1000;
    match seconds {
        0 => format!("{millis}ms"),
        1..=59 if millis.is_multiple_of(1000) => format!("{seconds}s"),
        1..=59 => format!("{}.{}s", seconds, (millis % 1000) / 100),
        60..=3599 => format!("{}m {:02}s", seconds / 60, seconds % 60),
        3600..=86_399 => format!("{}h {:02}m", seconds / 3600, (seconds % 3600) / 60),
        _ => format!("{}d {:02}h", seconds / 86_400, (seconds % 86_400) / 3600),
    }
}

/// `delta` in whole milliseconds, rounded down: a lease expired half a millisecond ago is
/// `-1`, never `0`, which would read as still live.
pub(crate) fn floor_millis(delta: TimeDelta) -> i64 {
    let millis = delta.num_milliseconds();
    if TimeDelta::milliseconds(millis) > delta {
        millis - 1
    } else {
        millis
    }
}

/// A ttl as a JSON number of milliseconds, exact: whole milliseconds as an integer, a ttl
/// with a fraction of one (storages keep microseconds) as a decimal, so that `heartbeat_at`
/// plus `ttl_ms` is `expires_at`.
pub(crate) fn serialize_millis<S: Serializer>(
    ttl: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let micros = ttl.as_micros();
    match u64::try_from(micros / 1000) {
        Ok(millis) if micros.is_multiple_of(1000) => serializer.serialize_u64(millis),
        _ => serializer.serialize_f64(micros as f64 / 1000.0),
    }
}

/// How long before `now` the instant `then` was: `12.3s ago`.
pub(crate) fn ago(then: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let millis = (now - then).num_milliseconds();
    if millis >= 0 {
        format!("{} ago", span(millis))
    } else {
        format!("in {}", span(millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_use_at_most_two_units() {
        assert_eq!(span(850), "850ms");
        assert_eq!(span(12_345), "12.3s");
        assert_eq!(span(15_000), "15s");
        assert_eq!(span(-12_345), "12.3s");
        assert_eq!(span(252_000), "4m 12s");
        assert_eq!(span(3 * 3_600_000 + 4 * 60_000), "3h 04m");
        assert_eq!(span(2 * 86_400_000 + 3 * 3_600_000), "2d 03h");
    }

    #[test]
    fn milliseconds_round_down() {
        assert_eq!(floor_millis(TimeDelta::microseconds(-500)), -1);
        assert_eq!(floor_millis(TimeDelta::microseconds(-1_000)), -1);
        assert_eq!(floor_millis(TimeDelta::microseconds(-1_001)), -2);
        assert_eq!(floor_millis(TimeDelta::zero()), 0);
        assert_eq!(floor_millis(TimeDelta::microseconds(1_999)), 1);
    }

    #[test]
    fn ttls_are_exact_milliseconds() {
        let json = |ttl| {
            let mut out = Vec::new();
            serialize_millis(&ttl, &mut serde_json::Serializer::new(&mut out)).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(json(Duration::from_secs(30)), "30000");
        assert_eq!(json(Duration::from_micros(1_500)), "1.5");
        assert_eq!(json(Duration::from_micros(7)), "0.007");
    }
}
