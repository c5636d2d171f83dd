//! A backend connection killed with `pg_terminate_backend` mid-use: the call fails clearly,
//! nothing is half-written, no transaction stays open, and the next call works.

use std::time::Duration;

use eventstore::{
    AppendCriteria, EventStorage, EventStorageError, EventStreamId, EventToStore, FencingToken,
    LeaseRequest, LeaseStatus,
};
use eventstore_postgres::PostgresEventStorage;
use serde_json::json;
use sqlx::PgPool;

use eventstore_tck::support::assert_chain_repeats_no_text;

use crate::common;

/// Waits until a backend of `application` waits on a lock, then terminates it.
async fn terminate_the_waiting_backend(admin: &PgPool, application: &str) {
    let pid = common::eventually("the call to wait on the held lock", Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, i32>(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
        )
        .bind(application)
        .fetch_optional(admin)
        .await
        .unwrap()
    })
    .await;
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(admin)
        .await
        .unwrap();
    assert!(terminated);
}

fn assert_backend_error<T: std::fmt::Debug>(result: Result<T, EventStorageError>, doing: &str) {
    match result {
        Err(error @ EventStorageError::Backend { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains(doing),
                "{message:?} should say it was trying to {doing}"
            );
            assert_chain_repeats_no_text(&error, doing);
        }
        other => panic!("expected a Backend error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_request_whose_backend_is_killed_fails_and_writes_nothing() {
    if common::needs_direct_connection(
        "it finds the storage's server connection by application_name to kill it",
    ) {
        return;
    }
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let (storage, pool, application) =
        common::sessions::storage_with_named_pool(&prefix, "kill").await;
    let ttl = Duration::from_secs(60);

    let held = common::hold_lease_lock(&admin, &prefix, "orders").await;
    let waiting = {
        let storage = storage.clone();
        tokio::spawn(async move {
            storage
                .request_lease(LeaseRequest::new("orders", "a", 0, ttl))
                .await
        })
    };
    terminate_the_waiting_backend(&admin, &application).await;
    assert_backend_error(waiting.await.unwrap(), "request a lease");
    held.rollback().await.unwrap();

    assert!(
        storage.get_leases().await.unwrap().is_empty(),
        "the killed request left a lease"
    );
    let response = storage
        .request_lease(LeaseRequest::new("orders", "a", 0, ttl))
        .await
        .unwrap();
    assert_eq!(
        (response.status, response.fencing_token),
        (LeaseStatus::Leader, FencingToken(1))
    );
    assert_eq!(
        common::sessions::open_transactions(&admin, &application).await,
        0,
        "a pooled connection was left inside a transaction"
    );
    storage.close().await.unwrap();
    assert!(!pool.is_closed(), "the storage closed the caller's pool");
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_whose_backend_is_killed_mid_transaction_stores_nothing() {
    if common::needs_direct_connection(
        "it finds the storage's server connection by application_name to kill it",
    ) {
        return;
    }
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let (storage, pool, application) =
        common::sessions::storage_with_named_pool(&prefix, "kill").await;
    let stream = EventStreamId::for_context("orders");

    let held = common::hold_stream_lock(&admin, &prefix, "orders", "default").await;
    let waiting = {
        let storage = storage.clone();
        let stream = stream.clone();
        tokio::spawn(async move {
            storage
                .append(
                    AppendCriteria::none(),
                    &stream,
                    vec![
                        EventToStore::new("A", json!(1)),
                        EventToStore::new("B", json!(2)),
                    ],
                )
                .await
        })
    };
    terminate_the_waiting_backend(&admin, &application).await;
    assert_backend_error(waiting.await.unwrap(), "append to stream orders/default");
    held.rollback().await.unwrap();
    assert_eq!(common::stored_event_count(&admin, &prefix).await, 0);

    let stored = storage
        .append(
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("A", json!(1))],
        )
        .await
        .expect("the next append works");
    assert_eq!(stored.len(), 1);
    assert_eq!(
        common::sessions::open_transactions(&admin, &application).await,
        0,
        "a pooled connection was left inside a transaction"
    );
    storage.close().await.unwrap();
    pool.close().await;
}

#[tokio::test]
async fn idle_connections_killed_under_the_pool_are_replaced() {
    if common::needs_direct_connection(
        "it finds the storage's server connections by application_name to kill them",
    ) {
        return;
    }
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let (storage, pool, application) =
        common::sessions::storage_with_named_pool(&prefix, "kill").await;
    storage
        .request_lease(LeaseRequest::new("orders", "a", 0, Duration::from_secs(60)))
        .await
        .unwrap();
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) AS t",
    )
    .bind(&application)
    .fetch_one(&admin)
    .await
    .unwrap();
    assert!(killed >= 1);
    let response = storage
        .request_lease(LeaseRequest::new("orders", "a", 0, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(
        (response.status, response.fencing_token),
        (LeaseStatus::Leader, FencingToken(1))
    );
    storage.close().await.unwrap();
    pool.close().await;
}

/// The storage's own pool hands out a connection idle for a while only after a ping, so
/// that connections killed while idle are replaced instead of failing the next call.
#[tokio::test]
async fn the_storages_own_pool_replaces_connections_killed_while_idle() {
    let lease = LeaseRequest::new("orders", "a", 0, Duration::from_secs(60));
    let Some((admin, storage, prefix)) = one_connection_holding(&lease).await else {
        return;
    };
    kill_idle_connection(&admin, &storage, &prefix).await;
    // Idle for longer than the pool hands out connections unpinged.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let response = storage
        .request_lease(lease)
        .await
        .expect("a killed idle connection is replaced");
    assert_eq!(
        (response.status, response.fencing_token),
        (LeaseStatus::Leader, FencingToken(1))
    );
    storage.close().await.unwrap();
}

/// A connection killed moments after its last call goes back out unpinged; a read that finds
/// it broken is repeated on a new connection, and every connection is pinged for a while
/// after, so that a write right behind it is not handed another dead one.
#[tokio::test]
async fn a_connection_killed_right_after_a_call_fails_no_read_and_no_write_behind_it() {
    let lease = LeaseRequest::new("orders", "a", 0, Duration::from_secs(60));
    let Some((admin, storage, prefix)) = one_connection_holding(&lease).await else {
        return;
    };
    kill_idle_connection(&admin, &storage, &prefix).await;
    let leases = storage
        .get_leases()
        .await
        .expect("a read on the killed connection is repeated on a new one");
    assert_eq!(leases.len(), 1);

    kill_idle_connection(&admin, &storage, &prefix).await;
    let response = storage
        .request_lease(lease)
        .await
        .expect("the killed connection is pinged and replaced before the renewal");
    assert_eq!(
        (response.status, response.fencing_token),
        (LeaseStatus::Leader, FencingToken(1))
    );
    storage.close().await.unwrap();
}

/// An admin pool, and a storage on one pooled connection that has just been granted `lease`
/// (so that the connection's last statement names the prefix), with that prefix; `None`
/// where the test cannot run.
async fn one_connection_holding(
    lease: &LeaseRequest,
) -> Option<(PgPool, PostgresEventStorage, String)> {
    if common::needs_direct_connection(
        "it finds the storage's server connections by the statements they ran to kill them",
    ) {
        return None;
    }
    let admin = common::try_pool().await?;
    let prefix = common::unique_prefix();
    let storage = common::builder(&prefix)
        .max_connections(1)
        .build()
        .await
        .unwrap();
    storage.request_lease(lease.clone()).await.unwrap();
    Some((admin, storage, prefix))
}

/// Terminates the storage's one connection once it is idle in the pool: the pool checks a
/// connection it takes back before it counts it idle, and a connection killed during that
/// check would be dropped there, never reaching the next call.
async fn kill_idle_connection(admin: &PgPool, storage: &PostgresEventStorage, prefix: &str) {
    common::eventually(
        "the connection back in the pool",
        Duration::from_secs(10),
        || async { (storage.pool().num_idle() == 1).then_some(()) },
    )
    .await;
    assert_eq!(
        terminate_by_prefix(admin, prefix).await,
        1,
        "the storage's one connection"
    );
}

/// Terminates the server connections whose last statement mentions `prefix`, waiting until
/// each has exited (a termination is a signal the backend handles in its own time); how many.
async fn terminate_by_prefix(admin: &PgPool, prefix: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 10000) AS gone \
         FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query LIKE '%' || $1 || '%') AS t \
         WHERE gone",
    )
    .bind(prefix)
    .fetch_one(admin)
    .await
    .unwrap()
}
