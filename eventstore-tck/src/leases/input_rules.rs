//! Scenarios of leases: input rules.

use super::*;
use eventstore_api::EventStorageExt;

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
    storage.release_leases(&[], "node-a").await.or_rule(
        "release_leases of nothing",
        "releasing what one does not hold is Ok(()) on a storage with Capability::Lease",
    );
    assert_eq!(
        request(&other, "c", "node-b", 0, LONG_TTL).await,
        step_down_requested(1, "node-b"),
        "an empty release_leases withdraws nothing"
    );

    let names = ["a", "b", "c", "a", "never-held"].map(String::from);
    storage.release_leases(&names, "node-a").await.or_rule(
        "release_leases",
        "release_leases of valid names answers on a storage with Capability::Lease",
    );
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

    let contenders = storage.get_contenders("orders").await.or_rule(
        "get_contenders",
        "get_contenders of a valid lease name answers on a storage with Capability::Lease",
    );
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
            .or_rule(
                "get_contenders",
                "get_contenders of a valid lease name answers on a storage with Capability::Lease"
            )
            .is_empty(),
        "get_contenders of a lease that never existed: none"
    );
    request(&storage, "solo", "node-a", 0, LONG_TTL).await;
    assert!(
        storage
            .get_contenders("solo")
            .await
            .or_rule(
                "get_contenders",
                "get_contenders of a valid lease name answers on a storage with Capability::Lease"
            )
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
        .or_rule(
            "get_contenders",
            "get_contenders of a valid lease name answers on a storage with Capability::Lease",
        )
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
            let contenders = storage.get_contenders("orders").await.or_rule(
                "get_contenders",
                "get_contenders of a valid lease name answers on a storage with Capability::Lease",
            );
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
