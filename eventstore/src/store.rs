//! The typed facade: streams of Rust event types over any [`EventStorage`].
//!
//! An event type's stored name is explicit and stable. [`NamedEvent`] gives one struct one
//! name; [`DomainEvent`] maps an enum of several event types to several names. A Rust rename
//! of the type or a variant never changes what is stored.
//!
//! # Examples
//! ```
//! # use std::sync::Arc;
//! # use eventstore::*;
//! # use eventstore::store::*;
//! #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
//! struct OrderPlaced { order: String, amount: u64 }
//!
//! impl NamedEvent for OrderPlaced {
//!     const EVENT_TYPE: &'static str = "OrderPlaced";
//!     fn tags(&self) -> Tags { Tags::from_pairs([("order", self.order.as_str())]) }
//! }
//!
//! # async fn place(storage: Arc<dyn EventStorage>) -> Result<(), EventStoreError> {
//! let orders = EventStore::new(storage).stream::<OrderPlaced>(EventStreamId::for_context("orders"));
//! // read what the decision depends on, then append only if none of it changed meanwhile
//! let order_o1 = EventFilter::for_events(["OrderPlaced"], Tags::from_pairs([("order", "o-1")]));
//! let decision = orders.read_for_decision(order_o1).await?;
//! if decision.events.is_empty() {
//!     orders.append_decided(&decision, [OrderPlaced { order: "o-1".into(), amount: 30 }]).await?;
//! }
//! # Ok(()) }
//! ```

use std::collections::BTreeSet;
use std::fmt;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures_core::Stream;
use futures_util::{future, stream, StreamExt};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::value::RawValue;

use crate::event_stream::Events;
use crate::EventStorageExt;
use crate::{
    validate, AppendCriteria, Capability, Direction, EventFilter, EventReference, EventStorage,
    EventStorageError, EventStreamId, EventToStore, EventType, Fence, FilterItem, Limit,
    RawStoredEvent, StoredEvent, Tags,
};

/// An event type of a typed stream: how its values are stored and read back.
///
/// Implement it by hand for an enum whose variants are different event types; for a struct
/// that is one event type, implement [`NamedEvent`] instead.
///
/// # Examples
/// ```
/// use eventstore::store::DomainEvent;
/// use serde_json::{json, Value};
///
/// enum Account { Opened { owner: String }, Closed }
///
/// impl DomainEvent for Account {
///     fn event_types() -> &'static [&'static str] { &["AccountOpened", "AccountClosed"] }
///     fn event_type(&self) -> &'static str {
///         match self { Account::Opened { .. } => "AccountOpened", Account::Closed => "AccountClosed" }
///     }
///     fn to_payload(&self) -> serde_json::Result<Value> {
///         Ok(match self { Account::Opened { owner } => json!({ "owner": owner }), Account::Closed => json!({}) })
///     }
///     fn from_payload(event_type: &str, payload: Value) -> serde_json::Result<Self> {
///         match event_type {
///             "AccountOpened" => Ok(Account::Opened { owner: serde_json::from_value(payload["owner"].clone())? }),
///             _ => Ok(Account::Closed),
///         }
///     }
/// }
/// ```
pub trait DomainEvent: Sized + Send + Sync {
    /// Every stored name this type reads and writes; a typed stream reads only these.
    fn event_types() -> &'static [&'static str];

    /// The stored name of this value's event type (one of [`DomainEvent::event_types`]).
    fn event_type(&self) -> &'static str;

    /// The payload to store.
    ///
    /// # Errors
    /// When the value cannot be represented as JSON.
    fn to_payload(&self) -> serde_json::Result<serde_json::Value>;

    /// The value back from a stored payload of `event_type` (one of
    /// [`DomainEvent::event_types`]).
    ///
    /// # Errors
    /// When the payload does not describe a value of this type.
    fn from_payload(event_type: &str, payload: serde_json::Value) -> serde_json::Result<Self>;

    /// The value back from a stored payload of `event_type` given as JSON text. Typed reads
    /// decode with it when the storage hands out payloads as text
    /// ([`Capability::RawPayloads`]); the default parses the
    /// text into a [`serde_json::Value`] for [`DomainEvent::from_payload`]. Override it to
    /// deserialize the text directly, as [`NamedEvent`] types do.
    ///
    /// # Errors
    /// When the payload does not describe a value of this type.
    fn from_json(event_type: &str, payload: &RawValue) -> serde_json::Result<Self> {
        Self::from_payload(event_type, serde_json::from_str(payload.get())?)
    }

    /// The tags to store the event with, which queries and append criteria select it by.
    fn tags(&self) -> Tags {
        Tags::none()
    }
}

