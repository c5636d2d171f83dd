//! Prefixes: validated before any connection, and keeping storages apart.

use std::time::Duration;

use eventstore::{
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

/// Durations out of range are refused before any connection, by name: a lock timeout
/// PostgreSQL would refuse on every statement, and waits that overflow the clock
/// (`Duration::MAX` for "forever") where they would panic an append, the listener or the pool.
#[tokio::test]
async fn durations_out_of_range_are_refused_by_name_before_connecting() {
    let builder = || PostgresEventStorage::builder().url("postgres://nobody@127.0.0.1:1/none");
    let year_and_a_day = Duration::from_secs(366 * 24 * 60 * 60);
    let cases = [
        (
            "lock timeout",
            builder().lock_timeout(Duration::from_millis(i32::MAX as u64 + 1)),
        ),
        ("visibility wait", builder().visibility_wait(Duration::MAX)),
        (
            "listener heartbeat",
            builder().listener_heartbeat(Duration::MAX),
        ),
        ("acquire timeout", builder().acquire_timeout(Duration::MAX)),
        ("idle timeout", builder().idle_timeout(Some(year_and_a_day))),
        ("max lifetime", builder().max_lifetime(Some(Duration::MAX))),
    ];
    for (field, builder) in cases {
        let started = std::time::Instant::now();
        let result = builder.build().await;
        match result {
            Err(EventStorageError::InvalidInput { field: named, .. }) => {
                assert_eq!(named, field, "the refusal names the setting");
            }
            other => panic!("{field}: expected InvalidInput, got {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{field}: refused before trying to connect"
        );
    }
    // The longest accepted: PostgreSQL's own limit, and a year.
    let accepted = builder()
        .lock_timeout(Duration::from_millis(i32::MAX as u64))
        .visibility_wait(Duration::from_secs(365 * 24 * 60 * 60))
        .acquire_timeout(Duration::from_millis(200))
        .build()
        .await;
    assert!(
        !matches!(accepted, Err(EventStorageError::InvalidInput { .. })),
        "{accepted:?}"
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
