//! Scenarios: answers that say what happened ([`Capability::LeaseOutcomes`]).
//!
//! [`EventStorage::request_leases_with_outcome`] says whether an acquisition took the lease
//! over from another owner that let it expire, which a leader may want to know before it acts
//! (a takeover follows a crash or a stall; a planned handover does not);
//! [`EventStorageExt::release_lease_with_outcome`] says whether the caller held the lease. Run on
//! a backend that does not declare the capability, each scenario proves instead that both
//! methods refuse with `Unsupported`.

use std::time::Duration;

use eventstore_api::EventStorageExt;
use eventstore_api::{
    Capability, EventStorage, FencingToken, LeaseOutcome, LeaseRequest, LeaseStatus, ReleaseOutcome,
};

use crate::leases::{invalid_requests, leases, release, request};
use crate::support::Answer as _;
use crate::support::{self, assert_invalid_input, LONG_TTL, SHORT_TTL};
use crate::StorageFactory;

/// What every scenario of this module needs, unless it declares its own.
pub(crate) const NEEDS: &[Capability] = &[Capability::Lease, Capability::LeaseOutcomes];

/// A new lease, a standby, a renewal, a takeover of another owner's expired tenure, an
/// acquisition after a release and the re-acquisition of one's own expired lease: only the
/// takeover says it took over.
///
/// Only a lease that must expire gets a short ttl, from its last request on, so that a slow
/// machine never lets a lease lapse where the scenario expects it live.
pub async fn only_a_takeover_of_an_expired_holder_says_it_took_over<F: StorageFactory>(
    factory: &F,
) {
    let Some((storage, other)) = two_handles_with_outcomes(factory).await else {
        return;
    };
    let first = ask(&storage, "orders", "node-a", LONG_TTL).await;
    assert_outcome(
        &first,
        LeaseStatus::Leader,
        1,
        "node-a",
        false,
        "a new lease",
    );
    let standby = ask(&other, "orders", "node-b", LONG_TTL).await;
    assert_outcome(
        &standby,
        LeaseStatus::Standby,
        1,
        "node-a",
        false,
        "a standby",
    );
    let renewal = ask(&storage, "orders", "node-a", SHORT_TTL).await;
    assert_outcome(
        &renewal,
        LeaseStatus::Leader,
        1,
        "node-a",
        false,
        "a renewal",
    );

    support::wait_until_expired(&storage, "orders").await;
    let takeover = ask(&other, "orders", "node-b", LONG_TTL).await;
    assert_outcome(
        &takeover,
        LeaseStatus::Leader,
        2,
        "node-b",
        true,
        &support::after_expiry("acquiring node-a's expired lease takes it over"),
    );

    release(&other, "orders", "node-b").await;
    let after_release = ask(&storage, "orders", "node-a", SHORT_TTL).await;
    assert_outcome(
        &after_release,
        LeaseStatus::Leader,
        3,
        "node-a",
        false,
        "acquiring a released lease",
    );

    support::wait_until_expired(&storage, "orders").await;
    let own_again = ask(&storage, "orders", "node-a", LONG_TTL).await;
    assert_outcome(
        &own_again,
        LeaseStatus::Leader,
        4,
        "node-a",
        false,
        &support::after_expiry("re-acquiring one's own expired lease is a new tenure"),
    );
}

/// In a batch, each answer says whether that request took over, as one by one; a lease asked
/// for twice is taken over by the first request and renewed by the second.
pub async fn a_batch_says_which_requests_took_over<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_outcomes(factory).await else {
        return;
    };
    request(&storage, "expired", "node-a", 0, SHORT_TTL).await;
    request(&storage, "live", "node-a", 0, LONG_TTL).await;
    support::wait_until_expired(&storage, "expired").await;

    let outcomes = other
        .request_leases_with_outcome(vec![
            LeaseRequest::new("expired", "node-b", 0, LONG_TTL),
            LeaseRequest::new("live", "node-b", 0, LONG_TTL),
            LeaseRequest::new("fresh", "node-b", 0, LONG_TTL),
            LeaseRequest::new("expired", "node-b", 0, LONG_TTL),
        ])
        .await
        .or_rule("request_leases_with_outcome", "request_leases_with_outcome of valid requests answers on a storage with Capability::LeaseOutcomes");
    let shown: Vec<(LeaseStatus, u64, &str, bool)> = outcomes
        .iter()
        .map(|o| {
            (
                o.response.status,
                o.response.fencing_token.0,
                o.response.current_owner.as_str(),
                o.took_over,
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (LeaseStatus::Leader, 2, "node-b", true),
            (LeaseStatus::Standby, 1, "node-a", false),
            (LeaseStatus::Leader, 1, "node-b", false),
            (LeaseStatus::Leader, 2, "node-b", false),
        ],
        "{}",
        support::after_expiry(
            "the batch answers: takeover, standby, new lease, renewal of the lease just taken over"
        )
    );
}

