//! Storages whose server sessions a test can find, what those sessions still hold, and a
//! run of every call of the storage to look at them after.

use std::str::FromStr;
use std::time::Duration;

use eventstore::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStreamId, EventToStore, Fence,
    LeaseRequest, Limit, Tags,
};
use eventstore_postgres::PostgresEventStorage;
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

/// A storage on a pool of three connections whose sessions carry an application name of
/// their own, `es-<label>-<prefix>`, by which `pg_stat_activity` finds them: the storage,
/// its pool and that name.
pub async fn storage_with_named_pool(
    prefix: &str,
    label: &str,
) -> (PostgresEventStorage, PgPool, String) {
    let application = format!("es-{label}-{prefix}");
    let options = PgConnectOptions::from_str(&super::database_url())
        .unwrap()
        .application_name(&application);
    let pool = PgPoolOptions::new()
        .max_connections(3)
        .connect_with(options)
        .await
        .unwrap();
    let storage = PostgresEventStorage::builder()
        .pool(pool.clone())
        .prefix(prefix)
        .build()
        .await
        .unwrap();
    (storage, pool, application)
}

/// How many sessions named `application` sit idle inside a transaction.
pub async fn open_transactions(admin: &PgPool, application: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
         AND state LIKE 'idle in transaction%'",
    )
    .bind(application)
    .fetch_one(admin)
    .await
    .unwrap()
}

/// Every call of the storage, once: appends (plain, conditional, idempotent, fenced), reads,
/// bookmarks (plain and fenced), leases (one, a batch, a release, the list, the clock).
pub async fn exercise_every_call(storage: &PostgresEventStorage) {
    let ttl = Duration::from_secs(60);
    let granted = storage
        .request_lease(LeaseRequest::new("jobs", "a", 0, ttl))
        .await
        .unwrap();
    storage
        .request_leases(vec![
            LeaseRequest::new("jobs", "b", 0, ttl),
            LeaseRequest::new("other", "b", 0, ttl),
        ])
        .await
        .unwrap();
    storage.release_lease("other", "b").await.unwrap();
    let stream = EventStreamId::for_context("orders");
    let stored = storage
        .append(
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("A", json!(1))],
        )
        .await
        .unwrap();
    let criteria = AppendCriteria::of(EventFilter::for_types(["A"]), Some(stored[0].reference));
    storage
        .append(
            criteria,
            &stream,
            vec![EventToStore::new("B", json!(2)).with_idempotency_key("b")],
        )
        .await
        .unwrap();
    let fence = Fence::new("jobs", granted.fencing_token);
    let fenced = storage
        .append_fenced(
            &fence,
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("C", json!(3))],
        )
        .await
        .unwrap();
    storage
        .bookmark("plain", &stored[0].reference, Tags::none())
        .await
        .unwrap();
    storage
        .bookmark_fenced(&fence, "fenced", &fenced[0].reference, Tags::none())
        .await
        .unwrap();
    assert_eq!(
        storage.get_bookmark("fenced").await.unwrap(),
        Some(fenced[0].reference)
    );
    assert_eq!(storage.get_bookmarks().await.unwrap().len(), 2);
    storage.remove_bookmark("plain").await.unwrap();
    let events = storage
        .query(
            &EventFilter::match_all(),
            &stream,
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .unwrap();
    assert_eq!(events.len(), 3);
    assert_eq!(
        storage.head(&stream).await.unwrap(),
        Some(fenced[0].reference)
    );
    assert!(storage
        .get_event_by_id(stored[0].reference.id)
        .await
        .unwrap()
        .is_some());
    assert_eq!(storage.get_leases().await.unwrap().len(), 2);
    storage.storage_time().await.unwrap();
}
