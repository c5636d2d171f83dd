//! Storages that wrap another storage and change part of what it does.
//!
//! A decorator (to count calls, trace, retry, add a tenant, hide a capability) implements
//! [`Decorator`]: it names the storage it wraps with [`Decorator::inner`] and overrides only
//! the methods it changes. Every other method, `supports` included, forwards to the inner
//! storage, so a decorator can never claim a capability whose methods it does not pass on,
//! and a method added to the SPI later is forwarded without a change. Every type that
//! implements [`Decorator`] is an [`EventStorage`].
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//!
//! use async_trait::async_trait;
//! use eventstore_api::decorator::Decorator;
//! use eventstore_api::{
//!     AppendCriteria, EventStorage, EventStreamId, EventToStore, StorageResult, StoredEvent,
//! };
//!
//! /// Counts appends; everything else, leases and capabilities included, goes to `S` as is.
//! #[derive(Debug)]
//! struct CountingAppends<S> {
//!     inner: S,
//!     appends: AtomicUsize,
//! }
//!
//! #[async_trait]
//! impl<S: EventStorage> Decorator for CountingAppends<S> {
//!     type Inner = S;
//!
//!     fn inner(&self) -> &S {
//!         &self.inner
//!     }
//!
//!     async fn append(
//!         &self,
//!         criteria: AppendCriteria,
//!         stream: &EventStreamId,
//!         events: Vec<EventToStore>,
//!     ) -> StorageResult<Vec<StoredEvent>> {
//!         self.appends.fetch_add(1, Ordering::Relaxed);
//!         self.inner.append(criteria, stream, events).await
//!     }
//! }
//! ```
//!
//! A decorator of an `Arc<dyn EventStorage>` names `dyn EventStorage` as its inner type
//! (`fn inner(&self) -> &dyn EventStorage { &*self.0 }`): `Arc` is a storage of its own, and
//! a module that has both traits in scope could not tell which `append` of it is meant.
//!
//! Inside the impl, `self.name()` is ambiguous (a decorator is an [`EventStorage`] too, and
//! both traits have `name`): write `Decorator::name(self)` for the decorator's name, as an
//! `Unsupported` error of its own would give it, or `self.inner().name()` for the inner one's.
//!
//! `Arc<T>` and `Box<T>` of a storage are storages too: they forward every method.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::{
    AppendCriteria, Bookmark, Capability, Direction, EventFilter, EventId, EventReference,
    EventStorage, EventStreamId, EventToStore, Fence, Lease, LeaseContender, LeaseOutcome,
    LeaseRequest, LeaseResponse, LeaseSelection, Limit, ReadRequest, ReadStream, ReleaseOutcome,
    StorageResult, StoredEvent, Subscribed, Subscription, Tags,
};

// The methods below are written out once per method of `EventStorage`, in its order: the
// decorator's defaults forward to the inner storage, and the impl for every decorator calls
// the decorator's. Adding a method to `EventStorage` fails to compile here (the lint below)
// until it is forwarded.

/// A storage that wraps [`Decorator::Inner`] and forwards to it every method it does not
/// override. See the [module documentation](self).
#[async_trait]
pub trait Decorator: Send + Sync + std::fmt::Debug {
    /// The storage this one wraps.
    type Inner: EventStorage + ?Sized;

    /// The storage this one wraps, which every method not overridden is forwarded to.
    fn inner(&self) -> &Self::Inner;

    /// As [`EventStorage::name`]; forwards to the inner storage unless overridden.
    fn name(&self) -> &str {
        self.inner().name()
    }

    /// As [`EventStorage::supports`]; forwards to the inner storage unless overridden.
    fn supports(&self, capability: Capability) -> bool {
        self.inner().supports(capability)
    }

