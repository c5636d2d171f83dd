//! An append returns only once every reader sees it: with concurrent appenders, whose
//! transactions overlap, each append is read back at once, through its own storage and
//! through one with a pool of its own.

use std::sync::Arc;
use std::time::Duration;

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
