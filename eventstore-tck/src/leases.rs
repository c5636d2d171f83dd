//! Scenarios: leases ([`eventstore_api::Capability::Lease`]).
//!
//! Each scenario proves one rule of the lease semantics of
//! [`EventStorage::request_lease`], [`EventStorage::request_leases`],
//! [`EventStorage::release_lease`], [`EventStorage::get_leases`] and
//! [`EventStorage::storage_time`]. Run on a backend that does not declare the capability
//! (`tck_tests!` reports them as ignored there; `--include-ignored` runs them anyway), each
//! scenario proves instead that each lease method refuses with `Unsupported`.
//!
//! Leases that must stay live use [`LONG_TTL`]; where expiry is the point, scenarios use a
//! short ttl and poll the storage's clock with a deadline, never a bare sleep.
//!
//! Needs [`Capability::Lease`](eventstore_api::Capability::Lease), every scenario here.

use eventstore_api::EventStorageExt;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use eventstore_api::{EventStorage, FencingToken, Lease, LeaseRequest, LeaseResponse, LeaseStatus};
use tokio::sync::Barrier;

use crate::support::{self, assert_closed, assert_invalid_input, LONG_TTL, SHORT_TTL};
use crate::StorageFactory;

/// How many requests race each other in the concurrency scenarios.
const CONTENDERS: usize = 16;

/// The ttl of a contender whose lapse a scenario waits for: long enough that the holder's next
/// request surely sees it live on a slow machine, short enough to wait out.
const LAPSING_CONTENDER_TTL: Duration = Duration::from_secs(1);

/// The longest ttl the contract accepts (7 days).
const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The longest lease name or owner the contract accepts, in bytes.
const MAX_NAME_BYTES: usize = 512;

// ---------------------------------------------------------------------------------------------
// Acquisition, renewal, standby (rules 2, 3, 4, 6, 7)
// ---------------------------------------------------------------------------------------------

/// The very first request for a lease makes the caller its leader with token 1, and the
/// storage records the lease with the request's priority and ttl, acquired and heartbeat at
/// one instant of the storage's own clock.
pub async fn first_request_gets_token_one<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    let before = storage_time(&storage).await;
    let response = request(&storage, "orders", "node-a", 3, LONG_TTL).await;
    let after = storage_time(&storage).await;

    assert_eq!(response, leader(1, "node-a"), "first request");
    let lease = lease_named(&storage, "orders").await;
    assert_eq!(lease.owner, "node-a", "owner of the new lease: {lease:?}");
    assert_eq!(lease.priority, 3, "priority of the new lease: {lease:?}");
    assert_eq!(lease.ttl, LONG_TTL, "ttl of the new lease: {lease:?}");
    assert_eq!(lease.fencing_token, FencingToken(1), "token: {lease:?}");
    assert_eq!(
        lease.acquired_at, lease.heartbeat_at,
        "a new lease is acquired and heartbeat at the same instant: {lease:?}"
    );
    assert!(
        before <= lease.acquired_at && lease.acquired_at <= after,
        "acquired_at {} must lie on the storage's clock between {before} and {after}",
        lease.acquired_at
    );
}

/// A holder's request renews its live lease: the token and `acquired_at` stay, the heartbeat
/// moves forward on the storage's clock.
pub async fn renewal_keeps_token_and_acquired_at_and_moves_heartbeat<F: StorageFactory>(
    factory: &F,
) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    let first = lease_named(&storage, "orders").await;
    wait_for_storage_time_after(&storage, first.heartbeat_at).await;

    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(response, leader(1, "node-a"), "renewal");
    let renewed = lease_named(&storage, "orders").await;
    assert_eq!(
        renewed.fencing_token, first.fencing_token,
        "renewal keeps the token"
    );
    assert_eq!(
        renewed.acquired_at, first.acquired_at,
        "renewal keeps acquired_at"
    );
    assert!(
        renewed.heartbeat_at > first.heartbeat_at,
        "renewal moves the heartbeat forward: was {}, now {}",
        first.heartbeat_at,
        renewed.heartbeat_at
    );
    assert!(
        renewed.heartbeat_at <= storage_time(&storage).await,
        "the heartbeat lies on the storage's clock, not in its future: {renewed:?}"
    );
}

/// A renewal refreshes the priority and ttl the lease records to those of the latest request.
pub async fn renewal_refreshes_priority_and_ttl<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 1, LONG_TTL).await;
    let longer = LONG_TTL * 2;
    let response = request(&storage, "orders", "node-a", 7, longer).await;
    assert_eq!(response, leader(1, "node-a"), "renewal");

    let lease = lease_named(&storage, "orders").await;
    assert_eq!(
        lease.priority, 7,
        "renewal refreshes the priority: {lease:?}"
    );
    assert_eq!(lease.ttl, longer, "renewal refreshes the ttl: {lease:?}");
}

/// A ttl finer than a microsecond is kept in whole microseconds, by the lease and by its
/// contenders, as PostgreSQL's `interval` keeps it: the same request leaves the same lease on
/// every backend.
pub async fn a_ttl_is_kept_in_whole_microseconds<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    let fine = LONG_TTL + Duration::from_nanos(999);
    request(&storage, "orders", "node-a", 0, fine).await;
    request(&storage, "orders", "node-b", 0, fine).await;
    let lease = lease_named(&storage, "orders").await;
    assert_eq!(lease.ttl, LONG_TTL, "the lease's ttl in whole microseconds");
    let contenders = storage
        .get_contenders("orders")
        .await
        .unwrap_or_else(|err| panic!("get_contenders failed: {err}"));
    for contender in contenders {
        assert_eq!(
            contender.ttl, LONG_TTL,
            "a contender's ttl in whole microseconds: {contender:?}"
        );
    }
}

/// A request while another owner holds the live lease answers `Standby`, carrying the
/// holder's token and owner, and leaves the lease with the holder.
pub async fn standby_carries_the_holders_token_and_owner<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    let held = lease_named(&storage, "orders").await;

    let response = request(&other, "orders", "node-b", 0, LONG_TTL).await;
    assert_eq!(response, standby(1, "node-a"), "contender");
    let after = lease_named(&storage, "orders").await;
    assert_eq!(after, held, "a standby request must not touch the lease");
}

/// A live lease is never revoked: however high a contender's priority and however often it
/// asks, it stands by while the holder is asked to step down and keeps the lease.
pub async fn a_live_lease_is_never_revoked<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    for attempt in 0..5 {
        let response = request(&other, "orders", "node-b", 100, LONG_TTL).await;
        assert_eq!(
            response,
            standby(1, "node-a"),
            "higher-priority contender, attempt {attempt}"
        );
    }
    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(
        response,
        step_down_requested(1, "node-a"),
        "holder with a higher-priority contender waiting"
    );
    assert_eq!(
        lease_named(&storage, "orders").await.owner,
        "node-a",
        "lease rule 5: the storage never revokes a live lease: the holder keeps it"
    );
}

// ---------------------------------------------------------------------------------------------
// Expiry and release (rule 3, release_lease, get_leases)
// ---------------------------------------------------------------------------------------------

/// `get_leases` lists every lease by name, whatever the order they were first asked for in
/// (a map kept in hash order would not).
pub async fn leases_are_listed_by_name<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    let names = ["m", "c", "x", "a", "q", "b", "z", "k"];
    for name in names {
        request(&storage, name, "node-a", 0, LONG_TTL).await;
    }
    let listed: Vec<String> = storage
        .get_leases()
        .await
        .unwrap_or_else(|err| panic!("get_leases failed: {err}"))
        .into_iter()
        .map(|lease| lease.lease_name)
        .collect();
    let mut by_name = names.map(str::to_owned).to_vec();
    by_name.sort();
    assert_eq!(listed, by_name, "get_leases rule: every lease, by name");
}

