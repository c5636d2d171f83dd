//! Reads are answered from the indexes: a tag query from the tag index, the head of
//! a stream and a page after a reference from a few entries of an ordered index, never by
//! scanning the table; and every read shape walks an index in the order it returns, with
//! neither a sort nor a spill to disk. Judged by the server's own statistics for the events
//! table and by the plans PostgreSQL reports.

use std::time::Duration;

use eventstore::projector::DEFAULT_BATCH_SIZE;
use eventstore::{
    AppendCriteria, Direction, EventFilter, EventReference, EventStorage, EventStorageError,
    EventStreamId, EventToStore, Limit, Tags,
};
use eventstore_postgres::PostgresEventStorage;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::common;

const EVENTS: usize = 5_000;
/// Events per order: a tag names one order, as a DCB tag names one entity.
const PER_ORDER: usize = 10;

/// Scan counters of the prefix's events table and its tag index.
#[derive(Debug, sqlx::FromRow)]
struct Scans {
    seq_tup_read: i64,
    idx_scan: i64,
    idx_tup_fetch: i64,
    /// Scans of the tag index table, `event_tags`.
    tags_idx_scan: i64,
}

async fn scans(admin: &PgPool, prefix: &str) -> Scans {
    sqlx::query_as(
        "SELECT t.seq_tup_read, coalesce(t.idx_scan, 0) AS idx_scan, \
                coalesce(t.idx_tup_fetch, 0) AS idx_tup_fetch, \
                coalesce(tags.idx_scan, 0) AS tags_idx_scan \
         FROM pg_stat_user_tables AS t, pg_stat_user_tables AS tags \
         WHERE t.relname = $1 AND tags.relname = $2",
    )
    .bind(format!("{prefix}events"))
    .bind(format!("{prefix}event_tags"))
    .fetch_one(admin)
    .await
    .expect("reading the table statistics")
}

/// Inserts `chunks` transactions of `per_chunk` events each into the prefix's events table,
/// one for each `g` counting on from `first`: `columns` gives each event's stream context,
/// purpose, type, payload and tags in terms of `g`.
async fn insert_events(
    admin: &PgPool,
    prefix: &str,
    columns: &str,
    first: i32,
    chunks: i32,
    per_chunk: i32,
) {
    for chunk in 0..chunks {
        sqlx::query(&format!(
            "INSERT INTO {prefix}events \
                 (id, stream_context, stream_purpose, event_type, payload, tags) \
             SELECT gen_random_uuid(), {columns} \
             FROM generate_series($1::int, $1::int + $2::int - 1) AS g"
        ))
        .bind(first + chunk * per_chunk)
        .bind(per_chunk)
        .execute(admin)
        .await
        .unwrap();
    }
}

/// Gathers the statistics of the prefix's events table, as autovacuum would have by then.
async fn analyze(admin: &PgPool, prefix: &str) {
    sqlx::query(&format!("ANALYZE {prefix}events, {prefix}event_tags"))
        .execute(admin)
        .await
        .unwrap();
}

#[tokio::test]
async fn tag_queries_use_the_tags_index_and_head_and_pages_read_no_whole_table() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let stream = EventStreamId::for_context("sensors");
    let writer = common::storage_on(&prefix).await;
    for batch in 0..EVENTS / 100 {
        let events = (0..100)
            .map(|n| {
                let n = batch * 100 + n;
                let order = format!("o-{}", n / PER_ORDER);
                EventToStore::new("Measured", json!({ "n": n }))
                    .with_tags(Tags::from_pairs([("order", order)]))
            })
            .collect();
        writer
            .append(AppendCriteria::none(), &stream, events)
            .await
            .unwrap();
    }
    writer.close().await.unwrap();
    analyze(&admin, &prefix).await;

    let reader = common::storage_on(&prefix).await;
    let tagged = reader
        .query(
            &EventFilter::for_tags(Tags::from_pairs([("order", "o-250")])),
            &stream,
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .unwrap();
    assert_eq!(tagged.len(), PER_ORDER);
    let head = reader.head(&stream).await.unwrap().expect("a head");
    let page = reader
        .query(
            &EventFilter::match_all(),
            &stream,
            Some(&tagged[tagged.len() / 2].reference),
            Limit::to(100),
            Direction::Forward,
        )
        .await
        .unwrap();
    assert_eq!(page.len(), 100);
    assert!(page.iter().all(|e| e.reference <= head));
    // Closing the storage ends its server connections, which publishes their statistics.
    reader.close().await.unwrap();

    let scans = common::eventually(
        "the reads to show in the server's statistics",
        Duration::from_secs(30),
        || async {
            let scans = scans(&admin, &prefix).await;
            // Three reads, each by an index or by a scan of the whole table.
            (scans.idx_scan >= 3 || scans.seq_tup_read >= EVENTS as i64).then_some(scans)
        },
    )
    .await;
    assert!(
        scans.tags_idx_scan >= 1,
        "the tag query did not use the tags index: {scans:?}"
    );
    // Building the indexes scanned the table while it was empty: no rows read.
    assert_eq!(scans.seq_tup_read, 0, "a read scanned the table: {scans:?}");
    // The tag query fetches its 10 rows, the head one, the page 100: nowhere near 5,000.
    assert!(
        scans.idx_tup_fetch < 1_000,
        "the reads fetched as many rows as a table scan: {scans:?}"
    );
}

