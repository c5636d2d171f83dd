//! Reads: only events below the oldest running transaction.

use eventstore_api::{
    Direction, EventFilter, EventId, EventReference, EventStreamId, Limit, StorageResult,
    StoredEvent,
};
use sqlx::{Postgres, QueryBuilder};

use super::rows::{decode_event, decode_reference, EVENT_COLUMNS};
use crate::filter_sql::{push_after, push_filter, push_stream, VISIBILITY_BARRIER};
use crate::shared::Shared;

/// The matching events of the streams `stream` covers, strictly after `after`, below the
/// visibility barrier.
#[tracing::instrument(name = "query", level = "debug", skip_all,
    fields(backend = "postgres", stream = %stream, limit = ?limit.0, ?direction))]
pub(crate) async fn query(
    shared: &Shared,
    filter: &EventFilter,
    stream: &EventStreamId,
    after: Option<&EventReference>,
    limit: Limit,
    direction: Direction,
) -> StorageResult<Vec<StoredEvent>> {
    if limit.0 == Some(0) || filter.items.is_empty() {
        return Ok(Vec::new());
    }
    let mut query = QueryBuilder::<Postgres>::new(format!(
        "SELECT {EVENT_COLUMNS} FROM {events} WHERE {VISIBILITY_BARRIER}",
        events = shared.prefix.name("events")
    ));
    push_stream(&mut query, stream);
    push_filter(&mut query, filter);
    if let Some(after) = after {
        push_after(&mut query, after);
    }
    query.push(match direction {
        Direction::Forward => " ORDER BY tx, position",
        Direction::Backward => " ORDER BY tx DESC, position DESC",
    });
    if let Some(limit) = limit.0 {
        query
            .push(" LIMIT ")
            .push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
    }
    let operation = "query events";
    let failing = shared.settings.failing(operation);
    let mut connection = shared.connection_for(operation).await?;
    let rows = query
        .build()
        .persistent(shared.settings.prepared_statements)
        .fetch_all(&mut *connection)
        .await
        .map_err(|e| failing.map(e))?;
    shared.end(operation, connection).await?;
    rows.iter()
        .map(|row| decode_event(row).map_err(|e| failing.map(e)))
        .collect()
}

/// The event with `id`, if it is committed.
#[tracing::instrument(name = "get_event_by_id", level = "debug", skip_all,
    fields(backend = "postgres", id = %id.0))]
pub(crate) async fn get_by_id(shared: &Shared, id: EventId) -> StorageResult<Option<StoredEvent>> {
    let operation = "get an event by id";
    let failing = shared.settings.failing(operation);
    let mut connection = shared.connection_for(operation).await?;
    let row = sqlx::query(&format!(
        "SELECT {EVENT_COLUMNS} FROM {events} WHERE id = $1",
        events = shared.prefix.name("events")
    ))
    .bind(id.0)
    .persistent(shared.settings.prepared_statements)
    .fetch_optional(&mut *connection)
    .await
    .map_err(|e| failing.map(e))?;
    shared.end(operation, connection).await?;
    row.as_ref()
        .map(decode_event)
        .transpose()
        .map_err(|e| failing.map(e))
}

/// The last event below the visibility barrier in the streams `stream` covers.
#[tracing::instrument(name = "head", level = "debug", skip_all,
    fields(backend = "postgres", stream = %stream))]
pub(crate) async fn head(
    shared: &Shared,
    stream: &EventStreamId,
) -> StorageResult<Option<EventReference>> {
    let mut query = QueryBuilder::<Postgres>::new(format!(
        "SELECT position, tx::text AS tx_text, id FROM {events} WHERE {VISIBILITY_BARRIER}",
        events = shared.prefix.name("events")
    ));
    push_stream(&mut query, stream);
    query.push(" ORDER BY tx DESC, position DESC LIMIT 1");
    let operation = "read the head of a stream";
    let failing = shared.settings.failing(operation);
    let mut connection = shared.connection_for(operation).await?;
    let row = query
        .build()
        .persistent(shared.settings.prepared_statements)
        .fetch_optional(&mut *connection)
        .await
        .map_err(|e| failing.map(e))?;
    shared.end(operation, connection).await?;
    row.as_ref()
        .map(decode_reference)
        .transpose()
        .map_err(|e| failing.map(e))
}
