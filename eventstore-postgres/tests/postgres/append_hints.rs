//! Append hints pushed through `pg_notify` and the storage's one `LISTEN` connection: off
//! unless the builder turns them on, then one hint per append however many events it stores,
//! none for an append that did not commit, other processes hearing them, and a killed listener
//! connection.

use std::time::Duration;

use eventstore::EventStorageExt;
use eventstore::{
    AppendCriteria, AppendHint, AppendHints, AppendNotice, Capability, EventFilter, EventStorage,
    EventStorageError, EventStreamId, EventToStore, LeaseNotice, LeaseScope, StoredEvent,
};
use eventstore_postgres::PostgresEventStorage;
use serde_json::json;

use crate::common;
use crate::lease_changes::listener_pid;

/// The longest any notice may take to arrive.
const DEADLINE: Duration = Duration::from_secs(10);

fn orders() -> EventStreamId {
    EventStreamId::for_context("orders")
}

fn event(n: usize) -> EventToStore {
    EventToStore::new("Placed", json!({ "n": n }))
}

async fn append(
    storage: &PostgresEventStorage,
    stream: &EventStreamId,
    events: Vec<EventToStore>,
) -> Vec<StoredEvent> {
    storage
        .append(AppendCriteria::none(), stream, events)
        .await
        .unwrap()
}

async fn next_notice(hints: &mut AppendHints) -> AppendNotice {
    tokio::time::timeout(DEADLINE, hints.next())
        .await
        .unwrap_or_else(|_| panic!("no append notice within {DEADLINE:?}"))
        .expect("the subscription ended")
}

/// The next hint, which must not be `Missed`.
async fn next_hint(hints: &mut AppendHints) -> AppendHint {
    match next_notice(hints).await {
        AppendNotice::Appended(hint) => hint,
        AppendNotice::Missed => panic!("no hint may be missed here"),
    }
}

/// The hint an append of `stored` to `stream` sends.
fn hint_of(stream: &EventStreamId, stored: &[StoredEvent]) -> AppendHint {
    AppendHint {
        stream: stream.clone(),
        last: stored.last().expect("an append stores events").reference,
    }
}

#[tokio::test]
async fn without_the_option_a_storage_offers_no_hints_and_its_appends_notify_nothing() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    assert!(!storage.supports(Capability::AppendHints));
    let refused = storage.subscribe_appends(&orders()).await;
    assert!(
        matches!(refused, Err(EventStorageError::Unsupported { .. })),
        "{refused:?}"
    );

    // A listener of its own on the channel hears nothing of the storage's appends.
    let mut listener = sqlx::postgres::PgListener::connect_with(&admin)
        .await
        .unwrap();
    listener.listen(&format!("{prefix}appends")).await.unwrap();
    let batch = append(&storage, &orders(), (0..3).map(event).collect()).await;
    let keyed = append(
        &storage,
        &orders(),
        vec![event(3).with_idempotency_key("key-3")],
    )
    .await;
    let read = storage
        .query(
            &EventFilter::match_all(),
            &orders(),
            None,
            eventstore::Limit::none(),
            eventstore::Direction::Forward,
        )
        .await
        .unwrap();
    assert_eq!(read, [batch, keyed].concat());
    let heard = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await;
    assert!(heard.is_err(), "an append notified: {heard:?}");
    storage.close().await.unwrap();
}

#[tokio::test]
async fn an_append_of_many_events_is_one_hint_in_autocommit_and_in_a_transaction() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let storage = common::hinting_storage_on(&common::unique_prefix()).await;
    assert!(storage.supports(Capability::AppendHints));
    let mut hints = storage.subscribe_appends(&orders()).await.unwrap();

    // Unconditional: the single autocommit statement.
    let batch = append(&storage, &orders(), (0..100).map(event).collect()).await;
    // Keyed: checked and inserted in a transaction of its own.
    let keyed: Vec<EventToStore> = (0..10)
        .map(|n| event(n).with_idempotency_key(format!("key-{n}")))
        .collect();
    let keyed = append(&storage, &orders(), keyed).await;
    // Conditional, with criteria that hold: a transaction too.
    let criteria = AppendCriteria::of(
        EventFilter::for_types(["Cancelled"]),
        Some(keyed[9].reference),
    );
    let conditional = storage
        .append(criteria, &orders(), (0..3).map(event).collect())
        .await
        .unwrap();
    let single = append(&storage, &orders(), vec![event(0)]).await;

    // Hints arrive in commit order: had any append sent one per event, the next hint would
    // name an event of that append rather than the next append's last.
    for stored in [&batch, &keyed, &conditional, &single] {
        assert_eq!(next_hint(&mut hints).await, hint_of(&orders(), stored));
    }
    storage.close().await.unwrap();
}

