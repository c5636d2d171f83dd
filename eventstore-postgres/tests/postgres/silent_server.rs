//! A server that went away without closing its connections (a failed host, a dropped
//! network path, a virtual address moved to a new primary): the pool's idle connections wait
//! on sockets that never deliver again. The first ping that goes unanswered condemns them
//! all, so the next call connects anew instead of waiting out the pool's acquire timeout on
//! each of them in turn.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use eventstore::{
    AppendCriteria, EventStorage, EventStreamId, EventToStore, LeaseRequest, LeaseStatus,
};

use eventstore_postgres::PostgresEventStorage;

use crate::common;
use crate::common::fault_proxy::FaultProxy;

/// Far longer than the test may take: a call that waits for it has failed the test.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(120);
/// The most a call may take once the old connections went silent: a ping's timeout, a new
/// connection, the call itself, on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(20);

/// Whether these tests can run: their storages connect through a proxy, so they need a
/// direct connection to a server that is up.
async fn direct_server() -> bool {
    !common::needs_direct_connection("its storage connects through a proxy to the server")
        && common::try_pool().await.is_some()
}

/// A storage whose pool keeps `connections` open through `proxy`, waiting for a connection
/// far longer than any test may take.
async fn storage_through(
    proxy: &FaultProxy,
    prepared_statements: bool,
    connections: u32,
) -> PostgresEventStorage {
    common::builder(&common::unique_prefix())
        .url(proxy.url())
        .prepared_statements(prepared_statements)
        .max_connections(connections)
        .min_connections(connections)
        .idle_timeout(None)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn idle_connections_whose_server_went_silent_are_replaced_at_the_first_unanswered_ping() {
    if !direct_server().await {
        return;
    }
    let proxy = FaultProxy::start(&common::direct_url()).await;
    let storage = storage_through(&proxy, true, 3).await;
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

/// Calls that start with a transaction of their own take their connection the same way:
/// appends that check something first (here, an idempotency key), and every call of a
/// storage without prepared statements (as behind a pooler in transaction mode).
#[tokio::test]
async fn calls_that_begin_a_transaction_replace_silent_connections_as_quickly() {
    if !direct_server().await {
        return;
    }
    for prepared_statements in [true, false] {
        let proxy = FaultProxy::start(&common::direct_url()).await;
        let storage = storage_through(&proxy, prepared_statements, 3).await;
        let stream = EventStreamId::for_context("orders");
        let keys = AtomicU32::new(0);
        let append = || {
            let key = format!("k-{}", keys.fetch_add(1, Ordering::SeqCst));
            let event = EventToStore::new("Placed", serde_json::json!({ "n": 1 }))
                .with_idempotency_key(key);
            storage.append(AppendCriteria::none(), &stream, vec![event])
        };
        // Side by side, so that the pool has more than one connection to go silent.
        let (a, b, c) = tokio::join!(append(), append(), append());
        for appended in [a, b, c] {
            appended.unwrap();
        }
        // Idle long enough that the next use pings first: a precondition, not a wait for an
        // event.
        tokio::time::sleep(Duration::from_millis(600)).await;

        proxy.silence_open_connections();
        for call in 0..3 {
            tokio::time::timeout(DEADLINE, append())
                .await
                .unwrap_or_else(|_| {
                    panic!("append {call} (prepared statements {prepared_statements}) waited on a silent connection")
                })
                .unwrap();
        }
        let lease = LeaseRequest::new("jobs", "pod-a", 0, Duration::from_secs(60));
        let answer = tokio::time::timeout(DEADLINE, storage.request_lease(lease))
            .await
            .expect("a lease request after the appends")
            .unwrap();
        assert_eq!(answer.status, LeaseStatus::Leader);
        storage.close().await.unwrap();
    }
}

/// A call abandoned while its statement waits on a server that went silent (a caller's
/// timeout, an elector's deadline) gives its connection back part-way. Its place in the pool
/// is free again once that connection misses a ping, not when the operating system gives up
/// on the socket many minutes later: with one connection in the pool, the next call runs.
// On two worker threads, so that the pool takes the connection back on one while the call's
// remains are dropped on the other, as in a service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_abandoned_on_a_silent_connection_frees_its_place_in_the_pool() {
    if !direct_server().await {
        return;
    }
    for prepared_statements in [true, false] {
        let proxy = FaultProxy::start(&common::direct_url()).await;
        let storage = storage_through(&proxy, prepared_statements, 1).await;
        let request = LeaseRequest::new("jobs", "pod-a", 0, Duration::from_secs(60));
        let leader = storage.request_lease(request.clone()).await.unwrap();
        assert_eq!(leader.status, LeaseStatus::Leader);

        // Once the pool has the connection back (it pings a connection it takes back, and a
        // ping the silence caught would hold the place), and right after the call, so that
        // the next call takes the connection without a ping and sends its statement into
        // the silence.
        common::eventually("the connection back in the pool", DEADLINE, || async {
            (storage.pool().num_idle() == 1).then_some(())
        })
        .await;
        proxy.silence_open_connections();
        let abandoned = tokio::time::timeout(
            Duration::from_millis(300),
            storage.request_lease(request.clone()),
        )
        .await;
        assert!(
            abandoned.is_err(),
            "the call cannot be answered: {abandoned:?}"
        );

        let answer = tokio::time::timeout(DEADLINE, storage.request_lease(request))
            .await
            .unwrap_or_else(|_| {
                panic!("the call after (prepared statements {prepared_statements}) found no place in the pool")
            })
            .unwrap();
        assert_eq!(answer.status, LeaseStatus::Leader);
        storage.close().await.unwrap();
    }
}