/// A serde type that is exactly one event type, stored as [`NamedEvent::EVENT_TYPE`].
pub trait NamedEvent: Serialize + DeserializeOwned + Send + Sync {
    /// The stored name, e.g. `OrderPlaced`. Keep it stable: a new name is a new event type.
    const EVENT_TYPE: &'static str;

    /// The tags to store the event with.
    fn tags(&self) -> Tags {
        Tags::none()
    }
}

impl<T: NamedEvent> DomainEvent for T {
    fn event_types() -> &'static [&'static str] {
        std::slice::from_ref(&T::EVENT_TYPE)
    }

    fn event_type(&self) -> &'static str {
        T::EVENT_TYPE
    }

    fn to_payload(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(self)
    }

    fn from_payload(_event_type: &str, payload: serde_json::Value) -> serde_json::Result<Self> {
        serde_json::from_value(payload)
    }

    fn from_json(_event_type: &str, payload: &RawValue) -> serde_json::Result<Self> {
        serde_json::from_str(payload.get())
    }

    fn tags(&self) -> Tags {
        NamedEvent::tags(self)
    }
}

/// What can go wrong in the typed facade: the storage's errors, and encoding or decoding.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventStoreError {
    /// The storage refused or failed.
    #[error(transparent)]
    Storage(#[from] EventStorageError),

    /// A value could not be turned into a payload; nothing was appended.
    #[error("cannot encode an event of type {event_type} as JSON")]
    Encode {
        /// The stored name of the event's type.
        event_type: String,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },

    /// A stored payload does not describe a value of the stream's Rust type.
    #[error("cannot decode event {reference} of type {event_type} as {rust_type}")]
    Decode {
        /// The stored event.
        reference: EventReference,
        /// Its stored type name.
        event_type: String,
        /// The Rust type it was read as.
        rust_type: &'static str,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
}

impl EventStoreError {
    /// This error's message followed by the message of each source in its chain, joined by
    /// `: `, for a log line that tells the whole story (what serde said, say). Each text
    /// appears once: no message repeats its source.
    pub fn report(&self) -> String {
        crate::report_chain(self)
    }
}

/// The events of a [`TypedStream::query_stream`] or [`TypedStream::replay`], in order.
pub type TypedEvents<'a, E> =
    Pin<Box<dyn Stream<Item = Result<Envelope<E>, EventStoreError>> + Send + 'a>>;

/// A stored event decoded into its Rust type, with where and when it was stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope<E> {
    /// The event.
    pub event: E,
    /// Its id and place in the storage's order.
    pub reference: EventReference,
    /// The stream it belongs to.
    pub stream: EventStreamId,
    /// Its tags.
    pub tags: Tags,
    /// When it was stored, on the storage's clock.
    pub timestamp: DateTime<Utc>,
}

impl<E: DomainEvent> Envelope<E> {
    /// Decodes a stored event.
    ///
    /// # Errors
    /// [`EventStoreError::Decode`] when the payload is not an `E`.
    pub fn decode(stored: StoredEvent) -> Result<Self, EventStoreError> {
        let decoded = E::from_payload(stored.event_type.as_str(), stored.payload);
        Self::wrap(
            decoded,
            &stored.event_type,
            stored.reference,
            stored.stream,
            stored.tags,
            stored.timestamp,
        )
    }

    /// Decodes a stored event whose payload is JSON text, with [`DomainEvent::from_json`].
    ///
    /// # Errors
    /// [`EventStoreError::Decode`] when the payload is not an `E`.
    pub fn decode_raw(stored: RawStoredEvent) -> Result<Self, EventStoreError> {
        let decoded = E::from_json(stored.event_type.as_str(), &stored.payload);
        Self::wrap(
            decoded,
            &stored.event_type,
            stored.reference,
            stored.stream,
            stored.tags,
            stored.timestamp,
        )
    }

