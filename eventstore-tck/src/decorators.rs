//! Scenarios: the runtime behind a decorator written against the fixed methods of the SPI.
//!
//! Applications wrap their storage (to count calls, to trace, to add a tenant) with a
//! decorator that forwards the methods the contract fixes and passes `supports` on as it is.
//! Such a decorator claims every capability of the storage it wraps, yet the optional methods
//! it does not know answer `Unsupported` from their default bodies. The electors must lead
//! and hand over behind it all the same, on the fixed methods.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use eventstore::elector::LeaderElector;
use eventstore::partitions::PartitionElector;
use eventstore_api::{
    AppendCriteria, Bookmark, Capability, Direction, EventFilter, EventId, EventReference,
    EventStorage, EventStreamId, EventToStore, Fence, FencingToken, Lease, LeaseRequest,
    LeaseResponse, Limit, StorageResult, StoredEvent, Tags,
};

use crate::support;
use crate::StorageFactory;

/// What these scenarios need.
pub(crate) const NEEDS: &[Capability] = &[Capability::Lease];

/// Long enough that a handover within it was a release, not an expiry.
const TTL: Duration = Duration::from_secs(6);

/// How often the electors ask: behind the decorator nothing is pushed, so a standby hears
/// of a release at its next request.
const INTERVAL: Duration = Duration::from_millis(300);

/// The leader shuts down behind the decorator and the standby leads within a few request
/// intervals, well before the ttl would have let the lease expire, with the next token.
pub async fn an_elector_behind_a_decorator_of_the_fixed_methods_leads_and_hands_over<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    if !support::leases_supported(&storage).await {
        return;
    }
    let first_handle: Arc<dyn EventStorage> = Arc::new(FixedMethodsOnly(storage.clone()));
    let second_handle: Arc<dyn EventStorage> =
        Arc::new(FixedMethodsOnly(factory.another_handle(&storage).await));
    let first = start(first_handle, "node-a");
    let token = support::within(
        support::DEADLINE,
        "an elector behind a decorator of the fixed methods leads (the runtime falls back to \
         the fixed methods where an optional one answers Unsupported)",
        first.watch().wait_for_leadership(),
    )
    .await
    .expect("the elector runs");
    let second = start(second_handle, "node-b");
    first
        .shutdown()
        .await
        .expect("the leader releases on shutdown");
    let taken = support::within(
        TTL - Duration::from_secs(1),
        "the standby behind the decorator leads after the release, before the ttl would \
         have let the lease expire",
        second.watch().wait_for_leadership(),
    )
    .await
    .expect("the elector runs");
    assert_eq!(
        taken,
        FencingToken(token.0 + 1),
        "a handover by release gives the next holder the next token"
    );
    second.shutdown().await.expect("the elector shuts down");
}

/// A partition elector behind the decorator takes every partition of its group.
pub async fn a_partition_elector_behind_a_decorator_of_the_fixed_methods_takes_its_partitions<
    F: StorageFactory,
>(
    factory: &F,
) {
    const PARTITIONS: u32 = 4;
    let storage = factory.create().await;
    if !support::leases_supported(&storage).await {
        return;
    }
    let handle: Arc<dyn EventStorage> = Arc::new(FixedMethodsOnly(storage));
    let elector = PartitionElector::builder(handle, "decorated", PARTITIONS)
        .owner("node-a")
        .ttl(TTL)
        .request_interval(INTERVAL)
        .start()
        .expect("the partition elector starts");
    let watch = elector.watch();
    support::eventually(
        "a partition elector behind a decorator of the fixed methods holds every partition",
        || {
            let held = watch.held().len();
            async move { held == PARTITIONS as usize }
        },
    )
    .await;
    elector
        .shutdown()
        .await
        .expect("the partition elector shuts down");
}

fn start(storage: Arc<dyn EventStorage>, owner: &str) -> LeaderElector {
    LeaderElector::builder(storage, "decorated")
        .owner(owner)
        .ttl(TTL)
        .request_interval(INTERVAL)
        .start()
        .expect("the elector starts")
}

/// A decorator as an application writes it from the contract: it forwards exactly the
/// methods the contract fixes, `supports` included, and leaves every other method to the
/// trait's default body.
#[derive(Debug, Clone)]
struct FixedMethodsOnly<S>(S);

#[async_trait]
impl<S: EventStorage> EventStorage for FixedMethodsOnly<S> {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn supports(&self, capability: Capability) -> bool {
        self.0.supports(capability)
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
    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        self.0.bookmark(reader, reference, tags).await
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
    async fn request_leases(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseResponse>> {
        self.0.request_leases(requests).await
    }
    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        self.0.release_lease(lease_name, owner).await
    }
    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        self.0.get_leases().await
    }
    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        self.0.storage_time().await
    }
    async fn append_fenced(
        &self,
        fence: &Fence,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.0.append_fenced(fence, criteria, stream, events).await
    }
    async fn bookmark_fenced(
        &self,
        fence: &Fence,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        self.0.bookmark_fenced(fence, reader, reference, tags).await
    }
    async fn close(&self) -> StorageResult<()> {
        self.0.close().await
    }
}