/// `get_leases_with_prefix` lists the leases whose names start with the prefix, as
/// `get_leases` lists them (by name); the prefix is plain text, no pattern (`%` and `_` are
/// characters like any other), and an empty one lists every lease. A prefix with a NUL is
/// refused.
pub async fn leases_are_listed_by_prefix<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    let names = [
        "work/1",
        "work/0",
        "work/members/a",
        "workers",
        "work",
        "a%b",
        "axb",
        "a_b",
        "é/1",
    ];
    for name in names {
        request(&storage, name, "node-a", 0, LONG_TTL).await;
    }
    let listed = |prefix: &'static str| {
        let storage = &storage;
        async move {
            storage
                .get_leases_with_prefix(prefix)
                .await
                .unwrap_or_else(|err| panic!("get_leases_with_prefix({prefix:?}) failed: {err}"))
                .into_iter()
                .map(|lease| lease.lease_name)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        listed("work/").await,
        ["work/0", "work/1", "work/members/a"],
        "the leases whose names start with the prefix, by name"
    );
    assert_eq!(listed("a%").await, ["a%b"], "% is no wildcard");
    assert_eq!(listed("a_").await, ["a_b"], "_ is no wildcard");
    assert_eq!(listed("é").await, ["é/1"]);
    assert_eq!(listed("nothing").await, Vec::<String>::new());
    let mut every_name = names.map(str::to_owned).to_vec();
    every_name.sort();
    assert_eq!(
        listed("").await,
        every_name,
        "an empty prefix lists every lease"
    );
    support::assert_invalid_input(
        storage.get_leases_with_prefix("work\0").await,
        "a prefix with a NUL character",
        "validate_text",
    );
}

/// `get_contenders_with_prefix` lists the contenders of every lease whose name starts with the
/// prefix, as `get_contenders` lists them lease by lease, the leases by name; the prefix is
/// plain text, no pattern, an empty one covers every lease, and one with a NUL is refused.
pub async fn contenders_are_listed_by_prefix_as_lease_by_lease<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    let names = ["work/1", "work/0", "workers", "a%b", "axb", "quiet"];
    for name in names {
        request(&storage, name, "node-a", 0, LONG_TTL).await;
    }
    for name in ["work/1", "work/0", "workers", "a%b", "axb"] {
        request(&other, name, "node-c", 0, LONG_TTL).await;
        request(&other, name, "node-b", 3, LONG_TTL).await;
    }
    let lease_by_lease = |leases: &'static [&'static str]| {
        let storage = &storage;
        async move {
            let mut contenders = Vec::new();
            for name in leases {
                let listed = storage.get_contenders(name).await;
                contenders.extend(
                    listed.unwrap_or_else(|err| panic!("get_contenders({name:?}) failed: {err}")),
                );
            }
            contenders
        }
    };
    let by_prefix = |prefix: &'static str| {
        let storage = &storage;
        async move {
            storage
                .get_contenders_with_prefix(prefix)
                .await
                .unwrap_or_else(|err| {
                    panic!("get_contenders_with_prefix({prefix:?}) failed: {err}")
                })
        }
    };
    let work = by_prefix("work/").await;
    assert_eq!(
        work,
        lease_by_lease(&["work/0", "work/1"]).await,
        "the contenders of the leases whose names start with the prefix, by lease name"
    );
    let shown: Vec<(&str, &str)> = work
        .iter()
        .map(|c| (c.lease_name.as_str(), c.owner.as_str()))
        .collect();
    assert_eq!(
        shown,
        [
            ("work/0", "node-b"),
            ("work/0", "node-c"),
            ("work/1", "node-b"),
            ("work/1", "node-c")
        ],
        "by lease, then by priority, without the holder node-a"
    );
    assert_eq!(
        by_prefix("a%").await,
        lease_by_lease(&["a%b"]).await,
        "% is no wildcard"
    );
    assert_eq!(by_prefix("quiet").await, [], "a lease nobody contends for");
    assert_eq!(by_prefix("nothing").await, []);
    assert_eq!(
        by_prefix("").await,
        lease_by_lease(&["a%b", "axb", "quiet", "work/0", "work/1", "workers"]).await,
        "an empty prefix covers every lease"
    );
    support::assert_invalid_input(
        storage.get_contenders_with_prefix("work\0").await,
        "a prefix with a NUL character",
        "validate_text",
    );
}

/// Once the holder's ttl has lapsed on the storage's clock, the next request by another owner
/// takes the lease over with the next token, acquired and heartbeat at once.
pub async fn expired_lease_is_taken_over_with_the_next_token<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, SHORT_TTL).await;
    support::wait_until_expired(&storage, "orders").await;
    let expired = lease_named(&storage, "orders").await;

    let response = request(&other, "orders", "node-b", 0, LONG_TTL).await;
    assert_eq!(response, leader(2, "node-b"), "takeover");
    let lease = lease_named(&storage, "orders").await;
    assert_eq!(lease.owner, "node-b", "new holder: {lease:?}");
    assert_eq!(
        lease.fencing_token,
        FencingToken(2),
        "next token: {lease:?}"
    );
    assert_eq!(
        lease.acquired_at, lease.heartbeat_at,
        "a takeover is an acquisition: {lease:?}"
    );
    assert!(
        lease.acquired_at > expired.expires_at(),
        "the takeover at {} happened after the old lease expired at {}",
        lease.acquired_at,
        expired.expires_at()
    );
}

/// A released lease is acquirable at once: it is listed as expired on the storage's clock
/// immediately, keeping its owner and token, and the next request takes it with token + 1
/// without waiting out the ttl.
pub async fn released_lease_is_acquirable_at_once<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    release(&storage, "orders", "node-a").await;

    let released = lease_named(&storage, "orders").await;
    let now = storage_time(&storage).await;
    assert!(
        released.is_expired_at(now),
        "a released lease is expired at once on the storage's clock ({now}): {released:?}"
    );
    assert_eq!(released.owner, "node-a", "release keeps the last owner");
    assert_eq!(
        released.fencing_token,
        FencingToken(1),
        "release keeps the token"
    );

    let response = request(&other, "orders", "node-b", 0, LONG_TTL).await;
    assert_eq!(response, leader(2, "node-b"), "request after release");
}

/// Releasing a lease one does not hold succeeds and changes nothing: the holder keeps its
/// lease, token and heartbeat.
pub async fn release_by_a_non_owner_changes_nothing<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    let before = leases(&storage).await;

    release(&other, "orders", "node-b").await;
    assert_leases_unchanged(
        &storage,
        &before,
        "a release by a non-owner must not touch the lease",
    )
    .await;
    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(response, leader(1, "node-a"), "holder after");
}

/// Releasing a lease that never existed succeeds, creates nothing and touches no other lease.
pub async fn release_of_an_unknown_lease_changes_nothing<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    let before = leases(&storage).await;

    release(&storage, "never-requested", "node-a").await;
    assert_leases_unchanged(
        &storage,
        &before,
        "releasing an unknown lease must change nothing",
    )
    .await;
}

/// An expired lease is not held, not even by its last owner: that owner's release changes
/// nothing, and the next request still takes the lease over with the next token.
///
/// Each round releases as soon after the expiry as the storage answers, where a release that
/// backdates the heartbeat of any lease its caller last owned would still move it.
pub async fn releasing_ones_own_expired_lease_changes_nothing<F: StorageFactory>(factory: &F) {
    const ROUNDS: usize = 10;
    const TTL: Duration = Duration::from_millis(30);
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    for round in 0..ROUNDS {
        let lease_name = format!("orders-{round}");
        request(&storage, &lease_name, "node-a", 0, TTL).await;
        let before = wait_until_just_expired(&storage, &lease_name).await;

        release(&storage, &lease_name, "node-a").await;
        assert_leases_unchanged(
            &storage,
            &before,
            &format!("round {round}: releasing a lease that already expired must change nothing"),
        )
        .await;
        let response = request(&other, &lease_name, "node-b", 0, LONG_TTL).await;
        assert_eq!(
            response,
            leader(2, "node-b"),
            "round {round}: takeover after the release"
        );
    }
}

