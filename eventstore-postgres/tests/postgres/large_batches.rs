//! Batches larger than the server's lock table: each lease a batch decides holds an advisory
//! lock until its transaction commits, and a default server keeps about 6,400 of them for
//! everyone, so a batch is decided in calls of at most 1,000 leases.

use std::time::Duration;

use eventstore::{EventStorage, FencingToken, LeaseRequest, LeaseStatus};

use crate::common;

/// Well above what a default server's lock table holds at once.
const LEASES: usize = 20_000;

fn batch(owner: &str) -> Vec<LeaseRequest> {
    (0..LEASES)
        .map(|n| LeaseRequest::new(format!("lease-{n}"), owner, 0, Duration::from_secs(60)))
        .collect()
}

#[tokio::test]
async fn a_batch_of_twenty_thousand_leases_is_granted_released_and_taken_whole() {
    if common::try_pool().await.is_none() {
        return;
    }
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;

    let granted = storage.request_leases(batch("first")).await.unwrap();
    assert_eq!(granted.len(), LEASES);
    for (n, response) in granted.iter().enumerate() {
        assert_eq!(response.status, LeaseStatus::Leader, "lease-{n}");
        assert_eq!(response.fencing_token, FencingToken(1), "lease-{n}");
    }

    storage
        .release_leases(
            &(0..LEASES)
                .map(|n| format!("lease-{n}"))
                .collect::<Vec<_>>(),
            "first",
        )
        .await
        .unwrap();
    let taken = storage.request_leases(batch("second")).await.unwrap();
    for (n, response) in taken.iter().enumerate() {
        assert_eq!(response.status, LeaseStatus::Leader, "lease-{n}");
        assert_eq!(response.fencing_token, FencingToken(2), "lease-{n}");
        assert_eq!(response.current_owner, "second", "lease-{n}");
    }
    let leases = storage.get_leases().await.unwrap();
    assert_eq!(leases.len(), LEASES);
    assert!(leases.iter().all(|lease| lease.owner == "second"));
}
