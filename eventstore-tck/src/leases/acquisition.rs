//! Scenarios of leases: acquisition, renewal, standby, expiry and release.

use super::*;
use eventstore_api::EventStorageExt;

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
    assert_eq!(
        response,
        leader(2, "node-b"),
        "{}",
        support::after_expiry("another owner's request takes it over with the next token")
    );
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
