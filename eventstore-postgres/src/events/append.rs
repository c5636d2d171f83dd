//! Appends: all or nothing, checked and written under the stream's lock.
//!
//! An append that checks (a condition, idempotency keys, a fence) holds the lock alone; appends
//! that only write share it, so that writers of one stream do not queue behind each other's
//! commits.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use eventstore_api::idempotency::{self, Idempotency};
use eventstore_api::{
    AppendCondition, AppendCriteria, Direction, EventId, EventStorageError, EventStreamId,
    EventToStore, Fence, StorageResult, StoredEvent,
};
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{PgConnection, Postgres, QueryBuilder, Row};
use uuid::Uuid;

use super::filter_sql::{
    push_filter, push_order, push_stream_between, push_stream_plainly, VISIBILITY_BARRIER,
};
use super::rows::{concrete, decode_event, decode_reference, EVENT_COLUMNS};
use super::tags_column;
use super::visibility;
use super::walks::{self, Walk};
use crate::leases::fencing;
use crate::notifications::append_notification;
use crate::shared::Shared;

/// Appends `events` to `stream` if `criteria` (and `fence`, when given) hold, all or nothing,
/// and records how long it took.
#[tracing::instrument(name = "append", level = "debug", skip_all,
    fields(backend = "postgres", stream = %stream, events = events.len(), fenced = fence.is_some()))]
pub(crate) async fn append(
    shared: &Shared,
    fence: Option<&Fence>,
    criteria: AppendCriteria,
    stream: &EventStreamId,
    events: Vec<EventToStore>,
) -> StorageResult<Vec<StoredEvent>> {
    let started = std::time::Instant::now();
    let appended = append_unmeasured(shared, fence, criteria, stream, events).await;
    metrics::histogram!(eventstore_api::telemetry::APPEND_SECONDS, "backend" => "postgres")
        .record(started.elapsed().as_secs_f64());
    appended
}

async fn append_unmeasured(
    shared: &Shared,
    fence: Option<&Fence>,
    criteria: AppendCriteria,
    stream: &EventStreamId,
    events: Vec<EventToStore>,
) -> StorageResult<Vec<StoredEvent>> {
    let operation = format!("append to stream {stream}");
    let under_way = shared.own_appends.start();
    let reads_first = fence.is_some()
        || criteria.condition.is_some()
        || events.iter().any(|e| e.idempotency_key.is_some());
    let appended = if reads_first {
        let mut transaction = shared.begin(&operation).await?;
        let outcome = append_in(
            shared,
            &mut transaction,
            fence,
            &criteria,
            stream,
            events,
            &operation,
        )
        .await;
        let (outcome, hidden_conflict) = match outcome {
            Ok(appended) => (Ok(appended), None),
            Err(refusal) => (Err(refusal.error), refusal.hidden_conflict),
        };
        match shared.finish(&operation, transaction, outcome).await {
            Ok(appended) => appended,
            Err(error) => {
                drop(under_way);
                // The caller is told to read again and decide again: that read must see what
                // the append conflicted with, or it decides on the same facts and conflicts
                // again, for as long as an older transaction anywhere runs.
                if let Some(tx) = hidden_conflict {
                    visibility::wait_until_visible(shared, tx, None, CONFLICTING_EVENT).await;
                }
                return Err(error);
            }
        }
    } else if events.is_empty() {
        Appended::nothing()
    } else {
        // Nothing to check: one statement in autocommit, which takes the stream lock itself,
        // shared.
        let mut connection = shared.connection_for(&operation).await?;
        let appended = insert(shared, &mut connection, stream, events, &operation).await?;
        shared.end(&operation, connection).await?;
        appended
    };
    // Committed or rolled back by now: no longer running, whatever the caller sees next.
    match appended.tx {
        Some(tx) => under_way.ended(tx),
        None => drop(under_way),
    }
    let last_tx = appended.events.iter().map(|event| event.reference.tx).max();
    if let Some(last_tx) = last_tx {
        let older = appended.older.as_deref();
        visibility::wait_until_visible(shared, last_tx, older, "an append's events").await;
    }
    Ok(appended.events)
}

/// What [`visibility::wait_until_visible`] names when a conflict stays hidden.
const CONFLICTING_EVENT: &str = "the event a conditional append conflicts with";

