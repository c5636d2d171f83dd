//! Conveniences on every storage, built on the methods of [`EventStorage`]: the shapes
//! callers use most, without widening what a backend writes.

use async_trait::async_trait;

use crate::event_stream::{collect, EventStream, RawEventStream};
use crate::{
    AppendHints, Capability, Direction, EventFilter, EventReference, EventStorage,
    EventStorageError, EventStreamId, Lease, LeaseChanges, LeaseContender, LeaseScope,
    LeaseSelection, Limit, RawStoredEvent, ReadEvent, ReadRequest, ReleaseOutcome, StorageResult,
    Subscribed, Subscription,
};

/// Conveniences on every [`EventStorage`] (`Arc<dyn EventStorage>` included): each is one
/// call of a trait method, so a backend or a decorator never writes them.
#[async_trait]
pub trait EventStorageExt: EventStorage {
    /// The events [`query`](EventStorage::query) returns for the same arguments, each with
    /// its payload as JSON text: a whole raw [`read`](EventStorage::read).
    ///
    /// # Errors
    /// As [`EventStorage::query`].
    async fn query_raw(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<RawStoredEvent>> {
        let request = request(filter, stream, after, limit, direction).raw();
        collect(self.read(request))
            .await?
            .into_iter()
            .map(ReadEvent::into_raw)
            .collect()
    }

    /// The events [`query`](EventStorage::query) returns for the same arguments, as a stream
    /// that holds a page or two of them at a time: a streamed [`read`](EventStorage::read).
    fn query_stream<'a>(
        &'a self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> EventStream<'a> {
        use futures_util::StreamExt;
        let request = request(filter, stream, after, limit, direction).streamed();
        Box::pin(
            self.read(request)
                .map(|event| event.and_then(ReadEvent::into_decoded)),
        )
    }

    /// As [`query_stream`](EventStorageExt::query_stream), each payload as JSON text: a
    /// streamed raw [`read`](EventStorage::read), for replaying a long history into the
    /// caller's own types.
    fn query_raw_stream<'a>(
        &'a self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> RawEventStream<'a> {
        use futures_util::StreamExt;
        let request = request(filter, stream, after, limit, direction)
            .raw()
            .streamed();
        Box::pin(
            self.read(request)
                .map(|event| event.and_then(ReadEvent::into_raw)),
        )
    }

    /// The leases whose names start with `prefix`:
    /// [`list_leases`](EventStorage::list_leases) of [`LeaseSelection::Prefix`].
    ///
    /// # Errors
    /// As [`EventStorage::list_leases`].
    async fn get_leases_with_prefix(&self, prefix: &str) -> StorageResult<Vec<Lease>> {
        self.list_leases(LeaseSelection::prefix(prefix)).await
    }

    /// The contenders of `lease_name` besides its holder:
    /// [`list_contenders`](EventStorage::list_contenders) of [`LeaseSelection::Named`].
    ///
    /// # Errors
    /// As [`EventStorage::list_contenders`].
    async fn get_contenders(&self, lease_name: &str) -> StorageResult<Vec<LeaseContender>> {
        self.list_contenders(LeaseSelection::named(lease_name))
            .await
    }

    /// The contenders of every lease whose name starts with `prefix`:
    /// [`list_contenders`](EventStorage::list_contenders) of [`LeaseSelection::Prefix`].
    ///
    /// # Errors
    /// As [`EventStorage::list_contenders`].
    async fn get_contenders_with_prefix(&self, prefix: &str) -> StorageResult<Vec<LeaseContender>> {
        self.list_contenders(LeaseSelection::prefix(prefix)).await
    }

    /// Releases `lease_name` as [`release_lease`](EventStorage::release_lease) does, saying
    /// whether the caller held it: [`release_leases`](EventStorage::release_leases) of one, on
    /// a storage that tells ([`Capability::LeaseOutcomes`]).
    ///
    /// # Errors
    /// `Unsupported` without [`Capability::LeaseOutcomes`], releasing nothing: the answer
    /// could not say what it promises. Otherwise as [`EventStorage::release_lease`].
    async fn release_lease_with_outcome(
        &self,
        lease_name: &str,
        owner: &str,
    ) -> StorageResult<ReleaseOutcome> {
        if !self.supports(Capability::LeaseOutcomes) {
            return Err(EventStorageError::unsupported(
                "release_lease_with_outcome",
                self.name(),
            ));
        }
        let mut outcomes = self.release_leases(&[lease_name.to_owned()], owner).await?;
        outcomes.pop().ok_or_else(|| {
            EventStorageError::backend(
                "release_leases answered no lease",
                "one lease released, no answer",
            )
        })
    }

    /// Changes of the leases in `scope`: [`subscribe`](EventStorage::subscribe) to
    /// [`Subscription::LeaseChanges`].
    ///
    /// # Errors
    /// As [`EventStorage::subscribe`].
    async fn subscribe_lease_changes(&self, scope: LeaseScope) -> StorageResult<LeaseChanges> {
        match self.subscribe(Subscription::LeaseChanges(scope)).await? {
            Subscribed::LeaseChanges(changes) => Ok(changes),
            other => Err(another_kind("subscribe_lease_changes", &other)),
        }
    }

    /// Hints of appends to the streams `stream` covers: [`subscribe`](EventStorage::subscribe)
    /// to [`Subscription::Appends`].
    ///
    /// # Errors
    /// As [`EventStorage::subscribe`].
    async fn subscribe_appends(&self, stream: &EventStreamId) -> StorageResult<AppendHints> {
        match self
            .subscribe(Subscription::Appends(stream.clone()))
            .await?
        {
            Subscribed::Appends(hints) => Ok(hints),
            other => Err(another_kind("subscribe_appends", &other)),
        }
    }
}

impl<S: EventStorage + ?Sized> EventStorageExt for S {}

/// The read of these arguments, decoded and whole.
fn request(
    filter: &EventFilter,
    stream: &EventStreamId,
    after: Option<&EventReference>,
    limit: Limit,
    direction: Direction,
) -> ReadRequest {
    ReadRequest::new(filter.clone(), stream.clone())
        .after(after.copied())
        .limit(limit)
        .direction(direction)
}

/// A storage answered a subscription with notifications of another kind.
fn another_kind(operation: &str, subscribed: &Subscribed) -> EventStorageError {
    EventStorageError::backend(
        format!("{operation} was answered with notifications of another kind"),
        format!("{subscribed:?}"),
    )
}