/// Leases that expired or were released stay listed with their last owner, priority, token
/// and ttl, and `is_expired_at(storage_time)` tells them from live ones.
pub async fn expired_leases_stay_listed_with_their_last_owner<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    request(&storage, "expiring", "node-a", 3, SHORT_TTL).await;
    request(&storage, "released", "node-b", 4, LONG_TTL).await;
    request(&storage, "live", "node-c", 5, LONG_TTL).await;
    release(&storage, "released", "node-b").await;
    support::wait_until_expired(&storage, "expiring").await;

    let now = storage_time(&storage).await;
    let listed = leases(&storage).await;
    // (name, last owner, priority, ttl where the contract fixes it, expired)
    let expected = [
        ("expiring", "node-a", 3, Some(SHORT_TTL), true),
        ("released", "node-b", 4, None, true),
        ("live", "node-c", 5, Some(LONG_TTL), false),
    ];
    for (name, owner, priority, ttl, expired) in expected {
        let lease = listed
            .iter()
            .find(|lease| lease.lease_name == name)
            .unwrap_or_else(|| panic!("lease {name} must stay listed, got {listed:?}"));
        assert_eq!(lease.owner, owner, "last owner of {name}: {lease:?}");
        assert_eq!(lease.priority, priority, "priority of {name}: {lease:?}");
        assert_eq!(lease.fencing_token, FencingToken(1), "token of {name}");
        if let Some(ttl) = ttl {
            assert_eq!(lease.ttl, ttl, "ttl of {name}: {lease:?}");
        }
        assert_eq!(
            lease.is_expired_at(now),
            expired,
            "is_expired_at({now}) of {name}: {lease:?}"
        );
    }
    assert_eq!(listed.len(), 3, "exactly the three leases: {listed:?}");
}

// ---------------------------------------------------------------------------------------------
// Priority and step-down (rules 2 and 5, release withdraws the contender)
// ---------------------------------------------------------------------------------------------

/// A live contender with a strictly higher priority turns the holder's renewal into
/// `LeaderStepDownRequested`, with the holder's token kept.
pub async fn higher_live_priority_asks_the_holder_to_step_down<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    let response = request(&other, "orders", "node-b", 1, LONG_TTL).await;
    assert_eq!(response, standby(1, "node-a"), "contender");

    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(
        response,
        step_down_requested(1, "node-a"),
        "holder with a contender of priority 1 over its 0"
    );
}

/// Contenders of equal or lower priority never ask the holder to step down, down to the
/// extremes of the priority range.
pub async fn equal_or_lower_priority_never_asks_for_step_down<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 5, LONG_TTL).await;
    for (owner, priority) in [("equal", 5), ("lower", 4), ("lowest", i64::MIN)] {
        let response = request(&other, "orders", owner, priority, LONG_TTL).await;
        assert_eq!(response, standby(1, "node-a"), "{owner}");
    }
    let response = request(&storage, "orders", "node-a", 5, LONG_TTL).await;
    assert_eq!(
        response,
        leader(1, "node-a"),
        "holder of priority 5 with contenders of 5, 4 and i64::MIN"
    );

    request(&storage, "top", "node-a", i64::MAX, LONG_TTL).await;
    request(&other, "top", "node-b", i64::MAX, LONG_TTL).await;
    let response = request(&storage, "top", "node-a", i64::MAX, LONG_TTL).await;
    assert_eq!(
        response,
        leader(1, "node-a"),
        "holder of priority i64::MAX with a contender of the same"
    );
}

/// A contender counts with its latest request: the holder's own earlier, higher priority is
/// never a reason to step down, and a contender that lowers its priority withdraws its
/// step-down request.
pub async fn a_contender_is_judged_by_its_latest_priority<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 10, LONG_TTL).await;
    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(
        response,
        leader(1, "node-a"),
        "holder lowering its own priority (it is no contender of itself)"
    );

    request(&other, "orders", "node-b", 20, LONG_TTL).await;
    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(
        response,
        step_down_requested(1, "node-a"),
        "holder with a contender of priority 20"
    );
    request(&other, "orders", "node-b", 0, LONG_TTL).await;
    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(
        response,
        leader(1, "node-a"),
        "holder after the contender lowered its priority to 0"
    );
}

/// A step-down request lapses with its contender: once the higher-priority contender's own
/// ttl has lapsed on the storage's clock without another request, the holder is `Leader`
/// again, and it kept the lease throughout.
pub async fn step_down_request_lapses_with_the_higher_contender<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    let contender_registered_after = storage_time(&storage).await;
    request(&other, "orders", "node-b", 10, LAPSING_CONTENDER_TTL).await;
    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(
        response,
        step_down_requested(1, "node-a"),
        "holder while the higher-priority contender is live"
    );

    support::eventually("the step-down request to lapse", || async {
        let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
        assert!(
            response.status.is_leader() && response.fencing_token == FencingToken(1),
            "the holder keeps its lease while asked to step down: {response:?}"
        );
        response.status == LeaseStatus::Leader
    })
    .await;
    let lapsed_by = contender_registered_after
        + chrono::Duration::from_std(LAPSING_CONTENDER_TTL).expect("ttl fits");
    let now = storage_time(&storage).await;
    assert!(
        now > lapsed_by,
        "the step-down request lapsed at {now}, before the contender's ttl ran out at {lapsed_by}"
    );
}

/// Releasing withdraws the releaser's contender registration, whether or not it held the
/// lease: a waiting higher-priority contender that releases no longer asks the holder to step
/// down, and a high-priority holder that releases does not ask its successor to.
pub async fn release_withdraws_the_contender<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    request(&other, "orders", "node-b", 10, LONG_TTL).await;
    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(response.status, LeaseStatus::LeaderStepDownRequested, "lease rule 5: the holder is asked to step down while a live contender of higher priority waits");

    release(&other, "orders", "node-b").await;
    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(
        response,
        leader(1, "node-a"),
        "holder after the higher-priority contender released"
    );

    request(&storage, "payments", "node-a", 10, LONG_TTL).await;
    release(&storage, "payments", "node-a").await;
    let response = request(&other, "payments", "node-b", 0, LONG_TTL).await;
    assert_eq!(
        response,
        leader(2, "node-b"),
        "successor of a priority-10 holder that released (and so withdrew)"
    );
}

/// Step-down is judged on acquisition too: an owner that acquires a lease while a live
/// contender of strictly higher priority waits is told at once to step down.
pub async fn step_down_is_judged_on_acquisition_too<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-x", 0, LONG_TTL).await;
    let response = request(&other, "orders", "node-high", 10, LONG_TTL).await;
    assert_eq!(
        response.status,
        LeaseStatus::Standby,
        "lease rule 6: a contender that does not hold the live lease stands by"
    );
    release(&storage, "orders", "node-x").await;

    let response = request(&storage, "orders", "node-low", 0, LONG_TTL).await;
    assert_eq!(
        response,
        step_down_requested(2, "node-low"),
        "acquisition while a priority-10 contender is live"
    );
}

/// Planned handover: the holder asked to step down releases, and the higher-priority
/// contender takes the lease with token + 1 on its next request, as plain `Leader`; the old
/// holder then stands by behind it.
pub async fn planned_handover_passes_the_lease_to_the_higher_priority_contender<
    F: StorageFactory,
>(
    factory: &F,
) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-old", 0, LONG_TTL).await;
    request(&other, "orders", "node-new", 10, LONG_TTL).await;
    let response = request(&storage, "orders", "node-old", 0, LONG_TTL).await;
    assert_eq!(
        response.status,
        LeaseStatus::LeaderStepDownRequested,
        "lease rule 5: the holder is asked to step down by a live contender of higher priority"
    );

    release(&storage, "orders", "node-old").await;
    let response = request(&other, "orders", "node-new", 10, LONG_TTL).await;
    assert_eq!(response, leader(2, "node-new"), "handover");
    let response = request(&storage, "orders", "node-old", 0, LONG_TTL).await;
    assert_eq!(response, standby(2, "node-new"), "old holder");
    let response = request(&other, "orders", "node-new", 10, LONG_TTL).await;
    assert_eq!(response, leader(2, "node-new"), "new holder");
}

