//! The streaming read yields its events in order across pages, reads the next page while the
//! caller holds the stream without polling it, and a stream dropped while it reads a page
//! holds no connection and leaves no transaction open.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eventstore::EventStorageExt;
use eventstore::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStream, EventStreamId, EventToStore,
    Limit,
};
use eventstore_postgres::{DatabaseInitMode, PostgresEventStorage};
use futures_util::StreamExt;
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::common;

const EVENTS: usize = 2_500;

/// Appends the `EVENTS` events of the stream `replay`, numbered from 0.
async fn append_replay(storage: &PostgresEventStorage) -> EventStreamId {
    let stream = EventStreamId::for_context("replay");
    for batch in 0..EVENTS / 500 {
        let events = (0..500)
            .map(|n| EventToStore::new("Replayed", json!({ "n": batch * 500 + n })))
            .collect();
        storage
            .append(AppendCriteria::none(), &stream, events)
            .await
            .unwrap();
    }
    stream
}

/// Takes the numbers of the next `count` events of `events` onto `numbers`.
async fn take(events: &mut EventStream<'_>, count: usize, numbers: &mut Vec<Value>) {
    for _ in 0..count {
        numbers.push(events.next().await.expect("an event").unwrap().payload["n"].clone());
    }
}

/// How many other sessions whose statement names an object of `prefix` are in the state
/// `condition` says.
async fn sessions_on(admin: &PgPool, prefix: &str, condition: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE {condition} AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()"
    ))
    .bind(prefix)
    .fetch_one(admin)
    .await
    .unwrap()
}

/// A storage on a pool of the test's own, which counts the connections given back to it,
/// with the stream `replay` appended and every connection back.
struct Counted {
    storage: PostgresEventStorage,
    pool: PgPool,
    released: Arc<AtomicUsize>,
    prefix: String,
    stream: EventStreamId,
}

impl Counted {
    async fn new() -> Counted {
        let released = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&released);
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .after_release(move |_, _| {
                counted.fetch_add(1, Ordering::SeqCst);
                Box::pin(async { Ok(true) })
            })
            .connect(&common::direct_url())
            .await
            .unwrap();
        let prefix = common::unique_prefix();
        let storage = PostgresEventStorage::builder()
            .pool(pool.clone())
            .prefix(&prefix)
            .init_mode(DatabaseInitMode::Ensure)
            .build()
            .await
            .unwrap();
        let stream = append_replay(&storage).await;
        let counted = Counted {
            storage,
            pool,
            released,
            prefix,
            stream,
        };
        counted.all_back("the appends' connections back").await;
        counted
    }

    /// How many connections were given back so far.
    fn released(&self) -> usize {
        self.released.load(Ordering::SeqCst)
    }

    /// Waits until at least `count` connections were given back.
    async fn released_at_least(&self, count: usize, what: &str) {
        let released = || async { (self.released() >= count).then_some(()) };
        common::eventually(what, Duration::from_secs(10), released).await;
    }

    /// Waits until every connection of the pool is idle in it.
    async fn all_back(&self, what: &str) {
        let idle = || async { (self.pool.num_idle() == self.pool.size() as usize).then_some(()) };
        common::eventually(what, Duration::from_secs(10), idle).await;
    }

    /// The whole stream `replay`, forward.
    fn stream_all(&self) -> EventStream<'_> {
        self.storage.query_stream(
            &EventFilter::match_all(),
            &self.stream,
            None,
            Limit::none(),
            Direction::Forward,
        )
    }

    async fn close(self) {
        self.storage.close().await.unwrap();
        self.pool.close().await;
    }
}

#[tokio::test]
async fn the_next_page_is_read_while_the_caller_holds_the_stream_without_polling_it() {
    if common::try_pool().await.is_none() {
        return;
    }
    let counted = Counted::new().await;
    let before = counted.released();
    let mut events = counted.stream_all();
    // The first event of the second page: handing it out starts the third page's read.
    let mut numbers = Vec::new();
    take(&mut events, 1_001, &mut numbers).await;

    // Not polled from here on: the third and last page is read, and its connection given
    // back, all the same. A read that moved only when polled would hold the connection (or
    // not have taken one yet) until the next poll.
    counted
        .released_at_least(before + 3, "the third page read without a poll")
        .await;

    while let Some(event) = events.next().await {
        numbers.push(event.unwrap().payload["n"].clone());
    }
    let expected: Vec<_> = (0..EVENTS).map(|n| json!(n)).collect();
    assert_eq!(numbers, expected, "every event once, in order");
    assert_eq!(
        counted.released(),
        before + 3,
        "one connection taken and given back per page"
    );
    drop(events);
    counted.close().await;
}

#[tokio::test]
async fn a_stream_dropped_while_it_reads_a_page_holds_no_connection_and_no_transaction() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let counted = Counted::new().await;
    let events_table = format!("{}events", counted.prefix);
    let before = counted.released();
    let mut events = counted.stream_all();
    let mut numbers = Vec::new();
    take(&mut events, 1_000, &mut numbers).await;
    counted
        .released_at_least(before + 2, "the first two pages read")
        .await;

    // The third page's read starts with the second page's first event, and waits for a
    // lock on the table, holding its connection, until the stream is dropped.
    let mut lock = admin.begin().await.unwrap();
    sqlx::query(&format!(
        "LOCK TABLE {events_table} IN ACCESS EXCLUSIVE MODE"
    ))
    .execute(&mut *lock)
    .await
    .unwrap();
    take(&mut events, 1, &mut numbers).await;
    common::eventually(
        "the third page's statement waiting for the lock",
        Duration::from_secs(10),
        || async {
            // The page's statement names the page function, which waits for the table.
            let waiting = sessions_on(&admin, &counted.prefix, "wait_event_type = 'Lock'").await;
            (waiting > 0).then_some(())
        },
    )
    .await;
    let expected: Vec<_> = (0..1_001).map(|n| json!(n)).collect();
    assert_eq!(
        numbers, expected,
        "the events so far, in order across pages"
    );
    drop(events);
    lock.commit().await.unwrap();

    counted
        .all_back("every connection of the storage back in its pool")
        .await;
    let busy = sessions_on(&admin, &counted.prefix, "state <> 'idle'").await;
    assert_eq!(
        busy, 0,
        "no session of the storage is in a transaction or a statement"
    );
    counted.close().await;
}
