//! `Unreliable`: while healthy it is the storage it wraps, which the whole kit run through it
//! proves (leases and fenced writes included); while hanging, every call but `name`,
//! `supports` and `close` waits, counted, until it is dropped; while failing, those calls fail
//! at once and change nothing.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use eventstore::{
    AppendCriteria, Capability, EventStorage, EventStreamId, EventToStore, StorageResult,
};
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::support::{eventually, request};
use eventstore_tck::wrappers::Unreliable;
use eventstore_tck::StorageFactory;

/// Fresh memory storages behind a hang switch that stays off; another handle shares the
/// storage and its switch.
struct NeverHanging;

#[async_trait]
impl StorageFactory for NeverHanging {
    type Storage = Arc<Unreliable<MemoryEventStorage>>;

    async fn create(&self) -> Self::Storage {
        Arc::new(Unreliable::new(MemoryEventStorage::new()))
    }

    async fn another_handle(&self, storage: &Self::Storage) -> Self::Storage {
        Arc::clone(storage)
    }
}

eventstore_tck::tck_tests!(
    NeverHanging,
    capabilities = [
        Lease,
        FencedWrites,
        LeaseChanges,
        LeaseOutcomes,
        AppendHints
    ]
);

/// Starts `call` on its own task and waits until the storage counts it as hanging.
async fn start_hanging<T: Send + 'static>(
    storage: &Unreliable<MemoryEventStorage>,
    call: impl std::future::Future<Output = StorageResult<T>> + Send + 'static,
) -> tokio::task::JoinHandle<StorageResult<T>> {
    let hung_before = storage.hung_calls();
    let task = tokio::spawn(call);
    eventually("the call to hang", || async {
        storage.hung_calls() == hung_before + 1
    })
    .await;
    task
}

#[tokio::test]
async fn a_hanging_storage_holds_every_call_until_it_is_dropped_and_answers_new_ones_after() {
    let storage = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    storage.hang(true);
    assert!(storage.is_hanging());
    assert!(
        storage.supports(Capability::Lease),
        "supports still answers"
    );
    assert_eq!(storage.name(), storage.inner().name(), "name still answers");

    let lease = start_hanging(&storage, {
        let storage = Arc::clone(&storage);
        async move { storage.request_lease(request("jobs", "node-a")).await }
    })
    .await;
    let append = start_hanging(&storage, {
        let storage = Arc::clone(&storage);
        async move {
            let event = EventToStore::new("Noted", serde_json::json!({}));
            let stream = EventStreamId::for_context("notes");
            storage
                .append(AppendCriteria::none(), &stream, vec![event])
                .await
        }
    })
    .await;
    assert_eq!(storage.hung_calls(), 2);

    storage.hang(false);
    assert!(
        !lease.is_finished(),
        "a hung call stays hung after the switch"
    );
    let answered = tokio::time::timeout(Duration::from_secs(10), storage.get_leases())
        .await
        .expect("a call made after the switch is answered")
        .expect("get_leases");
    assert!(
        answered.is_empty(),
        "the hung request never reached the storage"
    );

    lease.abort();
    append.abort();
    eventually("aborted calls to stop counting", || async {
        storage.hung_calls() == 0
    })
    .await;
    storage.hang(true);
    storage.close().await.expect("close never hangs");
}

#[tokio::test]
async fn a_failing_storage_refuses_every_call_at_once_and_changes_nothing() {
    let storage = Unreliable::new(MemoryEventStorage::new());
    storage.fail(true);
    assert!(storage.is_failing());
    let refused = storage.request_lease(request("jobs", "node-a")).await;
    assert!(
        matches!(refused, Err(eventstore::EventStorageError::Backend { .. })),
        "a failing storage answers Backend, got {refused:?}"
    );
    let event = EventToStore::new("Noted", serde_json::json!({}));
    let stream = EventStreamId::for_context("notes");
    let refused = storage
        .append(AppendCriteria::none(), &stream, vec![event])
        .await;
    assert!(refused.is_err(), "append must fail too, got {refused:?}");

    storage.fail(false);
    assert!(storage.get_leases().await.expect("get_leases").is_empty());
    let head = storage.head(&stream).await.expect("head");
    assert_eq!(head, None, "the failed append stored nothing");
}
