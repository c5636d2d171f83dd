//! How a batch of events is laid out inside one frame.
//!
//! A whole batch is one frame, so a crash stores all of it or none of it. Inside the frame,
//! each event is length-prefixed so that the index can point at it and a read can fetch one
//! event alone. A batch also records where the write of its group (the frames synced
//! together) began in its segment, so that recovery can tell a group whose pages reached the
//! disk out of order from damage (see `group_tail`). Batches of kind 1, written before, lack
//! it and are still read.
//!
//! ```text
//! batch:  kind u8 = 2 | group start u64 | count u32 | (length u32 | event) * count
//! (kind 1: kind u8 = 1 | count u32 | (length u32 | event) * count)
//! event:  id [16] | position u64 | timestamp (i64 s, u32 ns) | context str | purpose str
//!         | type str | tag count u32 | (key str | value str) * n | has key u8 [| key str]
//!         | payload JSON (the rest)
//! ```

use std::io;

use chrono::{DateTime, Utc};
use eventstore_api::{
    EventId, EventReference, EventStorageError, EventStreamId, EventType, RawStoredEvent,
    StoredEvent, Tag, Tags,
};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::log::codec::{put_str, put_time, put_u32, put_u64, put_u8, DecodeError, Decoder};
use crate::log::frame::{begin_frame, finish_frame, reseal_frame, HEADER_LEN, MAX_PAYLOAD};

/// A batch without its group's start, as written before batches recorded it.
const UNGROUPED_BATCH_KIND: u8 = 1;
/// A batch that records where its group's write began.
const BATCH_KIND: u8 = 2;
/// Where a batch frame holds its group's start: after the frame header and the kind.
const GROUP_START_AT: usize = HEADER_LEN + 1;

/// A batch encoded as one complete frame, and where each event lies inside it.
#[derive(Debug)]
pub(crate) struct EncodedBatch {
    /// The frame, header included.
    pub(crate) frame: Vec<u8>,
    /// Each event's `(offset from the frame's start, length)`.
    pub(crate) events: Vec<(u64, u32)>,
}

/// Encodes `events` as one frame.
///
/// # Errors
/// `InvalidInput` when the batch does not fit one frame ([`MAX_PAYLOAD`]).
pub(crate) fn encode_batch(events: &[StoredEvent]) -> Result<EncodedBatch, EventStorageError> {
    let invalid = |problem: String| {
        EventStorageError::invalid("events", format!("{} events", events.len()), problem)
    };
    let mut frame = Vec::with_capacity(64 + events.len() * 128);
    let start = begin_frame(&mut frame);
    put_u8(&mut frame, BATCH_KIND);
    // Known once the frame is placed in its group: see `stamp_group_start`.
    put_u64(&mut frame, 0);
    put_u32(&mut frame, events.len() as u32);
    let mut located = Vec::with_capacity(events.len());
    for event in events {
        let length_at = frame.len();
        put_u32(&mut frame, 0);
        let body_start = frame.len();
        encode_event(event, &mut frame).map_err(|error| invalid(error.to_string()))?;
        let length = frame.len() - body_start;
        if frame.len() - HEADER_LEN > MAX_PAYLOAD {
            return Err(invalid(format!(
                "the batch encodes to more than {MAX_PAYLOAD} bytes, the most one append stores"
            )));
        }
        frame[length_at..body_start].copy_from_slice(&(length as u32).to_le_bytes());
        located.push(((body_start - start) as u64, length as u32));
    }
    finish_frame(&mut frame, start).map_err(|error| invalid(error.to_string()))?;
    Ok(EncodedBatch {
        frame,
        events: located,
    })
}

/// Appends one event to `out`.
///
/// # Errors
/// A string too long to store (writing the payload's JSON into memory does not fail).
fn encode_event(event: &StoredEvent, out: &mut Vec<u8>) -> io::Result<()> {
    out.extend_from_slice(event.reference.id.0.as_bytes());
    put_u64(out, event.reference.position);
    put_time(out, event.timestamp);
    put_str(out, event.stream.context.as_deref().unwrap_or_default())?;
    put_str(out, event.stream.purpose.as_deref().unwrap_or_default())?;
    put_str(out, event.event_type.as_str())?;
    put_u32(out, event.tags.len() as u32);
    for tag in &event.tags {
        put_str(out, &tag.key)?;
        put_str(out, &tag.value)?;
    }
    match &event.idempotency_key {
        Some(key) => {
            put_u8(out, 1);
            put_str(out, key)?;
        }
        None => put_u8(out, 0),
    }
    serde_json::to_writer(&mut *out, &event.payload)?;
    Ok(())
}

