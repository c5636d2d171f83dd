//! Calls given up part-way (a caller's timeout around them) and what later calls find.

use std::time::Duration;

use eventstore::EventStorageExt;
use eventstore::{EventStorage, LeaseScope};
use sqlx::PgPool;
use tokio::time::timeout;

use crate::common;

/// A storage with a pool of its own that keeps idle connections (no idle timeout).
async fn storage_keeping_idle_sessions(prefix: &str) -> eventstore_postgres::PostgresEventStorage {
    common::builder(prefix)
        .idle_timeout(None)
        .build()
        .await
        .unwrap()
}

/// The pool sessions (not the listener's) whose last statement named `prefix`'s tables.
async fn sessions(admin: &PgPool, prefix: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'eventstore' \
         AND strpos(query, $1) > 0",
    )
    .bind(format!("{prefix}leases"))
    .fetch_one(admin)
    .await
    .unwrap()
}

/// A `close` given up while it waits for the listener to stop (a caller's timeout around it)
/// has ended the subscriptions all the same, and the next `close` finishes the rest.
#[tokio::test]
async fn a_close_after_one_given_up_still_ends_every_subscription() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let storage = storage_keeping_idle_sessions(&common::unique_prefix()).await;
    let mut changes = storage
        .subscribe_lease_changes(LeaseScope::All)
        .await
        .unwrap();
    assert!(
        timeout(Duration::ZERO, storage.close()).await.is_err(),
        "the first close waits for the listener"
    );
    storage.close().await.expect("the second close");
    let next = timeout(Duration::from_secs(10), changes.next()).await;
    assert!(
        matches!(next, Ok(None)),
        "after close() answered Ok the subscription should end (None), got {next:?}"
    );
}

/// The `close` after one given up part-way closes the storage's own pool: none of its
/// sessions stays open on the server.
#[tokio::test]
async fn a_close_after_one_given_up_still_closes_the_storages_own_pool() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    if common::needs_direct_connection("it counts the server sessions of the storage's pool") {
        return;
    }
    let prefix = common::unique_prefix();
    let storage = storage_keeping_idle_sessions(&prefix).await;
    let _changes = storage
        .subscribe_lease_changes(LeaseScope::All)
        .await
        .unwrap();
    storage.get_leases().await.unwrap();
    assert!(sessions(&admin, &prefix).await > 0, "a pooled session");
    assert!(
        timeout(Duration::ZERO, storage.close()).await.is_err(),
        "the first close waits for the listener"
    );
    storage.close().await.expect("the second close");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut open = sessions(&admin, &prefix).await;
    while open > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        open = sessions(&admin, &prefix).await;
    }
    assert_eq!(
        open, 0,
        "close() answered Ok, yet the storage's own pool still has {open} session(s) open \
         10 s later"
    );
}
