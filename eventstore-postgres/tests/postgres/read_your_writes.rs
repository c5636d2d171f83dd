//! An append returns only once every reader sees it: with concurrent appenders, whose
//! transactions overlap, each append is read back at once, through its own storage and
//! through one with a pool of its own; and an append behind another session's open
//! transaction waits for it even while appends of its own storage are under way. A
//! conditional append refused for an event that readers cannot see yet returns once they can.

use std::sync::Arc;
use std::time::{Duration, Instant};

use eventstore::Direction;
use eventstore::{
    AppendCriteria, EventFilter, EventStorage, EventStorageError, EventStreamId, EventToStore,
    Limit, Tags,
};
use serde_json::json;

use crate::common;

const WRITERS: usize = 6;

/// A storage on `prefix` whose appends wait for the barrier longer than any foreign
/// transaction on a shared test server lasts: a failure is a read that missed an append,
/// never a slow neighbour.
async fn patient(prefix: &str) -> eventstore_postgres::PostgresEventStorage {
    common::builder(prefix)
        .visibility_wait(Duration::from_secs(60))
        .build()
        .await
        .unwrap()
}

/// A transaction of another session with an id, older than anything written after it:
/// readers see nothing committed later until it ends.
async fn hold_the_barrier(pool: &sqlx::PgPool) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut foreign = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *foreign)
        .await
        .unwrap();
    foreign
}
const APPENDS_EACH: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_append_is_readable_everywhere_the_moment_it_returns() {
    if common::try_pool().await.is_none() {
        return;
    }
    let prefix = common::unique_prefix();
    let writer = Arc::new(patient(&prefix).await);
    let reader = Arc::new(patient(&prefix).await);
    let tasks: Vec<_> = (0..WRITERS)
        .map(|n| {
            let (writer, reader) = (Arc::clone(&writer), Arc::clone(&reader));
            tokio::spawn(async move {
                let stream = EventStreamId::new("orders", format!("writer-{n}"));
                for i in 0..APPENDS_EACH {
                    let event = EventToStore::new("Placed", json!({ "i": i }));
                    let stored = writer
                        .append(AppendCriteria::none(), &stream, vec![event])
                        .await
                        .unwrap();
                    let appended = Some(stored[0].reference);
                    assert_eq!(writer.head(&stream).await.unwrap(), appended, "append {i}");
                    assert_eq!(reader.head(&stream).await.unwrap(), appended, "append {i}");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    writer.close().await.unwrap();
    reader.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_behind_another_sessions_open_transaction_waits_for_it() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = Arc::new(patient(&prefix).await);
    let stream = EventStreamId::for_context("orders");
    let append = |storage: Arc<eventstore_postgres::PostgresEventStorage>, i: usize| {
        let stream = stream.clone();
        tokio::spawn(async move {
            let event = EventToStore::new("Placed", json!({ "i": i }));
            storage
                .append(AppendCriteria::none(), &stream, vec![event])
                .await
                .unwrap()[0]
                .reference
        })
    };

    // Another session's transaction, with an id older than every append below.
    let foreign = hold_the_barrier(&pool).await;
    // Appends of this storage run beside it: the last ones find only their own older
    // transactions besides the foreign one, which they must not take for their own.
    let appends: Vec<_> = (0..4).map(|i| append(Arc::clone(&storage), i)).collect();

    // Held: every append committed, none readable while the foreign transaction runs.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let committed: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {prefix}events"))
            .fetch_one(&pool)
            .await
            .unwrap();
        if committed == 4 {
            break;
        }
        assert!(Instant::now() < deadline, "the appends never committed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for append in &appends {
        assert!(
            !append.is_finished(),
            "an append returned before readers could see it"
        );
    }
    assert_eq!(storage.head(&stream).await.unwrap(), None);

    foreign.commit().await.unwrap();
    let mut last = None;
    for append in appends {
        let reference = tokio::time::timeout(Duration::from_secs(30), append)
            .await
            .expect("the appends return once the foreign transaction ended")
            .unwrap();
        last = last.max(Some(reference));
    }
    assert_eq!(storage.head(&stream).await.unwrap(), last);
    storage.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_conflict_hidden_behind_another_sessions_open_transaction_is_reported_once_readable() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = Arc::new(patient(&prefix).await);
    // Another writer of the stream, which returns at its commit whoever can read it.
    let hasty = common::builder(&prefix)
        .visibility_wait(Duration::ZERO)
        .build()
        .await
        .unwrap();
    let stream = EventStreamId::for_context("orders");
    let order = Tags::from_pairs([("order", "1")]);
    let decision = EventFilter::for_tags(order.clone());
    let placed = || EventToStore::new("Placed", json!({})).with_tags(order.clone());
    let read = |storage: Arc<eventstore_postgres::PostgresEventStorage>| {
        let (stream, decision) = (stream.clone(), decision.clone());
        async move {
            storage
                .query(&decision, &stream, None, Limit::none(), Direction::Forward)
                .await
                .unwrap()
        }
    };

    // An older transaction of another session holds the barrier below the order's event.
    let foreign = hold_the_barrier(&pool).await;
    let stored = hasty
        .append(AppendCriteria::none(), &stream, vec![placed()])
        .await
        .unwrap();
    // Decided on what readers see: no event of the order yet.
    assert!(read(Arc::clone(&storage)).await.is_empty());
    let refused = tokio::spawn({
        let storage = Arc::clone(&storage);
        let (stream, criteria) = (stream.clone(), AppendCriteria::of(decision.clone(), None));
        let event = placed();
        async move { storage.append(criteria, &stream, vec![event]).await }
    });
    // Refused at once for an event no read shows: reading again would decide the same.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !refused.is_finished(),
        "the conflict was reported while readers could not see the conflicting event"
    );

    foreign.commit().await.unwrap();
    let refused = tokio::time::timeout(Duration::from_secs(30), refused)
        .await
        .expect("the conflict is reported once the foreign transaction ended")
        .unwrap();
    match refused {
        Err(EventStorageError::OptimisticLock { conflicting, .. }) => {
            assert_eq!(conflicting, stored[0].reference);
        }
        other => panic!("expected OptimisticLock, got {other:?}"),
    }
    // Read again, the decision sees what it conflicted with.
    let seen: Vec<_> = read(Arc::clone(&storage))
        .await
        .into_iter()
        .map(|event| event.reference)
        .collect();
    assert_eq!(seen, vec![stored[0].reference]);
    hasty.close().await.unwrap();
    storage.close().await.unwrap();
}
