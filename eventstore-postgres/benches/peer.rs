//! This store beside `disintegrate-postgres` 4.0.1, the DCB event store on PostgreSQL users
//! would pick instead: same process, same database, alternating rounds, medians of 5.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p eventstore-postgres --bench peer
//! ```
//!
//! Ours runs on a fresh `peer…_` prefix; the peer in a fresh schema of its own (its table
//! names are fixed), created from its own SQL. That SQL needs PostgreSQL 16 for one
//! hexadecimal literal, written here in decimal so that it runs on 15 too; the peer is then
//! opened with `new_uninitialized`. Both are left behind for inspection.
//!
//! Appends are unconditional on both sides (`AppendCriteria::none()`, and the peer's
//! `append_without_validation`). "One stream" is our stream `bench/default`, and the peer's
//! stream of `Measured` events; "by tag" is our tag `run:r1`, the peer's domain id
//! `run_id = 'r1'`. Every event read is decoded whole by both. "As typed events" is our
//! typed stream of the facade, whose events decode from their payloads' text as the peer's
//! do; the peer reads its stream as always.
//!
//! A second table says where a read's time goes: each store's rows of the read stream fetched
//! undecoded in one statement on the plan of its read (ours also with only the peer's
//! content, a position and a payload), beside each store's whole read.
//!
//! A last one reads a tag on fresh tables, as a new user would right after writing: events
//! of five tags spread over the ten streams of one context, written in batches, then one
//! tag's 20,000 read back scoped to the context (the peer: by its domain id) before anything
//! has analyzed either table (autovacuum is off for them).

use std::sync::Arc;
use std::time::{Duration, Instant};

use disintegrate::{EventStore as _, StreamItem};
use disintegrate_postgres::PgEventStore;
use disintegrate_serde::serde::json::Json;
use eventstore::store::NamedEvent;
use eventstore::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStore, EventStreamId, EventToStore,
    Limit, Tags,
};
use eventstore_postgres::PostgresEventStorage;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

const ROUNDS: usize = 5;
const SINGLE_APPENDS: usize = 300;
const CLIENTS: usize = 8;
const APPENDS_PER_CLIENT: usize = 100;
const BATCHES: usize = 20;
const BATCH: usize = 100;
const READ_EVENTS: usize = 20_000;

/// The peer's events: `Measured` fill the stream that is read, `Appended` the appends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, disintegrate::Event)]
#[stream(MeasuredEvent, [Measured])]
enum PeerEvent {
    Measured {
        #[id]
        run_id: String,
        n: i64,
        label: String,
    },
    Appended {
        #[id]
        run_id: String,
        n: i64,
        label: String,
    },
}

type Peer = PgEventStore<PeerEvent, Json<PeerEvent>>;

/// Our events of the read stream as a typed stream of the facade reads them: the fields of
/// the peer's `Measured` but its domain id, which ours carries as a tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Measured {
    n: i64,
    label: String,
}

impl NamedEvent for Measured {
    const EVENT_TYPE: &'static str = "Measured";
}

