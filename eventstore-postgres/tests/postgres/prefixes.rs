//! Prefixes: validated before any connection, and keeping storages apart.

use std::time::Duration;

use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStorageError, EventStreamId,
    EventToStore, LeaseRequest, Limit,
};
use eventstore_postgres::PostgresEventStorage;
use serde_json::json;

use crate::common;

#[tokio::test]
async fn a_prefix_that_is_not_a_safe_identifier_is_refused_before_any_connection() {
    // Nothing listens on port 1: had the builder connected first, this would be a Backend error.
    for prefix in [
        "",
        "a",
        "ab",
        "A_",
        "1a_",
        "_a_",
        "a-b_",
        "a b_",
        "a;drop table x;_",
        "é_",
        "a\0_",
    ] {
        let result = PostgresEventStorage::builder()
            .url("postgres://nobody@127.0.0.1:1/none")
            .prefix(prefix)
            .build()
            .await;
        match result {
            Err(EventStorageError::InvalidInput { field, .. }) => assert_eq!(field, "table prefix"),
            other => panic!("prefix {prefix:?} should be InvalidInput, got {other:?}"),
        }
    }
    let too_long = format!("a{}_", "b".repeat(31));
    let result = PostgresEventStorage::builder()
        .url("postgres://nobody@127.0.0.1:1/none")
        .prefix(too_long)
        .build()
        .await;
    assert!(
        matches!(result, Err(EventStorageError::InvalidInput { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_lock_timeout_below_a_millisecond_is_refused() {
    let result = PostgresEventStorage::builder()
        .url("postgres://nobody@127.0.0.1:1/none")
        .lock_timeout(Duration::ZERO)
        .build()
        .await;
    assert!(
        matches!(result, Err(EventStorageError::InvalidInput { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn two_prefixes_share_nothing() {
    if common::try_pool().await.is_none() {
        return;
    }
    let first = common::storage_on(&common::unique_prefix()).await;
    let second = common::storage_on(&common::unique_prefix()).await;
    let stream = EventStreamId::for_context("orders");
    first
        .append(
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("Placed", json!({"n": 1}))],
        )
        .await
        .expect("append");
    let ttl = Duration::from_secs(60);
    first
        .request_lease(LeaseRequest::new("l", "a", 0, ttl))
        .await
        .expect("request");

    let read = second
        .query(
            &EventFilter::match_all(),
            &EventStreamId::any(),
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .expect("query");
    assert!(
        read.is_empty(),
        "the second prefix sees the first's events: {read:?}"
    );
    assert!(second.get_leases().await.expect("get_leases").is_empty());
    let response = second
        .request_lease(LeaseRequest::new("l", "b", 0, ttl))
        .await
        .expect("request");
    assert!(response.status.is_leader(), "{response:?}");
    first.close().await.expect("close");
    second.close().await.expect("close");
}
