//! The lock timeout bounds every wait for a lock; a timed-out call changes nothing.

use std::time::{Duration, Instant};

use eventstore::{
    AppendCriteria, EventFilter, EventStorage, EventStorageError, EventStreamId, EventToStore,
    LeaseRequest, StoredEvent,
};
use eventstore_postgres::PostgresEventStorage;
use serde_json::json;
use sqlx::PgPool;

use crate::common;

const LOCK_TIMEOUT: Duration = Duration::from_millis(300);

/// A storage on `prefix` that waits at most [`LOCK_TIMEOUT`] for a lock.
async fn storage_with_lock_timeout(prefix: &str) -> PostgresEventStorage {
    common::builder(prefix)
        .lock_timeout(LOCK_TIMEOUT)
        .build()
        .await
        .unwrap()
}

/// Appends one event to `stream` without a condition.
async fn append_one(
    storage: &PostgresEventStorage,
    stream: &EventStreamId,
) -> Result<Vec<StoredEvent>, EventStorageError> {
    storage
        .append(
            AppendCriteria::none(),
            stream,
            vec![EventToStore::new("A", json!(1))],
        )
        .await
}

/// Every event of `stream`, oldest first.
async fn read_all(
    storage: &PostgresEventStorage,
    stream: &EventStreamId,
) -> Result<Vec<StoredEvent>, EventStorageError> {
    storage
        .query(
            &EventFilter::match_all(),
            stream,
            None,
            eventstore::Limit::none(),
            eventstore::Direction::Forward,
        )
        .await
}

fn assert_timeout<T: std::fmt::Debug>(result: Result<T, EventStorageError>, started: Instant) {
    match result {
        Err(EventStorageError::Timeout {
            after, operation, ..
        }) => {
            assert_eq!(after, LOCK_TIMEOUT, "{operation}");
            assert!(operation.contains("lock"), "{operation}");
        }
        other => panic!("expected a Timeout, got {other:?}"),
    }
    // The server started counting after the client's clock did, so this holds however
    // loaded the machine is.
    let waited = started.elapsed();
    assert!(
        waited >= LOCK_TIMEOUT,
        "gave up after {waited:?}, before the lock timeout"
    );
    // A margin of seconds for a loaded machine that still tells the configured timeout from
    // the builder's default of 10 s.
    assert!(
        waited < LOCK_TIMEOUT + Duration::from_secs(5),
        "waited {waited:?}: longer than the configured lock timeout allows"
    );
}

#[tokio::test]
async fn a_held_lease_lock_times_out_a_request_that_then_changes_nothing() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = storage_with_lock_timeout(&prefix).await;
    let ttl = Duration::from_secs(60);

    let held = common::hold_lease_lock(&pool, &prefix, "orders").await;
    let started = Instant::now();
    assert_timeout(
        storage
            .request_lease(LeaseRequest::new("orders", "a", 0, ttl))
            .await,
        started,
    );
    let started = Instant::now();
    assert_timeout(storage.release_lease("orders", "a").await, started);
    assert!(
        storage.get_leases().await.unwrap().is_empty(),
        "a timed-out request wrote a lease"
    );
    // Other leases are not behind this lock.
    let other = storage
        .request_lease(LeaseRequest::new("invoices", "a", 0, ttl))
        .await
        .unwrap();
    assert!(other.status.is_leader());
    held.rollback().await.unwrap();

    let response = storage
        .request_lease(LeaseRequest::new("orders", "a", 0, ttl))
        .await
        .unwrap();
    assert!(response.status.is_leader(), "{response:?}");
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_held_lease_row_times_out_a_renewal_sent_as_one_update_that_then_changes_nothing() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    // The storage's own pool starts its connections with the lock timeout; on a caller's
    // pool the renewal sets it itself.
    for own_pool in [true, false] {
        let prefix = common::unique_prefix();
        let storage = if own_pool {
            storage_with_lock_timeout(&prefix).await
        } else {
            let pool = PgPool::connect(&common::direct_url()).await.unwrap();
            common::builder(&prefix)
                .pool(pool)
                .lock_timeout(LOCK_TIMEOUT)
                .build()
                .await
                .unwrap()
        };
        renewal_behind_a_held_row_times_out(&admin, &prefix, &storage).await;
        storage.close().await.unwrap();
    }
}

/// Renews `orders` for `a` once through `storage` (so that the next renewal is one
/// `UPDATE`), then again while another transaction holds the lease's row: it times out and
/// changes nothing, and succeeds once the row is free.
async fn renewal_behind_a_held_row_times_out(
    admin: &PgPool,
    prefix: &str,
    storage: &PostgresEventStorage,
) {
    let renewal = LeaseRequest::new("orders", "a", 0, Duration::from_secs(60));
    assert!(storage
        .request_lease(renewal.clone())
        .await
        .unwrap()
        .status
        .is_leader());
    let before = storage.get_leases().await.unwrap();

    let mut held = admin.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT FROM {prefix}leases WHERE lease_name = 'orders' FOR UPDATE"
    ))
    .fetch_one(&mut *held)
    .await
    .unwrap();
    let started = Instant::now();
    assert_timeout(storage.request_lease(renewal.clone()).await, started);
    assert_eq!(
        storage.get_leases().await.unwrap(),
        before,
        "a timed-out renewal changed the lease"
    );
    held.rollback().await.unwrap();

    assert!(storage
        .request_lease(renewal)
        .await
        .unwrap()
        .status
        .is_leader());
}