/// The events of a batch frame's payload: each event's offset from the payload's start and its
/// bytes.
///
/// # Errors
/// The payload is not a batch.
pub(crate) fn decode_batch(payload: &[u8]) -> Result<Vec<(u64, &[u8])>, DecodeError> {
    let mut decoder = Decoder::new(payload);
    if batch_kind(&mut decoder)? == BATCH_KIND {
        decoder.u64("the group start")?;
    }
    let count = decoder.u32("the event count")?;
    let mut events = Vec::with_capacity(count.min(1 << 16) as usize);
    for index in 0..count {
        let length = decoder.u32("an event length")? as usize;
        let offset = decoder.position() as u64;
        let bytes = decoder.take(length, &format!("event {index} of {count}"))?;
        events.push((offset, bytes));
    }
    decoder.finish("the last event of the batch")?;
    Ok(events)
}

/// Where the write of the group of a batch frame's payload began in its segment, or `None`
/// for a batch of kind 1, which does not say.
///
/// # Errors
/// The payload is not a batch.
pub(crate) fn group_start(payload: &[u8]) -> Result<Option<u64>, DecodeError> {
    let mut decoder = Decoder::new(payload);
    if batch_kind(&mut decoder)? == BATCH_KIND {
        return decoder.u64("the group start").map(Some);
    }
    Ok(None)
}

/// Records in `frame`, a batch frame from [`encode_batch`], that its group's write began at
/// `group_start`, and brings its checksums up to date.
pub(crate) fn stamp_group_start(frame: &mut [u8], group_start: u64) {
    frame[GROUP_START_AT..GROUP_START_AT + 8].copy_from_slice(&group_start.to_le_bytes());
    reseal_frame(frame);
}

/// A batch frame holding one event at `position`, whose payload carries `text`: for tests
/// that lay frames out on disk.
#[cfg(test)]
pub(crate) fn test_frame(position: u64, text: &str) -> Vec<u8> {
    let event = StoredEvent {
        stream: EventStreamId::new("orders", "eu"),
        event_type: "OrderPlaced".into(),
        reference: EventReference::at(EventId::new(), position),
        payload: serde_json::json!({ "n": position, "text": text }),
        tags: Tags::default(),
        timestamp: Utc::now(),
        idempotency_key: None,
    };
    encode_batch(&[event])
        .expect("one small event fits a frame")
        .frame
}

/// Reads a batch's kind: either kind of batch.
fn batch_kind(decoder: &mut Decoder<'_>) -> Result<u8, DecodeError> {
    let kind = decoder.u8("the record kind")?;
    if kind != BATCH_KIND && kind != UNGROUPED_BATCH_KIND {
        return Err(DecodeError(format!(
            "unknown record kind {kind}, expected {BATCH_KIND} or {UNGROUPED_BATCH_KIND} \
             (a batch of events)"
        )));
    }
    Ok(kind)
}

/// An event's fields as stored, borrowed from its bytes, payload not parsed.
#[derive(Debug)]
pub(crate) struct EventFields<'a> {
    pub(crate) id: EventId,
    pub(crate) position: u64,
    pub(crate) timestamp: DateTime<Utc>,
    pub(crate) context: &'a str,
    pub(crate) purpose: &'a str,
    pub(crate) event_type: &'a str,
    pub(crate) tags: Vec<(&'a str, &'a str)>,
    pub(crate) idempotency_key: Option<&'a str>,
    pub(crate) payload: &'a [u8],
}

impl<'a> EventFields<'a> {
    /// Decodes one event's bytes.
    ///
    /// # Errors
    /// The bytes are not an event.
    pub(crate) fn decode(bytes: &'a [u8]) -> Result<Self, DecodeError> {
        let mut decoder = Decoder::new(bytes);
        let id = Uuid::from_bytes(decoder.array("the event id")?);
        let position = decoder.u64("the position")?;
        let timestamp = decoder.time("the timestamp")?;
        let context = decoder.str("the stream context")?;
        let purpose = decoder.str("the stream purpose")?;
        let event_type = decoder.str("the event type")?;
        let tag_count = decoder.u32("the tag count")?;
        let mut tags = Vec::with_capacity(tag_count.min(1024) as usize);
        for _ in 0..tag_count {
            tags.push((decoder.str("a tag key")?, decoder.str("a tag value")?));
        }
        let idempotency_key = match decoder.u8("the idempotency key flag")? {
            0 => None,
            1 => Some(decoder.str("the idempotency key")?),
            flag => {
                return Err(DecodeError(format!(
                    "idempotency key flag {flag} is neither 0 nor 1"
                )))
            }
        };
        Ok(EventFields {
            id: EventId(id),
            position,
            timestamp,
            context,
            purpose,
            event_type,
            tags,
            idempotency_key,
            payload: decoder.rest(),
        })
    }

