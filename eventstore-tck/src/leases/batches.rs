//! Scenarios of leases: batches, the storage's clock and lifecycle.

use super::*;
use eventstore_api::EventStorageExt;

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
    assert_eq!(
        answered[0],
        leader(2, "node-b"),
        "{}",
        support::after_expiry(
            "another owner's request in a batch takes it over with the next token"
        )
    );
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
    let answered = storage.request_leases(Vec::new()).await.or_rule(
        "request_leases(empty)",
        "request_leases of no request answers an empty list on a storage with Capability::Lease",
    );
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
    storage
        .close()
        .await
        .or_rule("close", "close succeeds, and again once closed");

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