#[tokio::test]
async fn a_held_stream_lock_times_out_an_append_but_never_a_lease_request() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = storage_with_lock_timeout(&prefix).await;
    let stream = EventStreamId::new("orders", "eu");

    let held = common::hold_stream_lock(&pool, &prefix, "orders", "eu").await;
    let started = Instant::now();
    let appended = append_one(&storage, &stream).await;
    assert_timeout(appended, started);
    assert_eq!(common::stored_event_count(&pool, &prefix).await, 0);

    // Lease traffic takes no lock an append takes. The stream lock stays held until after
    // the request, so a request that waited on it could only have ended in a Timeout: its
    // success proves it never waited, with no clock involved.
    let response = storage
        .request_lease(LeaseRequest::new("orders", "a", 0, Duration::from_secs(60)))
        .await
        .expect("a lease request while the stream lock is held");
    assert!(response.status.is_leader());
    held.rollback().await.unwrap();

    append_one(&storage, &stream)
        .await
        .expect("append once the lock is free");
    storage.close().await.unwrap();
}

/// Unconditional appends share the stream's lock: one runs while another holds it. An append
/// that checks before it writes (a condition, an idempotency key) waits for them, and times
/// out changing nothing.
#[tokio::test]
async fn unconditional_appends_share_the_stream_lock_and_checking_ones_wait_for_them() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = storage_with_lock_timeout(&prefix).await;
    let stream = EventStreamId::new("orders", "eu");

    let held = common::hold_stream_lock_shared(&pool, &prefix, "orders", "eu").await;
    // The lock stays held throughout, so an append that waited for it could only have ended
    // in a Timeout: success proves it never waited.
    append_one(&storage, &stream)
        .await
        .expect("an unconditional append beside another");
    let checking = [
        (
            "a condition",
            AppendCriteria::of(EventFilter::for_types(["Z"]), None),
            EventToStore::new("B", json!(2)),
        ),
        (
            "an idempotency key",
            AppendCriteria::none(),
            EventToStore::new("B", json!(2)).with_idempotency_key("k-1"),
        ),
    ];
    for (what, criteria, event) in checking {
        let started = Instant::now();
        let appended = storage.append(criteria, &stream, vec![event]).await;
        assert_timeout(appended, started);
        assert_eq!(
            common::stored_event_count(&pool, &prefix).await,
            1,
            "an append with {what} stored nothing"
        );
    }
    held.rollback().await.unwrap();

    storage
        .append(
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("B", json!(2)).with_idempotency_key("k-1")],
        )
        .await
        .expect("a keyed append once the lock is free");
    storage.close().await.unwrap();
}

/// Without prepared statements (behind a pooler in transaction mode) no connection has the
/// lock timeout as a session default. A statement that sets it itself takes its table's
/// lock when it is parsed, before the setting runs, so the transaction of every call sets it
/// as it begins: an unconditional append and a read behind a table locked by DDL (here
/// `LOCK TABLE`, as `ALTER TABLE` or `VACUUM FULL` would) time out like any other wait.
#[tokio::test]
async fn without_prepared_statements_a_table_lock_times_out_appends_and_reads() {
    use sqlx::Connection;
    if common::try_pool().await.is_none() {
        return;
    }
    let prefix = common::unique_prefix();
    let storage = common::builder(&prefix)
        .prepared_statements(false)
        .lock_timeout(LOCK_TIMEOUT)
        .build()
        .await
        .unwrap();
    let stream = EventStreamId::for_context("orders");
    append_one(&storage, &stream).await.unwrap();

    let mut holder = sqlx::PgConnection::connect(&common::direct_url())
        .await
        .unwrap();
    let mut transaction = holder.begin().await.unwrap();
    sqlx::query(&format!(
        "LOCK TABLE {prefix}events IN ACCESS EXCLUSIVE MODE"
    ))
    .execute(&mut *transaction)
    .await
    .unwrap();
    let started = Instant::now();
    let appended = tokio::time::timeout(
        LOCK_TIMEOUT + Duration::from_secs(10),
        append_one(&storage, &stream),
    )
    .await
    .expect("the append gives up by its lock timeout");
    assert_timeout(appended, started);
    let started = Instant::now();
    let read = tokio::time::timeout(
        LOCK_TIMEOUT + Duration::from_secs(10),
        read_all(&storage, &stream),
    )
    .await
    .expect("the read gives up by its lock timeout");
    assert_timeout(read, started);
    transaction.rollback().await.unwrap();
    assert_eq!(
        read_all(&storage, &stream).await.unwrap().len(),
        1,
        "the timed-out append stored nothing"
    );
}
