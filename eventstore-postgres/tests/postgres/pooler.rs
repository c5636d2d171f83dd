//! Behind a pooler in transaction mode (PgBouncer): without prepared statements nothing
//! relies on session state, and without a direct connection to `LISTEN` the storage offers no
//! push and says so.

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventstore::EventStorageExt;
use eventstore::{
    Capability, EventStorage, EventStorageError, EventStreamId, LeaseRequest, LeaseScope,
};
use eventstore_postgres::PostgresEventStorage;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, Row};

use crate::common;

/// What a session still holds after a call: named prepared statements, advisory locks,
/// channels it listens on, settings changed for the whole session, temporary tables.
const LEFTOVERS: &str = "SELECT \
     (SELECT count(*) FROM pg_prepared_statements) AS prepared, \
     (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) \
         AS advisory_locks, \
     (SELECT count(*) FROM pg_listening_channels()) AS channels, \
     (SELECT count(*) FROM pg_settings WHERE source = 'session') AS session_settings, \
     (SELECT count(*) FROM pg_class WHERE relpersistence = 't') AS temporary_tables";

/// A caller's pool of one connection whose session is reset (`DISCARD ALL`) before every
/// call, as if each call reached another server session, as behind a pooler; before the
/// reset it records what the previous call left in the session.
#[tokio::test]
async fn without_prepared_statements_nothing_relies_on_session_state() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let leftovers = Arc::new(Mutex::new(Vec::<String>::new()));
    let checks = Arc::new(Mutex::new(0_usize));
    let (found, counted) = (Arc::clone(&leftovers), Arc::clone(&checks));
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .before_acquire(move |connection, _| {
            let (found, counted) = (Arc::clone(&found), Arc::clone(&counted));
            Box::pin(async move {
                let row = connection.fetch_one(LEFTOVERS).await?;
                for column in [
                    "prepared",
                    "advisory_locks",
                    "channels",
                    "session_settings",
                    "temporary_tables",
                ] {
                    let count: i64 = row.try_get(column)?;
                    if count > 0 {
                        found.lock().unwrap().push(format!("{count} {column}"));
                    }
                }
                *counted.lock().unwrap() += 1;
                connection.execute("DISCARD ALL").await?;
                Ok(true)
            })
        })
        .connect_with(PgConnectOptions::from_str(&common::direct_url()).unwrap())
        .await
        .unwrap();
    let prefix = common::unique_prefix();
    let storage = PostgresEventStorage::builder()
        .pool(pool.clone())
        .prefix(&prefix)
        .prepared_statements(false)
        .build()
        .await
        .unwrap();

    common::sessions::exercise_every_call(&storage).await;
    // One more acquire checks what the last call left.
    drop(pool.acquire().await.unwrap());

    let checked = *checks.lock().unwrap();
    assert!(checked >= 15, "only {checked} calls were checked");
    let found = leftovers.lock().unwrap().clone();
    assert!(found.is_empty(), "calls left session state: {found:?}");
    storage.close().await.unwrap();
    pool.close().await;
}

/// `pgbouncer=true` without a listen url: no connection can `LISTEN`, so the storage offers
/// neither lease changes nor append hints and refuses their subscriptions; electors and
/// projectors on it poll. With a direct listen url it offers both again.
#[tokio::test]
async fn a_pooler_url_without_a_listen_url_offers_no_push() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let url = common::database_url();
    let url = if url.contains("pgbouncer=true") {
        url
    } else {
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}pgbouncer=true")
    };
    let prefix = common::unique_prefix();
    let pooled = PostgresEventStorage::builder()
        .url(&url)
        .prefix(&prefix)
        .max_connections(2)
        .append_hints(true)
        .build()
        .await
        .unwrap();
    assert!(pooled.supports(Capability::Lease));
    assert!(!pooled.supports(Capability::LeaseChanges));
    assert!(!pooled.supports(Capability::AppendHints));
    let changes = pooled
        .subscribe_lease_changes(LeaseScope::lease("jobs"))
        .await;
    assert!(
        matches!(changes, Err(EventStorageError::Unsupported { .. })),
        "{changes:?}"
    );
    let hints = pooled
        .subscribe_appends(&EventStreamId::for_context("orders"))
        .await;
    assert!(
        matches!(hints, Err(EventStorageError::Unsupported { .. })),
        "{hints:?}"
    );
    // Leases work all the same.
    let granted = pooled
        .request_lease(LeaseRequest::new("jobs", "a", 0, Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(granted.status.is_leader());
    pooled.close().await.unwrap();

    let listening = PostgresEventStorage::builder()
        .url(&url)
        .listen_url(common::direct_url())
        .prefix(&prefix)
        .max_connections(2)
        .append_hints(true)
        .build()
        .await
        .unwrap();
    assert!(listening.supports(Capability::LeaseChanges));
    assert!(listening.supports(Capability::AppendHints));
    listening.close().await.unwrap();
}

#[tokio::test]
async fn a_listen_url_through_the_pooler_is_refused() {
    let result = PostgresEventStorage::builder()
        .url(common::database_url())
        .listen_url("postgres://app@pooler:6432/db?pgbouncer=true")
        .build()
        .await;
    match result {
        Err(EventStorageError::InvalidInput { field, .. }) => assert_eq!(field, "listen url"),
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}
