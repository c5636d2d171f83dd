//! Lease types: requests, answers, and the lease records a storage keeps.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A request to acquire, renew or contend for a lease, all in one.
///
/// Every instance, leader and standby alike, sends the same request on a timer (roughly a
/// third of the ttl) and acts on the [`LeaseResponse`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseRequest {
    /// The lease's name, unique in the storage.
    pub lease_name: String,
    /// The caller's identity: stable for its lifetime and unique among contenders.
    pub owner: String,
    /// Higher priorities ask a lower-priority holder to step down.
    pub priority: i64,
    /// How long the lease (and this contender) stays live without another request. Storages
    /// keep it in whole microseconds (PostgreSQL's `interval` has no finer unit): a finer
    /// part is cut off, on every backend alike.
    pub ttl: Duration,
}

impl LeaseRequest {
    /// A request for `lease_name` by `owner`.
    pub fn new(
        lease_name: impl Into<String>,
        owner: impl Into<String>,
        priority: i64,
        ttl: Duration,
    ) -> Self {
        LeaseRequest {
            lease_name: lease_name.into(),
            owner: owner.into(),
            priority,
            ttl,
        }
    }
}

/// What the caller is after a [`LeaseRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LeaseStatus {
    /// The caller holds the lease and is the one legitimate processor.
    Leader,
    /// The caller holds the lease, but a live contender with a strictly higher priority waits:
    /// finish the current unit of work, then release.
    LeaderStepDownRequested,
    /// Someone else holds a live lease; the caller is registered as a contender.
    Standby,
}

impl LeaseStatus {
    /// Whether the caller holds the lease (either leader status).
    pub fn is_leader(self) -> bool {
        !matches!(self, LeaseStatus::Standby)
    }
}

