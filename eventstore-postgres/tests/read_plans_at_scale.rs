//! Every read shape on a table of half a million events, once analyzed and once never
//! analyzed (a store read right after its writes, before autovacuum came by): does its plan
//! cost what it returns, or what the table, the context or the tag's neighbours hold?
//!
//! A plan fails when it sorts more than a page, scans the table, or has a node that looks at
//! many more rows than the read returns (an index walk filtering out other streams' events, a
//! bitmap of a whole context). Every shape must pass, and the run prints what each costs.
//!
//! A test binary of its own: writing a million events would slow the timed tests beside it.
//! `cargo test -p eventstore-postgres --test read_plans_at_scale -- --nocapture` prints the
//! table of plans.

mod common;

use eventstore::{
    Direction, EventFilter, EventReference, EventStorage, EventStreamId, Limit, Tags,
};
use eventstore_postgres::PostgresEventStorage;
use serde_json::Value;
use sqlx::PgPool;

const EVENTS: i32 = 500_000;
/// Events per transaction as they are inserted: each transaction's events share a `tx`.
const PER_TRANSACTION: i32 = 5_000;
/// A page of a read: what a read asks for, and the most a plan may sort.
const PAGE: u64 = 1_000;
/// How many times the rows a read returns a node may look at.
const LOOKS_PER_ROW: u64 = 4;

/// The columns of event `g`: 100 streams (ten contexts of ten purposes), 1,000 entity tags
/// (each entity's events in one stream, every 1,000th event), a kind tag of three values
/// spread over every stream, and four types that change every hundred events.
const COLUMNS: &str = "'c' || (g % 100 / 10), 'p' || (g % 10), 'T' || (g / 100 % 4), \
     json_build_object('n', g), \
     ARRAY['entity:e-' || (g % 1000), 'kind:k' || (g % 3)]";

async fn fill(admin: &PgPool, prefix: &str) {
    for first in (0..EVENTS).step_by(PER_TRANSACTION as usize) {
        sqlx::query(&format!(
            "INSERT INTO {prefix}events \
                 (id, stream_context, stream_purpose, event_type, payload, tags) \
             SELECT gen_random_uuid(), {COLUMNS} \
             FROM generate_series($1::int, $1::int + $2::int - 1) AS g"
        ))
        .bind(first)
        .bind(PER_TRANSACTION)
        .execute(admin)
        .await
        .unwrap();
    }
}

/// A storage on a fresh prefix holding [`EVENTS`] events; its tables analyzed, or never
/// (autovacuum off for them, so that they stay so while the test runs).
async fn store(admin: &PgPool, analyzed: bool) -> (String, PostgresEventStorage) {
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    for table in ["events", "event_tags"] {
        if !analyzed {
            sqlx::query(&format!(
                "ALTER TABLE {prefix}{table} SET (autovacuum_enabled = false)"
            ))
            .execute(admin)
            .await
            .unwrap();
        }
    }
    fill(admin, &prefix).await;
    if analyzed {
        sqlx::query(&format!("ANALYZE {prefix}events, {prefix}event_tags"))
            .execute(admin)
            .await
            .unwrap();
    }
    (prefix, storage)
}