/// Events in the stream the plans read: as many as a replay of a busy stream.
const STREAM_EVENTS: usize = 20_000;

/// Every node of `plan` whose type is `Sort` or `Incremental Sort`, and every count of
/// temporary blocks read or written (a spill to disk), as text for a failure message.
fn sorts_and_spills(plan: &Value, found: &mut Vec<String>) {
    match plan {
        Value::Object(node) => {
            if let Some(Value::String(kind)) = node.get("Node Type") {
                if kind.contains("Sort") {
                    found.push(format!("a {kind} node"));
                }
            }
            for key in ["Temp Read Blocks", "Temp Written Blocks"] {
                if let Some(blocks) = node.get(key).and_then(Value::as_u64) {
                    if blocks > 0 {
                        found.push(format!("{key}: {blocks}"));
                    }
                }
            }
            node.values().for_each(|v| sorts_and_spills(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| sorts_and_spills(v, found)),
        _ => {}
    }
}

/// The most rows any node of `plan` looked at: those it returned and those its filter
/// removed.
fn most_rows_looked_at(plan: &Value) -> u64 {
    match plan {
        Value::Object(node) => {
            let own = ["Actual Rows", "Rows Removed by Filter"]
                .iter()
                .filter_map(|key| node.get(*key).and_then(Value::as_u64))
                .sum::<u64>();
            node.values().map(most_rows_looked_at).fold(own, u64::max)
        }
        Value::Array(items) => items.iter().map(most_rows_looked_at).max().unwrap_or(0),
        _ => 0,
    }
}

/// Rows the top node of `plan` returned.
fn rows_returned(plan: &Value) -> u64 {
    plan[0]["Plan"]["Actual Rows"]
        .as_u64()
        .expect("actual rows in the plan")
}

#[tokio::test]
async fn every_read_shape_walks_an_index_in_order_without_sorting_or_spilling() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    // Four streams' events interleaved over 40 transactions, as a shared log holds them:
    // sensors/default (half of them, two types, every one tagged run:r1 and with its order),
    // sensors/eu and billing/default (a quarter each).
    insert_events(
        &admin,
        &prefix,
        "CASE WHEN g % 4 = 3 THEN 'billing' ELSE 'sensors' END, \
         CASE WHEN g % 4 = 2 THEN 'eu' ELSE 'default' END, \
         CASE WHEN g % 4 = 3 THEN 'Billed' WHEN g % 8 < 2 THEN 'Measured' \
              ELSE 'Calibrated' END, \
         json_build_object('n', g), \
         CASE WHEN g % 4 < 2 THEN ARRAY['run:r1', 'order:o-' || (g / 40)] \
              ELSE ARRAY['order:x-' || (g / 40)] END",
        0,
        40,
        1_000,
    )
    .await;
    analyze(&admin, &prefix).await;

    let sensors = EventStreamId::for_context("sensors");
    let middle = storage
        .query(
            &EventFilter::match_all(),
            &sensors,
            None,
            Limit::to(STREAM_EVENTS as u64 / 2),
            Direction::Forward,
        )
        .await
        .unwrap();
    assert_eq!(middle.len(), STREAM_EVENTS / 2);
    let middle = middle.last().map(|event| event.reference);
    let run = Tags::from_pairs([("run", "r1")]);
    let shapes = [
        (
            "one stream",
            EventFilter::match_all(),
            sensors.clone(),
            None,
            Direction::Forward,
        ),
        (
            "one stream backward",
            EventFilter::match_all(),
            sensors.clone(),
            None,
            Direction::Backward,
        ),
        (
            "one stream after a reference",
            EventFilter::match_all(),
            sensors.clone(),
            middle,
            Direction::Forward,
        ),
        (
            "a context with any purpose",
            EventFilter::match_all(),
            sensors.clone().any_purpose(),
            None,
            Direction::Forward,
        ),
        (
            "every stream",
            EventFilter::match_all(),
            EventStreamId::any(),
            None,
            Direction::Forward,
        ),
        (
            "a tag in a stream",
            EventFilter::for_tags(run.clone()),
            sensors.clone(),
            None,
            Direction::Forward,
        ),
        (
            "a tag in every stream",
            EventFilter::for_tags(run.clone()),
            EventStreamId::any(),
            None,
            Direction::Forward,
        ),
        (
            "a type in a stream",
            EventFilter::for_types(["Calibrated"]),
            sensors.clone(),
            None,
            Direction::Forward,
        ),
        (
            "a type in every stream",
            EventFilter::for_types(["Billed"]),
            EventStreamId::any(),
            None,
            Direction::Forward,
        ),
        (
            "a type and a tag",
            EventFilter::for_events(["Calibrated"], run.clone()),
            sensors.clone(),
            None,
            Direction::Forward,
        ),
        (
            "two types in every stream",
            EventFilter::for_types(["Measured", "Billed"]),
            EventStreamId::any(),
            None,
            Direction::Forward,
        ),
        (
            "either of two items",
            EventFilter::for_events(["Calibrated"], run.clone())
                .or(EventFilter::for_types(["Measured"])),
            sensors.clone(),
            None,
            Direction::Forward,
        ),
    ];
    let mut failures = Vec::new();
    for (shape, filter, stream, after, direction) in &shapes {
        let plan = storage
            .explain_query(filter, stream, after.as_ref(), Limit::none(), *direction)
            .await
            .unwrap();
        assert!(
            rows_returned(&plan) > 0,
            "{shape}: the read returned nothing: {plan}"
        );
        let mut found = Vec::new();
        sorts_and_spills(&plan, &mut found);
        if !found.is_empty() {
            failures.push(format!("{shape}: {found:?} in {plan}"));
        }
        // A projector's batch.
        let batch = DEFAULT_BATCH_SIZE;
        let plan = storage
            .explain_query(filter, stream, after.as_ref(), Limit::to(batch), *direction)
            .await
            .unwrap();
        assert_eq!(
            rows_returned(&plan),
            batch,
            "{shape}: a batch of {batch}: {plan}"
        );
        let mut found = Vec::new();
        sorts_and_spills(&plan, &mut found);
        if !found.is_empty() {
            failures.push(format!("{shape}, a batch of {batch}: {found:?} in {plan}"));
        }
    }
    // A few events of a type no event has yet: the type's index says so at once, where a
    // walk of the stream, counting on a match soon, would look at all of its 20,000.
    let plan = storage
        .explain_query(
            &EventFilter::for_types(["Unseen"]),
            &sensors,
            None,
            Limit::to(5),
            Direction::Forward,
        )
        .await
        .unwrap();
    let looked_at = most_rows_looked_at(&plan);
    if looked_at > 100 {
        failures.push(format!(
            "five of a type no event has: a node looked at {looked_at} rows in {plan}"
        ));
    }
    // A tag few events carry is walked from the tag index in order: nothing to sort.
    let one_order = EventFilter::for_tags(Tags::from_pairs([("order", "o-250")]));
    let plan = storage
        .explain_query(
            &one_order,
            &sensors,
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .unwrap();
    assert!(
        rows_returned(&plan) > 0,
        "one order: the read returned nothing: {plan}"
    );
    let mut found = Vec::new();
    sorts_and_spills(&plan, &mut found);
    if !found.is_empty() {
        failures.push(format!("one order: {found:?} in {plan}"));
    }
    // Read in pages, the whole stream comes back once, in order, either way.
    for direction in [Direction::Forward, Direction::Backward] {
        let all = storage
            .query(
                &EventFilter::match_all(),
                &sensors,
                None,
                Limit::none(),
                direction,
            )
            .await
            .unwrap();
        assert_eq!(
            all.len(),
            STREAM_EVENTS,
            "{direction:?}: every event of the stream"
        );
        let ordered = all.windows(2).all(|pair| match direction {
            Direction::Forward => pair[0].reference < pair[1].reference,
            Direction::Backward => pair[0].reference > pair[1].reference,
        });
        assert!(ordered, "{direction:?}: the pages join in order");
    }
    storage.close().await.unwrap();
    assert!(
        failures.is_empty(),
        "reads that sort or spill:\n{}",
        failures.join("\n")
    );
}

/// Events of the busy contexts that fill the table around the small stream.
const BUSY_EVENTS: usize = 20_000;

#[tokio::test]
async fn a_small_stream_is_read_from_its_own_entries_even_under_a_generic_plan() {
    if common::needs_direct_connection("its pool sets plan_cache_mode at connection") {
        return;
    }
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    common::storage_on(&prefix).await.close().await.unwrap();
    // The small stream's 50 events come first; 20,000 of two busy contexts follow them,
    // interleaved as a shared log holds them.
    insert_events(
        &admin,
        &prefix,
        "'small', 'default', 'Noted', json_build_object('n', g), '{}'",
        1,
        1,
        50,
    )
    .await;
    insert_events(
        &admin,
        &prefix,
        "CASE WHEN g % 2 = 0 THEN 'alpha' ELSE 'omega' END, \
         'default', 'Noted', json_build_object('n', g), '{}'",
        1,
        4,
        (BUSY_EVENTS / 4) as i32,
    )
    .await;
    analyze(&admin, &prefix).await;

    // Every statement planned once for any stream, as PostgreSQL plans a prepared statement
    // after its fifth run when that plan looks no dearer than the ones for its values.
    let options: sqlx::postgres::PgConnectOptions = common::direct_url().parse().unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options.options([("plan_cache_mode", "force_generic_plan")]))
        .await
        .unwrap();
    let storage = PostgresEventStorage::builder()
        .pool(pool.clone())
        .prefix(&prefix)
        .build()
        .await
        .unwrap();
    let small = EventStreamId::for_context("small");
    let read = |stream: EventStreamId, after: Option<EventReference>, limit, direction| {
        let storage = storage.clone();
        async move {
            storage
                .query(
                    &EventFilter::match_all(),
                    &stream,
                    after.as_ref(),
                    limit,
                    direction,
                )
                .await
                .unwrap()
        }
    };
    let forward = read(small.clone(), None, Limit::none(), Direction::Forward).await;
    assert_eq!(forward.len(), 50);
    let backward = read(small.clone(), None, Limit::none(), Direction::Backward).await;
    assert_eq!(backward.len(), 50);
    assert_eq!(backward.first(), forward.last());
    let after = read(
        small.clone(),
        Some(forward[9].reference),
        Limit::to(5),
        Direction::Forward,
    )
    .await;
    assert_eq!(after, forward[10..15]);
    let any_purpose = read(
        small.clone().any_purpose(),
        None,
        Limit::none(),
        Direction::Forward,
    );
    assert_eq!(any_purpose.await, forward);
    let head = storage.head(&small).await.unwrap();
    assert_eq!(head, Some(forward[49].reference));
    // A conditional append looks for a conflicting event after the one it expects.
    storage
        .append(
            AppendCriteria::of(EventFilter::for_types(["Unseen"]), head),
            &small,
            vec![EventToStore::new("Noted", json!({ "n": 51 }))],
        )
        .await
        .unwrap();
    storage.close().await.unwrap();
    pool.close().await;

    let scans = common::eventually(
        "the reads to show in the server's statistics",
        Duration::from_secs(30),
        || async {
            let scans = scans(&admin, &prefix).await;
            (scans.idx_scan >= 6).then_some(scans)
        },
    )
    .await;
    // Six statements over a stream of 50: walking the busy contexts' entries too would
    // fetch 20,000 rows for each.
    assert!(
        scans.idx_tup_fetch < 2_000,
        "reads of the small stream fetched the busy contexts' rows: {scans:?}"
    );
}

/// Events of the stream an append's condition looks through, each with a tag of its own.
const TAGGED_EVENTS: usize = 20_000;

#[tokio::test]
async fn conditions_and_short_reads_of_a_rare_tag_use_the_tags_index_not_the_stream() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    // An order per event, as a DCB tag names one entity, over 40 transactions.
    insert_events(
        &admin,
        &prefix,
        "'orders', 'default', 'Placed', json_build_object('n', g), ARRAY['order:o-' || g]",
        1,
        40,
        (TAGGED_EVENTS / 40) as i32,
    )
    .await;
    analyze(&admin, &prefix).await;
    let orders = EventStreamId::for_context("orders");
    let early = storage
        .query(
            &EventFilter::match_all(),
            &orders,
            None,
            Limit::to(10),
            Direction::Forward,
        )
        .await
        .unwrap();
    let order = |name: &str| EventFilter::for_tags(Tags::from_pairs([("order", name)]));
    let placed = |n: usize| vec![EventToStore::new("Placed", json!({ "n": n }))];
    let changed = storage
        .query(
            &order("o-19000"),
            &orders,
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .unwrap();

    // A new order: no event may carry its tag yet.
    storage
        .append(AppendCriteria::of(order("new-1"), None), &orders, placed(1))
        .await
        .unwrap();
    // An order last seen long ago: nothing of it since.
    storage
        .append(
            AppendCriteria::of(order("o-5"), Some(early[9].reference)),
            &orders,
            placed(2),
        )
        .await
        .unwrap();
    // An order changed since: the conflict names its event.
    let conflict = storage
        .append(
            AppendCriteria::of(order("o-19000"), Some(early[9].reference)),
            &orders,
            placed(3),
        )
        .await
        .unwrap_err();
    match conflict {
        EventStorageError::OptimisticLock { conflicting, .. } => {
            assert_eq!(conflicting, changed[0].reference);
        }
        other => panic!("expected an optimistic lock failure, got {other:?}"),
    }
    // A projector's batch of an order's events.
    let batch = storage
        .query(
            &order("o-4321"),
            &orders,
            None,
            Limit::to(DEFAULT_BATCH_SIZE),
            Direction::Forward,
        )
        .await
        .unwrap();
    assert_eq!(batch.len(), 1);
    // The first and the last few events of an order.
    for direction in [Direction::Forward, Direction::Backward] {
        let few = storage
            .query(&order("o-12345"), &orders, None, Limit::to(5), direction)
            .await
            .unwrap();
        assert_eq!(few.len(), 1, "{direction:?}");
    }
    storage.close().await.unwrap();

    let scans = common::eventually(
        "the conditions to show in the server's statistics",
        Duration::from_secs(30),
        || async {
            let scans = scans(&admin, &prefix).await;
            // Five reads and three conditions, each by an index or by a scan of the table;
            // each connection's counters arrive when it closes, the tag index's with them.
            let counted = scans.idx_scan >= 8 && scans.tags_idx_scan >= 7;
            (counted || scans.seq_tup_read > 0).then_some(scans)
        },
    )
    .await;
    assert_eq!(
        scans.seq_tup_read, 0,
        "a condition scanned the table: {scans:?}"
    );
    assert!(
        scans.tags_idx_scan >= 7,
        "a condition, a short read or a batch did not use the tags index: {scans:?}"
    );
    // The reads fetch 14 rows; walking the stream for an order's events fetches 20,000.
    assert!(
        scans.idx_tup_fetch < 1_000,
        "the conditions or the short reads fetched the stream's rows: {scans:?}"
    );
}

/// Events that all carry one tag: a run, a tenant, anything many events share.
const COMMON_TAG_EVENTS: usize = 10_000;

/// A fresh prefix whose stream `bench` holds [`COMMON_TAG_EVENTS`] analyzed events, each with
/// the tags `tags` (SQL in terms of the event's number `g`), and a storage on it with one
/// connection, so that every statement runs on the session that would keep it.
async fn on_one_connection(admin: &PgPool, tags: &str) -> (String, PostgresEventStorage) {
    let prefix = common::unique_prefix();
    common::storage_on(&prefix).await.close().await.unwrap();
    insert_events(
        admin,
        &prefix,
        &format!("'bench', 'default', 'Measured', json_build_object('n', g), {tags}"),
        1,
        10,
        (COMMON_TAG_EVENTS / 10) as i32,
    )
    .await;
    analyze(admin, &prefix).await;
    let storage = common::builder(&prefix)
        .max_connections(1)
        .build()
        .await
        .unwrap();
    (prefix, storage)
}

#[tokio::test]
async fn a_tag_every_event_carries_is_read_in_order_however_often_it_is_read() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    // A statement kept and run five times may go over to one generic plan for every tag;
    // a plan that gathers the tag's events and sorts them fetches all 10,000 for each page.
    let (prefix, reader) = on_one_connection(&admin, "ARRAY['run:r1']").await;
    let by_tag = EventFilter::for_tags(Tags::from_pairs([("run", "r1")]));
    const READS: usize = 6;
    for _ in 0..READS {
        let events = reader
            .query(
                &by_tag,
                &EventStreamId::any(),
                None,
                Limit::none(),
                Direction::Forward,
            )
            .await
            .unwrap();
        assert_eq!(events.len(), COMMON_TAG_EVENTS);
    }
    reader.close().await.unwrap();

    // Pages of 1,000, then of 2,000: six statements a read.
    let statements = READS as i64 * 6;
    let scans = common::eventually(
        "the reads to show in the server's statistics",
        Duration::from_secs(30),
        || async {
            let scans = scans(&admin, &prefix).await;
            (scans.idx_scan >= statements && scans.tags_idx_scan >= statements).then_some(scans)
        },
    )
    .await;
    assert!(
        scans.tags_idx_scan >= statements,
        "a page of a tag every event carries was not walked from the tag index: {scans:?}"
    );
    // Each event fetched once per read: walked in order, a page stops where it is full.
    assert!(
        scans.idx_tup_fetch <= (READS * COMMON_TAG_EVENTS) as i64 + 1_000,
        "pages of the tag fetched more events than they returned: {scans:?}"
    );
}

