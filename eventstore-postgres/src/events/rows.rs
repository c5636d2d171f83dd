//! Events as rows of the events table: the columns a read selects, how a row decodes, and
//! the stream columns of an append.

use eventstore_api::{EventId, EventReference, EventStreamId, StoredEvent};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::tags_column;

/// The columns [`decode_event`] reads.
///
/// The transaction id is read as text under a name of its own: were the alias `tx`, an
/// `ORDER BY tx` would sort by that text (PostgreSQL resolves ORDER BY names to output
/// columns first), putting transaction 10 before transaction 9.
pub(crate) const EVENT_COLUMNS: &str = "position, tx::text AS tx_text, id, stream_context, \
     stream_purpose, event_type, payload, tags, idempotency_key, stored_at";

/// Context and purpose of a stream validated as concrete.
pub(crate) fn concrete(stream: &EventStreamId) -> (&str, &str) {
    (
        stream.context.as_deref().unwrap_or_default(),
        stream.purpose.as_deref().unwrap_or_default(),
    )
}

/// A reference from the `id`, `position` and `tx_text` (`tx::text`) columns.
pub(crate) fn decode_reference(row: &PgRow) -> Result<EventReference, sqlx::Error> {
    let position: i64 = row.try_get("position")?;
    let tx: String = row.try_get("tx_text")?;
    Ok(EventReference {
        id: EventId(row.try_get("id")?),
        position: u64::try_from(position)
            .map_err(|_| sqlx::Error::Decode(format!("negative position {position}").into()))?,
        tx: tx.parse().map_err(|_| {
            sqlx::Error::Decode(format!("transaction id {tx:?} is not a u64").into())
        })?,
    })
}

/// An event from a row with the [`EVENT_COLUMNS`].
pub(crate) fn decode_event(row: &PgRow) -> Result<StoredEvent, sqlx::Error> {
    let tags: Vec<String> = row.try_get("tags")?;
    Ok(StoredEvent {
        stream: EventStreamId::new(
            row.try_get::<String, _>("stream_context")?,
            row.try_get::<String, _>("stream_purpose")?,
        ),
        event_type: row.try_get::<String, _>("event_type")?.into(),
        reference: decode_reference(row)?,
        payload: row.try_get("payload")?,
        tags: tags_column::from_texts(&tags)?,
        timestamp: row.try_get("stored_at")?,
        idempotency_key: row.try_get("idempotency_key")?,
    })
}