// ---------------------------------------------------------------------------------------------
// Fencing tokens (rule 3)
// ---------------------------------------------------------------------------------------------

/// Re-acquiring one's own lease after it expired is a new tenure with a new token.
pub async fn reacquiring_ones_own_expired_lease_gets_a_new_token<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, SHORT_TTL).await;
    support::wait_until_expired(&storage, "orders").await;
    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(
        response,
        leader(2, "node-a"),
        "same owner after its lease expired"
    );
}

/// Re-acquiring one's own lease after releasing it is a new tenure with a new token.
pub async fn reacquiring_ones_own_released_lease_gets_a_new_token<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    release(&storage, "orders", "node-a").await;
    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(response, leader(2, "node-a"), "same owner after releasing");
}

/// A holder whose ttl lapsed is no longer the holder, even if nobody else took the lease:
/// its next request is a re-acquisition (new token, `acquired_at` reset to the heartbeat),
/// not a renewal, and contenders see the new token.
pub async fn a_lapsed_holder_that_requests_again_starts_a_new_tenure<F: StorageFactory>(
    factory: &F,
) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, SHORT_TTL).await;
    let first = lease_named(&storage, "orders").await;
    let response = request(&other, "orders", "node-b", 0, LONG_TTL).await;
    assert_eq!(response, standby(1, "node-a"), "contender");
    support::wait_until_expired(&storage, "orders").await;

    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(
        response,
        leader(2, "node-a"),
        "the lapsed holder, first to ask again"
    );
    let second = lease_named(&storage, "orders").await;
    assert_eq!(
        second.acquired_at, second.heartbeat_at,
        "a re-acquisition starts a new tenure: {second:?}"
    );
    assert!(
        second.acquired_at > first.acquired_at,
        "acquired_at must move to the new tenure: was {}, now {}",
        first.acquired_at,
        second.acquired_at
    );
    let response = request(&other, "orders", "node-b", 0, LONG_TTL).await;
    assert_eq!(response, standby(2, "node-a"), "contender after");
}

/// Over a sequence of owners, handing over by release and by expiry and including owners that
/// come back, every acquisition gets the previous token + 1: tokens strictly increase and
/// never repeat.
pub async fn tokens_strictly_increase_over_owners_and_never_repeat<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    // (owner, hands over by expiry rather than by release)
    let tenures = [
        ("node-a", false),
        ("node-b", true),
        ("node-c", false),
        ("node-a", false),
        ("node-b", true),
        ("node-a", false),
        ("node-c", false),
    ];
    let mut tokens = Vec::new();
    for (index, (owner, by_expiry)) in tenures.into_iter().enumerate() {
        let handle = if index % 2 == 0 { &storage } else { &other };
        let ttl = if by_expiry { SHORT_TTL } else { LONG_TTL };
        let response = request(handle, "orders", owner, 0, ttl).await;
        assert!(
            response.status.is_leader() && response.current_owner == owner,
            "tenure {index}: {owner} must acquire the free lease, got {response:?}"
        );
        if let Some(previous) = tokens.last() {
            assert_eq!(
                response.fencing_token,
                FencingToken::next(*previous),
                "tenure {index} ({owner}) must get the previous token + 1; tokens so far {tokens:?}"
            );
        }
        tokens.push(response.fencing_token);
        if by_expiry {
            support::wait_until_expired(&storage, "orders").await;
        } else {
            release(handle, "orders", owner).await;
        }
    }
    assert_eq!(tokens.first(), Some(&FencingToken(1)), "tokens {tokens:?}");
    let distinct: HashSet<_> = tokens.iter().collect();
    assert_eq!(distinct.len(), tokens.len(), "tokens repeat: {tokens:?}");
}

/// A displaced owner that keeps requesting never renews the new holder's lease: it stands by
/// behind the new token, and the new holder's record (heartbeat, ttl, priority) stays as the
/// new holder left it.
pub async fn a_displaced_owner_never_renews_the_new_holders_lease<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, SHORT_TTL).await;
    support::wait_until_expired(&storage, "orders").await;
    request(&other, "orders", "node-b", 0, LONG_TTL).await;
    let taken = lease_named(&storage, "orders").await;
    wait_for_storage_time_after(&storage, taken.heartbeat_at).await;

    for attempt in 0..10 {
        let response = request(&storage, "orders", "node-a", 1, LONG_TTL * 2).await;
        assert_eq!(
            response,
            standby(2, "node-b"),
            "displaced owner, attempt {attempt}"
        );
    }
    assert_eq!(
        lease_named(&storage, "orders").await,
        taken,
        "the displaced owner's requests must leave the new holder's lease untouched"
    );
}

/// Leases are independent: tokens count per lease, and a contender, release or expiry on one
/// lease leaves every other lease as it was.
pub async fn leases_are_independent<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "alpha", "node-a", 0, LONG_TTL).await;
    request(&storage, "alpha", "node-a", 0, LONG_TTL).await;
    release(&storage, "alpha", "node-a").await;
    request(&storage, "alpha", "node-a", 0, LONG_TTL).await;

    let response = request(&other, "beta", "node-b", 0, SHORT_TTL).await;
    assert_eq!(response, leader(1, "node-b"), "beta's first");
    let response = request(&other, "alpha", "node-c", 100, LONG_TTL).await;
    assert_eq!(response, standby(2, "node-a"), "alpha contender");
    let response = request(&other, "beta", "node-b", 0, SHORT_TTL).await;
    assert_eq!(
        response,
        leader(1, "node-b"),
        "beta's holder is not asked to step down by alpha's contender"
    );

    let alpha = lease_named(&storage, "alpha").await;
    release(&storage, "beta", "node-a").await;
    support::wait_until_expired(&storage, "beta").await;
    assert_eq!(
        lease_named(&storage, "alpha").await,
        alpha,
        "beta's release and expiry leave alpha untouched"
    );
    let now = storage_time(&storage).await;
    assert!(!alpha.is_expired_at(now), "alpha is still live: {alpha:?}");
}

// ---------------------------------------------------------------------------------------------
// Contention (rule 8)
// ---------------------------------------------------------------------------------------------

/// Many first requests for one lease at once, from several handles and tasks, elect exactly
/// one leader with token 1; every other request stands by behind it.
pub async fn concurrent_first_requests_elect_exactly_one<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    let handles = [Arc::new(storage), Arc::new(other)];
    assert_race_elects_exactly_one(&handles, &handles[0], FencingToken(1)).await;
}

/// Many requests racing for an expired lease elect exactly one new leader with the next
/// token; every other request stands by behind it.
pub async fn concurrent_takeover_after_expiry_elects_exactly_one<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-old", 0, SHORT_TTL).await;
    support::wait_until_expired(&storage, "orders").await;

    let handles = [Arc::new(storage), Arc::new(other)];
    assert_race_elects_exactly_one(&handles, &handles[1], FencingToken(2)).await;
}

