//! Events as rows of the events table: the columns a read selects, how a row decodes, and
//! the stream columns of an append.

use chrono::{DateTime, Utc};
use eventstore_api::{
    EventId, EventReference, EventStreamId, EventType, RawStoredEvent, StoredEvent, Tags,
};
use serde_json::value::RawValue;
use sqlx::postgres::{PgRow, PgValueFormat};
use sqlx::{Row, TypeInfo, ValueRef};

use super::tags_column::RepeatedTags;

/// The columns [`decode_event`] reads, in the order it reads them by index.
///
/// The transaction id is read as its binary form (`xid8send`, 8 bytes), under a name of its
/// own: were the alias `tx`, an `ORDER BY tx` would sort by the output column, not the
/// `xid8`. As `bytea` rather than as `xid8`, it needs no look-up of a type the driver does
/// not know, which would leave a prepared statement in the session; unlike `tx::text`, which
/// took the server a fifth of the time it spends sending a read's rows, it is neither printed
/// nor parsed.
pub(crate) const EVENT_COLUMNS: &str = "position, xid8send(tx) AS tx_bytes, id, stream_context, \
     stream_purpose, event_type, payload, tags, idempotency_key, stored_at";

/// Context and purpose of a stream validated as concrete.
pub(crate) fn concrete(stream: &EventStreamId) -> (&str, &str) {
    (
        stream.context.as_deref().unwrap_or_default(),
        stream.purpose.as_deref().unwrap_or_default(),
    )
}

/// A reference from the `id`, `position` and `tx_bytes` (`xid8send(tx)`) columns.
pub(crate) fn decode_reference(row: &PgRow) -> Result<EventReference, sqlx::Error> {
    let position: i64 = row.try_get("position")?;
    Ok(EventReference {
        id: EventId(row.try_get("id")?),
        position: u64::try_from(position)
            .map_err(|_| sqlx::Error::Decode(format!("negative position {position}").into()))?,
        tx: decode_tx(row.try_get("tx_bytes")?)?,
    })
}

/// A transaction id from its binary form (`xid8send`): 8 bytes, the most significant first.
fn decode_tx(bytes: &[u8]) -> Result<u64, sqlx::Error> {
    <[u8; 8]>::try_from(bytes)
        .map(u64::from_be_bytes)
        .map_err(|_| {
            sqlx::Error::Decode(format!("a transaction id of {} bytes, not 8", bytes.len()).into())
        })
}

/// The columns a read of one concrete stream selects: those of [`EVENT_COLUMNS`] but the
/// stream's, which every row would repeat. Sending them cost the server about a sixth of the
/// rows' wire format (20,000 events read: 31–35 ms against 38–41 ms).
const STREAM_READ_COLUMNS: &str =
    "position, xid8send(tx) AS tx_bytes, id, event_type, payload, tags, idempotency_key, stored_at";

/// The columns a read of `stream` selects: see [`decode_read`].
pub(crate) fn read_columns(stream: &EventStreamId) -> &'static str {
    if stream.is_concrete() {
        STREAM_READ_COLUMNS
    } else {
        EVENT_COLUMNS
    }
}

/// What a read hands out for each row: a [`StoredEvent`], or a [`RawStoredEvent`] whose
/// payload stays the JSON text the row carries.
pub(crate) trait ReadEvent: Sized + Send + 'static {
    /// Where the event stands in the storage's order.
    fn reference(&self) -> EventReference;

    /// The event from a row a read of `stream` returned, with the [`read_columns`] of
    /// `stream`: a concrete stream's events carry that stream, the others their own. `tags`
    /// holds the tags of the read's row before.
    fn decode(
        row: &PgRow,
        stream: &EventStreamId,
        tags: &mut RepeatedTags,
    ) -> Result<Self, sqlx::Error>;
}

impl ReadEvent for StoredEvent {
    fn reference(&self) -> EventReference {
        self.reference
    }

    fn decode(
        row: &PgRow,
        stream: &EventStreamId,
        tags: &mut RepeatedTags,
    ) -> Result<Self, sqlx::Error> {
        decode_row(row, stream, value_payload, tags).map(EventRow::into_stored)
    }
}

impl ReadEvent for RawStoredEvent {
    fn reference(&self) -> EventReference {
        self.reference
    }

    fn decode(
        row: &PgRow,
        stream: &EventStreamId,
        tags: &mut RepeatedTags,
    ) -> Result<Self, sqlx::Error> {
        decode_row(row, stream, raw_payload, tags).map(EventRow::into_raw)
    }
}

/// An event from a row a read of `stream` returned, with the [`read_columns`] of `stream`: a
/// concrete stream's events carry that stream, the others their own. Its payload is decoded
/// by `payload`; `tags` holds the tags of the read's row before.
fn decode_row<P>(
    row: &PgRow,
    stream: &EventStreamId,
    payload: fn(&PgRow, usize) -> Result<P, sqlx::Error>,
    tags: &mut RepeatedTags,
) -> Result<EventRow<P>, sqlx::Error> {
    if stream.is_concrete() {
        decode_after_stream(row, stream.clone(), 3, payload, tags)
    } else {
        decode_with_stream(row, payload, tags)
    }
}

