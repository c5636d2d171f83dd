//! The streaming read yields its events in order across pages, reads the next page while the
//! caller holds the stream without polling it, and a stream dropped part-way (its next page
//! read ahead) holds no connection and leaves no transaction open.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStream, EventStreamId, EventToStore,
    Limit,
};
use eventstore_postgres::{DatabaseInitMode, PostgresEventStorage};
use futures_util::StreamExt;
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;

use crate::common;

const EVENTS: usize = 2_500;

/// Appends the `EVENTS` events of the stream `replay`, numbered from 0.
async fn append_replay(storage: &PostgresEventStorage) -> EventStreamId {
    let stream = EventStreamId::for_context("replay");
    for batch in 0..EVENTS / 500 {
        let events = (0..500)
            .map(|n| EventToStore::new("Replayed", json!({ "n": batch * 500 + n })))
            .collect();
        storage
            .append(AppendCriteria::none(), &stream, events)
            .await
            .unwrap();
    }
    stream
}

/// Takes the numbers of the next `count` events of `events` onto `numbers`.
async fn take(events: &mut EventStream<'_>, count: usize, numbers: &mut Vec<Value>) {
    for _ in 0..count {
        numbers.push(events.next().await.expect("an event").unwrap().payload["n"].clone());
    }
}

#[tokio::test]
async fn the_next_page_is_read_while_the_caller_holds_the_stream_without_polling_it() {
    if common::try_pool().await.is_none() {
        return;
    }
    // A pool of the test's own, which counts the connections given back to it.
    let released = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&released);
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .after_release(move |_, _| {
            counted.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(true) })
        })
        .connect(&common::direct_url())
        .await
        .unwrap();
    let storage = PostgresEventStorage::builder()
        .pool(pool.clone())
        .prefix(common::unique_prefix())
        .init_mode(DatabaseInitMode::Ensure)
        .build()
        .await
        .unwrap();
    let stream = append_replay(&storage).await;
    let all_idle = || async { (pool.num_idle() == pool.size() as usize).then_some(()) };
    common::eventually(
        "the appends' connections back",
        Duration::from_secs(10),
        all_idle,
    )
    .await;
    let before = released.load(Ordering::SeqCst);

    let mut events = storage.query_stream(
        &EventFilter::match_all(),
        &stream,
        None,
        Limit::none(),
        Direction::Forward,
    );
    // The first event of the second page: handing it out starts the third page's read.
    let mut numbers = Vec::new();
    take(&mut events, 1_001, &mut numbers).await;

    // Not polled from here on: the third and last page is read, and its connection given
    // back, all the same. A read that moved only when polled would hold the connection (or
    // not have taken one yet) until the next poll.
    common::eventually(
        "the third page read without a poll",
        Duration::from_secs(10),
        || async { (released.load(Ordering::SeqCst) == before + 3).then_some(()) },
    )
    .await;

    while let Some(event) = events.next().await {
        numbers.push(event.unwrap().payload["n"].clone());
    }
    let expected: Vec<_> = (0..EVENTS).map(|n| json!(n)).collect();
    assert_eq!(numbers, expected, "every event once, in order");
    assert_eq!(
        released.load(Ordering::SeqCst),
        before + 3,
        "one connection taken and given back per page"
    );
    storage.close().await.unwrap();
    pool.close().await;
}

#[tokio::test]
async fn a_stream_dropped_half_way_holds_no_connection_and_no_transaction() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let stream = append_replay(&storage).await;

    let mut events = storage.query_stream(
        &EventFilter::match_all(),
        &stream,
        None,
        Limit::none(),
        Direction::Forward,
    );
    let mut read = Vec::new();
    while read.len() < EVENTS / 2 + 1 {
        read.push(events.next().await.expect("an event").unwrap().reference);
    }
    assert!(
        read.windows(2).all(|pair| pair[0] < pair[1]),
        "the stream yields events in order across its pages"
    );
    drop(events);

    let pool = storage.pool().clone();
    common::eventually(
        "every connection of the storage back in its pool",
        Duration::from_secs(10),
        || async { (pool.num_idle() == pool.size() as usize).then_some(()) },
    )
    .await;
    let busy: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE query LIKE '%' || $1 || '%' AND state <> 'idle' AND pid <> pg_backend_pid()",
    )
    .bind(format!("{prefix}events"))
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(
        busy, 0,
        "no session of the storage is in a transaction or a statement"
    );
    storage.close().await.unwrap();
}
