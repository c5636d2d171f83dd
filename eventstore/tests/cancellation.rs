//! Runs given up part-way (a caller's timeout around them) and what later runs find.

use futures_util::FutureExt;
use std::sync::{Arc, Mutex};

use eventstore::projector::{BookmarkReading, Projection, ProjectionError, Projector};
use eventstore::{
    AppendCriteria, EventReference, EventStorage, EventStreamId, EventToStore, StoredEvent,
};
use eventstore_memory::MemoryEventStorage;
use serde_json::json;

/// The projection's own store: its data and its position, committed together.
#[derive(Default)]
struct OwnStore {
    count: u64,
    position: Option<EventReference>,
}

/// The exactly-once counter of the `projector` module's documentation, whose `handle` awaits
/// (as one that writes to its own store does).
struct Counter {
    store: Arc<Mutex<OwnStore>>,
    pending: u64,
    from: Option<EventReference>,
}

#[async_trait::async_trait]
impl Projection for Counter {
    async fn handle(&mut self, _event: &StoredEvent) -> Result<(), ProjectionError> {
        self.pending += 1;
        tokio::task::yield_now().await; // a write to the projection's own store
        Ok(())
    }
    async fn after_batch(&mut self, last: &EventReference) -> Result<(), ProjectionError> {
        let mut store = self.store.lock().unwrap();
        if store.position != self.from {
            return Err("another instance committed this batch; stopping".into());
        }
        store.count += std::mem::take(&mut self.pending);
        store.position = Some(*last);
        self.from = Some(*last);
        Ok(())
    }
    async fn cancel_batch(&mut self) {
        self.pending = 0;
    }
}

/// A run dropped inside a batch counts as a failed batch: the next run cancels it first, so
/// the batch handled again is committed once.
#[tokio::test]
async fn a_run_dropped_inside_a_batch_leaves_nothing_of_it_to_the_next_run() {
    let storage = Arc::new(MemoryEventStorage::new());
    let stream = EventStreamId::for_context("clicks");
    let events = (0..3)
        .map(|n| EventToStore::new("Clicked", json!({ "n": n })))
        .collect();
    storage
        .append(AppendCriteria::none(), &stream, events)
        .await
        .unwrap();
    let store = Arc::new(Mutex::new(OwnStore::default()));
    let counter = Counter {
        store: Arc::clone(&store),
        pending: 0,
        from: None,
    };
    let mut projector = Projector::builder(storage, counter)
        .stream(stream)
        .bookmark_reading(BookmarkReading::OnRequest)
        .build()
        .unwrap();
    // Polled once, then given up (a caller's timeout, a select) while its first event is
    // being handled.
    let given_up = projector.run().now_or_never();
    assert!(given_up.is_none(), "the run waits inside the batch");
    assert_eq!(store.lock().unwrap().count, 0, "nothing committed yet");

    projector.seek(store.lock().unwrap().position);
    projector.run().await.unwrap();
    assert_eq!(
        store.lock().unwrap().count,
        3,
        "3 events, each counted once: the dropped batch must be cancelled before the next run"
    );
}