/// What is wrong with `plan` for a read that returned `returned` rows, if anything.
fn costly(node: &Value, returned: u64, found: &mut Vec<String>) {
    let Value::Object(fields) = node else {
        if let Value::Array(items) = node {
            items.iter().for_each(|item| costly(item, returned, found));
        }
        return;
    };
    let number = |key: &str| fields.get(key).and_then(Value::as_u64).unwrap_or(0);
    if let Some(Value::String(kind)) = fields.get("Node Type") {
        let relation = fields
            .get("Relation Name")
            .or_else(|| fields.get("Index Name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let loops = number("Actual Loops").max(1);
        let looked_at = (number("Actual Rows")
            + number("Rows Removed by Filter")
            + number("Rows Removed by Index Recheck"))
            * loops;
        if kind == "Seq Scan" {
            found.push(format!("a Seq Scan of {relation}"));
        }
        if kind.contains("Sort") {
            let sorted = fields["Plans"][0]["Actual Rows"].as_u64().unwrap_or(0);
            if sorted > PAGE {
                found.push(format!("a {kind} of {sorted} rows"));
            }
        }
        if looked_at > LOOKS_PER_ROW * returned.max(1) + PAGE {
            found.push(format!(
                "{kind} {relation} looked at {looked_at} rows for {returned}"
            ));
        }
    }
    fields
        .values()
        .for_each(|value| costly(value, returned, found));
}

/// A read, and how many rows it must return.
struct Shape {
    name: &'static str,
    filter: EventFilter,
    stream: EventStreamId,
    after: Option<EventReference>,
    returns: u64,
}

fn shape(
    name: &'static str,
    filter: EventFilter,
    stream: &EventStreamId,
    after: Option<EventReference>,
    returns: u64,
) -> Shape {
    Shape {
        name,
        filter,
        stream: stream.clone(),
        after,
        returns,
    }
}

/// Every read shape; `middle` is halfway through the stream c3/p4.
fn shapes(middle: EventReference) -> Vec<Shape> {
    let entity = |n: u32| EventFilter::for_tags(Tags::from_pairs([("entity", format!("e-{n}"))]));
    let stream = EventStreamId::new("c3", "p4");
    let context = EventStreamId::for_context("c3").any_purpose();
    let every = EventStreamId::any();
    let all = EventFilter::match_all;
    let t2 = || EventFilter::for_types(["T2"]);
    // Entities 734 and 735 live in streams c3/p4 and c3/p5: event g is in stream g % 100.
    let tagged = Tags::from_pairs([("entity", "e-734")]);
    vec![
        shape("one stream", all(), &stream, None, PAGE),
        shape(
            "one stream after a reference",
            all(),
            &stream,
            Some(middle),
            PAGE,
        ),
        shape("a context with any purpose", all(), &context, None, PAGE),
        shape("every stream", all(), &every, None, PAGE),
        shape("a type in every stream", t2(), &every, None, PAGE),
        shape("a type in a stream", t2(), &stream, None, PAGE),
        shape(
            "either of two types in every stream",
            EventFilter::for_types(["T1", "T2"]),
            &every,
            None,
            PAGE,
        ),
        shape("a tag in its context", entity(734), &context, None, 500),
        shape("a tag in its stream", entity(734), &stream, None, 500),
        shape("a tag in every stream", entity(734), &every, None, 500),
        shape(
            "a tag after a reference",
            entity(734),
            &stream,
            Some(middle),
            250,
        ),
        shape(
            "a type and a tag",
            EventFilter::for_events(["T3"], tagged),
            &stream,
            None,
            250,
        ),
        shape(
            "a common tag in a stream",
            EventFilter::for_tags(Tags::from_pairs([("kind", "k1")])),
            &stream,
            None,
            PAGE,
        ),
        shape(
            "a common tag in every stream",
            EventFilter::for_tags(Tags::from_pairs([("kind", "k1")])),
            &every,
            None,
            PAGE,
        ),
        shape(
            "either of two tags in a context",
            entity(734).or(entity(735)),
            &context,
            None,
            PAGE,
        ),
    ]
}

#[tokio::test]
async fn every_read_shape_costs_what_it_returns_at_half_a_million_events() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    if common::needs_direct_connection("it reads plans, which a pooler does not change") {
        return;
    }
    let mut unexpected = Vec::new();
    for analyzed in [false, true] {
        let (prefix, storage) = store(&admin, analyzed).await;
        let stream = EventStreamId::new("c3", "p4");
        let half = storage
            .query(
                &EventFilter::match_all(),
                &stream,
                None,
                Limit::to(2_500),
                Direction::Forward,
            )
            .await
            .unwrap();
        let middle = half.last().expect("the stream's first half").reference;
        for Shape {
            name,
            filter,
            stream,
            after,
            returns,
        } in shapes(middle)
        {
            for direction in [Direction::Forward, Direction::Backward] {
                let plan = storage
                    .explain_query(&filter, &stream, after.as_ref(), Limit::to(PAGE), direction)
                    .await
                    .unwrap();
                let returned = plan[0]["Plan"]["Actual Rows"].as_u64().unwrap_or(0);
                let took = plan[0]["Execution Time"].as_f64().unwrap_or(0.0);
                let mut found = Vec::new();
                if returned != returns {
                    found.push(format!("returned {returned} rows, not {returns}"));
                }
                costly(&plan[0]["Plan"], returned, &mut found);
                let verdict = if found.is_empty() { "ok" } else { "COSTLY" };
                let table = if analyzed { "analyzed" } else { "not analyzed" };
                println!(
                    "{table:<13} {name:<32} {direction:<8?} {returned:>5} rows {took:>7.2} ms  \
                     {verdict} {}",
                    found.join("; ")
                );
                if !found.is_empty() {
                    unexpected.push(format!(
                        "{name} ({direction:?}, analyzed: {analyzed}): {}",
                        found.join("; ")
                    ));
                }
            }
        }
        storage.close().await.unwrap();
        drop_store(&admin, &prefix).await;
    }
    assert!(
        unexpected.is_empty(),
        "reads that cost more than they return:\n{}",
        unexpected.join("\n")
    );
}

/// Drops the prefix's tables: half a million events per run would pile up otherwise.
async fn drop_store(admin: &PgPool, prefix: &str) {
    for table in [
        "bookmarks",
        "lease_contenders",
        "leases",
        "event_tags",
        "events",
    ] {
        sqlx::query(&format!("DROP TABLE IF EXISTS {prefix}{table} CASCADE"))
            .execute(admin)
            .await
            .unwrap();
    }
}