/// Concurrent requests by one owner never move its lease's `heartbeat_at` backwards: a
/// request that started earlier but is applied later must not stamp the earlier time over a
/// later one, or the storage could expire the lease before the holder's own deadline. Each
/// round races 16 renewals over two handles while `get_leases` is read again and again; no
/// reading may be earlier than the one before.
pub async fn concurrent_renewals_by_one_owner_never_move_the_heartbeat_back<F: StorageFactory>(
    factory: &F,
) {
    const ROUNDS: usize = 20;
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    let handles = [Arc::new(storage), Arc::new(other)];
    let first = request(&*handles[0], "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(first, leader(1, "node-a"), "first request");
    let mut highest = lease_named(&*handles[0], "orders").await.heartbeat_at;
    let mut readings = 0_usize;
    for round in 0..ROUNDS {
        let start = Arc::new(Barrier::new(CONTENDERS));
        let tasks: Vec<_> = (0..CONTENDERS)
            .map(|index| {
                let handle = Arc::clone(&handles[index % handles.len()]);
                let start = Arc::clone(&start);
                tokio::spawn(async move {
                    start.wait().await;
                    handle
                        .request_lease(LeaseRequest::new("orders", "node-a", 0, LONG_TTL))
                        .await
                })
            })
            .collect();
        loop {
            let finished = tasks.iter().all(|task| task.is_finished());
            let heartbeat = lease_named(&*handles[round % 2], "orders")
                .await
                .heartbeat_at;
            readings += 1;
            assert!(
                heartbeat >= highest,
                "round {round}: heartbeat_at went back from {highest} to {heartbeat}"
            );
            highest = heartbeat;
            if finished {
                break;
            }
        }
        for (index, task) in tasks.into_iter().enumerate() {
            let response = task
                .await
                .unwrap_or_else(|error| panic!("request {index} panicked: {error}"))
                .unwrap_or_else(|error| panic!("request {index} failed: {error}"));
            assert_eq!(
                response,
                leader(1, "node-a"),
                "round {round}, request {index}"
            );
        }
    }
    assert!(readings >= ROUNDS, "read the lease {readings} times");
}

// ---------------------------------------------------------------------------------------------
// Input rules (rule 1)
// ---------------------------------------------------------------------------------------------

/// Every invalid request (blank, NUL-holding or over-512-byte lease name or owner; ttl under
/// 1 ms or over 7 days) is refused with `InvalidInput` and changes nothing: no lease is
/// created or renewed and no contender registered.
pub async fn invalid_requests_are_refused_and_change_nothing<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    let before = leases(&storage).await;

    for (what, invalid) in invalid_requests() {
        let result = storage.request_lease(invalid.clone()).await;
        assert_invalid_input(
            result,
            &format!("request_lease with {what}"),
            "validate_lease_request",
        );
        assert_leases_unchanged(
            &storage,
            &before,
            &format!("a refused request with {what} must change nothing"),
        )
        .await;
    }
    let response = request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    assert_eq!(
        response,
        leader(1, "node-a"),
        "holder after refused requests (none may have registered a contender)"
    );
}

/// Requests right at the limits are accepted: a 512-byte lease name, a 512-byte owner of
/// two-byte characters, a ttl of exactly 1 ms and of exactly 7 days.
pub async fn requests_at_the_limits_are_accepted<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    let long_name = "n".repeat(MAX_NAME_BYTES);
    let long_owner = "é".repeat(MAX_NAME_BYTES / 2);
    let cases = [
        (
            "a 512-byte name",
            LeaseRequest::new(&long_name, "node-a", 0, LONG_TTL),
        ),
        (
            "a 512-byte owner",
            LeaseRequest::new("owner-limit", &long_owner, 0, LONG_TTL),
        ),
        (
            "a ttl of 1ms",
            LeaseRequest::new("short", "node-a", 0, Duration::from_millis(1)),
        ),
        (
            "a ttl of 7 days",
            LeaseRequest::new("long", "node-a", 0, MAX_TTL),
        ),
    ];
    for (what, accepted) in cases {
        let owner = accepted.owner.clone();
        let lease_name = accepted.lease_name.clone();
        let response = storage
            .request_lease(accepted)
            .await
            .unwrap_or_else(|error| panic!("a request with {what} must be accepted: {error}"));
        assert_eq!(response, leader(1, &owner), "{what}");
        let lease = lease_named(&storage, &lease_name).await;
        assert_eq!(lease.owner, owner, "{what}: owner kept byte for byte");
    }
}

/// `release_lease` with an invalid lease name or owner is refused with `InvalidInput` and
/// changes nothing.
pub async fn invalid_releases_are_refused_and_change_nothing<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    let before = leases(&storage).await;

    let too_long = "x".repeat(MAX_NAME_BYTES + 1);
    let cases = [
        ("an empty lease name", "", "node-a"),
        ("a blank lease name", " \t", "node-a"),
        ("a lease name with NUL", "orders\0", "node-a"),
        ("a 513-byte lease name", too_long.as_str(), "node-a"),
        ("an empty owner", "orders", ""),
        ("a blank owner", "orders", "  "),
        ("an owner with NUL", "orders", "node-a\0"),
        ("a 513-byte owner", "orders", too_long.as_str()),
    ];
    for (what, lease_name, owner) in cases {
        let result = storage.release_lease(lease_name, owner).await;
        assert_invalid_input(
            result,
            &format!("release_lease with {what}"),
            "validate_release",
        );
        assert_leases_unchanged(
            &storage,
            &before,
            &format!("a refused release with {what} must change nothing"),
        )
        .await;
    }
}

/// `release_leases` releases every listed lease the owner holds (each acquirable at once by
/// the next request, with the next token), withdraws the owner as contender of the others,
/// leaves other owners' leases alone, takes a name listed twice once, and an empty list
/// changes nothing.
pub async fn releasing_several_leases_releases_each_held_one<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "a", "node-a", 0, LONG_TTL).await;
    request(&storage, "b", "node-a", 0, LONG_TTL).await;
    request(&other, "c", "node-b", 0, LONG_TTL).await;
    // node-a waits for c with a higher priority: its registration asks node-b to step down.
    request(&storage, "c", "node-a", 5, LONG_TTL).await;
    storage
        .release_leases(&[], "node-a")
        .await
        .expect("release_leases of nothing");
    assert_eq!(
        request(&other, "c", "node-b", 0, LONG_TTL).await,
        step_down_requested(1, "node-b"),
        "an empty release_leases withdraws nothing"
    );

    let names = ["a", "b", "c", "a", "never-held"].map(String::from);
    storage
        .release_leases(&names, "node-a")
        .await
        .expect("release_leases");
    let now = storage_time(&storage).await;
    for name in ["a", "b"] {
        let lease = lease_named(&storage, name).await;
        assert!(
            lease.is_expired_at(now),
            "release_leases: {name} is released, expired at once on the storage's clock: {lease:?}"
        );
        assert_eq!(
            request(&other, name, "node-b", 0, LONG_TTL).await,
            leader(2, "node-b"),
            "release_leases: the next request acquires {name} with the next token"
        );
    }
    assert_eq!(
        request(&other, "c", "node-b", 0, LONG_TTL).await,
        leader(1, "node-b"),
        "release_leases leaves another owner's lease alone and withdraws the caller as contender"
    );
    assert!(
        !leases(&storage)
            .await
            .iter()
            .any(|lease| lease.lease_name == "never-held"),
        "release_leases creates no lease"
    );
}

/// `release_leases` with an invalid owner or any invalid lease name is refused with
/// `InvalidInput` (rule `validate_releases`) and changes nothing, not even for the valid names.
pub async fn invalid_batch_releases_are_refused_and_change_nothing<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    let before = leases(&storage).await;
    let cases = [
        (
            "an invalid second name",
            vec!["orders".to_owned(), " ".to_owned()],
            "node-a",
        ),
        ("a NUL in a name", vec!["orders\0".to_owned()], "node-a"),
        ("a blank owner", vec!["orders".to_owned()], " "),
    ];
    for (what, names, owner) in cases {
        let result = storage.release_leases(&names, owner).await;
        assert_invalid_input(
            result,
            &format!("release_leases with {what}"),
            "validate_releases",
        );
        assert_leases_unchanged(
            &storage,
            &before,
            &format!("a refused release_leases with {what} must change nothing"),
        )
        .await;
    }
}