    /// As [`EventStorage::append`]; forwards to the inner storage unless overridden.
    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.inner().append(criteria, stream, events).await
    }

    /// As [`EventStorage::query`]; forwards to the inner storage unless overridden.
    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.inner()
            .query(filter, stream, after, limit, direction)
            .await
    }

    /// As [`EventStorage::read`]; forwards to the inner storage unless overridden.
    fn read<'a>(&'a self, request: ReadRequest) -> ReadStream<'a> {
        self.inner().read(request)
    }

    /// As [`EventStorage::get_event_by_id`]; forwards to the inner storage unless overridden.
    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        self.inner().get_event_by_id(id).await
    }

    /// As [`EventStorage::head`]; forwards to the inner storage unless overridden.
    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        self.inner().head(stream).await
    }

    /// As [`EventStorage::bookmark`]; forwards to the inner storage unless overridden.
    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        self.inner().bookmark(reader, reference, tags).await
    }

    /// As [`EventStorage::get_bookmark`]; forwards to the inner storage unless overridden.
    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        self.inner().get_bookmark(reader).await
    }

    /// As [`EventStorage::remove_bookmark`]; forwards to the inner storage unless overridden.
    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        self.inner().remove_bookmark(reader).await
    }

    /// As [`EventStorage::get_bookmarks`]; forwards to the inner storage unless overridden.
    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        self.inner().get_bookmarks().await
    }

    /// As [`EventStorage::request_lease`]; forwards to the inner storage unless overridden.
    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        self.inner().request_lease(request).await
    }

    /// As [`EventStorage::request_leases`]; forwards to the inner storage unless overridden.
    async fn request_leases(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseResponse>> {
        self.inner().request_leases(requests).await
    }

    /// As [`EventStorage::release_lease`]; forwards to the inner storage unless overridden.
    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        self.inner().release_lease(lease_name, owner).await
    }

    /// As [`EventStorage::release_leases`]; forwards to the inner storage unless overridden.
    async fn release_leases(
        &self,
        lease_names: &[String],
        owner: &str,
    ) -> StorageResult<Vec<ReleaseOutcome>> {
        self.inner().release_leases(lease_names, owner).await
    }

    /// As [`EventStorage::request_leases_with_outcome`]; forwards to the inner storage unless overridden.
    async fn request_leases_with_outcome(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        self.inner().request_leases_with_outcome(requests).await
    }

    /// As [`EventStorage::get_leases`]; forwards to the inner storage unless overridden.
    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        self.inner().get_leases().await
    }

    /// As [`EventStorage::list_leases`]; forwards to the inner storage unless overridden.
    async fn list_leases(&self, selection: LeaseSelection) -> StorageResult<Vec<Lease>> {
        self.inner().list_leases(selection).await
    }

    /// As [`EventStorage::list_contenders`]; forwards to the inner storage unless overridden.
    async fn list_contenders(
        &self,
        selection: LeaseSelection,
    ) -> StorageResult<Vec<LeaseContender>> {
        self.inner().list_contenders(selection).await
    }

    /// As [`EventStorage::storage_time`]; forwards to the inner storage unless overridden.
    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        self.inner().storage_time().await
    }

    /// As [`EventStorage::subscribe`]; forwards to the inner storage unless overridden.
    async fn subscribe(&self, subscription: Subscription) -> StorageResult<Subscribed> {
        self.inner().subscribe(subscription).await
    }

    /// As [`EventStorage::append_fenced`]; forwards to the inner storage unless overridden.
    async fn append_fenced(
        &self,
        fence: &Fence,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.inner()
            .append_fenced(fence, criteria, stream, events)
            .await
    }

    /// As [`EventStorage::bookmark_fenced`]; forwards to the inner storage unless overridden.
    async fn bookmark_fenced(
        &self,
        fence: &Fence,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        self.inner()
            .bookmark_fenced(fence, reader, reference, tags)
            .await
    }

    /// As [`EventStorage::close`]; forwards to the inner storage unless overridden.
    async fn close(&self) -> StorageResult<()> {
        self.inner().close().await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<D: Decorator> EventStorage for D {
    fn name(&self) -> &str {
        Decorator::name(self)
    }
    fn supports(&self, capability: Capability) -> bool {
        Decorator::supports(self, capability)
    }
    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        Decorator::append(self, criteria, stream, events).await
    }
    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        Decorator::query(self, filter, stream, after, limit, direction).await
    }
    fn read<'a>(&'a self, request: ReadRequest) -> ReadStream<'a> {
        Decorator::read(self, request)
    }
    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        Decorator::get_event_by_id(self, id).await
    }
    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        Decorator::head(self, stream).await
    }
    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        Decorator::bookmark(self, reader, reference, tags).await
    }
    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        Decorator::get_bookmark(self, reader).await
    }
    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        Decorator::remove_bookmark(self, reader).await
    }
    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        Decorator::get_bookmarks(self).await
    }
    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        Decorator::request_lease(self, request).await
    }
    async fn request_leases(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseResponse>> {
        Decorator::request_leases(self, requests).await
    }
    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        Decorator::release_lease(self, lease_name, owner).await
    }
    async fn release_leases(
        &self,
        lease_names: &[String],
        owner: &str,
    ) -> StorageResult<Vec<ReleaseOutcome>> {
        Decorator::release_leases(self, lease_names, owner).await
    }
    async fn request_leases_with_outcome(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        Decorator::request_leases_with_outcome(self, requests).await
    }
    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        Decorator::get_leases(self).await
    }
    async fn list_leases(&self, selection: LeaseSelection) -> StorageResult<Vec<Lease>> {
        Decorator::list_leases(self, selection).await
    }
    async fn list_contenders(
        &self,
        selection: LeaseSelection,
    ) -> StorageResult<Vec<LeaseContender>> {
        Decorator::list_contenders(self, selection).await
    }
    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        Decorator::storage_time(self).await
    }
    async fn subscribe(&self, subscription: Subscription) -> StorageResult<Subscribed> {
        Decorator::subscribe(self, subscription).await
    }
    async fn append_fenced(
        &self,
        fence: &Fence,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        Decorator::append_fenced(self, fence, criteria, stream, events).await
    }
    async fn bookmark_fenced(
        &self,
        fence: &Fence,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        Decorator::bookmark_fenced(self, fence, reader, reference, tags).await
    }
    async fn close(&self) -> StorageResult<()> {
        Decorator::close(self).await
    }
}

