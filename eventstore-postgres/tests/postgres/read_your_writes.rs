//! An append returns only once every reader sees it: with concurrent appenders, whose
//! transactions overlap, each append is read back at once, through its own storage and
//! through one with a pool of its own; and an append behind another session's open
//! transaction waits for it even while appends of its own storage are under way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use eventstore_api::{AppendCriteria, EventStorage, EventStreamId, EventToStore};
use serde_json::json;

use crate::common;

const WRITERS: usize = 6;
const APPENDS_EACH: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_append_is_readable_everywhere_the_moment_it_returns() {
    if common::try_pool().await.is_none() {
        return;
    }
    let prefix = common::unique_prefix();
    // A wait no foreign transaction on a shared test server outlasts: a failure here is a
    // read that missed an append, never a slow neighbour.
    let open = || {
        common::builder(&prefix)
            .visibility_wait(Duration::from_secs(60))
            .build()
    };
    let writer = Arc::new(open().await.unwrap());
    let reader = Arc::new(open().await.unwrap());
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
    let storage = Arc::new(
        common::builder(&prefix)
            .visibility_wait(Duration::from_secs(60))
            .build()
            .await
            .unwrap(),
    );
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
    let mut foreign = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *foreign)
        .await
        .unwrap();
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
