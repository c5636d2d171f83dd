//! Bookmarks: a reader's position, held as a foreign key to the event it names.

use eventstore_api::{Bookmark, EventReference, EventStorageError, Fence, StorageResult, Tags};
use sqlx::PgConnection;
use sqlx::Row;

use super::rows::decode_reference;
use super::tags_column;
use crate::leases::fencing;
use crate::shared::Shared;

/// Places `reader`'s bookmark at the event `reference` names, if this storage holds it and
/// `fence` (when given) holds.
#[tracing::instrument(name = "bookmark", level = "debug", skip_all,
    fields(backend = "postgres", reader = reader, position = reference.position, fenced = fence.is_some()))]
pub(crate) async fn place(
    shared: &Shared,
    fence: Option<&Fence>,
    reader: &str,
    reference: &EventReference,
    tags: Tags,
) -> StorageResult<()> {
    let operation = format!("place the bookmark of {reader:?}");
    match fence {
        None => {
            let mut connection = shared.connection_for(&operation).await?;
            upsert(
                shared,
                &mut connection,
                reader,
                reference,
                &tags,
                &operation,
            )
            .await?;
            shared.end(&operation, connection).await
        }
        Some(fence) => {
            let mut transaction = shared.begin(&operation).await?;
            let outcome = async {
                fencing::hold(
                    shared,
                    &mut transaction,
                    fence,
                    &operation,
                    &shared.settings.lock_timeout_setting(),
                )
                .await?;
                upsert(
                    shared,
                    &mut transaction,
                    reader,
                    reference,
                    &tags,
                    &operation,
                )
                .await
            }
            .await;
            shared.finish(&operation, transaction, outcome).await
        }
    }
}

/// One statement: the insert selects the event by id, so an unknown id inserts nothing and
/// returns nothing, and the earlier bookmark stays. `now()` is when the statement's
/// transaction began, so of two racing replacements the later one may carry the earlier
/// time: the update time keeps the later of the two, never moving back.
async fn upsert(
    shared: &Shared,
    connection: &mut PgConnection,
    reader: &str,
    reference: &EventReference,
    tags: &Tags,
    operation: &str,
) -> StorageResult<()> {
    let placed: Option<String> = sqlx::query_scalar(&format!(
        "INSERT INTO {bookmarks} AS b (reader, event_id, tags, updated_at) \
         SELECT $1, e.id, $3, now() FROM {events} AS e WHERE e.id = $2 \
         ON CONFLICT (reader) DO UPDATE \
             SET event_id = excluded.event_id, tags = excluded.tags, \
                 updated_at = greatest(b.updated_at, excluded.updated_at) \
         RETURNING b.reader",
        bookmarks = shared.prefix.name("bookmarks"),
        events = shared.prefix.name("events"),
    ))
    .bind(reader)
    .bind(reference.id.0)
    .bind(tags_column::to_texts(tags))
    .persistent(shared.settings.prepared_statements)
    .fetch_optional(&mut *connection)
    .await
    .map_err(|e| shared.settings.failing(operation).map(e))?;
    match placed {
        Some(_) => Ok(()),
        None => Err(EventStorageError::unknown_event(reference.id)),
    }
}

/// Where `reader`'s bookmark stands, in this storage's coordinates.
#[tracing::instrument(
    name = "get_bookmark",
    level = "debug",
    skip_all,
    fields(backend = "postgres", reader = reader)
)]
pub(crate) async fn get(shared: &Shared, reader: &str) -> StorageResult<Option<EventReference>> {
    let operation = "read a bookmark";
    let failing = shared.settings.failing(operation);
    let mut connection = shared.connection_for(operation).await?;
    let row = sqlx::query(&format!(
        "SELECT e.id, e.position, xid8send(e.tx) AS tx_bytes \
         FROM {bookmarks} AS b JOIN {events} AS e ON e.id = b.event_id WHERE b.reader = $1",
        bookmarks = shared.prefix.name("bookmarks"),
        events = shared.prefix.name("events"),
    ))
    .bind(reader)
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

/// Removes `reader`'s bookmark, if any.
#[tracing::instrument(
    name = "remove_bookmark",
    level = "debug",
    skip_all,
    fields(backend = "postgres", reader = reader)
)]
pub(crate) async fn remove(shared: &Shared, reader: &str) -> StorageResult<()> {
    let operation = "remove a bookmark";
    let mut connection = shared.connection_for(operation).await?;
    sqlx::query(&format!(
        "DELETE FROM {bookmarks} WHERE reader = $1",
        bookmarks = shared.prefix.name("bookmarks")
    ))
    .bind(reader)
    .persistent(shared.settings.prepared_statements)
    .execute(&mut *connection)
    .await
    .map_err(|e| shared.settings.failing(operation).map(e))?;
    shared.end(operation, connection).await
}

/// Every bookmark, by reader in byte order.
#[tracing::instrument(
    name = "get_bookmarks",
    level = "debug",
    skip_all,
    fields(backend = "postgres")
)]
pub(crate) async fn all(shared: &Shared) -> StorageResult<Vec<Bookmark>> {
    let operation = "list bookmarks";
    let failing = shared.settings.failing(operation);
    let mut connection = shared.connection_for(operation).await?;
    let rows = sqlx::query(&format!(
        "SELECT b.reader, b.tags, b.updated_at, e.id, e.position, xid8send(e.tx) AS tx_bytes \
         FROM {bookmarks} AS b JOIN {events} AS e ON e.id = b.event_id \
         ORDER BY b.reader COLLATE \"C\"",
        bookmarks = shared.prefix.name("bookmarks"),
        events = shared.prefix.name("events"),
    ))
    .persistent(shared.settings.prepared_statements)
    .fetch_all(&mut *connection)
    .await
    .map_err(|e| failing.map(e))?;
    shared.end(operation, connection).await?;
    rows.iter()
        .map(|row| {
            let tags: Vec<String> = row.try_get("tags")?;
            Ok(Bookmark {
                reader: row.try_get("reader")?,
                reference: decode_reference(row)?,
                tags: tags_column::from_texts(&tags)?,
                updated_at: row.try_get("updated_at")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(|e| failing.map(e))
}
