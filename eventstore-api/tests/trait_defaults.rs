//! The trait's default bodies, on a storage that keeps them (as a backend written against the
//! required methods alone does): each answers as the backends' own versions do.

use chrono::{DateTime, Utc};
use eventstore_api::{
    AppendCriteria, Bookmark, Direction, EventFilter, EventId, EventReference, EventStorage,
    EventStorageError, EventStreamId, EventToStore, Lease, LeaseContender, LeaseRequest,
    LeaseResponse, Limit, StorageResult, StoredEvent, Tags,
};
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::support::LONG_TTL;

/// The memory storage behind the required methods and the single lease calls only.
#[derive(Debug, Clone, Default)]
struct DefaultsOnly(MemoryEventStorage);

#[async_trait::async_trait]
impl EventStorage for DefaultsOnly {
    fn name(&self) -> &str {
        "defaults-only"
    }
    fn supports(&self, capability: eventstore_api::Capability) -> bool {
        capability == eventstore_api::Capability::Lease
    }
    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.0.append(criteria, stream, events).await
    }
    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.0.query(filter, stream, after, limit, direction).await
    }
    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        self.0.get_event_by_id(id).await
    }
    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        self.0.head(stream).await
    }
    async fn bookmark(&self, reader: &str, at: &EventReference, tags: Tags) -> StorageResult<()> {
        self.0.bookmark(reader, at, tags).await
    }
    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        self.0.get_bookmark(reader).await
    }
    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        self.0.remove_bookmark(reader).await
    }
    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        self.0.get_bookmarks().await
    }
    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        self.0.request_lease(request).await
    }
    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        self.0.release_lease(lease_name, owner).await
    }
    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        self.0.get_leases().await
    }
    async fn get_contenders(&self, lease_name: &str) -> StorageResult<Vec<LeaseContender>> {
        self.0.get_contenders(lease_name).await
    }
    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        self.0.storage_time().await
    }
    async fn close(&self) -> StorageResult<()> {
        self.0.close().await
    }
}

/// Empty batches on a closed storage are `Closed`, as every call is.
#[tokio::test]
async fn empty_batches_on_a_closed_storage_are_closed() {
    let storage = DefaultsOnly::default();
    storage.close().await.unwrap();
    let requested = storage.request_leases(Vec::new()).await;
    assert!(
        matches!(requested, Err(EventStorageError::Closed)),
        "{requested:?}"
    );
    let released = storage.release_leases(&[], "pod-a").await;
    assert!(
        matches!(released, Err(EventStorageError::Closed)),
        "{released:?}"
    );
}

/// Empty batches on an open storage answer nothing and change nothing.
#[tokio::test]
async fn empty_batches_on_an_open_storage_answer_nothing() {
    let storage = DefaultsOnly::default();
    assert_eq!(storage.request_leases(Vec::new()).await.unwrap(), []);
    storage.release_leases(&[], "pod-a").await.unwrap();
    assert_eq!(storage.get_leases().await.unwrap(), []);
}

/// The default `get_contenders_with_prefix` lists what the backend's own lists.
#[tokio::test]
async fn contenders_by_prefix_are_those_the_backend_lists() {
    let storage = DefaultsOnly::default();
    for (lease, owner, priority) in [
        ("work/1", "pod-a", 0),
        ("work/1", "pod-b", 2),
        ("work/1", "pod-c", 0),
        ("work/0", "pod-b", 0),
        ("work/0", "pod-a", 1),
        ("workers", "pod-a", 0),
        ("workers", "pod-d", 0),
    ] {
        let request = LeaseRequest::new(lease, owner, priority, LONG_TTL);
        storage.request_lease(request).await.unwrap();
    }
    for prefix in ["work/", "work", "", "nothing"] {
        assert_eq!(
            storage.get_contenders_with_prefix(prefix).await.unwrap(),
            storage.0.get_contenders_with_prefix(prefix).await.unwrap(),
            "{prefix:?}"
        );
    }
    let listed = storage.get_contenders_with_prefix("work/").await.unwrap();
    let owners: Vec<(&str, &str)> = listed
        .iter()
        .map(|c| (c.lease_name.as_str(), c.owner.as_str()))
        .collect();
    assert_eq!(
        owners,
        [
            ("work/0", "pod-a"),
            ("work/1", "pod-b"),
            ("work/1", "pod-c")
        ]
    );
}
