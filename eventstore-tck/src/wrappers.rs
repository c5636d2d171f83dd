//! Storages that wrap a real storage to show code running on it a situation a healthy
//! backend does not produce on demand: a backend without leases, or one that stops
//! answering.
//!
//! The kit's own scenarios use them, and so can a backend's or an application's tests: wrap
//! the storage under test and hand the wrapper to the elector, projector or service whose
//! behaviour in that situation is the point.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use eventstore_api::decorator::Decorator;
use eventstore_api::event_stream::{self, ReadStream};
use eventstore_api::{
    AppendCriteria, Bookmark, Capability, Direction, EventFilter, EventId, EventReference,
    EventStorage, EventStorageError, EventStreamId, EventToStore, Fence, Lease, LeaseContender,
    LeaseOutcome, LeaseRequest, LeaseResponse, LeaseSelection, Limit, ReadRequest, ReleaseOutcome,
    StorageResult, StoredEvent, Subscribed, Subscription, Tags,
};
use tokio::sync::watch;

/// A storage with the capabilities of the one it wraps hidden: events, bookmarks and `close`
/// are forwarded, [`supports`](EventStorage::supports) answers `false` for every capability,
/// and the trait's default bodies stay in place, so every lease method and fenced write
/// returns `Unsupported`, as a backend written before leases existed would.
///
/// It is the one wrapper here that is not a [`Decorator`]: what it shows is a storage that
/// writes only the required methods and keeps every default body.
///
/// Wrapping a storage that does offer leases proves that code gates on the capability
/// rather than on the backend: the kit runs every scenario through it to prove its lease
/// scenarios pass on such a backend by checking the refusals.
///
/// Clones share the wrapped storage as clones of `S` do.
///
/// # Examples
///
/// ```
/// use eventstore_api::{Capability, EventStorage};
/// use eventstore_tck::wrappers::EventsOnly;
///
/// /// Whatever `storage` offers, the wrapper offers nothing and refuses every lease method.
/// async fn hide_leases<S: EventStorage>(storage: S) {
///     let storage = EventsOnly::new(storage);
///     assert!(!storage.supports(Capability::Lease));
///     eventstore_tck::support::assert_lease_methods_unsupported(&storage).await;
/// }
/// ```
#[derive(Debug, Clone, Default)]
pub struct EventsOnly<S> {
    inner: S,
}

impl<S> EventsOnly<S> {
    /// Wraps `inner`, hiding its capabilities.
    pub fn new(inner: S) -> Self {
        EventsOnly { inner }
    }

    /// The wrapped storage, with its capabilities.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

#[async_trait]
impl<S: EventStorage> EventStorage for EventsOnly<S> {
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

/// A storage that forwards every call to the one it wraps until it is switched to hang or to
/// fail, as a backend whose connections stall, or whose server stopped answering or went away.
///
/// - [`hang(true)`](Unreliable::hang): every call but `name`, `supports` and `close` waits
///   forever without failing. Nothing but the caller's own deadline notices such a hang, which
///   is what an elector's self-demotion or a client's timeout is for. A call that hangs never
///   completes, even after `hang(false)`; dropping it (a timeout does) ends it.
/// - [`fail(true)`](Unreliable::fail): those calls return [`EventStorageError::Backend`] at
///   once, as after a dropped connection, and change nothing.
/// - [`panic(true)`](Unreliable::panic): those calls panic, as in a backend with a bug.
/// - [`hold_subscriptions(true)`](Unreliable::hold_subscriptions): subscriptions to lease
///   changes and append hints wait, and subscribe once the hold is switched off, as with a
///   backend whose notification connection is slow to start listening.
///
/// Calls made after the switch is turned off are forwarded again.
///
/// Put it behind an `Arc` to share one switch between handles.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use eventstore_api::EventStorage;
/// use eventstore_tck::support::request;
/// use eventstore_tck::wrappers::Unreliable;
///
/// /// A lease request to a hanging `storage` (one with leases) times out; after the hang, the
/// /// same request is answered.
/// async fn hang_and_recover<S: EventStorage>(storage: S) {
///     let storage = Unreliable::new(storage);
///     storage.hang(true);
///     let call = storage.request_lease(request("jobs", "node-a"));
///     let answered = tokio::time::timeout(Duration::from_millis(20), call).await;
///     assert!(answered.is_err(), "a hanging storage never answers");
///     assert_eq!(storage.hung_calls(), 0, "the timed-out call was dropped");
///
///     storage.hang(false);
///     assert!(storage.request_lease(request("jobs", "node-a")).await.is_ok());
/// }
/// ```
#[derive(Debug, Default)]
pub struct Unreliable<S> {
    inner: S,
    hanging: AtomicBool,
    failing: AtomicBool,
    panicking: AtomicBool,
    hung_calls: AtomicUsize,
    failed_calls: AtomicUsize,
    holding_subscriptions: watch::Sender<bool>,
    queries: AtomicUsize,
    lease_listings: AtomicUsize,
}

impl<S> Unreliable<S> {
    /// Wraps `inner`, answering as it does until [`hang`](Unreliable::hang) is switched on.
    pub fn new(inner: S) -> Self {
        Unreliable {
            inner,
            hanging: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            panicking: AtomicBool::new(false),
            hung_calls: AtomicUsize::new(0),
            failed_calls: AtomicUsize::new(0),
            holding_subscriptions: watch::Sender::new(false),
            queries: AtomicUsize::new(0),
            lease_listings: AtomicUsize::new(0),
        }
    }