    /// The stream as an id.
    pub(crate) fn stream(&self) -> EventStreamId {
        EventStreamId::new(self.context, self.purpose)
    }

    /// The tags as a set.
    pub(crate) fn tag_set(&self) -> Tags {
        self.tags
            .iter()
            .map(|&(key, value)| Tag::new(key, value))
            .collect()
    }
}

/// An event as a read hands it out, made from its stored fields: a [`StoredEvent`], or a
/// [`RawStoredEvent`] whose payload stays the stored JSON text.
pub(crate) trait FromFields: Sized {
    /// The event of `fields`.
    ///
    /// # Errors
    /// The payload is not JSON.
    fn from_fields(fields: EventFields<'_>) -> Result<Self, DecodeError>;
}

impl FromFields for StoredEvent {
    fn from_fields(fields: EventFields<'_>) -> Result<Self, DecodeError> {
        let payload = serde_json::from_slice(fields.payload).map_err(not_json)?;
        Ok(StoredEvent {
            stream: fields.stream(),
            event_type: EventType::from(fields.event_type),
            reference: EventReference::at(fields.id, fields.position),
            tags: fields.tag_set(),
            timestamp: fields.timestamp,
            idempotency_key: fields.idempotency_key.map(str::to_owned),
            payload,
        })
    }
}

impl FromFields for RawStoredEvent {
    fn from_fields(fields: EventFields<'_>) -> Result<Self, DecodeError> {
        let text = std::str::from_utf8(fields.payload)
            .map_err(|error| DecodeError(format!("the payload is not UTF-8: {error}")))?;
        let payload = RawValue::from_string(text.to_owned()).map_err(not_json)?;
        Ok(RawStoredEvent {
            stream: fields.stream(),
            event_type: EventType::from(fields.event_type),
            reference: EventReference::at(fields.id, fields.position),
            tags: fields.tag_set(),
            timestamp: fields.timestamp,
            idempotency_key: fields.idempotency_key.map(str::to_owned),
            payload,
        })
    }
}

fn not_json(error: serde_json::Error) -> DecodeError {
    DecodeError(format!("the payload is not JSON: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::frame::FrameScanner;
    use crate::log::frame::Scanned;

    fn stored(position: u64, key: Option<&str>) -> StoredEvent {
        StoredEvent {
            stream: EventStreamId::new("orders", "eu"),
            event_type: "OrderPlaced".into(),
            reference: EventReference::at(EventId::new(), position),
            payload: serde_json::json!({"n": position, "text": "ä"}),
            tags: Tags::from_pairs([("customer", "c-1"), ("region", "eu:west")]),
            timestamp: Utc::now(),
            idempotency_key: key.map(str::to_owned),
        }
    }

    #[test]
    fn a_batch_round_trips_and_each_event_can_be_read_alone() {
        let events = vec![stored(1, Some("k")), stored(2, None)];
        let encoded = encode_batch(&events).unwrap();
        let mut scanner = FrameScanner::new(&encoded.frame[..], 0, encoded.frame.len() as u64);
        let Scanned::Frame { payload, .. } = scanner.next_frame().unwrap() else {
            panic!("one frame expected");
        };
        let decoded = decode_batch(&payload).unwrap();
        assert_eq!(decoded.len(), 2);
        for ((offset, bytes), (expected, (frame_offset, length))) in
            decoded.iter().zip(events.iter().zip(&encoded.events))
        {
            assert_eq!(offset + HEADER_LEN as u64, *frame_offset);
            assert_eq!(bytes.len(), *length as usize);
            let alone = &encoded.frame[*frame_offset as usize..][..*length as usize];
            assert_eq!(
                &StoredEvent::from_fields(EventFields::decode(alone).unwrap()).unwrap(),
                expected
            );
        }
    }
}