/// Why an append that checks before it writes stored nothing.
struct Refusal {
    error: EventStorageError,
    /// The transaction of the event a condition conflicts with, when new reads could not see
    /// that event yet (a transaction older than it was still running).
    hidden_conflict: Option<u64>,
}

impl From<EventStorageError> for Refusal {
    fn from(error: EventStorageError) -> Self {
        Refusal {
            error,
            hidden_conflict: None,
        }
    }
}

/// What an append stored.
struct Appended {
    /// The stored events, in order.
    events: Vec<StoredEvent>,
    /// The append's own transaction, when it wrote.
    tx: Option<u64>,
    /// The transactions older than the append's own that may still have been running when
    /// it wrote, when known: the visibility barrier passes the events once these end (at
    /// once when there are none).
    older: Option<Vec<u64>>,
}

impl Appended {
    /// An append that stored nothing (an empty batch).
    fn nothing() -> Self {
        Appended {
            events: Vec::new(),
            tx: None,
            older: Some(Vec::new()),
        }
    }
}

async fn append_in(
    shared: &Shared,
    connection: &mut PgConnection,
    fence: Option<&Fence>,
    criteria: &AppendCriteria,
    stream: &EventStreamId,
    events: Vec<EventToStore>,
    operation: &str,
) -> Result<Appended, Refusal> {
    let failing = shared.settings.failing(operation);
    if let Some(fence) = fence {
        let lock_timeout = shared.settings.lock_timeout_setting();
        fencing::hold(shared, connection, fence, operation, &lock_timeout).await?;
    }
    let (context, purpose) = concrete(stream);
    // Every append to the stream takes this lock before it looks, so a check and the write
    // after it see every append that went before. The transaction has no xid while it waits,
    // so a waiting append holds no reader back. A condition's check is planned for its
    // values (see `first_conflict`); `$3` NULL leaves the plan cache's mode as it is.
    sqlx::query(&format!(
        "SELECT {lock} FROM (SELECT set_config('lock_timeout', $2, true), \
                set_config('plan_cache_mode', \
                           coalesce($3, current_setting('plan_cache_mode')), true)) AS setting",
        lock = stream_lock(shared, StreamLock::Exclusive, "$1")
    ))
    .bind(stream_key(context, purpose))
    .bind(shared.settings.lock_timeout_setting())
    .bind(checks_matches(criteria).then_some("force_custom_plan"))
    .persistent(shared.settings.prepared_statements)
    .execute(&mut *connection)
    .await
    .map_err(|e| failing.map(e))?;

    if let Idempotency::Retry(stored) =
        judge_keys(shared, connection, stream, &events, operation).await?
    {
        // Stored by earlier transactions, which readers may not see yet: wait as for a write.
        return Ok(Appended {
            events: stored,
            tx: None,
            older: None,
        });
    }
    check_criteria(shared, connection, criteria, stream, operation).await?;
    if events.is_empty() {
        return Ok(Appended::nothing());
    }
    Ok(insert(shared, connection, stream, events, operation).await?)
}

/// Judges the batch's idempotency keys against the events `stream` stores under them.
async fn judge_keys(
    shared: &Shared,
    connection: &mut PgConnection,
    stream: &EventStreamId,
    events: &[EventToStore],
    operation: &str,
) -> StorageResult<Idempotency> {
    let keys: Vec<&str> = idempotency::keys(events).collect();
    if keys.is_empty() {
        return Ok(Idempotency::New);
    }
    let failing = shared.settings.failing(operation);
    let (context, purpose) = concrete(stream);
    let rows = sqlx::query(&format!(
        "SELECT {EVENT_COLUMNS} FROM {events} \
         WHERE stream_context = $1 AND stream_purpose = $2 AND idempotency_key = ANY($3)",
        events = shared.prefix.name("events")
    ))
    .bind(context)
    .bind(purpose)
    .bind(&keys)
    .persistent(shared.settings.prepared_statements)
    .fetch_all(&mut *connection)
    .await
    .map_err(|e| failing.map(e))?;
    let stored = rows
        .iter()
        .map(decode_event)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| failing.map(e))?;
    idempotency::judge(stream, events, &stored)
}