    /// The envelope of what decoding an event of `event_type` at `reference` gave.
    fn wrap(
        decoded: serde_json::Result<E>,
        event_type: &crate::EventType,
        reference: EventReference,
        stream: EventStreamId,
        tags: Tags,
        timestamp: DateTime<Utc>,
    ) -> Result<Self, EventStoreError> {
        let event = decoded.map_err(|source| EventStoreError::Decode {
            reference,
            event_type: event_type.0.clone(),
            rust_type: std::any::type_name::<E>(),
            source,
        })?;
        Ok(Envelope {
            event,
            reference,
            stream,
            tags,
            timestamp,
        })
    }
}

/// Encodes `event` for appending, with its stored name and tags.
///
/// # Errors
/// [`EventStoreError::Encode`] when the payload cannot be built.
pub fn encode<E: DomainEvent>(event: &E) -> Result<EventToStore, EventStoreError> {
    let payload = event
        .to_payload()
        .map_err(|source| EventStoreError::Encode {
            event_type: event.event_type().to_owned(),
            source,
        })?;
    Ok(EventToStore::new(event.event_type(), payload).with_tags(event.tags()))
}

/// The envelopes of `stored`, each decoded by `decode`, ending with the first error, of the
/// storage or of decoding.
fn until_an_error<'a, S, E>(
    stored: Events<'a, S>,
    decode: fn(S) -> Result<Envelope<E>, EventStoreError>,
) -> TypedEvents<'a, E>
where
    S: Send + 'a,
    E: DomainEvent + 'a,
{
    let decoded = stored.map(move |stored| match stored {
        Ok(event) => decode(event),
        Err(error) => Err(error.into()),
    });
    let until_an_error = decoded.scan(false, |failed, item| {
        let ended = std::mem::replace(failed, item.is_err());
        future::ready((!ended).then_some(item))
    });
    Box::pin(until_an_error)
}

/// `stored`, decoded in order into a vector sized once (collected through `Result`, it would
/// grow by doubling, copying every event each time). The storage returned only events of
/// `E`'s types: the filter was narrowed to them ([`TypedStream::query`]).
fn decode_all<S, E: DomainEvent>(
    stored: Vec<S>,
    decode: impl Fn(S) -> Result<Envelope<E>, EventStoreError>,
) -> Result<Vec<Envelope<E>>, EventStoreError> {
    let mut envelopes = Vec::with_capacity(stored.len());
    for event in stored {
        envelopes.push(decode(event)?);
    }
    Ok(envelopes)
}

/// The typed entry point over a storage: hands out typed streams.
#[derive(Debug, Clone)]
pub struct EventStore {
    storage: Arc<dyn EventStorage>,
}

impl EventStore {
    /// A store over `storage`.
    pub fn new(storage: Arc<dyn EventStorage>) -> Self {
        EventStore { storage }
    }

    /// The storage underneath, for bookmarks, leases and untyped access.
    pub fn storage(&self) -> &Arc<dyn EventStorage> {
        &self.storage
    }

    /// The stream `id` read and written as events of type `E`.
    pub fn stream<E: DomainEvent>(&self, id: EventStreamId) -> TypedStream<E> {
        TypedStream {
            storage: Arc::clone(&self.storage),
            id,
            fence: None,
            event_type: PhantomData,
        }
    }
}

/// What a decision was based on: the matching events up to the stream's head at read time.
///
/// Appending with [`TypedStream::append_decided`] succeeds only if no event matching the same
/// filter was appended since, so the decision is never made on stale facts.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision<E> {
    /// The events matching the filter, oldest first.
    pub events: Vec<Envelope<E>>,
    /// The filter the decision depends on, as the caller gave it. The events above are those
    /// of it this stream decodes (its own types); the criteria guard the whole filter, so an
    /// event of another type that matches it conflicts too, though no read of this stream
    /// shows it.
    pub filter: EventFilter,
    /// The stream's last event when it was read.
    pub head: Option<EventReference>,
}

impl<E> Decision<E> {
    /// The criteria that hold while nothing matching the filter came after the head.
    pub fn criteria(&self) -> AppendCriteria {
        let last_matching = self.events.last().map(|envelope| envelope.reference);
        // The head covers events that do not match as well; either bound is correct, the
        // head makes the check independent of whether anything matched.
        AppendCriteria::of(self.filter.clone(), self.head.or(last_matching))
    }
}

/// A stream whose events are values of `E`. Cheap to clone.
pub struct TypedStream<E> {
    storage: Arc<dyn EventStorage>,
    id: EventStreamId,
    fence: Option<Fence>,
    event_type: PhantomData<fn() -> E>,
}