#[tokio::test]
async fn an_append_that_does_not_commit_never_hints() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::hinting_storage_on(&prefix).await;
    let first = append(&storage, &orders(), vec![event(0)]).await;
    let mut hints = storage.subscribe_appends(&orders()).await.unwrap();

    // Criteria that fail: nothing is committed.
    let refused = storage
        .append(
            AppendCriteria::of(EventFilter::for_types(["Placed"]), None),
            &orders(),
            vec![event(1)],
        )
        .await;
    assert!(
        matches!(refused, Err(EventStorageError::OptimisticLock { .. })),
        "{refused:?}"
    );
    // An insert and its notification, on a connection of its own, rolled back.
    let mut transaction = admin.begin().await.unwrap();
    sqlx::query(&format!(
        "WITH inserted AS ( \
             INSERT INTO {prefix}events (id, tx, stream_context, stream_purpose, event_type, \
                                         payload, tags) \
             VALUES (gen_random_uuid(), pg_current_xact_id(), 'orders', 'default', 'Ghost', \
                     '{{}}', '{{}}') \
             RETURNING id, position, tx) \
         SELECT pg_notify('{prefix}appends', json_build_object('c', 'orders', 'p', 'default', \
                          'id', id, 'pos', position, 'tx', tx::text)::text) \
         FROM inserted"
    ))
    .execute(&mut *transaction)
    .await
    .unwrap();
    transaction.rollback().await.unwrap();

    let stored = append(&storage, &orders(), vec![event(2)]).await;
    assert_eq!(
        next_hint(&mut hints).await,
        hint_of(&orders(), &stored),
        "the first hint is the first committed append's"
    );
    assert_ne!(stored[0].reference, first[0].reference);
    storage.close().await.unwrap();
}

#[tokio::test]
async fn another_storage_on_the_same_prefix_hears_the_hints() {
    // The reader's own pool, as another process would have.
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let writer = common::hinting_storage_on(&prefix).await;
    let reader = PostgresEventStorage::builder()
        .pool(pool.clone())
        .prefix(&prefix)
        .append_hints(true)
        .build()
        .await
        .unwrap();
    let mut every = reader
        .subscribe_appends(&EventStreamId::any())
        .await
        .unwrap();
    let mut billing = reader
        .subscribe_appends(&EventStreamId::for_context("billing").any_purpose())
        .await
        .unwrap();

    let ordered = append(&writer, &orders(), (0..5).map(event).collect()).await;
    let billed_stream = EventStreamId::new("billing", "invoices");
    let billed = append(&writer, &billed_stream, vec![event(0)]).await;
    assert_eq!(next_hint(&mut every).await, hint_of(&orders(), &ordered));
    assert_eq!(
        next_hint(&mut every).await,
        hint_of(&billed_stream, &billed)
    );
    assert_eq!(
        next_hint(&mut billing).await,
        hint_of(&billed_stream, &billed),
        "a subscriber hears only of the streams it covers"
    );
    writer.close().await.unwrap();
    reader.close().await.unwrap();
    pool.close().await;
}

#[tokio::test]
async fn a_killed_listener_says_hints_may_have_been_missed_and_hints_resume() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::hinting_storage_on(&prefix).await;
    // The first subscription to appends starts the listener; a lease subscription shares it.
    let mut hints = storage.subscribe_appends(&orders()).await.unwrap();
    let killed = listener_pid(&admin, &prefix)
        .await
        .expect("the subscription's listener connection");
    let mut changes = storage
        .subscribe_lease_changes(LeaseScope::All)
        .await
        .unwrap();
    assert_eq!(listener_pid(&admin, &prefix).await, Some(killed));

    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(killed)
        .fetch_one(&admin)
        .await
        .unwrap();
    assert!(terminated);
    assert_eq!(next_notice(&mut hints).await, AppendNotice::Missed);
    let lease_notice = tokio::time::timeout(DEADLINE, changes.next()).await;
    assert_eq!(lease_notice, Ok(Some(LeaseNotice::Missed)));

    // Told after listening again: what is appended from now on is hinted.
    let stored = append(&storage, &orders(), vec![event(0), event(1)]).await;
    assert_eq!(next_hint(&mut hints).await, hint_of(&orders(), &stored));
    let reconnected = listener_pid(&admin, &prefix).await;
    assert!(
        reconnected.is_some_and(|pid| pid != killed),
        "the listener should listen on a new connection, got {reconnected:?}"
    );
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_notification_that_does_not_decode_is_heard_as_missed() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::hinting_storage_on(&prefix).await;
    let mut hints = storage.subscribe_appends(&orders()).await.unwrap();
    sqlx::query("SELECT pg_notify($1, 'not an append')")
        .bind(format!("{prefix}appends"))
        .execute(&admin)
        .await
        .unwrap();
    assert_eq!(next_notice(&mut hints).await, AppendNotice::Missed);
    let stored = append(&storage, &orders(), vec![event(0)]).await;
    assert_eq!(next_hint(&mut hints).await, hint_of(&orders(), &stored));
    storage.close().await.unwrap();
}

#[tokio::test]
async fn close_ends_append_subscriptions_and_the_listener_connection() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::hinting_storage_on(&prefix).await;
    let mut hints = storage.subscribe_appends(&orders()).await.unwrap();
    assert!(listener_pid(&admin, &prefix).await.is_some());

    storage.close().await.unwrap();
    let end = tokio::time::timeout(DEADLINE, hints.next()).await;
    assert_eq!(end, Ok(None), "a subscription outlived close");
    assert!(matches!(
        storage.subscribe_appends(&orders()).await,
        Err(EventStorageError::Closed)
    ));
    common::eventually("the listener connection to close", DEADLINE, || async {
        listener_pid(&admin, &prefix).await.is_none().then_some(())
    })
    .await;
}
