//! Whether a read costs what it returns or what the table holds: a read of 1,000 events by tag
//! on a table of 500,000 events beside the same read on one of 5,000,000.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p eventstore-postgres --bench read_scale
//! ```
//!
//! Both tables hold events of 100 streams (ten contexts of ten purposes), each entity tag on
//! 1,000 events of one stream, so the read returns 1,000 events from either. Each is read
//! never analyzed (autovacuum off for it, a store read right after its writes) and then
//! analyzed. Rounds alternate the two tables; the figures are medians, and the ratio is the
//! median of each round's. The goal is a ratio within 1.5. The tables are dropped at the end.

use std::time::{Duration, Instant};

use eventstore::{Direction, EventFilter, EventStorage, EventStreamId, Limit, Tags};
use eventstore_postgres::PostgresEventStorage;
use sqlx::PgPool;

const SMALL: i64 = 500_000;
const ROUNDS: usize = 21;
/// Events per entity tag: what the read returns.
const PER_TAG: i64 = 1_000;

/// A store of `events` events on a fresh prefix, autovacuum off for its tables.
async fn store(url: &str, admin: &PgPool, events: i64) -> (String, PostgresEventStorage) {
    let prefix = format!("bench{:08x}_", rand::random::<u32>());
    let storage = PostgresEventStorage::builder()
        .url(url)
        .prefix(&prefix)
        .build()
        .await
        .expect("a storage on DATABASE_URL");
    for table in ["events", "event_tags"] {
        sqlx::query(&format!(
            "ALTER TABLE {prefix}{table} SET (autovacuum_enabled = false)"
        ))
        .execute(admin)
        .await
        .unwrap();
    }
    let tags = events / PER_TAG;
    // Event g is in stream g % 100; entity tag g % tags, a multiple of 100 apart, stays in it.
    for first in (0..events).step_by(10_000) {
        sqlx::query(&format!(
            "INSERT INTO {prefix}events \
                 (id, stream_context, stream_purpose, event_type, payload, tags) \
             SELECT gen_random_uuid(), 'c' || (g % 100 / 10), 'p' || (g % 10), \
                    'T' || (g / 100 % 4), json_build_object('n', g), \
                    ARRAY['entity:e-' || (g % {tags}), 'kind:k' || (g % 3)] \
             FROM generate_series($1::bigint, $1::bigint + 9999) AS g"
        ))
        .bind(first)
        .execute(admin)
        .await
        .unwrap();
    }
    (prefix, storage)
}

/// How long the read of entity 434's events in `stream` takes.
async fn read(storage: &PostgresEventStorage, stream: &EventStreamId) -> Duration {
    let filter = EventFilter::for_tags(Tags::from_pairs([("entity", "e-434")]));
    let started = Instant::now();
    let events = storage
        .query(&filter, stream, None, Limit::none(), Direction::Forward)
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(
        events.len() as i64,
        PER_TAG,
        "the read returns the tag's events"
    );
    took
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("run with `cargo bench -p eventstore-postgres --bench read_scale`");
        return;
    }
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let admin = PgPool::connect(&url).await.expect("a pool on DATABASE_URL");
    let started = Instant::now();
    let small = store(&url, &admin, SMALL).await;
    let large = store(&url, &admin, SMALL * 10).await;
    println!(
        "wrote {SMALL} and {} events in {:.0?}",
        SMALL * 10,
        started.elapsed()
    );
    // Entity 434 lives in stream c3/p4 in both tables (434 % 100 = 34).
    let shapes = [
        (
            "by tag in its context",
            EventStreamId::for_context("c3").any_purpose(),
        ),
        ("by tag in its stream", EventStreamId::new("c3", "p4")),
        ("by tag in every stream", EventStreamId::any()),
    ];
    println!("| table | read of {PER_TAG} events | 500k (ms) | 5M (ms) | 5M / 500k |");
    println!("|---|---|---|---|---|");
    for analyzed in [false, true] {
        if analyzed {
            for (prefix, _) in [&small, &large] {
                sqlx::query(&format!("ANALYZE {prefix}events, {prefix}event_tags"))
                    .execute(&admin)
                    .await
                    .unwrap();
            }
        }
        for (shape, stream) in &shapes {
            let (mut smalls, mut larges, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                let on_small = read(&small.1, stream).await.as_secs_f64() * 1e3;
                let on_large = read(&large.1, stream).await.as_secs_f64() * 1e3;
                smalls.push(on_small);
                larges.push(on_large);
                ratios.push(on_large / on_small);
            }
            println!(
                "| {} | {shape} | {:.2} | {:.2} | {:.2} |",
                if analyzed {
                    "analyzed"
                } else {
                    "never analyzed"
                },
                median(smalls),
                median(larges),
                median(ratios)
            );
        }
    }
    for (prefix, storage) in [small, large] {
        storage.close().await.unwrap();
        for table in [
            "bookmarks",
            "lease_contenders",
            "leases",
            "event_tags",
            "events",
        ] {
            sqlx::query(&format!("DROP TABLE IF EXISTS {prefix}{table} CASCADE"))
                .execute(&admin)
                .await
                .unwrap();
        }
    }
}
