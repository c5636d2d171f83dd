//! A storage wrapper that counts what is asked of the storage it wraps.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use eventstore::{
    AppendCriteria, Bookmark, Capability, Direction, EventFilter, EventId, EventReference,
    EventStorage, EventStreamId, EventToStore, Lease, LeaseChanges, LeaseContender, LeaseOutcome,
    LeaseRequest, LeaseResponse, LeaseScope, Limit, ReleaseOutcome, StorageResult, StoredEvent,
    Tags,
};

/// A storage that counts lease requests by lease and calls by method, and forwards
/// everything (batches stay batches).
#[derive(Debug)]
pub(crate) struct CountingStorage<S> {
    inner: S,
    requests: Mutex<HashMap<String, usize>>,
    calls: Mutex<HashMap<&'static str, usize>>,
}

impl<S> CountingStorage<S> {
    pub(crate) fn new(inner: S) -> Self {
        CountingStorage {
            inner,
            requests: Mutex::new(HashMap::new()),
            calls: Mutex::new(HashMap::new()),
        }
    }

    fn call(&self, method: &'static str) {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        *calls.entry(method).or_default() += 1;
    }

    /// Calls by SPI method since the last reset: each is one round trip on a database.
    pub(crate) fn calls(&self) -> HashMap<&'static str, usize> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn count(&self, lease: &str) {
        let mut requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *requests.entry(lease.to_owned()).or_default() += 1;
    }

    pub(crate) fn total(&self) -> usize {
        self.by_lease().values().sum()
    }

    pub(crate) fn by_lease(&self) -> HashMap<String, usize> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn reset(&self) {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[async_trait]
impl<S: EventStorage> EventStorage for CountingStorage<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn supports(&self, capability: Capability) -> bool {
        self.inner.supports(capability)
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
    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        self.call("request_lease");
        self.count(&request.lease_name);
        self.inner.request_lease(request).await
    }
    async fn request_leases(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseResponse>> {
        self.call("request_leases");
        for request in &requests {
            self.count(&request.lease_name);
        }
        self.inner.request_leases(requests).await
    }
    async fn request_leases_with_outcome(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        self.call("request_leases_with_outcome");
        for request in &requests {
            self.count(&request.lease_name);
        }
        self.inner.request_leases_with_outcome(requests).await
    }
    async fn release_lease_with_outcome(
        &self,
        lease_name: &str,
        owner: &str,
    ) -> StorageResult<ReleaseOutcome> {
        self.call("release_lease_with_outcome");
        self.inner
            .release_lease_with_outcome(lease_name, owner)
            .await
    }
    async fn release_leases(&self, lease_names: &[String], owner: &str) -> StorageResult<()> {
        self.call("release_leases");
        self.inner.release_leases(lease_names, owner).await
    }
    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        self.call("release_lease");
        self.inner.release_lease(lease_name, owner).await
    }
    async fn get_contenders(&self, lease_name: &str) -> StorageResult<Vec<LeaseContender>> {
        self.call("get_contenders");
        self.inner.get_contenders(lease_name).await
    }
    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        self.call("get_leases");
        self.inner.get_leases().await
    }

    async fn get_leases_with_prefix(&self, prefix: &str) -> StorageResult<Vec<Lease>> {
        self.call("get_leases_with_prefix");
        self.inner.get_leases_with_prefix(prefix).await
    }
    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        self.call("storage_time");
        self.inner.storage_time().await
    }
    async fn subscribe_lease_changes(&self, scope: LeaseScope) -> StorageResult<LeaseChanges> {
        self.inner.subscribe_lease_changes(scope).await
    }
    async fn close(&self) -> StorageResult<()> {
        self.inner.close().await
    }
}