/// Fails with `OptimisticLock` naming the first event of the stream that matches the
/// condition's filter after its expected last event. Reads every committed event (no
/// barrier): the stream lock guarantees no earlier append of the stream is still running.
/// That event may lie above the barrier still, out of sight of new reads: the refusal then
/// carries its transaction.
async fn check_criteria(
    shared: &Shared,
    connection: &mut PgConnection,
    criteria: &AppendCriteria,
    stream: &EventStreamId,
    operation: &str,
) -> Result<(), Refusal> {
    let Some(condition) = &criteria.condition else {
        return Ok(());
    };
    if condition.filter.items.is_empty() {
        return Ok(());
    }
    let mut query = first_conflict(shared, condition, stream);
    let conflicting = query
        .build()
        .persistent(shared.settings.prepared_statements)
        .fetch_optional(&mut *connection)
        .await
        .map_err(|e| shared.settings.failing(operation).map(e))?;
    let Some(row) = conflicting else {
        return Ok(());
    };
    let failing = |e| shared.settings.failing(operation).map(e);
    let conflicting = decode_reference(&row).map_err(failing)?;
    let readable: bool = row.try_get("readable").map_err(failing)?;
    Err(Refusal {
        error: EventStorageError::optimistic_lock(
            stream.to_string(),
            condition.expected_last,
            conflicting,
        ),
        hidden_conflict: (!readable).then_some(conflicting.tx),
    })
}

/// Whether `criteria`'s check looks for matches of a filter of types or tags (see
/// [`first_conflict`]), which its transaction then plans for their values.
fn checks_matches(criteria: &AppendCriteria) -> bool {
    criteria.condition.as_ref().is_some_and(|condition| {
        !condition.filter.items.is_empty() && !condition.filter.is_match_all()
    })
}

/// The statement that finds the first event of `stream` that `condition` conflicts with.
///
/// Any event after the expected one conflicts with a filter that matches all: the first is
/// the next entry of the stream's index. A filter of types or tags is another matter. Asked
/// for the first match, the planner walks the stream in order and counts on a match soon,
/// because it guesses that a tag it has no statistics for is carried by one event in 200;
/// but a tag nobody carries yet (every new entity's) or an entity untouched since long before
/// the expected event made that walk read the whole stream, or all of it since that event.
/// A filter whose every item names tags walks the tag index instead (see [`walks`]): the
/// first match after the expected event is the first entry of a tag's walk within the
/// stream, and a tag nobody carries has none. For types, and for more items than one
/// statement merges (whose candidates the tag index then gathers), the matches are found first,
/// by the plan that reads fewest rows for all of them (the type's index, the stream's index
/// from the expected event when few came after), and only then the first of them is
/// picked, with the conditions written plainly so that the planner can weigh them.
///
/// That weighing needs the values: a statement kept on the connection may, after five runs,
/// be planned once for every value, after the plans its first runs got. Six checks of
/// entities last seen long ago (the tags index) and then two of a tag every event carries,
/// known up to the head, fetched 20,000 rows on that plan, and 2 planned for their values.
/// So the transaction of a check has `plan_cache_mode` `force_custom_plan` (set with the
/// stream's lock, no round trip of its own).
fn first_conflict<'a>(
    shared: &Shared,
    condition: &'a AppendCondition,
    stream: &'a EventStreamId,
) -> QueryBuilder<'a, Postgres> {
    let events = shared.prefix.name("events");
    let expected_last = condition.expected_last.as_ref();
    // Whether new reads see the conflicting event: below the barrier of the check's snapshot.
    let columns =
        format!("position, xid8send(tx) AS tx_bytes, id, {VISIBILITY_BARRIER} AS readable");
    if condition.filter.is_match_all() {
        let mut query = QueryBuilder::new(format!("SELECT {columns} FROM {events} WHERE true"));
        push_stream_between(&mut query, stream, expected_last, None);
        push_filter(&mut query, &condition.filter);
        push_order(&mut query, stream, Direction::Forward);
        query.push(" LIMIT 1");
        return query;
    }
    let tagged = condition
        .filter
        .items
        .iter()
        .all(|item| !item.tags.is_empty());
    if tagged && walks::walks(&condition.filter) {
        let walk = Walk {
            stream,
            after: expected_last,
            before: None,
            below_barrier: false,
            direction: Direction::Forward,
            rows: 1,
        };
        let mut query = QueryBuilder::new(format!("SELECT {columns} FROM ("));
        walks::push_walks(&mut query, shared, &condition.filter, walk);
        query.push(") AS events");
        return query;
    }
    // `OFFSET 0` keeps the matches a query of their own, planned to return them all.
    let mut query = QueryBuilder::new(format!(
        "SELECT {columns} FROM (SELECT position, tx, id FROM {events} WHERE true"
    ));
    push_stream_plainly(&mut query, stream, expected_last);
    push_filter(&mut query, &condition.filter);
    walks::push_gathered_candidates(&mut query, shared, &condition.filter, stream);
    query.push(" OFFSET 0) AS matching ORDER BY tx, position LIMIT 1");
    query
}

