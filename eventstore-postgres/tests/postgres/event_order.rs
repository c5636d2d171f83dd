//! Events are ordered by `(tx, position)` as numbers: a transaction id with more digits comes
//! later, although its text sorts first (`"10" < "9"`). Real servers cross such a boundary
//! (transaction 9,999,999 to 10,000,000) in their first weeks.

use eventstore::{
    AppendCriteria, Direction, EventFilter, EventId, EventStorage, EventStorageError,
    EventStreamId, EventToStore, Limit, StoredEvent,
};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::common;

/// Stores an event of `orders/default` under the given transaction id, as a writer whose
/// transaction had that id would have, and returns its id.
async fn store_with_tx(admin: &PgPool, prefix: &str, tx: u64, event_type: &str) -> Uuid {
    sqlx::query_scalar(&format!(
        "INSERT INTO {prefix}events (id, tx, stream_context, stream_purpose, event_type, payload, tags) \
         VALUES (gen_random_uuid(), $1::text::xid8, 'orders', 'default', $2, '{{}}', '{{}}') \
         RETURNING id"
    ))
    .bind(tx.to_string())
    .bind(event_type)
    .fetch_one(admin)
    .await
    .expect("storing an event under a chosen transaction id")
}

fn types(events: &[StoredEvent]) -> Vec<&str> {
    events.iter().map(|e| e.event_type.as_str()).collect()
}

#[tokio::test]
async fn transaction_ids_order_as_numbers_not_as_text() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let stream = EventStreamId::for_context("orders");
    // Written in this order, so that positions disagree with the transaction order too; both
    // ids lie far below the visibility barrier.
    store_with_tx(&admin, &prefix, 10, "Second").await;
    store_with_tx(&admin, &prefix, 9, "First").await;

    let query = |direction, limit| {
        let (storage, stream) = (&storage, &stream);
        async move {
            storage
                .query(&EventFilter::match_all(), stream, None, limit, direction)
                .await
                .unwrap()
        }
    };
    let forward = query(Direction::Forward, Limit::none()).await;
    assert_eq!(types(&forward), ["First", "Second"]);
    assert!(forward[0].reference < forward[1].reference);
    assert_eq!(
        types(&query(Direction::Forward, Limit::to(1)).await),
        ["First"]
    );
    assert_eq!(
        types(&query(Direction::Backward, Limit::none()).await),
        ["Second", "First"]
    );
    assert_eq!(
        types(&query(Direction::Backward, Limit::to(1)).await),
        ["Second"]
    );

    assert_eq!(
        storage.head(&stream).await.unwrap(),
        Some(forward[1].reference)
    );
    assert_eq!(
        storage.head(&EventStreamId::any()).await.unwrap(),
        Some(forward[1].reference)
    );
    let after_first = storage
        .query(
            &EventFilter::match_all(),
            &stream,
            Some(&forward[0].reference),
            Limit::to(1),
            Direction::Forward,
        )
        .await
        .unwrap();
    assert_eq!(types(&after_first), ["Second"]);

    // The conflict a conditional append reports is the first matching event in that order.
    let refused = storage
        .append(
            AppendCriteria::of(EventFilter::match_all(), None),
            &stream,
            vec![EventToStore::new("Third", json!({}))],
        )
        .await;
    match refused {
        Err(EventStorageError::OptimisticLock { conflicting, .. }) => {
            assert_eq!(conflicting, forward[0].reference)
        }
        other => panic!("expected OptimisticLock, got {other:?}"),
    }
    storage.close().await.unwrap();
}

/// A transaction id an epoch or more past the first 2^32 transactions reads back whole: the
/// high half of the 64-bit id is the epoch, and reads take the id in its binary form.
#[tokio::test]
async fn a_transaction_id_of_a_later_epoch_reads_back_whole() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let tx = (3_u64 << 32) + 7;
    let id = store_with_tx(&admin, &prefix, tx, "Later").await;

    let event = storage
        .get_event_by_id(EventId(id))
        .await
        .unwrap()
        .expect("the event stored");
    assert_eq!(event.reference.tx, tx);
    let as_the_server_prints_it: String = sqlx::query_scalar(&format!(
        "SELECT tx::text FROM {prefix}events WHERE id = $1"
    ))
    .bind(id)
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(event.reference.tx.to_string(), as_the_server_prints_it);
    storage.close().await.unwrap();
}

/// A long read decodes a page while the next one is read: a row that cannot be decoded in a
/// later page fails the whole read with an error naming the operation, and the store reads on.
#[tokio::test]
async fn a_corrupt_row_in_a_later_page_fails_the_read_and_the_store_reads_on() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let stream = EventStreamId::for_context("orders");
    for chunk in 0..5 {
        let events = (0..1_000)
            .map(|n| EventToStore::new("Placed", json!({ "n": chunk * 1_000 + n })))
            .collect();
        storage
            .append(AppendCriteria::none(), &stream, events)
            .await
            .unwrap();
    }
    // The 4,001st event: in the third page (1,000, 2,000, then 2,000 events).
    sqlx::query(&format!(
        "UPDATE {prefix}events SET tags = '{{\"no colon\"}}' \
         WHERE position = (SELECT position FROM {prefix}events ORDER BY position OFFSET 4000 LIMIT 1)"
    ))
    .execute(&admin)
    .await
    .unwrap();
    let read = |limit| {
        let (storage, stream) = (&storage, &stream);
        async move {
            storage
                .query(
                    &EventFilter::match_all(),
                    stream,
                    None,
                    limit,
                    Direction::Forward,
                )
                .await
        }
    };
    match read(Limit::none()).await {
        Err(EventStorageError::Backend { message, .. }) => {
            assert!(message.contains("query events"), "{message}")
        }
        other => panic!("expected a Backend error, got {:?}", other.map(|e| e.len())),
    }
    let first = read(Limit::to(4_000)).await.unwrap();
    assert_eq!(
        first.len(),
        4_000,
        "the events before the corrupt one read on"
    );
    assert_eq!(first[3_999].payload, json!({ "n": 3_999 }));
    storage.close().await.unwrap();
}