/// The peer's schema, from its own SQL files; `0xFFFFFFFF` is written `4294967295`.
const PEER_SCHEMA: &[&str] = &[
    "CREATE SEQUENCE IF NOT EXISTS seq_event_event_id",
    "CREATE TABLE IF NOT EXISTS event (
        event_id BIGINT PRIMARY KEY DEFAULT nextval('seq_event_event_id'),
        event_type VARCHAR(255),
        payload BYTEA,
        inserted_at TIMESTAMP DEFAULT now()
    )",
    "CREATE INDEX IF NOT EXISTS idx_event_type_btree ON event(event_type)",
    "CREATE OR REPLACE FUNCTION event_store_current_epoch()
    RETURNS BIGINT AS $$
    DECLARE
        persisted_event_id BIGINT;
        pending_event_id BIGINT;
        db_id INT;
    BEGIN
        SELECT COALESCE(MAX(event_id), 0) INTO persisted_event_id FROM event;
        SELECT oid INTO db_id FROM pg_database WHERE datname = current_database();
        SELECT MIN((l3.objid::bigint << 32) + l2.objid::bigint)
        INTO pending_event_id
        FROM pg_locks l1
        INNER JOIN pg_locks l2 ON l1.pid = l2.pid
        INNER JOIN pg_locks l3 ON l1.pid = l3.pid
        WHERE l1.classid = db_id AND l2.classid = 1 AND l3.classid = 2
            AND l1.locktype = 'advisory';
        RETURN LEAST(COALESCE(pending_event_id, persisted_event_id), persisted_event_id);
    END;
    $$ LANGUAGE plpgsql",
    "CREATE OR REPLACE FUNCTION event_store_begin_epoch()
    RETURNS void AS $$
    DECLARE
        id BIGINT;
        db_id INT;
    BEGIN
        SELECT last_value INTO id FROM seq_event_event_id;
        SELECT oid INTO db_id FROM pg_database WHERE datname = current_database();
        PERFORM pg_try_advisory_xact_lock_shared(db_id, 0);
        PERFORM pg_try_advisory_xact_lock_shared(1, (id & 4294967295)::bit(32)::integer);
        PERFORM pg_try_advisory_xact_lock_shared(2, (id >> 32)::bit(32)::integer);
    END;
    $$ LANGUAGE plpgsql",
    // What its migrator adds for the domain id.
    "ALTER TABLE event ADD COLUMN IF NOT EXISTS run_id TEXT",
    "CREATE INDEX IF NOT EXISTS idx_event_run_id ON event (run_id) WHERE run_id IS NOT NULL",
];

/// The two stores under test.
struct Stores {
    ours: PostgresEventStorage,
    peer: Peer,
}

/// Which store a measurement runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Ours,
    Peer,
}

impl Side {
    /// The stores in the order round `round` measures them: alternating which goes first,
    /// so that neither always meets a warmer server.
    fn order(round: usize) -> [Side; 2] {
        if round.is_multiple_of(2) {
            [Side::Ours, Side::Peer]
        } else {
            [Side::Peer, Side::Ours]
        }
    }
}

/// One round's figures for one store.
#[derive(Debug, Default, Clone)]
struct Round {
    single_p50: Duration,
    single_rate: f64,
    clients_rate: f64,
    batch_rate: f64,
    read_stream_rate: f64,
    read_tag_rate: f64,
    read_typed_rate: f64,
}

fn label(n: usize) -> String {
    format!("measurement {n}")
}

fn our_event(n: usize, run: &str) -> EventToStore {
    EventToStore::new("Measured", json!({ "n": n, "label": label(n) }))
        .with_tags(Tags::from_pairs([("run", run)]))
}

fn peer_appended(n: usize, run: &str) -> PeerEvent {
    PeerEvent::Appended {
        run_id: run.to_owned(),
        n: n as i64,
        label: label(n),
    }
}

impl Stores {
    /// One append of one event on `side`, tagged with `run`.
    async fn append_one(&self, side: Side, n: usize, run: &str) {
        match side {
            Side::Ours => {
                let stream = EventStreamId::for_context("appends");
                self.ours
                    .append(AppendCriteria::none(), &stream, vec![our_event(n, run)])
                    .await
                    .unwrap();
            }
            Side::Peer => {
                self.peer
                    .append_without_validation(vec![peer_appended(n, run)])
                    .await
                    .unwrap();
            }
        }
    }

    /// One append of `BATCH` events on `side`.
    async fn append_batch(&self, side: Side, first: usize) {
        match side {
            Side::Ours => {
                let stream = EventStreamId::for_context("appends");
                let batch = (first..first + BATCH)
                    .map(|n| our_event(n, "batch"))
                    .collect();
                self.ours
                    .append(AppendCriteria::none(), &stream, batch)
                    .await
                    .unwrap();
            }
            Side::Peer => {
                let batch = (first..first + BATCH)
                    .map(|n| peer_appended(n, "batch"))
                    .collect();
                self.peer.append_without_validation(batch).await.unwrap();
            }
        }
    }