/// How an append holds its stream's lock.
#[derive(Debug, Clone, Copy)]
enum StreamLock {
    /// An append that reads before it writes (a condition, idempotency keys, a fence): no
    /// other append of the stream runs while it checks and writes.
    Exclusive,
    /// An append that only writes: such appends run side by side, since none looks at what
    /// another wrote, and only wait for (and hold back) an append that checks.
    Shared,
}

/// The call that takes the lock of the stream whose [`stream_key`] is bound as `key`.
fn stream_lock(shared: &Shared, mode: StreamLock, key: &str) -> String {
    let function = match mode {
        StreamLock::Exclusive => "pg_advisory_xact_lock",
        StreamLock::Shared => "pg_advisory_xact_lock_shared",
    };
    format!(
        "{function}(hashtext('{events}'), hashtext({key}))",
        events = shared.prefix.name("events")
    )
}

/// The text whose hash names a stream's lock.
fn stream_key(context: &str, purpose: &str) -> String {
    format!("{context}\u{1f}{purpose}")
}

/// Inserts the batch in one statement that first takes the stream's lock, shared (granted at once
/// when the caller's transaction holds it exclusively already), so that an unconditional
/// append in autocommit waits for an append of the stream that checks before it writes, and
/// holds such an append back until it commits.
///
/// With append hints on, the same statement notifies the append's hint, once, naming the last
/// inserted event: `pg_notify` delivers it when the transaction commits, and never if it rolls
/// back. Every append inserts once, so a transaction notifies at most once per stream.
async fn insert(
    shared: &Shared,
    connection: &mut PgConnection,
    stream: &EventStreamId,
    events: Vec<EventToStore>,
    operation: &str,
) -> StorageResult<Appended> {
    let failing = shared.settings.failing(operation);
    let (context, purpose) = concrete(stream);
    let ids: Vec<Uuid> = events.iter().map(|_| EventId::new().0).collect();
    let statement = insert_sql(shared, events.len() == 1);
    let query = sqlx::query(&statement).bind(context).bind(purpose);
    let rows = bind_events(query, &ids, &events)
        .bind(stream_key(context, purpose))
        .bind(shared.settings.lock_timeout_setting())
        .persistent(shared.settings.prepared_statements)
        .fetch_all(&mut *connection)
        .await
        .map_err(|e| failing.map(e))?;

    let mut by_id = HashMap::with_capacity(rows.len());
    for row in &rows {
        by_id.insert(
            row.try_get::<Uuid, _>("id").map_err(|e| failing.map(e))?,
            row,
        );
    }
    let mut stored = Vec::with_capacity(events.len());
    for (event, id) in events.into_iter().zip(ids) {
        let row = by_id.get(&id).ok_or_else(|| {
            EventStorageError::backend(
                format!("PostgreSQL did not return event {id} it was asked to {operation}"),
                "missing row in INSERT … RETURNING",
            )
        })?;
        let timestamp: DateTime<Utc> = row.try_get("stored_at").map_err(|e| failing.map(e))?;
        stored.push(StoredEvent {
            stream: stream.clone(),
            event_type: event.event_type,
            reference: decode_reference(row).map_err(|e| failing.map(e))?,
            payload: event.payload,
            tags: event.tags,
            timestamp,
            idempotency_key: event.idempotency_key,
        });
    }
    stored.sort_by_key(|event| event.reference);
    let tx = stored.first().map(|event| event.reference.tx);
    let older = match (rows.first(), tx) {
        (Some(row), Some(tx)) => older_transactions(row, tx).map_err(|e| failing.map(e))?,
        _ => None,
    };
    Ok(Appended {
        events: stored,
        tx,
        older,
    })
}