/// A lease's generation: strictly increasing on every change of owner, stable across renewals,
/// never reset. Stamp work with it so that a stale leader's writes can be refused.
///
/// A backend may step it by more than one where that keeps it from ever repeating: PostgreSQL
/// puts the server's timeline in the high bits, so tokens granted after a failover exceed every
/// token of the old primary. Compare tokens only by order.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The token the next owner gets.
    pub fn next(self) -> FencingToken {
        FencingToken(self.0 + 1)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The answer to a [`LeaseRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseResponse {
    /// Leader, step-down requested, or standby.
    pub status: LeaseStatus,
    /// The holder's token: the caller's own when it leads.
    pub fencing_token: FencingToken,
    /// The holder's owner: the caller itself when it leads.
    pub current_owner: String,
}

/// The answer to a [`LeaseRequest`] with how the caller came to hold the lease
/// ([`EventStorage::request_leases_with_outcome`]).
///
/// [`EventStorage::request_leases_with_outcome`]: crate::EventStorage::request_leases_with_outcome
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseOutcome {
    /// The answer [`EventStorage::request_lease`] gives.
    ///
    /// [`EventStorage::request_lease`]: crate::EventStorage::request_lease
    pub response: LeaseResponse,
    /// Whether this request acquired the lease from another owner whose tenure expired
    /// without a release: a takeover of a holder that died or stopped renewing in time.
    /// False for renewals and standbys, and for acquiring a lease never held, released, or
    /// the caller's own expired one. A leader that took over may want to recover first
    /// (re-read state, re-arm timers) before it acts.
    pub took_over: bool,
}

/// What [`EventStorage::release_leases`] did with one lease.
///
/// [`EventStorage::release_leases`]: crate::EventStorage::release_leases
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// The caller held the lease live: it is acquirable at once.
    Released,
    /// The caller did not hold the lease (another owner does, it had expired, it was released
    /// before, or it never existed); only the caller's registration as contender was withdrawn.
    NotHeld,
    /// Released as asked, whether or not the caller held it, by a storage that does not say
    /// which (one without [`Capability::LeaseOutcomes`](crate::Capability::LeaseOutcomes)).
    Unreported,
}

/// A lease as the storage records it. Expired and released leases keep their last owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lease {
    /// The lease's name.
    pub lease_name: String,
    /// The holder, or the last holder when the lease is expired or released.
    pub owner: String,
    /// The holder's priority at its last request.
    pub priority: i64,
    /// The holder's token.
    pub fencing_token: FencingToken,
    /// When the holder acquired it, on the storage's clock.
    pub acquired_at: DateTime<Utc>,
    /// The holder's last renewal, on the storage's clock.
    pub heartbeat_at: DateTime<Utc>,
    /// The ttl of the holder's last request, in whole microseconds.
    pub ttl: Duration,
}

impl Lease {
    /// When the lease lapses unless renewed: `heartbeat_at + ttl`, or the latest time there
    /// is when that lies beyond it.
    pub fn expires_at(&self) -> DateTime<Utc> {
        expiry(self.heartbeat_at, self.ttl)
    }

    /// Whether the lease is expired at `now`, strictly after `heartbeat_at + ttl`.
    ///
    /// `now` must come from the storage's clock ([`crate::EventStorage::storage_time`]): a
    /// local clock compares two clocks, fine for a dashboard, never for deciding to process.
    pub fn is_expired_at(&self, now: DateTime<Utc>) -> bool {
        now > self.expires_at()
    }
}

/// A contender registered for a lease: an instance that asked for it and is not its holder
/// of record. Registrations lapse with their own ttl; a storage may keep a lapsed one until it
/// next tidies the lease, so judge liveness with [`LeaseContender::is_live_at`] on the
/// storage's clock.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseContender {
    /// The lease it contends for.
    pub lease_name: String,
    /// The contender's owner id.
    pub owner: String,
    /// Its priority at its last request.
    pub priority: i64,
    /// Its last request, on the storage's clock.
    pub heartbeat_at: DateTime<Utc>,
    /// The ttl of its last request, in whole microseconds.
    pub ttl: Duration,
}

impl LeaseContender {
    /// When the registration lapses unless renewed: `heartbeat_at + ttl`, or the latest time
    /// there is when that lies beyond it.
    pub fn expires_at(&self) -> DateTime<Utc> {
        expiry(self.heartbeat_at, self.ttl)
    }

    /// Whether the registration is live at `now` (from the storage's clock): until and
    /// including `heartbeat_at + ttl`.
    pub fn is_live_at(&self, now: DateTime<Utc>) -> bool {
        now <= self.expires_at()
    }
}

/// `heartbeat_at + ttl`, saturating: the calls refuse ttls past a week, but a lease read from
/// a store may have been written around them (PostgreSQL's functions called from SQL), and a
/// dashboard listing it must not panic.
fn expiry(heartbeat_at: DateTime<Utc>, ttl: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(ttl)
        .ok()
        .and_then(|ttl| heartbeat_at.checked_add_signed(ttl))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// A lease name and a fencing token: a write carrying it succeeds only while that lease is
/// live on the storage's clock and its current token is this one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fence {
    /// The lease the writer believes it holds.
    pub lease_name: String,
    /// The token it was granted.
    pub token: FencingToken,
}

impl Fence {
    /// A fence for `lease_name` at `token`.
    pub fn new(lease_name: impl Into<String>, token: FencingToken) -> Self {
        Fence {
            lease_name: lease_name.into(),
            token,
        }
    }

    /// Checks this fence against the storage's record of the lease at `now`.
    ///
    /// # Errors
    /// [`crate::EventStorageError::Fenced`] when the lease is unknown, not live, or holds
    /// another token.
    pub fn check(
        &self,
        lease: Option<&Lease>,
        now: DateTime<Utc>,
    ) -> Result<(), crate::EventStorageError> {
        let live = lease.is_some_and(|lease| !lease.is_expired_at(now));
        let current = lease.map(|lease| lease.fencing_token);
        if live && current == Some(self.token) {
            Ok(())
        } else {
            Err(crate::EventStorageError::Fenced {
                lease_name: self.lease_name.clone(),
                presented: self.token,
                current,
                live,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(heartbeat_at: DateTime<Utc>, ttl: Duration) -> Lease {
        Lease {
            lease_name: "l".into(),
            owner: "o".into(),
            priority: 0,
            fencing_token: FencingToken(1),
            acquired_at: heartbeat_at,
            heartbeat_at,
            ttl,
        }
    }

    #[test]
    fn expiry_is_strictly_after_heartbeat_plus_ttl() {
        let t0 = Utc::now();
        let l = lease(t0, Duration::from_secs(1));
        assert!(!l.is_expired_at(t0 + chrono::Duration::seconds(1)));
        assert!(l.is_expired_at(t0 + chrono::Duration::milliseconds(1001)));
    }

    #[test]
    fn a_ttl_past_the_end_of_time_never_expires_and_does_not_panic() {
        let now = Utc::now();
        for ttl in [
            Duration::MAX,
            Duration::from_secs(u64::from(u32::MAX) * 3_600),
        ] {
            let held = lease(now, ttl);
            assert_eq!(held.expires_at(), DateTime::<Utc>::MAX_UTC, "{ttl:?}");
            assert!(!held.is_expired_at(now), "{ttl:?}");
            let contender = LeaseContender {
                lease_name: "l".into(),
                owner: "o".into(),
                priority: 0,
                heartbeat_at: now,
                ttl,
            };
            assert!(contender.is_live_at(now), "{ttl:?}");
        }
    }

    #[test]
    fn fence_passes_only_for_the_live_current_token() {
        let now = Utc::now();
        let live = lease(now, Duration::from_secs(10));
        assert!(Fence::new("l", FencingToken(1))
            .check(Some(&live), now)
            .is_ok());
        assert!(Fence::new("l", FencingToken(2))
            .check(Some(&live), now)
            .is_err());
        let later = now + chrono::Duration::seconds(11);
        assert!(Fence::new("l", FencingToken(1))
            .check(Some(&live), later)
            .is_err());
        assert!(Fence::new("l", FencingToken(1)).check(None, now).is_err());
    }
}
