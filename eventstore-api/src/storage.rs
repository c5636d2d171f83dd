//! The SPI: what a backend implements.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::{
    AppendCriteria, Bookmark, Capability, Direction, EventFilter, EventId, EventReference,
    EventStorageError, EventStreamId, EventToStore, Fence, Lease, LeaseContender, LeaseOutcome,
    LeaseRequest, LeaseResponse, LeaseSelection, Limit, ReadRequest, ReadStream, ReleaseOutcome,
    StoredEvent, Subscribed, Subscription, Tags,
};

/// Shorthand for the result every storage operation returns.
pub type StorageResult<T> = Result<T, EventStorageError>;

/// A storage of events, bookmarks and (optionally) leases.
///
/// # What a backend writes
///
/// | family | methods a backend writes | with a default body |
/// |---|---|---|
/// | identity | `name`, `supports` | |
/// | events | `append`, `query`, `get_event_by_id` | `head`, `read` |
/// | bookmarks | `bookmark`, `remove_bookmark`, `get_bookmarks` | `get_bookmark` |
/// | [`Capability::Lease`] | `request_lease`, `release_lease`, `get_leases`, `storage_time`, `list_contenders` | `request_leases`, `list_leases`, `release_leases` |
/// | [`Capability::FencedWrites`] | `append_fenced`, `bookmark_fenced` | |
/// | [`Capability::LeaseOutcomes`] | `request_leases_with_outcome`, `release_leases` | |
/// | [`Capability::LeaseChanges`], [`Capability::AppendHints`] | `subscribe` | |
/// | lifecycle | `close` | |
///
/// A default body is built on the methods a backend writes, and a backend may override it to
/// do the same work in fewer steps (a whole batch in one round trip, a native stream). The
/// methods of a capability a backend does not offer answer [`EventStorageError::Unsupported`]
/// from their default bodies. Conveniences that are not part of what a backend writes
/// (`query_raw`, `query_stream`, `get_contenders`, `subscribe_appends`, …) are in
/// [`EventStorageExt`](crate::EventStorageExt), built on these methods.
///
/// Every method the contract fixes keeps its signature, and every method added later comes
/// with a default body: a storage, or a decorator of one, written against the fixed methods
/// compiles against every later version. To wrap a storage, implement
/// [`Decorator`](crate::decorator::Decorator), which forwards every method you do not
/// override, capabilities included.
///
/// Callers usually hold an `Arc<dyn EventStorage>`. Every backend behaves alike where this
/// trait says so; the conformance kit (`eventstore-tck`) proves it. Methods of a
/// [`Capability`] the backend lacks return [`EventStorageError::Unsupported`]; their default
/// bodies do exactly that.
///
/// # The order of refusals
///
/// Every backend answers a call in one order: a closed storage answers
/// [`EventStorageError::Closed`] to every call but `name`, whatever its input; an open one
/// then refuses invalid input with [`EventStorageError::InvalidInput`] and changes nothing;
/// only then does it look at what it stores. Backends get both steps from one call,
/// [`Admission::admit`](crate::admission::Admission::admit), which applies the rules of
/// [`validate`](crate::validate) for each method.
#[async_trait]
pub trait EventStorage: Send + Sync + std::fmt::Debug {
    /// The backend's name, for messages and metrics (e.g. `memory`, `postgres`).
    fn name(&self) -> &str;

    /// Whether the backend offers `capability`.
    fn supports(&self, capability: Capability) -> bool;

    /// Appends `events` to `stream` if `criteria` hold, all or nothing.
    ///
    /// Returns the stored events in order, each with a storage-assigned id, reference and UTC
    /// timestamp. A batch is one write at one instant: all its events carry the same
    /// timestamp, taken from the storage's clock. References are the backend's own numbering
    /// (see [`EventReference`]). An empty batch stores nothing and returns an empty list (the
    /// criteria are still checked, so a violated condition is still `OptimisticLock`; a retry
    /// needs keys, so an empty batch never is one).
    ///
    /// The criteria look at the events of `stream` only, never at other streams, also when
    /// their filter would match events elsewhere.
    ///
    /// Idempotency keys are unique per stream. A batch in which every event carries a key the
    /// stream holds with the same event (type, payload and tags) is a retry: it stores nothing,
    /// is not checked against the criteria (the first attempt was), and returns the events
    /// stored the first time, in the order of the batch. A stored key given with a different
    /// event, or stored keys mixed with new keys or keyless events, is an
    /// `IdempotencyConflict`. [`idempotency::judge`](crate::idempotency::judge) decides this
    /// for every backend.
    ///
    /// # Errors
    /// `InvalidInput` (wildcard stream, invalid event, a key twice in the batch, a batch above
    /// [`MAX_BATCH_BYTES`](crate::validate::MAX_BATCH_BYTES)),
    /// `OptimisticLock` (criteria violated; it names the stream as [`EventStreamId`] displays
    /// it, the criteria's expected last event exactly as given, and the first matching event
    /// after it, which reads that start after the error show, as they show an append's own
    /// events once it returns, so that reading again and deciding again sees the new facts),
    /// `IdempotencyConflict` (a stored key reused by
    /// another event, or stored and new keys mixed),
    /// `Closed`, `Backend`.
    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>>;