/// A release says `Released` exactly when the caller held the lease live, and `NotHeld` for
/// a lease another owner holds, one released already, one that expired, one that never
/// existed, or one the caller only contended for (whose registration is still withdrawn).
pub async fn a_release_says_whether_the_caller_held_the_lease<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_outcomes(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    request(&other, "orders", "node-b", 5, LONG_TTL).await;

    let cases = [
        (
            &other,
            "orders",
            "node-b",
            "a contender that does not hold it",
        ),
        (
            &storage,
            "never-requested",
            "node-a",
            "a lease that never existed",
        ),
    ];
    for (handle, lease, owner, what) in cases {
        assert_eq!(
            released(handle, lease, owner).await,
            ReleaseOutcome::NotHeld,
            "releasing {what}"
        );
    }
    let contenders = storage.get_contenders("orders").await.or_rule(
        "get_contenders",
        "get_contenders of a valid lease name answers on a storage with Capability::Lease",
    );
    assert!(
        contenders.iter().all(|c| c.owner != "node-b"),
        "a release withdraws the caller's registration even when it held nothing: {contenders:?}"
    );

    assert_eq!(
        released(&storage, "orders", "node-a").await,
        ReleaseOutcome::Released,
        "releasing the lease one holds"
    );
    assert_eq!(
        released(&storage, "orders", "node-a").await,
        ReleaseOutcome::NotHeld,
        "releasing it again"
    );

    request(&storage, "lapsing", "node-a", 0, SHORT_TTL).await;
    support::wait_until_expired(&storage, "lapsing").await;
    assert_eq!(
        released(&storage, "lapsing", "node-a").await,
        ReleaseOutcome::NotHeld,
        "{}",
        support::after_expiry("releasing one's own expired lease releases nothing held")
    );
}

/// Invalid input is refused as by `request_leases` and `release_lease`, changing nothing.
pub async fn invalid_input_is_refused_and_changes_nothing<F: StorageFactory>(factory: &F) {
    let Some((storage, _)) = two_handles_with_outcomes(factory).await else {
        return;
    };
    request(&storage, "held", "node-x", 0, LONG_TTL).await;
    let before = leases(&storage).await;
    for (what, invalid) in invalid_requests() {
        let batch = vec![LeaseRequest::new("fresh", "node-a", 0, LONG_TTL), invalid];
        assert_invalid_input(
            storage.request_leases_with_outcome(batch).await,
            &format!("request_leases_with_outcome with a request with {what}"),
            "validate_lease_requests",
        );
    }
    for (lease, owner) in [("", "node-x"), ("held", ""), ("held\0", "node-x")] {
        assert_invalid_input(
            storage.release_lease_with_outcome(lease, owner).await,
            &format!("release_lease_with_outcome({lease:?}, {owner:?})"),
            "validate_release",
        );
    }
    assert_eq!(
        leases(&storage).await,
        before,
        "refused calls changed the leases"
    );
}

async fn ask<S: EventStorage + ?Sized>(
    storage: &S,
    lease_name: &str,
    owner: &str,
    ttl: Duration,
) -> LeaseOutcome {
    let mut outcomes = storage
        .request_leases_with_outcome(vec![LeaseRequest::new(lease_name, owner, 0, ttl)])
        .await
        .unwrap_or_else(|error| {
            panic!("request_leases_with_outcome({lease_name:?}, {owner:?}): {error}")
        });
    assert_eq!(outcomes.len(), 1, "one answer per request: {outcomes:?}");
    outcomes.remove(0)
}

async fn released<S: EventStorage + ?Sized>(
    storage: &S,
    lease_name: &str,
    owner: &str,
) -> ReleaseOutcome {
    storage
        .release_lease_with_outcome(lease_name, owner)
        .await
        .unwrap_or_else(|error| {
            panic!("release_lease_with_outcome({lease_name:?}, {owner:?}): {error}")
        })
}

fn assert_outcome(
    outcome: &LeaseOutcome,
    status: LeaseStatus,
    token: u64,
    owner: &str,
    took_over: bool,
    what: &str,
) {
    assert_eq!(
        (
            outcome.response.status,
            outcome.response.fencing_token,
            outcome.response.current_owner.as_str(),
            outcome.took_over
        ),
        (status, FencingToken(token), owner, took_over),
        "{what}: (status, token, owner, took_over)"
    );
}

/// Two handles of a fresh storage, or `None` (after proving both methods refuse with
/// `Unsupported`) when the backend does not offer outcomes.
async fn two_handles_with_outcomes<F: StorageFactory>(
    factory: &F,
) -> Option<(F::Storage, F::Storage)> {
    let storage = factory.create().await;
    if !(storage.supports(Capability::Lease) && storage.supports(Capability::LeaseOutcomes)) {
        support::assert_unsupported(
            storage
                .request_leases_with_outcome(vec![LeaseRequest::new("l", "o", 0, LONG_TTL)])
                .await,
            "request_leases_with_outcome without Capability::LeaseOutcomes",
        );
        support::assert_unsupported(
            storage.release_lease_with_outcome("l", "o").await,
            "release_lease_with_outcome without Capability::LeaseOutcomes",
        );
        return None;
    }
    let other = factory.another_handle(&storage).await;
    Some((storage, other))
}
