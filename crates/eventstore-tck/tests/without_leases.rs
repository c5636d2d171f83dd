//! The whole kit against a backend that does not claim `Capability::Lease`: events and
//! bookmarks behave as the kit demands, and every lease scenario passes by proving that
//! each lease method refuses with `Unsupported`. This is how capability gating is proven.

use async_trait::async_trait;
use eventstore_api::{
    AppendCriteria, Bookmark, Capability, Direction, EventFilter, EventId, EventReference,
    EventStorage, EventStreamId, EventToStore, Limit, StorageResult, StoredEvent, Tags,
};
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::StorageFactory;

/// The memory backend with its leases hidden: it forwards events, bookmarks and `close`, claims
/// no capability, and so keeps the trait's default `Unsupported` lease methods.
#[derive(Debug, Clone)]
struct EventsOnlyStorage {
    inner: MemoryEventStorage,
}

#[async_trait]
impl EventStorage for EventsOnlyStorage {
    fn name(&self) -> &str {
        "events-only"
    }

    fn supports(&self, _capability: Capability) -> bool {
        false
    }

    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.inner.append(criteria, stream, events).await
    }

    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.inner
            .query(filter, stream, after, limit, direction)
            .await
    }

    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        self.inner.get_event_by_id(id).await
    }

    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        self.inner.head(stream).await
    }

    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        self.inner.bookmark(reader, reference, tags).await
    }

    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        self.inner.get_bookmark(reader).await
    }

    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        self.inner.remove_bookmark(reader).await
    }

    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        self.inner.get_bookmarks().await
    }

    async fn close(&self) -> StorageResult<()> {
        self.inner.close().await
    }
}

/// Fresh events-only storages; another handle is a clone, which shares the storage.
struct EventsOnly;

#[async_trait]
impl StorageFactory for EventsOnly {
    type Storage = EventsOnlyStorage;

    async fn create(&self) -> EventsOnlyStorage {
        EventsOnlyStorage {
            inner: MemoryEventStorage::new(),
        }
    }

    async fn another_handle(&self, storage: &EventsOnlyStorage) -> EventsOnlyStorage {
        storage.clone()
    }
}

#[tokio::test]
async fn the_wrapper_hides_the_lease_capability_of_the_storage_it_wraps() {
    let storage = EventsOnly.create().await;
    assert!(
        storage.inner.supports(Capability::Lease),
        "the wrapped memory storage offers leases, so hiding them proves the gating"
    );
    assert!(!storage.supports(Capability::Lease));
    eventstore_tck::support::assert_lease_methods_unsupported(&storage).await;
}

eventstore_tck::tck_tests!(EventsOnly);