    /// Events of the streams `stream` covers that match `filter`, strictly after `after`
    /// when given (after its place, [`EventReference::order_key`], whatever its id), ordered
    /// by `direction`, at most `limit` of them (counted from the first event in that
    /// direction).
    ///
    /// # Errors
    /// `InvalidInput` (invalid stream), `Closed`, `Backend`.
    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>>;

    /// The events [`query`](EventStorage::query) returns for the request's arguments, in
    /// the form it asks for: payloads decoded or as JSON text ([`ReadRequest::payloads`]),
    /// handed out whole or streamed a page or two at a time ([`ReadRequest::delivery`]).
    ///
    /// The default ([`default_read`](crate::event_stream::default_read)) reads whole through
    /// `query` and streams page after page of its own whole reads; a backend overrides the
    /// forms it reads natively (raw payloads with [`Capability::RawPayloads`], a native
    /// stream) and falls back on the default for the rest. Either way, dropping a stream
    /// part-way leaves no transaction open and no connection held. The errors of `query` come
    /// as items, invalid input as the first and only one, before anything is read.
    fn read<'a>(&'a self, request: ReadRequest) -> ReadStream<'a> {
        crate::event_stream::default_read(self, request)
    }

    /// The event with `id`, if this storage holds one.
    ///
    /// # Errors
    /// `Closed`, `Backend`.
    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>>;

    /// The reference of the last event in the streams `stream` covers.
    ///
    /// The default asks `query` for the last event, newest first.
    ///
    /// # Errors
    /// `InvalidInput` (invalid stream), `Closed`, `Backend`.
    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        let last = self
            .query(
                &EventFilter::match_all(),
                stream,
                None,
                Limit::to(1),
                Direction::Backward,
            )
            .await?;
        Ok(last.first().map(|event| event.reference))
    }

    /// Places `reader`'s bookmark at `reference`, replacing any earlier one.
    ///
    /// # Errors
    /// `UnknownEvent` when the storage holds no event with the reference's id (the previous
    /// bookmark stays), `InvalidInput`, `Closed`, `Backend`.
    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()>;

    /// Where `reader`'s bookmark stands, in the storage's own coordinates.
    ///
    /// The default finds it among [`get_bookmarks`](EventStorage::get_bookmarks).
    ///
    /// # Errors
    /// `InvalidInput`, `Closed`, `Backend`.
    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        // `Closed` comes before the input is judged, as in every call.
        let bookmarks = self.get_bookmarks().await?;
        crate::validate::validate_reader(reader)?;
        Ok(bookmarks
            .into_iter()
            .find(|bookmark| bookmark.reader == reader)
            .map(|bookmark| bookmark.reference))
    }

    /// Removes `reader`'s bookmark; removing none is fine.
    ///
    /// # Errors
    /// `InvalidInput`, `Closed`, `Backend`.
    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()>;

    /// Every bookmark, ordered by reader.
    ///
    /// # Errors
    /// `Closed`, `Backend`.
    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>>;

    /// Acquires, renews, or registers as contender for a lease ([`Capability::Lease`]).
    ///
    /// # Errors
    /// `InvalidInput` (nothing changes), `Unsupported`, `Closed`, `Timeout`, `Backend`.
    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        let _ = request;
        Err(EventStorageError::unsupported("request_lease", self.name()))
    }

    /// A batch of lease requests: the answers are those the requests would get one by one,
    /// in order. One invalid request refuses the whole batch and changes nothing.
    ///
    /// The default validates every request, then runs them one by one.
    ///
    /// # Errors
    /// As [`EventStorage::request_lease`].
    async fn request_leases(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseResponse>> {
        if !self.supports(Capability::Lease) {
            return Err(EventStorageError::unsupported(
                "request_leases",
                self.name(),
            ));
        }
        let invalid = crate::validate::validate_lease_requests(&requests).err();
        if invalid.is_some() || requests.is_empty() {
            // The trait's order: a closed storage says `Closed` first, to a refused batch and to
            // an empty one alike. The storage's clock answers `Closed` once closed, and reading
            // it changes nothing.
            self.storage_time().await?;
            if let Some(invalid) = invalid {
                return Err(invalid);
            }
        }
        let mut responses = Vec::with_capacity(requests.len());
        for request in requests {
            responses.push(self.request_lease(request).await?);
        }
        Ok(responses)
    }

    /// Releases `lease_name` if `owner` holds it, and withdraws `owner` as a contender.
    ///
    /// A released lease is acquirable by the next request of any contender, whatever its
    /// priority: the storage never reserves a lease for a contender that may be gone. Who
    /// should ask first is a hint instead: the release's [`LeaseChangeKind::Released`] names
    /// the live contender with the highest priority, which asks at once while the others give
    /// it a grace period, so a planned handover still takes exactly one token.
    ///
    /// [`LeaseChangeKind::Released`]: crate::LeaseChangeKind::Released
    ///
    /// # Errors
    /// `InvalidInput`, `Unsupported`, `Closed`, `Timeout`, `Backend`.
    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        let _ = (lease_name, owner);
        Err(EventStorageError::unsupported("release_lease", self.name()))
    }

    /// Releases each of `lease_names` that `owner` holds and withdraws `owner` as their
    /// contender, as [`EventStorage::release_lease`] would one by one, and says for each
    /// whether the caller held it; a backend may do it in one round trip. An invalid owner or
    /// name refuses the whole call and changes nothing.
    ///
    /// With [`Capability::LeaseOutcomes`] each answer is [`ReleaseOutcome::Released`] or
    /// [`ReleaseOutcome::NotHeld`], decided in the same step as the release. The default
    /// validates every name, then releases them one by one with `release_lease`, answering
    /// [`ReleaseOutcome::Unreported`] for each.
    ///
    /// # Errors
    /// As [`EventStorage::release_lease`].
    async fn release_leases(
        &self,
        lease_names: &[String],
        owner: &str,
    ) -> StorageResult<Vec<ReleaseOutcome>> {
        if !self.supports(Capability::Lease) {
            return Err(EventStorageError::unsupported(
                "release_leases",
                self.name(),
            ));
        }
        let invalid = crate::validate::validate_releases(lease_names, owner).err();
        if invalid.is_some() || lease_names.is_empty() {
            // As in `request_leases`: a closed storage says `Closed` first.
            self.storage_time().await?;
            if let Some(invalid) = invalid {
                return Err(invalid);
            }
        }
        let mut outcomes = Vec::with_capacity(lease_names.len());
        for lease_name in lease_names {
            self.release_lease(lease_name, owner).await?;
            outcomes.push(ReleaseOutcome::Unreported);
        }
        Ok(outcomes)
    }

    /// As [`EventStorage::request_leases`], each answer saying also whether it took the lease
    /// over from another owner that let it expire ([`Capability::LeaseOutcomes`]): the
    /// storage decides it in the same step as the answer, which nothing read before or after
    /// could.
    ///
    /// # Errors
    /// As [`EventStorage::request_lease`].
    async fn request_leases_with_outcome(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        let _ = requests;
        Err(EventStorageError::unsupported(
            "request_leases_with_outcome",
            self.name(),
        ))
    }

    /// Every lease the storage records, expired and released ones included, by name.
    ///
    /// # Errors
    /// `Unsupported`, `Closed`, `Backend`.
    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        Err(EventStorageError::unsupported("get_leases", self.name()))
    }

    /// The leases `selection` covers, as [`EventStorage::get_leases`] lists them (by name,
    /// expired and released ones included): the leases of one partition group, say, without
    /// reading every lease of the storage.
    ///
    /// The default filters [`EventStorage::get_leases`]; a backend that keeps many leases reads
    /// only the selection's.
    ///
    /// # Errors
    /// `InvalidInput` (an invalid name, or a prefix with a NUL character or longer than a name
    /// may be), `Unsupported`, `Closed`, `Backend`.
    async fn list_leases(&self, selection: LeaseSelection) -> StorageResult<Vec<Lease>> {
        // `Closed` and `Unsupported` come before the input is judged, as in every call.
        let mut leases = self.get_leases().await?;
        crate::validate::validate_lease_selection(&selection)?;
        leases.retain(|lease| selection.selects(&lease.lease_name));
        Ok(leases)
    }

    /// The contenders registered for the leases `selection` covers besides each lease's
    /// holder of record, lease by lease in byte order of their names, each lease's by
    /// priority (highest first), then owner id; empty for leases nobody contends for or that
    /// never existed ([`Capability::Lease`]). Lapsed registrations may be listed until the
    /// storage tidies the lease: judge them with [`LeaseContender::is_live_at`] and
    /// [`EventStorage::storage_time`].
    ///
    /// # Errors
    /// As [`EventStorage::list_leases`].
    async fn list_contenders(
        &self,
        selection: LeaseSelection,
    ) -> StorageResult<Vec<LeaseContender>> {
        let _ = selection;
        Err(EventStorageError::unsupported(
            "list_contenders",
            self.name(),
        ))
    }

    /// "Now" on the storage's clock, the clock that judges lease expiry.
    ///
    /// # Errors
    /// `Unsupported`, `Closed`, `Backend`.
    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        Err(EventStorageError::unsupported("storage_time", self.name()))
    }

    /// Subscribes to what `subscription` follows: changes of leases
    /// ([`Capability::LeaseChanges`]) or hints of appends ([`Capability::AppendHints`]).
    ///
    /// **Lease changes** are hints that wake a requester early: releases, acquisitions (and
    /// whether they took over an expired tenure), step-down requests, contenders joining and
    /// leaving. A missed or late notification costs latency only, never safety: every
    /// decision is still made by [`EventStorage::request_lease`] on the storage's clock, and a
    /// subscriber keeps requesting on its own timer. A plain renewal changes nothing for
    /// anyone else and notifies nothing of its own; a contender whose registration lapsed is
    /// announced as gone when the storage next tidies the lease, which a backend may do on any
    /// request for it (the in-process ones) or only on a registration or a change of holder
    /// (PostgreSQL).
    ///
    /// **Append hints** are sent after an append is durable, at most one per append (never
    /// one per event). A read right after it may not show the append yet: a backend whose
    /// reads hold back events until older writes end (PostgreSQL's visibility barrier) shows
    /// it once they have, so a reader that finds nothing new reads again later rather than
    /// waiting for the next hint. A hint only wakes a reader early: the read decides what is
    /// new, and a reader keeps polling on its own timer, so a missed hint costs at most one
    /// poll interval.
    ///
    /// Every subscription ends when the storage closes.
    ///
    /// # Errors
    /// `InvalidInput` (invalid stream), `Unsupported`, `Closed`, `Backend`.
    async fn subscribe(&self, subscription: Subscription) -> StorageResult<Subscribed> {
        Err(EventStorageError::unsupported(
            subscription.operation(),
            self.name(),
        ))
    }

    /// [`EventStorage::append`], only while `fence` holds ([`Capability::FencedWrites`]).
    ///
    /// The fence is checked atomically with the write: the lease must be live on the
    /// storage's clock with `fence.token` as its current token.
    ///
    /// # Errors
    /// `Fenced` (nothing written), the errors of `append`, `Unsupported`.
    async fn append_fenced(
        &self,
        fence: &Fence,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        let _ = (fence, criteria, stream, events);
        Err(EventStorageError::unsupported("append_fenced", self.name()))
    }

    /// [`EventStorage::bookmark`], only while `fence` holds ([`Capability::FencedWrites`]).
    ///
    /// # Errors
    /// `Fenced` (the bookmark stays), the errors of `bookmark`, `Unsupported`.
    async fn bookmark_fenced(
        &self,
        fence: &Fence,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        let _ = (fence, reader, reference, tags);
        Err(EventStorageError::unsupported(
            "bookmark_fenced",
            self.name(),
        ))
    }

    /// Closes the storage for every handle; idempotent. Afterwards every call but `name`
    /// returns `Closed`, and every subscription the storage handed out ends: each stream of
    /// lease changes and of append hints ([`subscribe`](EventStorage::subscribe)) yields its last item and then `None`, promptly, so that no reader waits on a closed
    /// storage. The notification hubs do it: close them here
    /// ([`LeaseChangeHub::close`](crate::lease_changes::LeaseChangeHub::close),
    /// [`AppendHintHub::close`](crate::append_hints::AppendHintHub::close)).
    ///
    /// # Errors
    /// `Backend` when releasing resources fails.
    async fn close(&self) -> StorageResult<()>;
}
