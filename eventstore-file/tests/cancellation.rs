//! Calls given up part-way (a caller's timeout around them) and what later calls find.

use std::time::Duration;

use eventstore_api::{AppendCriteria, EventStorage, EventStreamId, EventToStore};
use eventstore_file::FileEventStorage;
use serde_json::json;
use tokio::time::timeout;

/// A `close` given up while it waits for the writer (a caller's `timeout` around it) leaves
/// the wait to the next `close`: once that one answers, the directory is free to reopen.
#[tokio::test]
async fn a_close_after_one_given_up_waits_until_the_directory_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path()).await.unwrap();
    let stream = EventStreamId::for_context("big");
    let pad = "x".repeat(4 << 20);
    // Work queued for the writer: each append is polled once (its command reaches the
    // writer), then its caller gives up; the writer stores it all the same.
    for n in 0..16 {
        let append = storage.append(
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("Big", json!({ "n": n, "pad": pad }))],
        );
        assert!(
            timeout(Duration::ZERO, append).await.is_err(),
            "still writing"
        );
    }
    // The caller's timeout ends the first close while it waits for the writer thread.
    assert!(
        timeout(Duration::ZERO, storage.close()).await.is_err(),
        "the first close waits for the writer"
    );
    storage.close().await.expect("the second close");
    let reopened = FileEventStorage::open(dir.path()).await;
    assert!(
        reopened.is_ok(),
        "close() answered Ok, yet the directory is still held by the writer: {}",
        reopened.err().map(|e| format!("{e:?}")).unwrap_or_default()
    );
}
