//! The timings of a lease loop, shared by the leader and the partition elector: checked once,
//! with the defaults both use.

use std::time::Duration;

use crate::in_process::MAX_RATE_DIFFERENCE;
use crate::{validate, EventStorageError};

/// The least grace chosen by default, unless the ttl is shorter than twice that.
const MIN_DEFAULT_GRACE: Duration = Duration::from_millis(10);

/// A grace chosen by default: `ttl / divisor`, at least 10 ms, and at most half the ttl, so
/// that every ttl the storage accepts (1 ms and up) starts with the defaults.
pub(crate) fn default_grace(ttl: Duration, divisor: u32) -> Duration {
    (ttl / divisor).max(MIN_DEFAULT_GRACE).min(ttl / 2)
}

/// Checked timings of a lease loop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timings {
    pub(crate) ttl: Duration,
    pub(crate) request_interval: Duration,
    pub(crate) safety_margin: Duration,
    pub(crate) handover_grace: Duration,
}

impl Timings {
    /// The timings for `ttl`, each unset one at its default: a third of the ttl between
    /// requests, a twentieth as safety margin, a fortieth (at least 10 ms, at most half the
    /// ttl) as handover grace.
    ///
    /// # Errors
    /// [`EventStorageError::InvalidInput`] for a ttl out of range, a request interval that is
    /// zero or not shorter than the ttl, a safety margin below a hundredth of the ttl or that
    /// leaves no time between requests, or a handover grace not shorter than the ttl.
    pub(crate) fn check(
        ttl: Duration,
        request_interval: Option<Duration>,
        safety_margin: Option<Duration>,
        handover_grace: Option<Duration>,
    ) -> Result<Timings, EventStorageError> {
        validate::validate_ttl(ttl)?;
        let request_interval = request_interval.unwrap_or(ttl / 3);
        if request_interval.is_zero() || request_interval >= ttl {
            return Err(EventStorageError::invalid(
                "request interval",
                format!("{request_interval:?}"),
                format!(
                    "must be above zero and shorter than the ttl {ttl:?} (a third of it is \
                     the default), or a single slow request loses what it holds"
                ),
            ));
        }
        let safety_margin = safety_margin.unwrap_or(ttl / 20);
        // An in-process storage's clock may run this much fast while it catches up with a
        // system clock stepped forward, expiring a lease that much early in real time.
        let least_margin = ttl / MAX_RATE_DIFFERENCE.unsigned_abs();
        if safety_margin < least_margin {
            return Err(EventStorageError::invalid(
                "safety margin",
                format!("{safety_margin:?}"),
                format!(
                    "must be at least a hundredth of the ttl ({least_margin:?}): a storage's \
                     clock may run that much fast, and a lease could lapse in the storage \
                     before this instance stops counting on it"
                ),
            ));
        }
        // Not `request_interval + safety_margin`, which overflows for a margin near
        // `Duration::MAX`; the interval is below the ttl by now.
        if safety_margin >= ttl - request_interval {
            return Err(EventStorageError::invalid(
                "safety margin",
                format!("{safety_margin:?}"),
                format!(
                    "with the request interval {request_interval:?} it must stay below the \
                     ttl {ttl:?}, or what is held lapses between renewals"
                ),
            ));
        }
        let handover_grace = handover_grace.unwrap_or_else(|| default_grace(ttl, 40));
        shorter_than_ttl("handover grace", handover_grace, ttl)?;
        Ok(Timings {
            ttl,
            request_interval,
            safety_margin,
            handover_grace,
        })
    }
}

/// Checks that `value` (named `field`) is shorter than the ttl.
///
/// # Errors
/// [`EventStorageError::InvalidInput`] naming `field` when it is not.
pub(crate) fn shorter_than_ttl(
    field: &str,
    value: Duration,
    ttl: Duration,
) -> Result<(), EventStorageError> {
    if value >= ttl {
        return Err(EventStorageError::invalid(
            field,
            format!("{value:?}"),
            format!("must be shorter than the ttl {ttl:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_safety_margin_of_any_size_past_the_ttl_is_refused_by_name() {
        let ttl = Duration::from_secs(3);
        for margin in [Duration::from_secs(2), ttl, Duration::MAX] {
            let error = Timings::check(ttl, None, Some(margin), None).unwrap_err();
            assert!(
                error.to_string().contains("safety margin"),
                "{margin:?}: {error}"
            );
        }
    }

    #[test]
    fn every_ttl_the_storage_accepts_starts_with_the_defaults() {
        for millis in [1, 2, 5, 10, 19, 20, 21, 400, 30_000] {
            let ttl = Duration::from_millis(millis);
            let timings = Timings::check(ttl, None, None, None)
                .unwrap_or_else(|error| panic!("a ttl of {ttl:?} with the defaults: {error}"));
            assert!(timings.handover_grace < ttl, "{ttl:?}");
            assert!(
                timings.handover_grace >= MIN_DEFAULT_GRACE.min(ttl / 2),
                "{ttl:?}"
            );
        }
        assert_eq!(
            default_grace(Duration::from_secs(30), 40),
            Duration::from_millis(750)
        );
        assert_eq!(
            default_grace(Duration::from_millis(5), 40),
            Duration::from_micros(2_500)
        );
    }

    #[test]
    fn a_safety_margin_that_leaves_time_between_requests_is_kept() {
        let ttl = Duration::from_secs(3);
        let margin = Duration::from_millis(1_999);
        let timings = Timings::check(ttl, None, Some(margin), None).unwrap();
        assert_eq!(timings.request_interval, Duration::from_secs(1));
        assert_eq!(timings.safety_margin, margin);
    }
}