    /// The events both read: `READ_EVENTS` in the read stream, all with the tag `run:r1`.
    async fn seed_reads(&self) {
        let stream = EventStreamId::for_context("bench");
        for first in (0..READ_EVENTS).step_by(1_000) {
            let ours = (first..first + 1_000).map(|n| our_event(n, "r1")).collect();
            self.ours
                .append(AppendCriteria::none(), &stream, ours)
                .await
                .unwrap();
            let peer = (first..first + 1_000)
                .map(|n| PeerEvent::Measured {
                    run_id: "r1".to_owned(),
                    n: n as i64,
                    label: label(n),
                })
                .collect();
            self.peer.append_without_validation(peer).await.unwrap();
        }
    }

    /// Reads the read stream (or, `by_tag`, the tag `run:r1`) whole; returns how many events.
    async fn read(&self, side: Side, by_tag: bool) -> usize {
        match side {
            Side::Ours => {
                let (filter, stream) = if by_tag {
                    (
                        EventFilter::for_tags(Tags::from_pairs([("run", "r1")])),
                        EventStreamId::any(),
                    )
                } else {
                    (
                        EventFilter::match_all(),
                        EventStreamId::for_context("bench"),
                    )
                };
                self.ours
                    .query(&filter, &stream, None, Limit::none(), Direction::Forward)
                    .await
                    .unwrap()
                    .len()
            }
            Side::Peer => {
                if by_tag {
                    let query = disintegrate::query!(PeerEvent; run_id == "r1".to_owned());
                    let items: Vec<_> = self.peer.stream(&query).collect().await;
                    count_events(items)
                } else {
                    let query = disintegrate::query!(MeasuredEvent);
                    let items: Vec<_> = self.peer.stream(&query).collect().await;
                    count_events(items)
                }
            }
        }
    }

    /// Reads the read stream whole into typed events: ours through a typed stream of the
    /// facade, the peer as its read always does; returns how many events.
    async fn read_typed(&self, side: Side) -> usize {
        match side {
            Side::Ours => EventStore::new(Arc::new(self.ours.clone()))
                .stream::<Measured>(EventStreamId::for_context("bench"))
                .read_all()
                .await
                .unwrap()
                .len(),
            Side::Peer => self.read(Side::Peer, false).await,
        }
    }

    async fn round(&self, side: Side, round: usize) -> Round {
        let base = round * 1_000_000;
        let mut latencies = Vec::with_capacity(SINGLE_APPENDS);
        let start = Instant::now();
        for n in 0..SINGLE_APPENDS {
            let one = Instant::now();
            self.append_one(side, base + n, "single").await;
            latencies.push(one.elapsed());
        }
        let single_rate = SINGLE_APPENDS as f64 / start.elapsed().as_secs_f64();
        latencies.sort();

        let start = Instant::now();
        let clients = (0..CLIENTS).map(|client| async move {
            let run = format!("client-{client}");
            for n in 0..APPENDS_PER_CLIENT {
                self.append_one(side, base + 100_000 * (client + 1) + n, &run)
                    .await;
            }
        });
        futures_util::future::join_all(clients).await;
        let clients_rate = (CLIENTS * APPENDS_PER_CLIENT) as f64 / start.elapsed().as_secs_f64();

        let start = Instant::now();
        for batch in 0..BATCHES {
            self.append_batch(side, base + 900_000 + batch * BATCH)
                .await;
        }
        let batch_rate = (BATCHES * BATCH) as f64 / start.elapsed().as_secs_f64();

        let rate = |read: usize, start: Instant| read as f64 / start.elapsed().as_secs_f64();
        let start = Instant::now();
        let read = self.read(side, false).await;
        assert_eq!(read, READ_EVENTS, "{side:?} read the stream");
        let read_stream_rate = rate(read, start);
        let start = Instant::now();
        let read = self.read(side, true).await;
        assert_eq!(read, READ_EVENTS, "{side:?} read the tag");
        let read_tag_rate = rate(read, start);
        let start = Instant::now();
        let read = self.read_typed(side).await;
        assert_eq!(
            read, READ_EVENTS,
            "{side:?} read the stream as typed events"
        );
        let read_typed_rate = rate(read, start);
        Round {
            single_p50: latencies[latencies.len() / 2],
            single_rate,
            clients_rate,
            batch_rate,
            read_stream_rate,
            read_tag_rate,
            read_typed_rate,
        }
    }
}

