//! The trait's default bodies, on a storage that keeps them (as a backend written against the
//! methods a backend must write does): each answers as the backends' own versions do.

use chrono::{DateTime, Utc};
use eventstore_api::{
    AppendCriteria, Bookmark, Direction, EventFilter, EventId, EventReference, EventStorage,
    EventStorageError, EventStreamId, EventToStore, Lease, LeaseContender, LeaseRequest,
    LeaseResponse, LeaseSelection, Limit, ReleaseOutcome, StorageResult, StoredEvent, Tags,
};
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::support::LONG_TTL;

/// The memory storage behind the sixteen methods a backend of events, bookmarks, leases and
/// fenced writes must write (fenced writes left out: no default is built on them).
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
    async fn bookmark(&self, reader: &str, at: &EventReference, tags: Tags) -> StorageResult<()> {
        self.0.bookmark(reader, at, tags).await
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
    async fn list_contenders(
        &self,
        selection: LeaseSelection,
    ) -> StorageResult<Vec<LeaseContender>> {
        self.0.list_contenders(selection).await
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
    assert_eq!(storage.release_leases(&[], "pod-a").await.unwrap(), []);
    assert_eq!(storage.get_leases().await.unwrap(), []);
}

/// The default `list_leases` lists what the backend's own lists, by prefix and by name.
#[tokio::test]
async fn leases_by_selection_are_those_the_backend_lists() {
    let storage = DefaultsOnly::default();
    for (lease, owner) in [
        ("work/1", "pod-a"),
        ("work/0", "pod-b"),
        ("workers", "pod-a"),
    ] {
        let request = LeaseRequest::new(lease, owner, 0, LONG_TTL);
        storage.request_lease(request).await.unwrap();
    }
    let selections = ["work/", "work", "", "nothing"]
        .map(LeaseSelection::prefix)
        .into_iter()
        .chain(["work/1", "work", "nothing"].map(LeaseSelection::named))
        .chain([LeaseSelection::all()]);
    for selection in selections {
        assert_eq!(
            storage.list_leases(selection.clone()).await.unwrap(),
            storage.0.list_leases(selection.clone()).await.unwrap(),
            "{selection:?}"
        );
    }
    let invalid = storage.list_leases(LeaseSelection::named("")).await;
    assert!(
        matches!(invalid, Err(EventStorageError::InvalidInput { .. })),
        "a blank name is refused: {invalid:?}"
    );
}

/// The default `release_leases` releases each lease and says it does not know which the
/// caller held.
#[tokio::test]
async fn releases_by_default_release_and_do_not_report() {
    let storage = DefaultsOnly::default();
    let held = storage
        .request_lease(LeaseRequest::new("work/1", "pod-a", 0, LONG_TTL))
        .await
        .unwrap();
    let names = ["work/1".to_owned(), "never".to_owned()];
    assert_eq!(
        storage.release_leases(&names, "pod-a").await.unwrap(),
        [ReleaseOutcome::Unreported, ReleaseOutcome::Unreported]
    );
    let next = storage
        .request_lease(LeaseRequest::new("work/1", "pod-b", 0, LONG_TTL))
        .await
        .unwrap();
    assert_eq!(
        next.fencing_token.0,
        held.fencing_token.0 + 1,
        "released: the next holder takes it at once"
    );
}

/// The default `head` and `get_bookmark` answer as the backend's own.
#[tokio::test]
async fn head_and_bookmark_by_default_are_the_backends() {
    let storage = DefaultsOnly::default();
    let orders = EventStreamId::for_context("orders");
    assert_eq!(storage.head(&orders).await.unwrap(), None);
    let stored = storage
        .append(
            AppendCriteria::none(),
            &orders,
            vec![
                EventToStore::new("A", serde_json::json!(1)),
                EventToStore::new("B", serde_json::json!(2)),
            ],
        )
        .await
        .unwrap();
    storage
        .append(
            AppendCriteria::none(),
            &EventStreamId::for_context("other"),
            vec![EventToStore::new("C", serde_json::json!(3))],
        )
        .await
        .unwrap();
    for stream in [orders.clone(), EventStreamId::any()] {
        assert_eq!(
            storage.head(&stream).await.unwrap(),
            storage.0.head(&stream).await.unwrap(),
            "{stream}"
        );
    }
    assert_eq!(
        storage.head(&orders).await.unwrap(),
        Some(stored[1].reference)
    );
    assert_eq!(storage.get_bookmark("reader").await.unwrap(), None);
    storage
        .bookmark("reader", &stored[0].reference, Tags::none())
        .await
        .unwrap();
    assert_eq!(
        storage.get_bookmark("reader").await.unwrap(),
        storage.0.get_bookmark("reader").await.unwrap()
    );
    assert_eq!(
        storage.get_bookmark("reader").await.unwrap(),
        Some(stored[0].reference)
    );
    let blank = storage.get_bookmark("").await;
    assert!(
        matches!(blank, Err(EventStorageError::InvalidInput { .. })),
        "a blank reader is refused: {blank:?}"
    );
    storage.close().await.unwrap();
    let closed = storage.get_bookmark("").await;
    assert!(
        matches!(closed, Err(EventStorageError::Closed)),
        "closed comes first: {closed:?}"
    );
}
