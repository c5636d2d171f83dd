//! Reads: only events below the oldest running transaction.

use std::panic;
use std::sync::Arc;

use eventstore_api::event_stream::{read_ahead, Events};
use eventstore_api::{
    Direction, EventFilter, EventId, EventReference, EventStorageError, EventStreamId, Limit,
    StorageResult, StoredEvent,
};
use futures_util::stream;
use sqlx::{Postgres, QueryBuilder};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::filter_sql::{push_order, push_stream_between, VISIBILITY_BARRIER};
use super::pages::decode_rows;
pub(crate) use super::pages::Pages;
use super::rows::{decode_event, decode_reference, ReadEvent, EVENT_COLUMNS};
use super::tags_column::RepeatedTags;
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
    let mut tags = RepeatedTags::default();
    let mut rows = pages.next_rows(shared, &mut connection, operation).await?;
    while !pages.is_done() {
        // The decoding runs while the next statement waits for its rows.
        let (next, decoded) = tokio::join!(
            pages.next_rows(shared, &mut connection, operation),
            decode_rows(rows, &stream, &mut tags, &mut events)
        );
        decoded.map_err(|e| failing.map(e))?;
        rows = next?;
    }
    decode_rows(rows, &stream, &mut tags, &mut events)
        .await
        .map_err(|e| failing.map(e))?;
    shared.end(operation, connection).await?;
    Ok(events)
}

/// The events [`query`] returns, page by page, each page read while the caller takes the
/// one before (see [`read_ahead`]): each page on a connection of its own, given back before
/// the page is handed out, so that a stream dropped part-way holds no connection and no
/// transaction, and at most two pages are held.
///
/// Each page is read on a task of its own, in the caller's span, so that it goes on while
/// the caller works on the page before without polling the stream (a projection committing
/// its batch), on another worker thread where the runtime has one; dropping the stream
/// aborts it. The stream is polled on the Tokio runtime, as every call of this storage is.
pub(crate) fn query_stream<E: ReadEvent>(shared: Arc<Shared>, pages: Pages) -> Events<'static, E> {
    if pages.is_done() {
        return Box::pin(stream::empty());
    }
    let spawn_read = move |pages: Pages| {
        let page = read_page::<E>(Arc::clone(&shared), pages).in_current_span();
        async move {
            // Spawned when first polled: when the caller starts on the page before.
            let mut reading = JoinSet::new();
            reading.spawn(page);
            match reading.join_next().await {
                Some(Ok(page)) => page,
                Some(Err(failed)) if failed.is_panic() => panic::resume_unwind(failed.into_panic()),
                // Only a runtime shutting down cancels the read: no storage call can
                // succeed any more, which is what `Closed` tells the caller.
                Some(Err(_)) | None => Err(EventStorageError::Closed),
            }
        }
    };
    read_ahead(pages, spawn_read)
}

/// The page of a [`query_stream`] that `pages` points at, and where the next one starts
/// unless it was the last.
async fn read_page<E: ReadEvent>(
    shared: Arc<Shared>,
    pages: Pages,
) -> StorageResult<(Vec<E>, Option<Pages>)> {
    if shared.admission.is_closed() {
        return Err(EventStorageError::Closed);
    }
    let operation = "stream events";
    // Each attempt reads from where the stream stands, so a repeated one repeats nothing.
    let attempt = || {
        let (shared, mut pages) = (&shared, pages.clone());
        async move {
            let mut connection = shared.connection_for(operation).await?;
            let page = pages.next(shared, &mut connection, operation).await?;
            shared.end(operation, connection).await?;
            Ok((page, (!pages.is_done()).then_some(pages)))
        }
    };
    shared.settings.health.read(attempt).await
}

/// The plan of a full page of the largest size [`query`] asks for, with these arguments,
/// as `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` reports it: the page's statement planned as
/// the page function plans it, with the function's settings, in a transaction that is
/// rolled back.
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
    let page = pages.statement(shared);
    let plan = async {
        let mut transaction = sqlx::Connection::begin(&mut *connection).await?;
        // A gathered page is planned as the server sees fit; the others with the page
        // function's settings.
        sqlx::query(
            "SELECT pg_catalog.set_config(split_part(setting, '=', 1), \
                                          substr(setting, strpos(setting, '=') + 1), true) \
             FROM pg_catalog.pg_proc, unnest(proconfig) AS setting \
             WHERE oid = pg_catalog.to_regprocedure($1) AND NOT $2",
        )
        .bind(format!("{}(text, text[])", shared.prefix.name("read_page")))
        .bind(page.gathered)
        .persistent(false)
        .execute(&mut *transaction)
        .await?;
        let plan: serde_json::Value = sqlx::query_scalar(&format!(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}",
            page.sql.text
        ))
        .bind(page.sql.arguments)
        .persistent(false)
        .fetch_one(&mut *transaction)
        .await?;
        transaction.rollback().await?;
        Ok::<_, sqlx::Error>(plan)
    }
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