/// The events among what the peer's stream yielded (it ends with its epoch); panics on an
/// error.
fn count_events<E: disintegrate::Event + Clone>(
    items: Vec<Result<StreamItem<i64, E>, disintegrate_postgres::Error>>,
) -> usize {
    items
        .into_iter()
        .filter(|item| matches!(item.as_ref().expect("a peer read"), StreamItem::Event(_)))
        .count()
}

/// How one figure is taken from a round.
type Figure = fn(&Round) -> f64;

fn median<T: PartialOrd + Copy>(rounds: &[Round], field: impl Fn(&Round) -> T) -> T {
    let mut values: Vec<T> = rounds.iter().map(field).collect();
    values.sort_by(|a, b| a.partial_cmp(b).expect("comparable figures"));
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("run with `cargo bench -p eventstore-postgres --bench peer`");
        return;
    }
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let tag = format!("{:08x}", rand::random::<u32>());
    let ours = PostgresEventStorage::builder()
        .url(&url)
        .prefix(format!("peer{tag}_"))
        .max_connections(CLIENTS as u32 + 2)
        .build()
        .await
        .expect("our storage on DATABASE_URL");

    let schema = format!("peer{tag}");
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&admin)
        .await
        .unwrap();
    let options: PgConnectOptions = url.parse().unwrap();
    let peer_pool = PgPoolOptions::new()
        .max_connections(CLIENTS as u32 + 2)
        .connect_with(options.options([("search_path", schema.as_str())]))
        .await
        .unwrap();
    for statement in PEER_SCHEMA {
        sqlx::query(statement).execute(&peer_pool).await.unwrap();
    }
    let stores = Stores {
        ours,
        peer: PgEventStore::new_uninitialized(peer_pool.clone(), Json::<PeerEvent>::default()),
    };
    stores.seed_reads().await;
    // Statistics as autovacuum would gather them on a store that has run for a while.
    sqlx::query(&format!("ANALYZE peer{tag}_events"))
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query(&format!("ANALYZE {schema}.event"))
        .execute(&admin)
        .await
        .unwrap();

    let mut ours = Vec::new();
    let mut peer = Vec::new();
    for round in 0..ROUNDS {
        for side in Side::order(round) {
            let figures = stores
                .round(side, round * 2 + usize::from(side == Side::Peer))
                .await;
            match side {
                Side::Ours => ours.push(figures),
                Side::Peer => peer.push(figures),
            }
        }
    }

    println!(
        "# This store beside disintegrate-postgres 4.0.1 (prefix peer{tag}_, schema {schema})\n"
    );
    println!("Medians of {ROUNDS} alternating rounds.\n");
    println!("| measure | ours | disintegrate | ours / theirs |");
    println!("|---|---:|---:|---:|");
    let p50 = |r: &[Round]| median(r, |r| r.single_p50);
    println!(
        "| single append, 1 client, p50 latency | {:.0} µs | {:.0} µs | {:.2}× |",
        p50(&ours).as_secs_f64() * 1e6,
        p50(&peer).as_secs_f64() * 1e6,
        p50(&ours).as_secs_f64() / p50(&peer).as_secs_f64()
    );
    let rows: [(&str, Figure); 6] = [
        ("single append, 1 client, events/s", |r| r.single_rate),
        ("8 clients × single appends, events/s", |r| r.clients_rate),
        ("appends in batches of 100, events/s", |r| r.batch_rate),
        ("read 20,000 events of one stream, events/s", |r| {
            r.read_stream_rate
        }),
        ("read the same 20,000 by tag, events/s", |r| r.read_tag_rate),
        ("read the same 20,000 as typed events, events/s", |r| {
            r.read_typed_rate
        }),
    ];
    for (what, field) in rows {
        let (a, b) = (median(&ours, field), median(&peer, field));
        println!("| {what} | {a:.0} | {b:.0} | {:.2}× |", a / b);
    }
    fetch_floors(&stores, &admin, &peer_pool, &tag).await;
    fresh_tag_reads(&url, &admin, &tag).await;
}