/// A batch above `MAX_LEASE_BATCH` requests, and a `release_leases` above as many names, is
/// refused with `InvalidInput` naming the limit (rule `validate_lease_requests`,
/// `validate_releases`), before anything is read or written.
pub async fn batches_above_the_limit_are_refused_and_change_nothing<F: StorageFactory>(
    factory: &F,
) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    let before = leases(&storage).await;
    let limit = eventstore_api::validate::MAX_LEASE_BATCH;
    let requests: Vec<LeaseRequest> = (0..=limit)
        .map(|i| LeaseRequest::new(format!("l{i}"), "node-b", 0, LONG_TTL))
        .collect();
    let refused = storage.request_leases(requests).await;
    assert!(
        matches!(&refused, Err(eventstore_api::EventStorageError::InvalidInput { problem, .. })
            if problem.contains(&limit.to_string())),
        "request_leases of {} requests: InvalidInput naming the limit {limit} \
         (validate_lease_requests), got {:?}",
        limit + 1,
        refused.as_ref().map(Vec::len)
    );
    let names: Vec<String> = (0..=limit).map(|i| format!("l{i}")).collect();
    let refused = storage.release_leases(&names, "node-a").await;
    assert!(
        matches!(&refused, Err(eventstore_api::EventStorageError::InvalidInput { problem, .. })
            if problem.contains(&limit.to_string())),
        "release_leases of {} names: InvalidInput naming the limit (validate_releases), got \
         {refused:?}",
        limit + 1
    );
    assert_leases_unchanged(
        &storage,
        &before,
        "refused oversized batches change nothing",
    )
    .await;
}

/// `get_contenders` lists a lease's contenders besides its holder, by priority (highest
/// first), then owner id, each with the priority, ttl and heartbeat of its last request on the
/// storage's clock; a lease nobody contends for, or that never existed, has none.
pub async fn contenders_are_listed_by_priority_without_the_holder<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    let before = storage_time(&storage).await;
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    request(&other, "orders", "node-c", 0, LONG_TTL).await;
    request(&other, "orders", "node-b", 0, LONG_TTL).await;
    request(&other, "orders", "node-d", 5, SHORT_TTL * 100).await;
    let after = storage_time(&storage).await;

    let contenders = storage
        .get_contenders("orders")
        .await
        .expect("get_contenders");
    let listed: Vec<(&str, i64, Duration)> = contenders
        .iter()
        .map(|c| (c.owner.as_str(), c.priority, c.ttl))
        .collect();
    assert_eq!(
        listed,
        [
            ("node-d", 5, SHORT_TTL * 100),
            ("node-b", 0, LONG_TTL),
            ("node-c", 0, LONG_TTL)
        ],
        "get_contenders: by priority, then owner, without the holder node-a"
    );
    for contender in &contenders {
        assert_eq!(
            contender.lease_name, "orders",
            "get_contenders: {contender:?}"
        );
        assert!(
            before <= contender.heartbeat_at && contender.heartbeat_at <= after,
            "get_contenders: heartbeat on the storage's clock between {before} and {after}: \
             {contender:?}"
        );
        assert!(
            contender.is_live_at(after),
            "get_contenders: a fresh registration is live: {contender:?}"
        );
    }
    assert!(
        storage
            .get_contenders("nobody-contends")
            .await
            .expect("get_contenders")
            .is_empty(),
        "get_contenders of a lease that never existed: none"
    );
    request(&storage, "solo", "node-a", 0, LONG_TTL).await;
    assert!(
        storage
            .get_contenders("solo")
            .await
            .expect("get_contenders")
            .is_empty(),
        "get_contenders of a lease only its holder asked for: none"
    );
}

/// A contender that releases is withdrawn at once; one whose registration lapsed is either no
/// longer listed or listed as not live on the storage's clock.
pub async fn withdrawn_and_lapsed_contenders_are_not_live<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    request(&other, "orders", "node-b", 0, LONG_TTL).await;
    request(&other, "orders", "node-c", 0, SHORT_TTL).await;
    release(&other, "orders", "node-b").await;
    let owners: Vec<String> = storage
        .get_contenders("orders")
        .await
        .expect("get_contenders")
        .into_iter()
        .map(|c| c.owner)
        .collect();
    assert_eq!(
        owners,
        ["node-c"],
        "get_contenders: a released contender is withdrawn"
    );

    support::eventually(
        "node-c's registration to lapse on the storage's clock",
        || async {
            let now = storage_time(&storage).await;
            let contenders = storage
                .get_contenders("orders")
                .await
                .expect("get_contenders");
            contenders.iter().all(|c| !c.is_live_at(now))
        },
    )
    .await;
}

/// `get_contenders` with an invalid lease name is refused with `InvalidInput` naming the lease
/// name (rule `validate_name`).
pub async fn contenders_of_an_invalid_lease_name_are_refused<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    for (what, name) in [
        ("an empty", ""),
        ("a blank", " "),
        ("a NUL-holding", "a\0b"),
    ] {
        assert_invalid_input(
            storage.get_contenders(name).await,
            &format!("get_contenders of {what} lease name"),
            "validate_name",
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Batches (request_leases)
// ---------------------------------------------------------------------------------------------

/// A batch answers exactly as the same requests one by one, in order, and leaves the same
/// leases behind, with several requests for one lease in the batch (acquire, stand by, be
/// asked to step down) and a request against a lease held before the batch.
pub async fn a_batch_answers_as_the_same_requests_one_by_one<F: StorageFactory>(factory: &F) {
    let Some(batched) = storage_with_leases(factory).await else {
        return;
    };
    let one_by_one = factory.create().await;
    for storage in [&batched, &one_by_one] {
        request(storage, "held", "node-x", 0, LONG_TTL).await;
    }
    let requests = vec![
        LeaseRequest::new("fresh", "node-a", 0, LONG_TTL),
        LeaseRequest::new("fresh", "node-b", 5, LONG_TTL),
        LeaseRequest::new("fresh", "node-a", 0, LONG_TTL),
        LeaseRequest::new("held", "node-y", 0, LONG_TTL),
        LeaseRequest::new("held", "node-x", 1, LONG_TTL),
        LeaseRequest::new("other", "node-c", 2, LONG_TTL),
        LeaseRequest::new("fresh", "node-b", 5, LONG_TTL),
    ];
    let answered = assert_batch_answers_as_one_by_one(&batched, &one_by_one, requests).await;

    let status = |i: usize| answered[i].status;
    assert_eq!(status(0), LeaseStatus::Leader, "{answered:?}");
    assert_eq!(status(1), LeaseStatus::Standby, "{answered:?}");
    assert_eq!(
        status(2),
        LeaseStatus::LeaderStepDownRequested,
        "{answered:?}"
    );
    assert_eq!(status(3), LeaseStatus::Standby, "{answered:?}");
    assert_eq!(status(4), LeaseStatus::Leader, "{answered:?}");
}

/// A batch that follows an expiry answers as one by one too: the first request for the
/// expired lease takes it over with the next token, the old holder's request in the same
/// batch stands by behind it.
pub async fn a_batch_takes_over_an_expired_lease_as_one_by_one<F: StorageFactory>(factory: &F) {
    let Some(batched) = storage_with_leases(factory).await else {
        return;
    };
    let one_by_one = factory.create().await;
    for storage in [&batched, &one_by_one] {
        request(storage, "orders", "node-a", 0, SHORT_TTL).await;
    }
    for storage in [&batched, &one_by_one] {
        support::wait_until_expired(storage, "orders").await;
    }
    let requests = vec![
        LeaseRequest::new("orders", "node-b", 0, LONG_TTL),
        LeaseRequest::new("orders", "node-a", 0, LONG_TTL),
        LeaseRequest::new("orders", "node-b", 0, LONG_TTL),
    ];
    let answered = assert_batch_answers_as_one_by_one(&batched, &one_by_one, requests).await;
    assert_eq!(answered[0], leader(2, "node-b"), "takeover");
    assert_eq!(answered[1], standby(2, "node-b"), "old holder");
    assert_eq!(answered[2], leader(2, "node-b"), "renewal");
}

/// A batch holding one invalid request is refused whole with `InvalidInput`: the valid
/// requests before and after it change nothing either.
pub async fn a_batch_with_one_invalid_request_changes_nothing<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    request(&storage, "held", "node-x", 0, LONG_TTL).await;
    let before = leases(&storage).await;

    for (what, invalid) in invalid_requests() {
        let batch = vec![
            LeaseRequest::new("fresh", "node-a", 0, LONG_TTL),
            LeaseRequest::new("held", "node-x", 9, LONG_TTL * 2),
            invalid,
            LeaseRequest::new("held", "node-y", 50, LONG_TTL),
        ];
        let result = storage.request_leases(batch).await;
        assert_invalid_input(
            result,
            &format!("a batch holding a request with {what}"),
            "validate_lease_requests",
        );
        assert_leases_unchanged(
            &storage,
            &before,
            &format!("a refused batch (request with {what}) must change nothing"),
        )
        .await;
    }
    let response = request(&storage, "held", "node-x", 0, LONG_TTL).await;
    assert_eq!(
        response,
        leader(1, "node-x"),
        "holder after refused batches (none may have registered node-y)"
    );
}

/// An empty batch answers with an empty list and changes nothing.
pub async fn an_empty_batch_returns_an_empty_list<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    request(&storage, "held", "node-x", 0, LONG_TTL).await;
    let before = leases(&storage).await;
    let answered = storage
        .request_leases(Vec::new())
        .await
        .expect("request_leases(empty)");
    assert!(
        answered.is_empty(),
        "an empty batch answers nothing: {answered:?}"
    );
    assert_leases_unchanged(&storage, &before, "an empty batch changes nothing").await;
}

