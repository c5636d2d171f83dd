//! A storage wrapper that counts what is asked of the storage it wraps.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use eventstore::decorator::Decorator;
use eventstore::{
    EventStorage, Lease, LeaseContender, LeaseOutcome, LeaseRequest, LeaseResponse, LeaseSelection,
    ReleaseOutcome, StorageResult,
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

/// Counts the lease calls (each one round trip on a database) and forwards everything.
#[async_trait]
impl<S: EventStorage> Decorator for CountingStorage<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
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

    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        self.call("release_lease");
        self.inner.release_lease(lease_name, owner).await
    }

    async fn release_leases(
        &self,
        lease_names: &[String],
        owner: &str,
    ) -> StorageResult<Vec<ReleaseOutcome>> {
        self.call("release_leases");
        self.inner.release_leases(lease_names, owner).await
    }

    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        self.call("get_leases");
        self.inner.get_leases().await
    }

    async fn list_leases(&self, selection: LeaseSelection) -> StorageResult<Vec<Lease>> {
        self.call("list_leases");
        self.inner.list_leases(selection).await
    }

    async fn list_contenders(
        &self,
        selection: LeaseSelection,
    ) -> StorageResult<Vec<LeaseContender>> {
        self.call("list_contenders");
        self.inner.list_contenders(selection).await
    }

    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        self.call("storage_time");
        self.inner.storage_time().await
    }
}