/// Binds the columns of `events`, with `ids`, as the parameters of [`insert_sql`] from `$3`:
/// one event's as values (`$3`…`$7`), a batch's as arrays (`$3`…`$9`). Payloads go as text,
/// cast to `json` in the statement: bound as `jsonb` they would be parsed into `jsonb` first.
///
/// A batch's tags go as one array of all of them (`$6`) and each event's first and last
/// index in it (`$7`, `$8`): arrays of arrays must not be ragged, and tags sent as one `jsonb`
/// array per event cost the server a parse and a sub-query per event (batches of 100 took
/// 6–8% longer).
fn bind_events<'q>(
    query: Query<'q, Postgres, PgArguments>,
    ids: &[Uuid],
    events: &'q [EventToStore],
) -> Query<'q, Postgres, PgArguments> {
    if let ([id], [event]) = (ids, events) {
        return query
            .bind(*id)
            .bind(event.event_type.as_str())
            .bind(event.payload.to_string())
            .bind(tags_column::to_texts(&event.tags))
            .bind(event.idempotency_key.as_deref());
    }
    let mut tags = Vec::new();
    let (mut first_tags, mut last_tags) = (Vec::new(), Vec::new());
    for event in events {
        // PostgreSQL arrays count from 1; an event without tags is the empty slice [n + 1:n].
        first_tags.push(tag_index(tags.len() + 1));
        tags.extend(event.tags.iter().map(ToString::to_string));
        last_tags.push(tag_index(tags.len()));
    }
    query
        .bind(ids.to_vec())
        .bind(
            events
                .iter()
                .map(|e| e.event_type.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            events
                .iter()
                .map(|e| e.payload.to_string())
                .collect::<Vec<_>>(),
        )
        .bind(tags)
        .bind(first_tags)
        .bind(last_tags)
        .bind(
            events
                .iter()
                .map(|e| e.idempotency_key.as_deref())
                .collect::<Vec<_>>(),
        )
}

/// An index into a batch's array of tags, sent as `bigint`: PostgreSQL casts it to the
/// `integer` a subscript takes, and refuses the statement, writing nothing, should a batch
/// ever carry more tags than that counts.
fn tag_index(index: usize) -> i64 {
    i64::try_from(index).unwrap_or(i64::MAX)
}

/// The parameters of [`insert_sql`] that hold the stream's lock key and the lock timeout:
/// those after the events' columns.
fn lock_parameters(one: bool) -> (String, String) {
    let last_column = if one { 7 } else { 9 };
    (
        format!("${}", last_column + 1),
        format!("${}", last_column + 2),
    )
}

/// The most transaction ids an append judges locally as having started between its
/// snapshot and its own id; beyond it the server is asked.
const MOST_STARTED_BETWEEN: u64 = 256;

/// The transactions older than `tx` that may still have been running when the insert that
/// returned `row` wrote (see [`older_than`]).
fn older_transactions(
    row: &sqlx::postgres::PgRow,
    tx: u64,
) -> Result<Option<Vec<u64>>, sqlx::Error> {
    let id = |id: i64| {
        u64::try_from(id)
            .map_err(|_| sqlx::Error::Decode(format!("negative transaction id {id}").into()))
    };
    let xmax = id(row.try_get("snapshot_xmax")?)?;
    let running = row
        .try_get::<Vec<i64>, _>("snapshot_running")?
        .into_iter()
        .map(id)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(older_than(tx, xmax, &running))
}

/// The transactions older than `tx` that may still have been running when a snapshot whose
/// first id not yet handed out was `xmax`, and that saw `running`, was taken before `tx` was
/// handed out: those it saw running, and every id handed out between it and `tx`. `None`
/// when more than [`MOST_STARTED_BETWEEN`] were handed out in between.
fn older_than(tx: u64, xmax: u64, running: &[u64]) -> Option<Vec<u64>> {
    if tx.saturating_sub(xmax) > MOST_STARTED_BETWEEN {
        return None;
    }
    let mut older: Vec<u64> = running
        .iter()
        .copied()
        .filter(|&id| id < tx)
        .chain(xmax..tx)
        .collect();
    older.sort_unstable();
    older.dedup();
    Some(older)
}