/// An event from a row with the [`EVENT_COLUMNS`]: each column read by its index, each
/// value decoded from the row's bytes once. The columns' types are not checked again for
/// every row: the statement names them, and opening the storage checked the table's.
pub(crate) fn decode_event(row: &PgRow) -> Result<StoredEvent, sqlx::Error> {
    decode_with_stream(row, value_payload, &mut RepeatedTags::default()).map(EventRow::into_stored)
}

/// An event's fields as a row gives them, its payload decoded into `P`.
struct EventRow<P> {
    stream: EventStreamId,
    event_type: EventType,
    reference: EventReference,
    payload: P,
    tags: Tags,
    timestamp: DateTime<Utc>,
    idempotency_key: Option<String>,
}

impl EventRow<serde_json::Value> {
    fn into_stored(self) -> StoredEvent {
        StoredEvent {
            stream: self.stream,
            event_type: self.event_type,
            reference: self.reference,
            payload: self.payload,
            tags: self.tags,
            timestamp: self.timestamp,
            idempotency_key: self.idempotency_key,
        }
    }
}

impl EventRow<Box<RawValue>> {
    fn into_raw(self) -> RawStoredEvent {
        RawStoredEvent {
            stream: self.stream,
            event_type: self.event_type,
            reference: self.reference,
            payload: self.payload,
            tags: self.tags,
            timestamp: self.timestamp,
            idempotency_key: self.idempotency_key,
        }
    }
}

/// The payload column parsed into a [`serde_json::Value`].
fn value_payload(row: &PgRow, index: usize) -> Result<serde_json::Value, sqlx::Error> {
    row.try_get_unchecked(index)
}

/// The payload column as its JSON text, unparsed but checked. A `jsonb` column (of a table
/// made before payloads became `json`) sends a format version byte before the text.
fn raw_payload(row: &PgRow, index: usize) -> Result<Box<RawValue>, sqlx::Error> {
    let value = row.try_get_raw(index)?;
    let binary_jsonb =
        value.format() == PgValueFormat::Binary && value.type_info().name() == "JSONB";
    let bytes = value.as_bytes().map_err(sqlx::Error::Decode)?;
    let text = match (binary_jsonb, bytes.split_first()) {
        (true, Some((1, text))) => text,
        (true, _) => {
            return Err(sqlx::Error::Decode(
                "a jsonb payload of an unknown format version".into(),
            ))
        }
        (false, _) => bytes,
    };
    let text = std::str::from_utf8(text).map_err(|e| sqlx::Error::Decode(e.into()))?;
    RawValue::from_string(text.to_owned()).map_err(|e| sqlx::Error::Decode(e.into()))
}

/// An event from a row with the [`EVENT_COLUMNS`], its payload decoded by `payload`.
fn decode_with_stream<P>(
    row: &PgRow,
    payload: fn(&PgRow, usize) -> Result<P, sqlx::Error>,
    tags: &mut RepeatedTags,
) -> Result<EventRow<P>, sqlx::Error> {
    let stream = EventStreamId::new(
        row.try_get_unchecked::<String, _>(3)?,
        row.try_get_unchecked::<String, _>(4)?,
    );
    decode_after_stream(row, stream, 5, payload, tags)
}

/// An event of `stream` from a row that starts with `position`, `tx_bytes` and `id`, and has
/// the columns after the stream's from index `rest` on (`event_type` to `stored_at`), its
/// payload decoded by `payload`, its tags by `tags`.
fn decode_after_stream<P>(
    row: &PgRow,
    stream: EventStreamId,
    rest: usize,
    payload: fn(&PgRow, usize) -> Result<P, sqlx::Error>,
    tags: &mut RepeatedTags,
) -> Result<EventRow<P>, sqlx::Error> {
    let position: i64 = row.try_get_unchecked(0)?;
    let tx = decode_tx(row.try_get_unchecked(1)?)?;
    let tags =
        tags.decode(row.try_get_raw(rest + 2)?)
            .map_err(|source| sqlx::Error::ColumnDecode {
                index: "tags".to_owned(),
                source,
            })?;
    Ok(EventRow {
        stream,
        event_type: row.try_get_unchecked::<String, _>(rest)?.into(),
        reference: EventReference {
            id: EventId(row.try_get_unchecked(2)?),
            position: u64::try_from(position)
                .map_err(|_| sqlx::Error::Decode(format!("negative position {position}").into()))?,
            tx,
        },
        payload: payload(row, rest + 1)?,
        tags,
        timestamp: row.try_get_unchecked(rest + 4)?,
        idempotency_key: row.try_get_unchecked(rest + 3)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_id_decodes_from_its_eight_bytes_most_significant_first() {
        assert_eq!(decode_tx(&[0, 0, 0, 3, 0, 0, 0, 7]).unwrap(), (3 << 32) + 7);
        assert_eq!(decode_tx(&[0xff; 8]).unwrap(), u64::MAX);
    }

    #[test]
    fn a_transaction_id_of_another_length_is_refused_naming_its_length() {
        let error = decode_tx(&[0, 0, 1]).unwrap_err().to_string();
        assert!(error.contains("3 bytes, not 8"), "{error}");
    }
}
