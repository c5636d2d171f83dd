//! Calls given up part-way (a caller's timeout around them) and what later calls find.

use std::time::Duration;

use eventstore_api::{
    AppendCriteria, EventStorage, EventStreamId, EventToStore, Fence, FencingToken, LeaseRequest,
};
use eventstore_file::FileEventStorage;
use serde_json::json;
use tokio::time::timeout;

/// A `close` given up while it waits for the writer (a caller's `timeout` around it) leaves
/// the wait to the next `close`: once that one answers, the directory is free to reopen.
#[tokio::test]
async fn a_close_after_one_given_up_waits_until_the_directory_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path()).await.unwrap();
    queue_work(&storage).await;
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

/// Work queued for the writer: each append is polled once (its command reaches the writer),
/// then its caller gives up; the writer stores it all the same.
async fn queue_work(storage: &FileEventStorage) {
    let stream = EventStreamId::for_context("big");
    let pad = "x".repeat(4 << 20);
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
}

/// The last handle dropped after a `close` that was given up: the drop waits for the writer
/// as it does without the `close`, so the directory is free once it returns.
#[tokio::test]
async fn dropping_the_last_handle_after_a_given_up_close_frees_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path()).await.unwrap();
    queue_work(&storage).await;
    assert!(
        timeout(Duration::ZERO, storage.close()).await.is_err(),
        "the close waits for the writer"
    );
    drop(storage);
    let reopened = FileEventStorage::open(dir.path()).await;
    assert!(
        reopened.is_ok(),
        "the last handle was dropped, yet the directory is still held: {}",
        reopened.err().map(|e| e.report()).unwrap_or_default()
    );
}

/// Polls `future` once without yielding to the runtime, as a `select!` that takes another
/// branch does, then drops it.
fn poll_once<F: std::future::Future>(future: F) {
    let mut future = std::pin::pin!(future);
    let _ = future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
}

/// On a runtime of one thread: a first lease request, given up while the tokens it needs are
/// made durable (the lease lock held meanwhile), then a fenced append given up once it reached
/// the writer (which waits for the lease lock to check its fence), then the last handle
/// dropped, which waits for the writer on the runtime's only thread. Nothing the runtime would
/// have to run may stand between the writer and the lock.
#[test]
fn dropping_the_last_handle_while_a_fenced_append_waits_for_a_lease_write_returns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let (dropped, returned) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let storage = FileEventStorage::open(&path).await.unwrap();
            let ttl = Duration::from_secs(60);
            poll_once(storage.request_lease(LeaseRequest::new("orders", "pod-a", 0, ttl)));
            let fence = Fence::new("orders", FencingToken(1));
            let stream = EventStreamId::for_context("orders");
            let event = EventToStore::new("Placed", json!({}));
            poll_once(storage.append_fenced(&fence, AppendCriteria::none(), &stream, vec![event]));
            drop(storage);
        });
        let _ = dropped.send(());
    });
    assert!(
        returned.recv_timeout(Duration::from_secs(30)).is_ok(),
        "dropping the last handle hung: the writer waits for the lease lock, held by a task \
         of the runtime whose only thread waits for the writer"
    );
}