/// `Box<T>` of a storage is a storage: it forwards every method.
impl<T: EventStorage + ?Sized> Decorator for Box<T> {
    type Inner = T;

    fn inner(&self) -> &T {
        self
    }
}

/// `Arc<T>` of a storage is a storage: it forwards every method. (Written out rather than a
/// [`Decorator`], so that a decorator of an `Arc` calls its methods without ambiguity.)
#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: EventStorage + ?Sized> EventStorage for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn supports(&self, capability: Capability) -> bool {
        (**self).supports(capability)
    }
    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        (**self).append(criteria, stream, events).await
    }
    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        (**self)
            .query(filter, stream, after, limit, direction)
            .await
    }
    fn read<'a>(&'a self, request: ReadRequest) -> ReadStream<'a> {
        (**self).read(request)
    }
    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        (**self).get_event_by_id(id).await
    }
    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        (**self).head(stream).await
    }
    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        (**self).bookmark(reader, reference, tags).await
    }
    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        (**self).get_bookmark(reader).await
    }
    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        (**self).remove_bookmark(reader).await
    }
    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        (**self).get_bookmarks().await
    }
    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        (**self).request_lease(request).await
    }
    async fn request_leases(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseResponse>> {
        (**self).request_leases(requests).await
    }
    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        (**self).release_lease(lease_name, owner).await
    }
    async fn release_leases(
        &self,
        lease_names: &[String],
        owner: &str,
    ) -> StorageResult<Vec<ReleaseOutcome>> {
        (**self).release_leases(lease_names, owner).await
    }
    async fn request_leases_with_outcome(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        (**self).request_leases_with_outcome(requests).await
    }
    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        (**self).get_leases().await
    }
    async fn list_leases(&self, selection: LeaseSelection) -> StorageResult<Vec<Lease>> {
        (**self).list_leases(selection).await
    }
    async fn list_contenders(
        &self,
        selection: LeaseSelection,
    ) -> StorageResult<Vec<LeaseContender>> {
        (**self).list_contenders(selection).await
    }
    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        (**self).storage_time().await
    }
    async fn subscribe(&self, subscription: Subscription) -> StorageResult<Subscribed> {
        (**self).subscribe(subscription).await
    }
    async fn append_fenced(
        &self,
        fence: &Fence,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        (**self)
            .append_fenced(fence, criteria, stream, events)
            .await
    }
    async fn bookmark_fenced(
        &self,
        fence: &Fence,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        (**self)
            .bookmark_fenced(fence, reader, reference, tags)
            .await
    }
    async fn close(&self) -> StorageResult<()> {
        (**self).close().await
    }
}