impl<E> Clone for TypedStream<E> {
    fn clone(&self) -> Self {
        TypedStream {
            storage: Arc::clone(&self.storage),
            id: self.id.clone(),
            fence: self.fence.clone(),
            event_type: PhantomData,
        }
    }
}

impl<E> fmt::Debug for TypedStream<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedStream")
            .field("id", &self.id)
            .field("event_type", &std::any::type_name::<E>())
            .field("fence", &self.fence)
            .finish()
    }
}

impl<E: DomainEvent> TypedStream<E> {
    /// The stream's id.
    pub fn id(&self) -> &EventStreamId {
        &self.id
    }

    /// This stream with its appends guarded by `fence`: they succeed only while that lease is
    /// live with that token ([`crate::Capability::FencedWrites`]).
    pub fn fenced(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    /// Appends `events` if `criteria` hold, all or nothing, through the fence if one is set.
    ///
    /// Returns the stored events; an idempotent retry (every event stored already under its
    /// key) stores nothing and returns the events stored the first time.
    ///
    /// # Errors
    /// [`EventStoreError::Encode`] (nothing appended), and the storage's errors of
    /// [`EventStorage::append`] or [`EventStorage::append_fenced`].
    pub async fn append(
        &self,
        criteria: AppendCriteria,
        events: impl IntoIterator<Item = E>,
    ) -> Result<Vec<Envelope<E>>, EventStoreError> {
        let mut to_store = Vec::new();
        let mut values = Vec::new();
        for event in events {
            to_store.push(encode(&event)?);
            values.push(event);
        }
        let stored = match &self.fence {
            Some(fence) => {
                self.storage
                    .append_fenced(fence, criteria, &self.id, to_store)
                    .await?
            }
            None => self.storage.append(criteria, &self.id, to_store).await?,
        };
        // Stored events come back in the order given, a retry's included.
        Ok(stored
            .into_iter()
            .zip(values)
            .map(|(stored, event)| Envelope {
                event,
                reference: stored.reference,
                stream: stored.stream,
                tags: stored.tags,
                timestamp: stored.timestamp,
            })
            .collect())
    }

    /// Events of this stream's types that match `filter`, strictly after `after`, oldest first.
    /// `limit` counts only events of this stream's types.
    ///
    /// Payloads are decoded from their JSON text ([`DomainEvent::from_json`]) when the storage
    /// hands them out as text ([`Capability::RawPayloads`]), else from the storage's values.
    ///
    /// # Errors
    /// The storage's errors of [`EventStorage::query`], and [`EventStoreError::Decode`].
    pub async fn query(
        &self,
        filter: &EventFilter,
        after: Option<&EventReference>,
        limit: Limit,
    ) -> Result<Vec<Envelope<E>>, EventStoreError> {
        let filter = match Self::of_own_types(filter) {
            Ok(filter) => filter,
            Err(invalid) => return Err(self.refusal(filter, invalid).await),
        };
        let filter = &filter;
        if self.storage.supports(Capability::RawPayloads) {
            let stored = self
                .storage
                .query_raw(filter, &self.id, after, limit, Direction::Forward)
                .await?;
            return decode_all(stored, Envelope::decode_raw);
        }
        let stored = self
            .storage
            .query(filter, &self.id, after, limit, Direction::Forward)
            .await?;
        decode_all(stored, Envelope::decode)
    }

    /// Every event of this stream's types, oldest first.
    ///
    /// # Errors
    /// As [`TypedStream::query`].
    pub async fn read_all(&self) -> Result<Vec<Envelope<E>>, EventStoreError> {
        self.query(&Self::own_types(), None, Limit::none()).await
    }

    /// The events [`TypedStream::query`] returns, as a stream that holds a page or two of them
    /// at a time: for replaying a long history. Payloads are decoded as `query` decodes them:
    /// from their JSON text ([`EventStorageExt::query_raw_stream`]) when the storage hands them
    /// out as text ([`Capability::RawPayloads`]), else from the storage's values
    /// ([`EventStorageExt::query_stream`]). An error, of the storage or of decoding, is the
    /// stream's last item.
    pub fn query_stream<'a>(
        &'a self,
        filter: &EventFilter,
        after: Option<&EventReference>,
        limit: Limit,
    ) -> TypedEvents<'a, E>
    where
        E: 'a,
    {
        let filter = match Self::of_own_types(filter) {
            Ok(filter) => filter,
            Err(invalid) => {
                let filter = filter.clone();
                let refusal = async move { Err(self.refusal(&filter, invalid).await) };
                return Box::pin(stream::once(refusal));
            }
        };
        if self.storage.supports(Capability::RawPayloads) {
            let stored =
                self.storage
                    .query_raw_stream(&filter, &self.id, after, limit, Direction::Forward);
            return until_an_error(stored, Envelope::decode_raw);
        }
        let stored = self
            .storage
            .query_stream(&filter, &self.id, after, limit, Direction::Forward);
        until_an_error(stored, Envelope::decode)
    }

