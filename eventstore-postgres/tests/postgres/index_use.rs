//! Reads are answered from the indexes: a tag query from the GIN index on tags, the head of
//! a stream and a page after a reference from a few entries of an ordered index, never by
//! scanning the table. Judged by the server's own statistics for the events table.

use std::time::Duration;

use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStreamId, EventToStore, Limit, Tags,
};
use serde_json::json;
use sqlx::PgPool;

use crate::common;

const EVENTS: usize = 5_000;
/// Events per order: a tag names one order, as a DCB tag names one entity.
const PER_ORDER: usize = 10;

/// Scan counters of the prefix's events table and its tags index.
#[derive(Debug, sqlx::FromRow)]
struct Scans {
    seq_tup_read: i64,
    idx_scan: i64,
    idx_tup_fetch: i64,
    tags_idx_scan: i64,
}

async fn scans(admin: &PgPool, prefix: &str) -> Scans {
    sqlx::query_as(
        "SELECT t.seq_tup_read, coalesce(t.idx_scan, 0) AS idx_scan, \
                coalesce(t.idx_tup_fetch, 0) AS idx_tup_fetch, i.idx_scan AS tags_idx_scan \
         FROM pg_stat_user_tables AS t \
         JOIN pg_stat_user_indexes AS i ON i.relid = t.relid \
         WHERE t.relname = $1 AND i.indexrelname = $2",
    )
    .bind(format!("{prefix}events"))
    .bind(format!("{prefix}events_tags_idx"))
    .fetch_one(admin)
    .await
    .expect("reading the table statistics")
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
    sqlx::query(&format!("ANALYZE {prefix}events"))
        .execute(&admin)
        .await
        .unwrap();

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
