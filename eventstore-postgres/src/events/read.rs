//! Reads: only events below the oldest running transaction.

use std::sync::Arc;

use eventstore_api::{
    Direction, EventFilter, EventId, EventReference, EventStorageError, EventStream, EventStreamId,
    Limit, StorageResult, StoredEvent,
};
use futures_util::{stream, StreamExt, TryStreamExt};
use sqlx::{Postgres, QueryBuilder};

use super::pages::decode_rows;
pub(crate) use super::pages::Pages;
use super::rows::{decode_event, decode_reference, ReadEvent, EVENT_COLUMNS};
use crate::filter_sql::{push_order, push_stream_between, VISIBILITY_BARRIER};
use crate::shared::Shared;

/// The matching events of the streams `stream` covers, strictly after `after`, below the
/// visibility barrier: page after page on one connection (see [`Pages`]).
///
/// Each page's statement is sent before the page before it is decoded, so that the server
/// finds and sends the next rows while the client decodes: read one after the other, the
/// server waited idle for every next statement, and the client for every first row.
#[tracing::instrument(name = "query", level = "debug", skip_all,
    fields(backend = "postgres", stream = %stream, limit = ?limit.0, ?direction))]
pub(crate) async fn query<E: ReadEvent>(
    shared: &Shared,
    filter: &EventFilter,
    stream: &EventStreamId,
    after: Option<&EventReference>,
    limit: Limit,
    direction: Direction,
) -> StorageResult<Vec<E>> {
    let mut pages = Pages::new(filter, stream, after, limit, direction).growing();
    if pages.is_done() {
        return Ok(Vec::new());
    }
    let operation = "query events";
    let failing = shared.settings.failing(operation);
    let stream = pages.stream().clone();
    let mut connection = shared.connection_for(operation).await?;
    let mut events = Vec::new();
    let mut rows = pages.next_rows(shared, &mut connection, operation).await?;
    while !pages.is_done() {
        // The decoding never yields: it runs while the next statement waits for its rows.
        let decode = async { decode_rows(rows, &stream, &mut events) };
        let (next, decoded) =
            tokio::join!(pages.next_rows(shared, &mut connection, operation), decode);
        decoded.map_err(|e| failing.map(e))?;
        rows = next?;
    }
    decode_rows(rows, &stream, &mut events).map_err(|e| failing.map(e))?;
    shared.end(operation, connection).await?;
    Ok(events)
}

/// The events [`query`] returns, page by page as the caller consumes them: each page on a
/// connection of its own, given back before the page is yielded, so that a stream dropped
/// part-way holds no connection and no transaction.
pub(crate) fn query_stream(shared: Arc<Shared>, pages: Pages) -> EventStream<'static> {
    stream::try_unfold((shared, pages), |(shared, pages)| async move {
        if pages.is_done() {
            return Ok(None);
        }
        if shared.admission.is_closed() {
            return Err(EventStorageError::Closed);
        }
        let operation = "stream events";
        // Each attempt reads from where the stream stands, so a repeated one repeats nothing.
        let read_page = || {
            let (shared, mut pages) = (&shared, pages.clone());
            async move {
                let mut connection = shared.connection_for(operation).await?;
                let page = pages.next(shared, &mut connection, operation).await?;
                shared.end(operation, connection).await?;
                Ok((page, pages))
            }
        };
        let (page, pages) = shared.settings.health.read(read_page).await?;
        Ok(Some((page, (shared, pages))))
    })
    .map_ok(|page| stream::iter(page.into_iter().map(Ok)))
    .try_flatten()
    .boxed()
}

/// The plan of a full page of the largest size [`query`] asks for, with these arguments,
/// as `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` reports it.
pub(crate) async fn explain_query(
    shared: &Shared,
    filter: &EventFilter,
    stream: &EventStreamId,
    after: Option<&EventReference>,
    limit: Limit,
    direction: Direction,
) -> StorageResult<serde_json::Value> {
    let pages = Pages::new(filter, stream, after, limit, direction).largest();
    let operation = "explain a query";
    let failing = shared.settings.failing(operation);
    let mut connection = shared.connection_for(operation).await?;
    let (mut statement, _) = pages.statement(shared, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ");
    let plan: serde_json::Value = statement
        .build_query_scalar()
        .persistent(false)
        .fetch_one(&mut *connection)
        .await
        .map_err(|e| failing.map(e))?;
    shared.end(operation, connection).await?;
    Ok(plan)
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
        "SELECT position, xid8send(tx) AS tx_bytes, id FROM {events} WHERE {VISIBILITY_BARRIER}",
        events = shared.prefix.name("events")
    ));
    push_stream_between(&mut query, stream, None, None);
    push_order(&mut query, stream, Direction::Backward);
    query.push(" LIMIT 1");
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
