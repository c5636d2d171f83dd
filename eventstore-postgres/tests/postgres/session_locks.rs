//! No lock outlives its transaction: after every kind of call, the storage's connections sit
//! idle holding no advisory lock. A session-level lock would stay on the connection, and
//! silently stop working behind a transaction-mode pooler that hands the connection to
//! someone else.

use std::str::FromStr;
use std::time::Duration;

use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStreamId, EventToStore, Fence,
    LeaseRequest, Limit, Tags,
};
use eventstore_postgres::PostgresEventStorage;
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::common;

#[tokio::test]
async fn no_lock_outlives_its_transaction() {
    if common::needs_direct_connection(
        "it inspects the locks of the storage's own server sessions, found by application_name",
    ) {
        return;
    }
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let application = format!("es-locks-{prefix}");
    let options = PgConnectOptions::from_str(&common::database_url())
        .unwrap()
        .application_name(&application);
    let pool = PgPoolOptions::new()
        .max_connections(3)
        .connect_with(options)
        .await
        .unwrap();
    let storage = PostgresEventStorage::builder()
        .pool(pool.clone())
        .prefix(&prefix)
        .build()
        .await
        .unwrap();

    // Every kind of call that takes a lock: lease requests, a batch, a release, plain,
    // conditional and fenced appends, a fenced bookmark, and reads.
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
        .append(criteria, &stream, vec![EventToStore::new("B", json!(2))])
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
        .bookmark_fenced(&fence, "reader", &fenced[0].reference, Tags::none())
        .await
        .unwrap();
    storage
        .query(
            &EventFilter::match_all(),
            &stream,
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .unwrap();
    storage.get_leases().await.unwrap();

    let connections: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
            .bind(&application)
            .fetch_one(&admin)
            .await
            .unwrap();
    assert!(
        connections > 0,
        "the storage's connections are visible to the check"
    );
    let held: Vec<(String, String)> = sqlx::query_as(
        "SELECT l.locktype, a.state FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE a.application_name = $1 AND l.locktype = 'advisory'",
    )
    .bind(&application)
    .fetch_all(&admin)
    .await
    .unwrap();
    assert!(
        held.is_empty(),
        "advisory locks held by idle connections: {held:?}"
    );
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
         AND state LIKE 'idle in transaction%'",
    )
    .bind(&application)
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(open, 0, "no transaction stays open between calls");
    storage.close().await.unwrap();
    pool.close().await;
}
