//! Events: what a caller stores and what the storage gives back.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{EventReference, EventStreamId, Tags};

/// An event's identity, assigned by the storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EventId(pub Uuid);

impl EventId {
    /// A new, time-ordered id (UUID v7).
    pub fn new() -> Self {
        EventId(Uuid::now_v7())
    }
}

impl Default for EventId {
    fn default() -> Self {
        EventId::new()
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The stored name of an event's type, e.g. `OrderPlaced`.
///
/// Stored as written: keep it stable, since renaming it splits one type into two.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EventType(pub String);

impl EventType {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for EventType {
    fn from(name: &str) -> Self {
        EventType(name.to_owned())
    }
}

impl From<String> for EventType {
    fn from(name: String) -> Self {
        EventType(name)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An event on its way into the storage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventToStore {
    /// The event's type.
    pub event_type: EventType,
    /// The event's data.
    pub payload: serde_json::Value,
    /// Labels that queries select the event by.
    pub tags: Tags,
    /// A key that makes a retried append store the event once only (unique per stream).
    pub idempotency_key: Option<String>,
}

impl EventToStore {
    /// An event of `event_type` with `payload`, no tags and no idempotency key.
    pub fn new(event_type: impl Into<EventType>, payload: serde_json::Value) -> Self {
        EventToStore {
            event_type: event_type.into(),
            payload,
            tags: Tags::none(),
            idempotency_key: None,
        }
    }

    /// This event with `tags`.
    pub fn with_tags(mut self, tags: Tags) -> Self {
        self.tags = tags;
        self
    }

    /// This event with an idempotency key: appending a batch whose keys are all stored
    /// already stores nothing again.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

/// An event as the storage holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// The stream the event was appended to.
    pub stream: EventStreamId,
    /// The event's type.
    pub event_type: EventType,
    /// The event's id and place in the storage's order.
    pub reference: EventReference,
    /// The event's data.
    pub payload: serde_json::Value,
    /// The event's tags.
    pub tags: Tags,
    /// When the storage stored it, on the storage's clock.
    pub timestamp: DateTime<Utc>,
    /// The idempotency key it was appended with.
    pub idempotency_key: Option<String>,
}

/// A stored event with its payload left as the JSON text the storage holds, for readers that
/// decode payloads into their own types ([`EventStorageExt::query_raw`]): no
/// [`serde_json::Value`] is built in between.
///
/// [`EventStorageExt::query_raw`]: crate::EventStorageExt::query_raw
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RawStoredEvent {
    /// The stream the event was appended to.
    pub stream: EventStreamId,
    /// The event's type.
    pub event_type: EventType,
    /// The event's id and place in the storage's order.
    pub reference: EventReference,
    /// The event's data as JSON text.
    pub payload: Box<serde_json::value::RawValue>,
    /// The event's tags.
    pub tags: Tags,
    /// When the storage stored it, on the storage's clock.
    pub timestamp: DateTime<Utc>,
    /// The idempotency key it was appended with.
    pub idempotency_key: Option<String>,
}

impl PartialEq for RawStoredEvent {
    /// Equal when every field is, the payloads compared as text.
    fn eq(&self, other: &Self) -> bool {
        self.stream == other.stream
            && self.event_type == other.event_type
            && self.reference == other.reference
            && self.payload.get() == other.payload.get()
            && self.tags == other.tags
            && self.timestamp == other.timestamp
            && self.idempotency_key == other.idempotency_key
    }
}

impl RawStoredEvent {
    /// This event with its payload parsed: the [`StoredEvent`] `query` returns for it.
    ///
    /// # Errors
    /// The payload text is not JSON (it always is, coming from a storage).
    pub fn parse(self) -> serde_json::Result<StoredEvent> {
        Ok(StoredEvent {
            payload: serde_json::from_str(self.payload.get())?,
            stream: self.stream,
            event_type: self.event_type,
            reference: self.reference,
            tags: self.tags,
            timestamp: self.timestamp,
            idempotency_key: self.idempotency_key,
        })
    }
}

impl RawStoredEvent {
    /// `events` with their payloads written out as JSON text: what
    /// a [`Payloads::Raw`](crate::Payloads::Raw) read returns by default, for a backend that
    /// reads payloads as values.
    ///
    /// # Errors
    /// `Backend` when a payload cannot be written out.
    pub fn written_out(events: Vec<StoredEvent>) -> crate::StorageResult<Vec<RawStoredEvent>> {
        events
            .into_iter()
            .map(RawStoredEvent::try_from)
            .collect::<Result<_, _>>()
            .map_err(|e| crate::EventStorageError::backend("write a payload out as JSON text", e))
    }
}

impl TryFrom<StoredEvent> for RawStoredEvent {
    type Error = serde_json::Error;

    /// The event with its payload written out as JSON text.
    fn try_from(event: StoredEvent) -> Result<Self, Self::Error> {
        Ok(RawStoredEvent {
            payload: serde_json::value::to_raw_value(&event.payload)?,
            stream: event.stream,
            event_type: event.event_type,
            reference: event.reference,
            tags: event.tags,
            timestamp: event.timestamp,
            idempotency_key: event.idempotency_key,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored() -> StoredEvent {
        StoredEvent {
            stream: EventStreamId::for_context("orders"),
            event_type: "Placed".into(),
            reference: EventReference::at(EventId::new(), 7),
            payload: json!({ "order": "o-1", "lines": [1, 2.5, null], "note": "ü \"q\"" }),
            tags: Tags::from_pairs([("order", "o-1")]),
            timestamp: Utc::now(),
            idempotency_key: Some("k-1".into()),
        }
    }

    #[test]
    fn a_stored_event_written_as_text_keeps_every_field_and_its_payload_parses_back() {
        let event = stored();
        let raw = RawStoredEvent::try_from(event.clone()).unwrap();
        let payload: serde_json::Value = serde_json::from_str(raw.payload.get()).unwrap();
        assert_eq!(payload, event.payload);
        assert_eq!(
            (&raw.stream, &raw.event_type, raw.reference, &raw.tags),
            (
                &event.stream,
                &event.event_type,
                event.reference,
                &event.tags
            )
        );
        assert_eq!(
            (raw.timestamp, &raw.idempotency_key),
            (event.timestamp, &event.idempotency_key)
        );
        assert_eq!(raw.parse().unwrap(), event, "parsed back, the event itself");
    }

    #[test]
    fn raw_events_serialize_their_payload_inline_and_compare_by_its_text() {
        let raw = RawStoredEvent::try_from(stored()).unwrap();
        let document = serde_json::to_value(&raw).unwrap();
        assert_eq!(
            document["payload"]["order"], "o-1",
            "inline JSON, not a string"
        );
        let back: RawStoredEvent = serde_json::from_value(document).unwrap();
        assert_eq!(back, raw);
        let mut other = raw.clone();
        other.payload = serde_json::value::RawValue::from_string("{}".to_owned()).unwrap();
        assert_ne!(other, raw, "a different payload text is a different event");
    }
}