/// Tags of the fresh tables, and events per tag.
const FRESH_TAGS: usize = 5;
const FRESH_PER_TAG: usize = 20_000;
/// Streams of the fresh tables' one context (`fresh`, purposes `p0`…).
const FRESH_STREAMS: usize = 10;

/// The last table: a read of one tag scoped to a context, on fresh tables of both stores
/// never analyzed; medians of `ROUNDS` alternating reads.
async fn fresh_tag_reads(url: &str, admin: &PgPool, tag: &str) {
    let prefix = format!("peer{tag}_fresh_");
    let ours = PostgresEventStorage::builder()
        .url(url)
        .prefix(&prefix)
        .build()
        .await
        .expect("our fresh storage");
    let schema = format!("peer{tag}_fresh");
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(admin)
        .await
        .unwrap();
    let options: PgConnectOptions = url.parse().unwrap();
    let peer_pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options.options([("search_path", schema.as_str())]))
        .await
        .unwrap();
    for statement in PEER_SCHEMA {
        sqlx::query(statement).execute(&peer_pool).await.unwrap();
    }
    for table in [
        format!("{prefix}events"),
        format!("{prefix}event_tags"),
        format!("{schema}.event"),
    ] {
        sqlx::query(&format!(
            "ALTER TABLE {table} SET (autovacuum_enabled = false)"
        ))
        .execute(admin)
        .await
        .unwrap();
    }
    let peer = Peer::new_uninitialized(peer_pool, Json::<PeerEvent>::default());
    let events = FRESH_TAGS * FRESH_PER_TAG;
    for first in (0..events).step_by(1_000) {
        for stream in 0..FRESH_STREAMS {
            let batch: Vec<_> = (first..first + 1_000)
                .filter(|n| n % FRESH_STREAMS == stream)
                .collect();
            let stream = EventStreamId::new("fresh", format!("p{stream}"));
            let ours_batch = batch
                .iter()
                .map(|&n| our_event(n, &format!("t{}", n / FRESH_STREAMS % FRESH_TAGS)))
                .collect();
            ours.append(AppendCriteria::none(), &stream, ours_batch)
                .await
                .unwrap();
        }
        let peer_batch = (first..first + 1_000)
            .map(|n| PeerEvent::Measured {
                run_id: format!("t{}", n / FRESH_STREAMS % FRESH_TAGS),
                n: n as i64,
                label: label(n),
            })
            .collect();
        peer.append_without_validation(peer_batch).await.unwrap();
    }
    let context = EventStreamId::for_context("fresh").any_purpose();
    let filter = EventFilter::for_tags(Tags::from_pairs([("run", "t2")]));
    let mut times = [Vec::new(), Vec::new()];
    for round in 0..ROUNDS {
        for side in Side::order(round) {
            let start = Instant::now();
            let read = match side {
                Side::Ours => ours
                    .query(&filter, &context, None, Limit::none(), Direction::Forward)
                    .await
                    .unwrap()
                    .len(),
                Side::Peer => {
                    let query = disintegrate::query!(PeerEvent; run_id == "t2".to_owned());
                    count_events(peer.stream(&query).collect().await)
                }
            };
            assert_eq!(read, FRESH_PER_TAG, "{side:?} read the fresh tag");
            times[usize::from(side == Side::Peer)].push(start.elapsed());
        }
    }
    let median_ms = |times: &mut Vec<Duration>| {
        times.sort();
        times[times.len() / 2].as_secs_f64() * 1e3
    };
    let [mut ours_times, mut peer_times] = times;
    let (a, b) = (median_ms(&mut ours_times), median_ms(&mut peer_times));
    println!(
        "\n| fresh tables, never analyzed: {FRESH_PER_TAG} events of one tag in a context of \
         {FRESH_STREAMS} streams and {FRESH_TAGS} tags | ours | disintegrate | ours / theirs |"
    );
    println!("|---|---:|---:|---:|");
    println!(
        "| read them by tag, events/s (median of {ROUNDS}) | {:.0} | {:.0} | {:.2}× |",
        FRESH_PER_TAG as f64 / a * 1e3,
        FRESH_PER_TAG as f64 / b * 1e3,
        b / a
    );
    ours.close().await.unwrap();
}