    /// Every event of this stream's types strictly after `after`, oldest first, as a stream:
    /// what a projector replays from its bookmark. As [`TypedStream::query_stream`].
    pub fn replay<'a>(&'a self, after: Option<&EventReference>) -> TypedEvents<'a, E>
    where
        E: 'a,
    {
        self.query_stream(&Self::own_types(), after, Limit::none())
    }

    /// The reference of the stream's last event, of any type.
    ///
    /// # Errors
    /// The storage's errors of [`EventStorage::head`].
    pub async fn head(&self) -> Result<Option<EventReference>, EventStoreError> {
        Ok(self.storage.head(&self.id).await?)
    }

    /// Reads the head, then the events matching `filter` up to it: the facts a decision is
    /// made on. Append its outcome with [`TypedStream::append_decided`].
    ///
    /// # Errors
    /// As [`TypedStream::query`].
    pub async fn read_for_decision(
        &self,
        filter: EventFilter,
    ) -> Result<Decision<E>, EventStoreError> {
        let head = self.head().await?;
        let events = match head {
            Some(head) => {
                // The filter's own bound, when earlier, still holds.
                let bound = filter.until.map_or(head, |until| until.min(head));
                let bounded = filter.clone().until(bound);
                self.query(&bounded, None, Limit::none()).await?
            }
            None => Vec::new(),
        };
        Ok(Decision {
            events,
            filter,
            head,
        })
    }

    /// Appends `events` only if nothing matching the decision's filter was appended since the
    /// decision was read.
    ///
    /// # Errors
    /// [`EventStorageError::OptimisticLock`] (inside [`EventStoreError::Storage`]) when the
    /// facts changed: read again and decide again. Otherwise as [`TypedStream::append`].
    pub async fn append_decided(
        &self,
        decision: &Decision<E>,
        events: impl IntoIterator<Item = E>,
    ) -> Result<Vec<Envelope<E>>, EventStoreError> {
        self.append(decision.criteria(), events).await
    }

    fn own_types() -> EventFilter {
        EventFilter::for_types(E::event_types().iter().copied())
    }

    /// What a read of `filter`, which [`TypedStream::of_own_types`] refused as `invalid`,
    /// answers: `Closed` first, as the storage itself answers, which asking it with the
    /// same filter finds out (a read, and refused either way).
    async fn refusal(&self, filter: &EventFilter, invalid: EventStoreError) -> EventStoreError {
        let asked = self
            .storage
            .query(filter, &self.id, None, Limit::to(1), Direction::Forward);
        match asked.await {
            Err(EventStorageError::Closed) => EventStorageError::Closed.into(),
            _ => invalid,
        }
    }

    /// `filter` narrowed to this stream's types, so that the storage applies a limit to the
    /// events this stream decodes, not to events of other types that would be dropped after.
    /// The caller's filter is checked first, so that a bad one is refused even where the
    /// narrowing would leave nothing of it.
    fn of_own_types(filter: &EventFilter) -> Result<EventFilter, EventStoreError> {
        validate::validate_filter(filter)?;
        let own: BTreeSet<EventType> = E::event_types().iter().copied().map(Into::into).collect();
        let items = filter
            .items
            .iter()
            .filter_map(|item| {
                let types: BTreeSet<EventType> = match &item.types {
                    Some(types) => types.intersection(&own).cloned().collect(),
                    None => own.clone(),
                };
                (!types.is_empty()).then(|| FilterItem {
                    types: Some(types),
                    tags: item.tags.clone(),
                })
            })
            .collect();
        Ok(EventFilter {
            items,
            until: filter.until,
        })
    }
}