    /// The wrapped storage, which never hangs.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Switches the hang on or off for calls made from now on.
    pub fn hang(&self, hanging: bool) {
        self.hanging.store(hanging, Ordering::SeqCst);
    }

    /// Whether calls made now hang.
    pub fn is_hanging(&self) -> bool {
        self.hanging.load(Ordering::SeqCst)
    }

    /// How many calls are hanging right now (a dropped call no longer counts).
    pub fn hung_calls(&self) -> usize {
        self.hung_calls.load(Ordering::SeqCst)
    }

    /// Switches failing on or off for calls made from now on.
    pub fn fail(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// Whether calls made now fail.
    pub fn is_failing(&self) -> bool {
        self.failing.load(Ordering::SeqCst)
    }

    /// How many calls have failed on purpose so far.
    pub fn failed_calls(&self) -> usize {
        self.failed_calls.load(Ordering::SeqCst)
    }

    /// Switches panicking on or off: a call made while it is on panics, as a storage with a
    /// bug would, and so does the task that made it.
    pub fn panic(&self, panicking: bool) {
        self.panicking.store(panicking, Ordering::SeqCst);
    }

    /// How many `query` calls were made through it so far, answered or not.
    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }

    /// How many `get_leases` calls (every lease of the storage) were made through it so far,
    /// answered or not; `list_leases` is forwarded as itself and not counted.
    pub fn lease_listings(&self) -> usize {
        self.lease_listings.load(Ordering::SeqCst)
    }

    /// Switches the hold on subscriptions on or off: while it is on, subscriptions wait; once it
    /// is off, the waiting ones subscribe.
    pub fn hold_subscriptions(&self, holding: bool) {
        self.holding_subscriptions.send_replace(holding);
    }

    /// Returns once subscriptions are not held.
    async fn subscriptions_released(&self) {
        let mut holding = self.holding_subscriptions.subscribe();
        // The sender lives as long as `self`: the wait ends only by the hold's end.
        let _ = holding.wait_for(|holding| !holding).await;
    }

