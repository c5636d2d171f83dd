//! Scenarios of leases: priority and step-down.

use super::*;

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
