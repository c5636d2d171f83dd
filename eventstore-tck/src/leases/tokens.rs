//! Scenarios of leases: fencing tokens and contention.

use super::*;

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
        "{}",
        support::after_expiry("its owner's next request re-acquires it with a new token")
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
        "{}",
        support::after_expiry(
            "the lapsed holder, first to ask again, re-acquires it with a new token"
        )
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
            "tenure {index}: {owner} must acquire the free lease (released, or expired on the \
             storage's clock: {}), got {response:?}",
            support::EXPIRY_RULE
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
    let response = request(&other, "orders", "node-b", 0, LONG_TTL).await;
    assert_eq!(
        response,
        leader(2, "node-b"),
        "{}",
        support::after_expiry("another owner's request takes it over with the next token")
    );
    let taken = lease_named(&storage, "orders").await;
    wait_for_storage_time_after(&storage, taken.heartbeat_at).await;

    for attempt in 0..10 {
        let response = request(&storage, "orders", "node-a", 1, LONG_TTL * 2).await;
        assert_eq!(
            response,
            standby(2, "node-b"),
            "a live lease is never revoked, and expiry is judged on the storage's clock only: \
             the displaced owner's request (attempt {attempt}) must stand by behind the new \
             holder"
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