    /// Panics while panicking is on, fails while failing is on, waits forever while the hang
    /// is on; returns at once otherwise.
    async fn gate(&self) -> StorageResult<()> {
        if self.panicking.load(Ordering::SeqCst) {
            panic!("the storage panicked on purpose (Unreliable::panic)");
        }
        if self.is_failing() {
            self.failed_calls.fetch_add(1, Ordering::SeqCst);
            return Err(EventStorageError::backend(
                "the storage failed on purpose (Unreliable::fail)",
                std::io::Error::from(std::io::ErrorKind::ConnectionReset),
            ));
        }
        if !self.is_hanging() {
            return Ok(());
        }
        /// Counts a hanging call for as long as it lives.
        struct Hung<'a>(&'a AtomicUsize);
        impl Drop for Hung<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.hung_calls.fetch_add(1, Ordering::SeqCst);
        let _hung = Hung(&self.hung_calls);
        std::future::pending().await
    }
}

#[async_trait]
impl<S: EventStorage> Decorator for Unreliable<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    /// Reads through `query`, so that every page of a read passes the gate.
    fn read<'a>(&'a self, request: ReadRequest) -> ReadStream<'a> {
        event_stream::default_read(self, request)
    }

    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.gate().await?;
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
        self.queries.fetch_add(1, Ordering::SeqCst);
        self.gate().await?;
        self.inner
            .query(filter, stream, after, limit, direction)
            .await
    }

    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        self.gate().await?;
        self.inner.get_event_by_id(id).await
    }

    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        self.gate().await?;
        self.inner.head(stream).await
    }

    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        self.gate().await?;
        self.inner.bookmark(reader, reference, tags).await
    }

    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        self.gate().await?;
        self.inner.get_bookmark(reader).await
    }

    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        self.gate().await?;
        self.inner.remove_bookmark(reader).await
    }

    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        self.gate().await?;
        self.inner.get_bookmarks().await
    }

    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        self.gate().await?;
        self.inner.request_lease(request).await
    }

    async fn request_leases(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseResponse>> {
        self.gate().await?;
        self.inner.request_leases(requests).await
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        self.gate().await?;
        self.inner.release_lease(lease_name, owner).await
    }

    async fn release_leases(
        &self,
        lease_names: &[String],
        owner: &str,
    ) -> StorageResult<Vec<ReleaseOutcome>> {
        self.gate().await?;
        self.inner.release_leases(lease_names, owner).await
    }

    async fn request_leases_with_outcome(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        self.gate().await?;
        self.inner.request_leases_with_outcome(requests).await
    }

    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        self.lease_listings.fetch_add(1, Ordering::SeqCst);
        self.gate().await?;
        self.inner.get_leases().await
    }

    async fn list_leases(&self, selection: LeaseSelection) -> StorageResult<Vec<Lease>> {
        self.gate().await?;
        self.inner.list_leases(selection).await
    }

    async fn list_contenders(
        &self,
        selection: LeaseSelection,
    ) -> StorageResult<Vec<LeaseContender>> {
        self.gate().await?;
        self.inner.list_contenders(selection).await
    }

    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        self.gate().await?;
        self.inner.storage_time().await
    }

    async fn subscribe(&self, subscription: Subscription) -> StorageResult<Subscribed> {
        self.gate().await?;
        self.subscriptions_released().await;
        self.inner.subscribe(subscription).await
    }

    async fn append_fenced(
        &self,
        fence: &Fence,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.gate().await?;
        self.inner
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
        self.gate().await?;
        self.inner
            .bookmark_fenced(fence, reader, reference, tags)
            .await
    }
}

/// A storage that pushes nothing: every method is forwarded to the storage it wraps, except
/// that [`Capability::LeaseChanges`] and [`Capability::AppendHints`] are not offered and both
/// subscriptions answer `Unsupported`, as a backend without notifications (or a database
/// reached only through a pooler that cannot `LISTEN`) would.
///
/// Running code through it proves that it works by polling alone: electors take over and
/// hand over on their timers, projectors find new events on their poll interval.
///
/// # Examples
///
/// ```
/// use eventstore_api::{Capability, EventStorage};
/// use eventstore_tck::wrappers::PollOnly;
///
/// fn hide_push<S: EventStorage>(storage: S) {
///     let storage = PollOnly::new(storage);
///     assert!(!storage.supports(Capability::LeaseChanges));
///     assert!(!storage.supports(Capability::AppendHints));
/// }
/// ```
#[derive(Debug, Default, Clone)]
pub struct PollOnly<S> {
    inner: S,
}

impl<S> PollOnly<S> {
    /// Wraps `inner`, hiding its notifications.
    pub fn new(inner: S) -> Self {
        PollOnly { inner }
    }

    /// The wrapped storage.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

#[async_trait]
impl<S: EventStorage> Decorator for PollOnly<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    fn supports(&self, capability: Capability) -> bool {
        !matches!(
            capability,
            Capability::LeaseChanges | Capability::AppendHints
        ) && self.inner.supports(capability)
    }

    async fn subscribe(&self, subscription: Subscription) -> StorageResult<Subscribed> {
        Err(EventStorageError::unsupported(
            subscription.operation(),
            self.inner.name(),
        ))
    }
}