/// The insert statement of [`insert`]: `$1`, `$2` the stream, then the events' columns (see
/// [`bind_events`]; `one`: those of a single event), then the stream's lock key and the lock
/// timeout (see [`lock_parameters`]), set by the statement unless every connection has it as
/// its session default.
///
/// A single event, the most frequent append, is inserted from its values: unnesting arrays and
/// ordering them cost the server a tenth of the append.
fn insert_sql(shared: &Shared, one: bool) -> String {
    let events = shared.prefix.name("events");
    let (key, timeout) = lock_parameters(one);
    let lock = stream_lock(shared, StreamLock::Shared, &key);
    let locked = if shared.settings.session_defaults {
        format!("(SELECT {lock}) AS locked")
    } else {
        format!(
            "(SELECT {lock} FROM (SELECT set_config('lock_timeout', {timeout}, true)) AS setting) \
             AS locked"
        )
    };
    let values = if one {
        format!("SELECT $3, pg_current_xact_id(), $1, $2, $4, $5::json, $6, $7 FROM {locked}")
    } else {
        // Each event's tags are a slice of one array of all the batch's tags.
        format!(
            "SELECT e.id, pg_current_xact_id(), $1, $2, e.event_type, e.payload::json, \
                    ($6::text[])[e.first_tag:e.last_tag], e.idempotency_key \
             FROM {locked}, \
                  unnest($3::uuid[], $4::text[], $5::text[], $7::int8[], $8::int8[], $9::text[]) \
                  WITH ORDINALITY \
                  AS e(id, event_type, payload, first_tag, last_tag, idempotency_key, ordinality) \
             ORDER BY e.ordinality"
        )
    };
    let columns =
        "(id, tx, stream_context, stream_purpose, event_type, payload, tags, idempotency_key)";
    // The statement's snapshot: the transactions running when it was taken (listed once, an
    // init plan), and the first id not yet handed out then.
    let snapshot = "pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS snapshot_xmax, \
                    ARRAY(SELECT running::text::bigint \
                          FROM pg_snapshot_xip(pg_current_snapshot()) AS running) \
                        AS snapshot_running";
    if !shared.settings.append_hints {
        return format!(
            "INSERT INTO {events} {columns} {values} \
             RETURNING id, position, xid8send(tx) AS tx_bytes, stored_at, {snapshot}"
        );
    }
    // The notifying CTE is materialized, so it runs once, and the one-row filter that reads
    // it is evaluated once (an init plan), so that it runs at all.
    format!(
        "WITH inserted AS ( \
             INSERT INTO {events} {columns} {values} \
             RETURNING id, position, tx, stored_at, {snapshot}), \
         notified AS MATERIALIZED ( \
             SELECT pg_notify('{channel}', {payload}) \
             FROM (SELECT id, position, tx FROM inserted ORDER BY position DESC LIMIT 1) AS last) \
         SELECT id, position, xid8send(tx) AS tx_bytes, stored_at, snapshot_xmax, \
                snapshot_running \
         FROM inserted WHERE (SELECT count(*) FROM notified) = 1",
        channel = shared.prefix.name(append_notification::CHANNEL_SUFFIX),
        payload = append_notification::payload_sql("$1", "$2", "last"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_insert_that_saw_nothing_older_running_has_nothing_to_wait_for() {
        assert_eq!(older_than(100, 100, &[]), Some(vec![]));
    }

    #[test]
    fn what_the_snapshot_saw_running_and_every_id_handed_out_after_it_are_older() {
        assert_eq!(
            older_than(100, 97, &[90, 95]),
            Some(vec![90, 95, 97, 98, 99])
        );
    }

    #[test]
    fn the_own_transaction_and_later_ones_are_not_older() {
        assert_eq!(older_than(100, 101, &[90, 100]), Some(vec![90]));
    }

    #[test]
    fn too_many_ids_handed_out_in_between_are_left_to_the_server() {
        let xmax = 1_000 - MOST_STARTED_BETWEEN - 1;
        assert_eq!(older_than(1_000, xmax, &[]), None);
        assert_eq!(older_than(1_000, xmax + 1, &[]).map(|o| o.len()), Some(256));
    }
}
