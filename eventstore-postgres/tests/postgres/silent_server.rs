//! A server that went away without closing its connections (a failed host, a dropped
//! network path, a virtual address moved to a new primary): the pool's idle connections wait
//! on sockets that never deliver again. The first ping that goes unanswered condemns them
//! all, so the next call connects anew instead of waiting out the pool's acquire timeout on
//! each of them in turn.

use std::time::Duration;

use eventstore_api::{EventStorage, LeaseRequest, LeaseStatus};

use crate::common;
use crate::common::fault_proxy::FaultProxy;

/// Far longer than the test may take: a call that waits for it has failed the test.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(120);
/// The most a call may take once the old connections went silent: a ping's timeout, a new
/// connection, the call itself, on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(20);

#[tokio::test]
async fn idle_connections_whose_server_went_silent_are_replaced_at_the_first_unanswered_ping() {
    if common::needs_direct_connection("its storage connects through a proxy to the server") {
        return;
    }
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let proxy = FaultProxy::start(&common::direct_url()).await;
    let storage = common::builder(&common::unique_prefix())
        .url(proxy.url())
        .max_connections(3)
        .min_connections(3)
        .idle_timeout(None)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .build()
        .await
        .unwrap();
    let ttl = Duration::from_secs(60);
    let request = |owner: &str| LeaseRequest::new("jobs", owner, 0, ttl);
    let leader = storage.request_lease(request("pod-a")).await.unwrap();
    assert_eq!(leader.status, LeaseStatus::Leader);
    // Side by side, so that the pool has more than one connection to go silent.
    let (b, c) = tokio::join!(
        storage.request_lease(request("pod-b")),
        storage.request_lease(request("pod-c")),
    );
    assert_eq!(b.unwrap().status, LeaseStatus::Standby);
    assert_eq!(c.unwrap().status, LeaseStatus::Standby);
    // Idle long enough that the next use pings first: a precondition, not a wait for an event.
    tokio::time::sleep(Duration::from_millis(600)).await;

    proxy.silence_open_connections();
    for owner in ["pod-a", "pod-b", "pod-c"] {
        let answer = tokio::time::timeout(DEADLINE, storage.request_lease(request(owner)))
            .await
            .unwrap_or_else(|_| panic!("{owner}'s request waited on a silent connection"))
            .unwrap();
        let expected = if owner == "pod-a" {
            LeaseStatus::Leader
        } else {
            LeaseStatus::Standby
        };
        assert_eq!(answer.status, expected, "{owner}");
    }
    storage.close().await.unwrap();
}
