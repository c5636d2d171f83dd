//! A memory storage on tokio's paused clock: leases expire when the test advances the clock,
//! at once and to the nanosecond, and never on their own.

use std::time::Duration;

use chrono::{DateTime, Utc};
use eventstore_api::in_process::StorageClock;
use eventstore_api::{EventStorage, FencingToken, LeaseRequest, LeaseStatus};
use eventstore_memory::MemoryEventStorage;

fn origin() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

#[tokio::test(start_paused = true)]
async fn a_lease_expires_when_paused_time_passes_its_ttl_and_not_before() {
    let storage = MemoryEventStorage::with_clock(StorageClock::on_tokio_time(origin()));
    let ttl = Duration::from_secs(600);
    let first = storage
        .request_lease(LeaseRequest::new("jobs", "pod-a", 0, ttl))
        .await
        .unwrap();
    assert_eq!(
        (first.status, first.fencing_token),
        (LeaseStatus::Leader, FencingToken(1))
    );
    assert_eq!(storage.storage_time().await.unwrap(), origin());

    // At the ttl's last instant the lease is still pod-a's; a nanosecond later it is not.
    tokio::time::advance(ttl).await;
    let waiting = storage
        .request_lease(LeaseRequest::new("jobs", "pod-b", 0, ttl))
        .await
        .unwrap();
    assert_eq!(
        (waiting.status, waiting.current_owner.as_str()),
        (LeaseStatus::Standby, "pod-a"),
        "a lease is live until heartbeat_at + ttl, inclusive"
    );
    tokio::time::advance(Duration::from_nanos(1)).await;
    let taken = storage
        .request_lease(LeaseRequest::new("jobs", "pod-b", 0, ttl))
        .await
        .unwrap();
    assert_eq!(
        (taken.status, taken.fencing_token),
        (LeaseStatus::Leader, FencingToken(2))
    );
    assert_eq!(
        storage.storage_time().await.unwrap(),
        origin() + ttl + Duration::from_nanos(1),
        "the storage's time is the origin plus the paused time that passed"
    );
}
