//! Small tools the scenarios share: polling with a deadline and capability checks.

use std::future::Future;
use std::time::{Duration, Instant};

use eventstore_api::{Capability, EventStorage, EventStorageError, LeaseRequest};

/// How long a scenario waits for a condition that should become true (an expiry, say)
/// before it fails. Generous, because CI machines are shared and slow.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A ttl long enough that a lease never expires during a scenario.
pub const LONG_TTL: Duration = Duration::from_secs(60);

/// A ttl short enough that scenarios can wait for it to expire.
pub const SHORT_TTL: Duration = Duration::from_millis(150);

/// Polls `condition` every few milliseconds until it returns `true`; panics naming `what`
/// when [`DEADLINE`] passes first. Timing in scenarios never relies on a bare sleep.
pub async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if condition().await {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "timed out after {DEADLINE:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `lease_name` is expired on the storage's own clock.
pub async fn wait_until_expired<S: EventStorage + ?Sized>(storage: &S, lease_name: &str) {
    eventually(
        &format!("lease {lease_name} to expire on the storage's clock"),
        || async {
            let now = storage.storage_time().await.expect("storage_time");
            let leases = storage.get_leases().await.expect("get_leases");
            leases
                .iter()
                .find(|lease| lease.lease_name == lease_name)
                .is_some_and(|lease| lease.is_expired_at(now))
        },
    )
    .await;
}

/// A request with [`LONG_TTL`] and priority 0.
pub fn request(lease_name: &str, owner: &str) -> LeaseRequest {
    LeaseRequest::new(lease_name, owner, 0, LONG_TTL)
}

/// Whether the storage claims leases. When it does not, asserts that every lease method
/// refuses with `Unsupported`, so a lease scenario still proves something on such a backend.
pub async fn leases_supported<S: EventStorage + ?Sized>(storage: &S) -> bool {
    if storage.supports(Capability::Lease) {
        return true;
    }
    assert_lease_methods_unsupported(storage).await;
    false
}

/// Asserts that every lease method of `storage` returns `Unsupported`.
pub async fn assert_lease_methods_unsupported<S: EventStorage + ?Sized>(storage: &S) {
    fn is_unsupported<T: std::fmt::Debug>(result: &Result<T, EventStorageError>) -> bool {
        matches!(result, Err(EventStorageError::Unsupported { .. }))
    }
    let r = storage.request_lease(request("l", "o")).await;
    assert!(is_unsupported(&r), "request_lease: {r:?}");
    let r = storage.request_leases(vec![request("l", "o")]).await;
    assert!(is_unsupported(&r), "request_leases: {r:?}");
    let r = storage.release_lease("l", "o").await;
    assert!(is_unsupported(&r), "release_lease: {r:?}");
    let r = storage.get_leases().await;
    assert!(is_unsupported(&r), "get_leases: {r:?}");
    let r = storage.storage_time().await;
    assert!(is_unsupported(&r), "storage_time: {r:?}");
}