/// Checks of entities last seen long ago read their tags from the tag index; a check of a
/// tag every event carries, known up to the head, must still read only what came after it,
/// on the same connection after them.
#[tokio::test]
async fn a_check_of_a_common_tag_after_checks_of_rare_ones_reads_only_what_came_after() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    // A statement kept and run five times may go over to one generic plan for every tag and
    // every expected event, made after the plans of its first runs, which cannot tell that
    // few events came after the expected one.
    let (prefix, writer) = on_one_connection(&admin, "ARRAY['run:r1', 'order:o-' || g]").await;
    let stream = EventStreamId::for_context("bench");
    let run = Tags::from_pairs([("run", "r1")]);
    let early = writer
        .query(
            &EventFilter::match_all(),
            &stream,
            None,
            Limit::to(10),
            Direction::Forward,
        )
        .await
        .unwrap()[9]
        .reference;
    const APPENDS: usize = 8;
    for n in 0..APPENDS {
        // First decisions on orders last seen long ago, then on the run, known to its head.
        let (tags, expected) = if n < 6 {
            let order = format!("o-{}", n + 1);
            (Tags::from_pairs([("order", order.as_str())]), Some(early))
        } else {
            (run.clone(), writer.head(&stream).await.unwrap())
        };
        let event = EventToStore::new("Measured", json!({ "n": n })).with_tags(tags.clone());
        writer
            .append(
                AppendCriteria::of(EventFilter::for_tags(tags), expected),
                &stream,
                vec![event],
            )
            .await
            .unwrap();
    }
    writer.close().await.unwrap();

    let scans = common::eventually(
        "the checks to show in the server's statistics",
        Duration::from_secs(30),
        || async {
            let scans = scans(&admin, &prefix).await;
            // The read of `early`, a check per append and the two heads.
            let statements = 1 + APPENDS as i64 + 2;
            (scans.idx_scan >= statements || scans.seq_tup_read > 0).then_some(scans)
        },
    )
    .await;
    assert_eq!(
        scans.seq_tup_read, 0,
        "a check scanned the table: {scans:?}"
    );
    // The checks find nothing after what they expect; looking through the run's events
    // fetches 10,000 rows a check.
    assert!(
        scans.idx_tup_fetch < 1_000,
        "the checks fetched the events carrying the tag: {scans:?}"
    );
}
