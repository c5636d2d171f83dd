//! No lock outlives its transaction: after every kind of call, the storage's connections sit
//! idle holding no advisory lock. A session-level lock would stay on the connection, and
//! silently stop working behind a transaction-mode pooler that hands the connection to
//! someone else.

use eventstore::EventStorage;

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
    let (storage, pool, application) =
        common::sessions::storage_with_named_pool(&prefix, "locks").await;
    // Every kind of call, those that take a lock among them: lease requests, a batch, a
    // release, plain, conditional, idempotent and fenced appends, fenced bookmarks, reads.
    common::sessions::exercise_every_call(&storage).await;

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
    assert_eq!(
        common::sessions::open_transactions(&admin, &application).await,
        0,
        "no transaction stays open between calls"
    );
    storage.close().await.unwrap();
    pool.close().await;
}
