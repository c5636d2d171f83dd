//! What [`EventStorage::read`](crate::EventStorage::read) is asked for: the events of a
//! query, decoded or as JSON text, whole or streamed a page or two at a time.

use crate::{
    Direction, EventFilter, EventReference, EventStorageError, EventStreamId, Limit,
    RawStoredEvent, StorageResult, StoredEvent,
};

/// One read: which events (the arguments of [`EventStorage::query`](crate::EventStorage::query)),
/// and how they are handed out.
///
/// ```
/// use eventstore_api::{Direction, EventFilter, EventStreamId, Limit, ReadRequest};
///
/// let replay = ReadRequest::new(EventFilter::match_all(), EventStreamId::for_context("orders"))
///     .raw()
///     .streamed();
/// let last_ten = ReadRequest::new(EventFilter::for_types(["OrderPlaced"]), EventStreamId::any())
///     .limit(Limit::to(10))
///     .direction(Direction::Backward);
/// # let _ = (replay, last_ten);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ReadRequest {
    /// The events selected.
    pub filter: EventFilter,
    /// The streams read.
    pub stream: EventStreamId,
    /// Strictly after this place, when given (in the read's direction).
    pub after: Option<EventReference>,
    /// At most this many events, counted from the first in the read's direction.
    pub limit: Limit,
    /// Oldest first or newest first.
    pub direction: Direction,
    /// Payloads as values or as JSON text.
    pub payloads: Payloads,
    /// All at once, or a page or two in memory at a time.
    pub delivery: Delivery,
}

impl ReadRequest {
    /// Every event of `stream` matching `filter`, forward, decoded, whole.
    pub fn new(filter: EventFilter, stream: EventStreamId) -> Self {
        ReadRequest {
            filter,
            stream,
            after: None,
            limit: Limit::none(),
            direction: Direction::Forward,
            payloads: Payloads::Decoded,
            delivery: Delivery::Whole,
        }
    }

    /// Only the events after `reference` (before it, reading backward).
    pub fn after(mut self, reference: Option<EventReference>) -> Self {
        self.after = reference;
        self
    }

    /// At most `limit` events.
    pub fn limit(mut self, limit: Limit) -> Self {
        self.limit = limit;
        self
    }

    /// In `direction`.
    pub fn direction(mut self, direction: Direction) -> Self {
        self.direction = direction;
        self
    }

    /// Payloads as the JSON text the backend read ([`ReadEvent::Raw`]).
    pub fn raw(mut self) -> Self {
        self.payloads = Payloads::Raw;
        self
    }

    /// A page or two in memory at a time, for a long history.
    pub fn streamed(mut self) -> Self {
        self.delivery = Delivery::Streamed;
        self
    }
}

/// How a read hands out payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Payloads {
    /// As [`serde_json::Value`]s ([`ReadEvent::Decoded`]).
    Decoded,
    /// As JSON text ([`ReadEvent::Raw`]): for a caller that decodes into its own types. With
    /// [`Capability::RawPayloads`](crate::Capability::RawPayloads) no value is built in
    /// between.
    Raw,
}

/// How much of a read is held in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// Every event read before the first is handed out: one round trip for a bounded read.
    Whole,
    /// A page or two at a time (the page handed out and the next, read ahead), however many
    /// events match: for replaying a long history. Dropping the stream part-way leaves no
    /// transaction open and no connection held.
    Streamed,
}

/// An event as a read hands it out: in the form its [`ReadRequest::payloads`] asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadEvent {
    /// The payload as a value.
    Decoded(StoredEvent),
    /// The payload as JSON text.
    Raw(RawStoredEvent),
}

impl ReadEvent {
    /// Where the event stands in the storage's order.
    pub fn reference(&self) -> EventReference {
        match self {
            ReadEvent::Decoded(event) => event.reference,
            ReadEvent::Raw(event) => event.reference,
        }
    }

    /// The event with its payload as a value, parsed if it came as text.
    ///
    /// # Errors
    /// `Backend` when a payload the storage handed out as text is not JSON.
    pub fn into_decoded(self) -> StorageResult<StoredEvent> {
        match self {
            ReadEvent::Decoded(event) => Ok(event),
            ReadEvent::Raw(event) => event
                .parse()
                .map_err(|e| EventStorageError::backend("parse a stored payload as JSON", e)),
        }
    }

    /// The event with its payload as JSON text, written out if it came as a value.
    ///
    /// # Errors
    /// `Backend` when a payload cannot be written out.
    pub fn into_raw(self) -> StorageResult<RawStoredEvent> {
        match self {
            ReadEvent::Raw(event) => Ok(event),
            ReadEvent::Decoded(event) => RawStoredEvent::try_from(event)
                .map_err(|e| EventStorageError::backend("write a payload out as JSON text", e)),
        }
    }

    /// `event` in the form `payloads` asks for.
    ///
    /// # Errors
    /// As [`ReadEvent::into_raw`].
    pub fn of(event: StoredEvent, payloads: Payloads) -> StorageResult<ReadEvent> {
        Ok(match payloads {
            Payloads::Decoded => ReadEvent::Decoded(event),
            Payloads::Raw => ReadEvent::Decoded(event).into_raw().map(ReadEvent::Raw)?,
        })
    }
}
