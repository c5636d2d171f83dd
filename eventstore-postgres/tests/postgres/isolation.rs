//! Decisions taken after a lock wait see what committed during the wait, whatever isolation
//! level the database, the role or the caller's pool makes the default: under `REPEATABLE
//! READ` a transaction keeps the snapshot its first statement took, before the lock was
//! granted, and would judge a conditional append or a lease on stale rows.

use std::str::FromStr;
use std::time::Duration;

use eventstore::{
    AppendCriteria, EventFilter, EventStorage, EventStorageError, EventStreamId, EventToStore,
    FencingToken, LeaseRequest, LeaseStatus,
};
use eventstore_postgres::PostgresEventStorage;
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::common;

/// The startup option that makes every transaction of a connection `REPEATABLE READ`, as
/// `ALTER DATABASE … SET default_transaction_isolation` would.
const REPEATABLE_READ: (&str, &str) = ("default_transaction_isolation", "repeatable\\ read");

/// A caller's pool whose transactions default to `REPEATABLE READ`.
async fn repeatable_read_pool() -> PgPool {
    let options = PgConnectOptions::from_str(&common::database_url())
        .unwrap()
        .options([REPEATABLE_READ]);
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .unwrap();
    let isolation: String = sqlx::query_scalar("SHOW transaction_isolation")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        isolation, "repeatable read",
        "the test pool is not what it claims"
    );
    pool
}

/// Waits until a statement on `prefix`'s objects waits on a lock.
async fn wait_for_lock_wait(admin: &PgPool, prefix: &str) {
    common::eventually(
        "the call to wait on the held lock",
        Duration::from_secs(10),
        || async {
            sqlx::query_scalar::<_, i32>(
                "SELECT pid FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0 \
                   AND pid <> pg_backend_pid()",
            )
            .bind(prefix)
            .fetch_optional(admin)
            .await
            .unwrap()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_append_sees_what_committed_while_it_waited_for_the_stream_lock() {
    if common::needs_direct_connection(
        "a caller's pool whose sessions default to REPEATABLE READ, set by a startup option PgBouncer does not pass on",
    ) {
        return;
    }
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    common::storage_on(&prefix).await.close().await.unwrap();
    let pool = repeatable_read_pool().await;
    let storage = PostgresEventStorage::builder()
        .pool(pool.clone())
        .prefix(&prefix)
        .build()
        .await
        .unwrap();
    let stream = EventStreamId::for_context("accounts");

    // Another writer holds the stream's lock and writes an event the condition matches.
    let mut other = common::hold_stream_lock(&admin, &prefix, "accounts", "default").await;
    sqlx::query(&format!(
        "INSERT INTO {prefix}events (id, stream_context, stream_purpose, event_type, payload, tags) \
         VALUES (gen_random_uuid(), 'accounts', 'default', 'Opened', '{{}}', '{{}}')"
    ))
    .execute(&mut *other)
    .await
    .unwrap();
    let conditional = {
        let (storage, stream) = (storage.clone(), stream.clone());
        tokio::spawn(async move {
            storage
                .append(
                    AppendCriteria::of(EventFilter::match_all(), None),
                    &stream,
                    vec![EventToStore::new("Opened", json!({}))],
                )
                .await
        })
    };
    wait_for_lock_wait(&admin, &prefix).await;
    other.commit().await.unwrap();

    match conditional.await.unwrap() {
        Err(EventStorageError::OptimisticLock { .. }) => {}
        other => panic!("the append judged a stale snapshot: {other:?}"),
    }
    assert_eq!(common::stored_event_count(&admin, &prefix).await, 1);
    storage.close().await.unwrap();
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_request_on_a_repeatable_read_pool_is_refused_clearly_and_writes_nothing() {
    if common::needs_direct_connection(
        "a caller's pool whose sessions default to REPEATABLE READ, set by a startup option PgBouncer does not pass on",
    ) {
        return;
    }
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    common::storage_on(&prefix).await.close().await.unwrap();
    let pool = repeatable_read_pool().await;
    let storage = PostgresEventStorage::builder()
        .pool(pool.clone())
        .prefix(&prefix)
        .build()
        .await
        .unwrap();
    let ttl = Duration::from_secs(60);

    for refused in [
        storage
            .request_lease(LeaseRequest::new("orders", "a", 0, ttl))
            .await
            .map(drop),
        storage.release_lease("orders", "a").await,
    ] {
        match refused {
            Err(error @ EventStorageError::Backend { .. }) => {
                let message = error.report();
                assert!(
                    message.contains("READ COMMITTED") && message.contains("repeatable read"),
                    "{message}"
                );
            }
            other => panic!("expected a refusal naming the isolation level, got {other:?}"),
        }
    }
    assert!(storage.get_leases().await.unwrap().is_empty());
    storage.close().await.unwrap();
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storages_own_pool_reads_committed_whatever_the_default_isolation() {
    if common::needs_direct_connection(
        "a session default isolation set by a startup option PgBouncer does not pass on",
    ) {
        return;
    }
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let url = common::database_url();
    let separator = if url.contains('?') { '&' } else { '?' };
    let url = format!(
        "{url}{separator}options=-c%20default_transaction_isolation%3Drepeatable%5C%20read"
    );
    let storage = common::builder(&prefix).url(url).build().await.unwrap();
    let ttl = Duration::from_secs(60);

    // Another instance takes the lease while this request waits for the lease's lock.
    let mut other = common::hold_lease_lock(&admin, &prefix, "orders").await;
    sqlx::query(&format!(
        "INSERT INTO {prefix}leases \
             (lease_name, owner, priority, fencing_token, acquired_at, heartbeat_at, ttl) \
         VALUES ('orders', 'b', 0, 1, now(), now(), interval '60 seconds')"
    ))
    .execute(&mut *other)
    .await
    .unwrap();
    let request = {
        let storage = storage.clone();
        tokio::spawn(async move {
            storage
                .request_lease(LeaseRequest::new("orders", "a", 0, ttl))
                .await
        })
    };
    wait_for_lock_wait(&admin, &prefix).await;
    other.commit().await.unwrap();

    let response = request.await.unwrap().expect("a lease request");
    assert_eq!(
        (
            response.status,
            response.fencing_token,
            response.current_owner.as_str()
        ),
        (LeaseStatus::Standby, FencingToken(1), "b")
    );
    storage.close().await.unwrap();
}