// ---------------------------------------------------------------------------------------------
// The storage's clock and lifecycle
// ---------------------------------------------------------------------------------------------

/// `storage_time` never goes backwards, read in turn through two handles of one storage.
pub async fn storage_time_does_not_go_backwards<F: StorageFactory>(factory: &F) {
    let Some((storage, other)) = two_handles_with_leases(factory).await else {
        return;
    };
    let mut previous = storage_time(&storage).await;
    for read in 0..200 {
        let handle = if read % 2 == 0 { &other } else { &storage };
        let now = storage_time(handle).await;
        assert!(
            now >= previous,
            "storage_time went backwards on read {read}: {previous} then {now}"
        );
        previous = now;
    }
}

/// Once the storage is closed, every lease method refuses with `Closed`, through every
/// handle, an empty batch included.
pub async fn lease_methods_refuse_once_the_storage_is_closed<F: StorageFactory>(factory: &F) {
    let Some(storage) = storage_with_leases(factory).await else {
        return;
    };
    let other = storage.clone();
    request(&storage, "orders", "node-a", 0, LONG_TTL).await;
    storage.close().await.expect("close");

    for (which, handle) in [("the closed handle", &storage), ("a clone of it", &other)] {
        let one = || support::request("orders", "node-a");
        let r = handle.request_lease(one()).await;
        assert_closed(r, &format!("request_lease through {which}"));
        let r = handle.request_leases(vec![one()]).await;
        assert_closed(r, &format!("request_leases through {which}"));
        let r = handle.request_leases(Vec::new()).await;
        assert_closed(r, &format!("an empty request_leases through {which}"));
        let r = handle.release_lease("orders", "node-a").await;
        assert_closed(r, &format!("release_lease through {which}"));
        let r = handle.get_contenders("orders").await;
        assert_closed(r, &format!("get_contenders through {which}"));
        let oversized: Vec<LeaseRequest> = (0..=eventstore_api::validate::MAX_LEASE_BATCH)
            .map(|i| LeaseRequest::new(format!("l{i}"), "node-a", 0, LONG_TTL))
            .collect();
        let r = handle.request_leases(oversized).await;
        assert_closed(
            r,
            &format!("request_leases of an oversized batch through {which}"),
        );
        let r = handle
            .release_leases(&["orders".to_owned()], "node-a")
            .await;
        assert_closed(r, &format!("release_leases through {which}"));
        let r = handle.release_leases(&[" ".to_owned()], "node-a").await;
        assert_closed(
            r,
            &format!("release_leases of an invalid name through {which}"),
        );
        let r = handle.get_leases().await;
        assert_closed(r, &format!("get_leases through {which}"));
        let r = handle.get_leases_with_prefix("ord").await;
        assert_closed(r, &format!("get_leases_with_prefix through {which}"));
        let r = handle.get_leases_with_prefix("ord\0").await;
        assert_closed(
            r,
            &format!("get_leases_with_prefix of an invalid prefix through {which}"),
        );
        let r = handle.storage_time().await;
        assert_closed(r, &format!("storage_time through {which}"));
    }
}

// ---------------------------------------------------------------------------------------------
// What the scenarios share
// ---------------------------------------------------------------------------------------------

/// A fresh storage, or `None` when it does not offer leases (having proved that every lease
/// method then refuses with `Unsupported`).
async fn storage_with_leases<F: StorageFactory>(factory: &F) -> Option<F::Storage> {
    let storage = factory.create().await;
    support::leases_supported(&storage).await.then_some(storage)
}

/// Two handles of a fresh storage, as two processes would hold them, or `None` as
/// [`storage_with_leases`].
async fn two_handles_with_leases<F: StorageFactory>(
    factory: &F,
) -> Option<(F::Storage, F::Storage)> {
    let storage = storage_with_leases(factory).await?;
    let other = factory.another_handle(&storage).await;
    Some((storage, other))
}

/// Sends a request that must succeed.
pub(crate) async fn request<S: EventStorage + ?Sized>(
    storage: &S,
    lease_name: &str,
    owner: &str,
    priority: i64,
    ttl: Duration,
) -> LeaseResponse {
    storage
        .request_lease(LeaseRequest::new(lease_name, owner, priority, ttl))
        .await
        .unwrap_or_else(|error| {
            panic!("request_lease({lease_name:?}, {owner:?}, {priority}, {ttl:?}): {error}")
        })
}

/// Releases, which must succeed.
pub(crate) async fn release<S: EventStorage + ?Sized>(storage: &S, lease_name: &str, owner: &str) {
    storage
        .release_lease(lease_name, owner)
        .await
        .unwrap_or_else(|error| panic!("release_lease({lease_name:?}, {owner:?}): {error}"));
}

pub(crate) async fn storage_time<S: EventStorage + ?Sized>(storage: &S) -> DateTime<Utc> {
    storage.storage_time().await.expect("storage_time")
}

pub(crate) async fn leases<S: EventStorage + ?Sized>(storage: &S) -> Vec<Lease> {
    storage.get_leases().await.expect("get_leases")
}

/// The recorded lease named `lease_name`, which must be listed.
async fn lease_named<S: EventStorage + ?Sized>(storage: &S, lease_name: &str) -> Lease {
    let listed = leases(storage).await;
    listed
        .iter()
        .find(|lease| lease.lease_name == lease_name)
        .cloned()
        .unwrap_or_else(|| panic!("get_leases must list {lease_name:?}, got {listed:?}"))
}

/// What of the recorded leases does not depend on when a request ran.
async fn lease_shapes<S: EventStorage + ?Sized>(
    storage: &S,
) -> Vec<(String, String, i64, FencingToken, Duration)> {
    let mut shapes: Vec<_> = leases(storage)
        .await
        .into_iter()
        .map(|lease| {
            (
                lease.lease_name,
                lease.owner,
                lease.priority,
                lease.fencing_token,
                lease.ttl,
            )
        })
        .collect();
    shapes.sort();
    shapes
}

/// Waits until the storage's clock has moved past `instant`, so that a later heartbeat is
/// distinguishable from one at `instant`.
async fn wait_for_storage_time_after<S: EventStorage + ?Sized>(
    storage: &S,
    instant: DateTime<Utc>,
) {
    support::eventually(&format!("storage_time to pass {instant}"), || async {
        storage_time(storage).await > instant
    })
    .await;
}

