//! The streaming read yields its events in order across pages, and a stream dropped part-way
//! (its next page read ahead) holds no connection and leaves no transaction open.

use std::time::Duration;

use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStreamId, EventToStore, Limit,
};
use futures_util::StreamExt;
use serde_json::json;

use crate::common;

const EVENTS: usize = 2_500;

#[tokio::test]
async fn a_stream_dropped_half_way_holds_no_connection_and_no_transaction() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
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