/// Where a read's time goes, both stores side by side: each one's rows of the read stream
/// fetched undecoded in one statement on the same plan as its read, ours also with only the
/// peer's content (position and payload), beside each whole read; medians of `ROUNDS`,
/// alternating. Ours are fetched on `admin`, the peer's on `peer_pool`, whose search path
/// names its schema.
async fn fetch_floors(stores: &Stores, admin: &PgPool, peer_pool: &PgPool, tag: &str) {
    // The plan of our read's pages: the context's index walked in order behind the barrier.
    let ours_with = |columns: &str| {
        format!(
            "SELECT {columns} FROM peer{tag}_events \
             WHERE tx < pg_snapshot_xmin(pg_current_snapshot()) \
               AND stream_context >= 'bench' AND stream_context <= 'bench' \
               AND stream_purpose = 'default' \
             ORDER BY stream_context, tx, position LIMIT {READ_EVENTS}"
        )
    };
    let statements = [
        (
            "ours: the columns a read of one stream selects",
            admin,
            ours_with(
                "position, xid8send(tx) AS tx_bytes, id, event_type, payload, tags, \
                 idempotency_key, stored_at",
            ),
        ),
        (
            "ours: only the peer's content (position and payload)",
            admin,
            ours_with("position, payload"),
        ),
        (
            "the peer: its read's statement (id, payload, epoch)",
            peer_pool,
            "SELECT event.event_id, event.payload, epoch.__epoch_id \
             FROM (VALUES (event_store_current_epoch())) AS epoch(__epoch_id) \
             LEFT JOIN event ON event.event_id <= epoch.__epoch_id \
               AND event.event_type = 'Measured' \
             ORDER BY event_id ASC"
                .to_owned(),
        ),
    ];
    let mut fetched = vec![Vec::new(); statements.len()];
    let mut reads = [Vec::new(), Vec::new()];
    for round in 0..ROUNDS {
        // Rotated, so that no statement always runs first.
        for i in (0..statements.len()).map(|i| (i + round) % statements.len()) {
            let (what, pool, sql) = &statements[i];
            let start = Instant::now();
            let rows = sqlx::query(sql).fetch_all(*pool).await.unwrap();
            fetched[i].push(start.elapsed());
            assert!(rows.len() >= READ_EVENTS, "{what}: {} rows", rows.len());
        }
        for side in [Side::Ours, Side::Peer] {
            let start = Instant::now();
            assert_eq!(stores.read(side, false).await, READ_EVENTS);
            reads[usize::from(side == Side::Peer)].push(start.elapsed());
        }
    }
    let ms = |mut times: Vec<Duration>| {
        times.sort();
        times[times.len() / 2].as_secs_f64() * 1e3
    };
    println!("\n| the 20,000 events of the read stream | median of {ROUNDS} |");
    println!("|---|---:|");
    for ((what, _, _), times) in statements.iter().zip(fetched) {
        println!(
            "| {what}, fetched undecoded in one statement | {:.1} ms |",
            ms(times)
        );
    }
    let [ours, peer] = reads;
    println!(
        "| ours: `query`, pages of 1,000 then 2,000, each row decoded into a `StoredEvent` | {:.1} ms |",
        ms(ours)
    );
    println!(
        "| the peer: its read, each event decoded into its type | {:.1} ms |",
        ms(peer)
    );
}