/// Waits until `lease_name` has just expired on the storage's clock and returns the leases as
/// they were then. Sleeps until shortly before the expiry, then polls without pausing, so that
/// the caller acts as soon after the expiry as the storage answers.
async fn wait_until_just_expired<S: EventStorage + ?Sized>(
    storage: &S,
    lease_name: &str,
) -> Vec<Lease> {
    const MARGIN: Duration = Duration::from_millis(20);
    let lease = lease_named(storage, lease_name).await;
    let remaining = (lease.expires_at() - storage_time(storage).await)
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(remaining.saturating_sub(MARGIN)).await;
    let start = std::time::Instant::now();
    loop {
        let listed = leases(storage).await;
        let now = storage_time(storage).await;
        let expired = listed
            .iter()
            .any(|lease| lease.lease_name == lease_name && lease.is_expired_at(now));
        if expired {
            return listed;
        }
        assert!(
            start.elapsed() < support::DEADLINE,
            "timed out waiting for {lease_name} to expire on the storage's clock: {listed:?}"
        );
        tokio::task::yield_now().await;
    }
}

/// Asserts that the storage lists exactly the leases `before`.
async fn assert_leases_unchanged<S: EventStorage + ?Sized>(
    storage: &S,
    before: &[Lease],
    context: &str,
) {
    assert_eq!(leases(storage).await, before, "{context}");
}

/// Sends `requests` to `batched` as one batch and to `one_by_one` one by one, asserts that
/// both answer alike and leave alike leases behind, and returns the batch's answers.
async fn assert_batch_answers_as_one_by_one<S: EventStorage + ?Sized>(
    batched: &S,
    one_by_one: &S,
    requests: Vec<LeaseRequest>,
) -> Vec<LeaseResponse> {
    let answered = batched
        .request_leases(requests.clone())
        .await
        .expect("request_leases");
    let expected = one_by_one_answers(one_by_one, requests).await;
    assert_eq!(
        answered, expected,
        "batch answers against one-by-one answers"
    );
    assert_eq!(
        lease_shapes(batched).await,
        lease_shapes(one_by_one).await,
        "batch rule: a batch leaves the leases as the same requests one by one do"
    );
    answered
}

async fn one_by_one_answers<S: EventStorage + ?Sized>(
    storage: &S,
    requests: Vec<LeaseRequest>,
) -> Vec<LeaseResponse> {
    let mut answers = Vec::with_capacity(requests.len());
    for request in requests {
        answers.push(storage.request_lease(request).await.expect("request_lease"));
    }
    answers
}

/// The answer a request must get: `Leader`, with `token`, naming the caller `owner`.
fn leader(token: u64, owner: &str) -> LeaseResponse {
    lease_response(LeaseStatus::Leader, token, owner)
}

/// The answer a request must get: `Standby`, with the holder's `token` and name.
fn standby(token: u64, holder: &str) -> LeaseResponse {
    lease_response(LeaseStatus::Standby, token, holder)
}

/// The answer a request must get: `LeaderStepDownRequested`, with `token`, naming the caller
/// `owner`.
fn step_down_requested(token: u64, owner: &str) -> LeaseResponse {
    lease_response(LeaseStatus::LeaderStepDownRequested, token, owner)
}

fn lease_response(status: LeaseStatus, token: u64, current_owner: &str) -> LeaseResponse {
    LeaseResponse {
        status,
        fencing_token: FencingToken(token),
        current_owner: current_owner.to_owned(),
    }
}

/// One invalid request per input rule, each described. Requests whose lease name and owner are
/// valid target the `orders` lease and the `held` lease held by `node-a` or `node-x` with a
/// high priority, so that accepting one by mistake would show in the leases or as a step-down.
pub(crate) fn invalid_requests() -> Vec<(String, LeaseRequest)> {
    let over_long = "x".repeat(MAX_NAME_BYTES + 1);
    let over_long_multibyte = "é".repeat(MAX_NAME_BYTES / 2 + 1);
    let names = [
        ("an empty", String::new()),
        ("a blank", " \t\n".to_owned()),
        ("a NUL-holding", "lease\0name".to_owned()),
        ("a 513-byte", over_long),
        ("a 514-byte (257 characters)", over_long_multibyte),
    ];
    let mut cases = Vec::new();
    for (what, bad) in &names {
        cases.push((
            format!("{what} lease name"),
            LeaseRequest::new(bad.clone(), "node-b", 99, LONG_TTL),
        ));
        for lease_name in ["orders", "held"] {
            cases.push((
                format!("{what} owner for {lease_name}"),
                LeaseRequest::new(lease_name, bad.clone(), 99, LONG_TTL),
            ));
        }
    }
    let ttls = [
        ("a zero ttl", Duration::ZERO),
        ("a ttl of 999µs", Duration::from_micros(999)),
        ("a ttl of 7 days + 1ms", MAX_TTL + Duration::from_millis(1)),
        ("a ttl of Duration::MAX", Duration::MAX),
    ];
    for (what, ttl) in ttls {
        for (lease_name, owner) in [
            ("orders", "node-a"),
            ("orders", "node-b"),
            ("held", "node-x"),
            ("held", "node-b"),
        ] {
            cases.push((
                format!("{what} from {owner} for {lease_name}"),
                LeaseRequest::new(lease_name, owner, 99, ttl),
            ));
        }
    }
    cases
}

/// Sends [`CONTENDERS`] requests for `lease_name` at once, from distinct owners, spread over
/// `handles` and over tasks on the multi-thread runtime; returns every answer.
async fn race_for_lease<S: EventStorage + 'static>(
    handles: &[Arc<S>],
    lease_name: &str,
) -> Vec<LeaseResponse> {
    let start = Arc::new(Barrier::new(CONTENDERS));
    let tasks: Vec<_> = (0..CONTENDERS)
        .map(|index| {
            let handle = Arc::clone(&handles[index % handles.len()]);
            let start = Arc::clone(&start);
            let request = LeaseRequest::new(lease_name, format!("node-{index}"), 0, LONG_TTL);
            tokio::spawn(async move {
                start.wait().await;
                handle.request_lease(request).await
            })
        })
        .collect();
    let mut responses = Vec::with_capacity(CONTENDERS);
    for (index, task) in tasks.into_iter().enumerate() {
        let response = task
            .await
            .unwrap_or_else(|error| panic!("contender {index} panicked: {error}"))
            .unwrap_or_else(|error| panic!("contender {index}'s request failed: {error}"));
        responses.push(response);
    }
    responses
}

/// Races [`CONTENDERS`] requests for `orders` over `handles`; asserts that exactly one leads,
/// with `token`, and that `observer` records the winner as the holder with that token.
async fn assert_race_elects_exactly_one<S: EventStorage + 'static>(
    handles: &[Arc<S>],
    observer: &S,
    token: FencingToken,
) {
    let responses = race_for_lease(handles, "orders").await;
    assert_exactly_one_leader(&responses, token);
    let winner = &leader_of(&responses).current_owner;
    let lease = lease_named(observer, "orders").await;
    assert_eq!(&lease.owner, winner, "the recorded holder is the winner");
    assert_eq!(
        lease.fencing_token, token,
        "token rule: the listed lease carries the token its holder was granted"
    );
}

fn leader_of(responses: &[LeaseResponse]) -> &LeaseResponse {
    responses
        .iter()
        .find(|response| response.status.is_leader())
        .unwrap_or_else(|| panic!("no leader among {responses:?}"))
}

/// Exactly one response leads, with `token`; every other stands by behind the same owner
/// and token.
fn assert_exactly_one_leader(responses: &[LeaseResponse], token: FencingToken) {
    let leaders = responses
        .iter()
        .filter(|response| response.status.is_leader())
        .count();
    assert_eq!(leaders, 1, "exactly one leader among {responses:?}");
    let leader = leader_of(responses);
    assert_eq!(
        leader.status,
        LeaseStatus::Leader,
        "equal priorities: {leader:?}"
    );
    assert_eq!(
        leader.fencing_token, token,
        "the winner's token: {leader:?}"
    );
    for response in responses.iter().filter(|r| !r.status.is_leader()) {
        assert_eq!(
            (&response.current_owner, response.fencing_token),
            (&leader.current_owner, token),
            "every standby carries the winner's owner and token: {responses:?}"
        );
    }
}
