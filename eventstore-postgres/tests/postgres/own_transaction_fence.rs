//! Fences for the application's own tables: `check_fence` in the caller's transaction accepts
//! the live holder's fence, holds the lease against a takeover until that transaction ends,
//! and refuses the fence once another instance holds the lease, with nothing of the caller's
//! written. The SQL function `<prefix>check_fence` does the same for code outside Rust.

use std::sync::Arc;
use std::time::Duration;

use eventstore::{EventStorage, EventStorageError, Fence, FencingToken, LeaseRequest, LeaseStatus};
use eventstore_postgres::PostgresEventStorage;
use sqlx::PgPool;

use crate::common;

const LEASE: &str = "read-model";
const TTL: Duration = Duration::from_millis(300);

async fn read_model_rows(pool: &PgPool, table: &str) -> Vec<(String, i64)> {
    sqlx::query_as(&format!(
        "SELECT writer, token FROM {table} ORDER BY token, writer"
    ))
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Writes one read-model row under `fence` in the caller's own transaction.
async fn write_fenced(
    storage: &PostgresEventStorage,
    table: &str,
    fence: &Fence,
    writer: &str,
) -> Result<(), EventStorageError> {
    let mut transaction = storage.pool().begin().await.unwrap();
    storage.check_fence(&mut transaction, fence).await?;
    sqlx::query(&format!(
        "INSERT INTO {table} (writer, token) VALUES ($1, $2)"
    ))
    .bind(writer)
    .bind(fence.token.0 as i64)
    .execute(&mut *transaction)
    .await
    .unwrap();
    transaction.commit().await.unwrap();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_model_write_in_the_callers_transaction_is_fenced_against_a_racing_takeover() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    if common::needs_direct_connection("it holds a transaction open across other connections") {
        return;
    }
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let table = format!("{prefix}read_model");
    sqlx::query(&format!(
        "CREATE TABLE {table} (writer text NOT NULL, token bigint NOT NULL)"
    ))
    .execute(&admin)
    .await
    .unwrap();
    let other: Arc<dyn EventStorage> = Arc::new(common::storage_on(&prefix).await);

    let held = storage
        .request_lease(LeaseRequest::new(LEASE, "instance-a", 0, TTL))
        .await
        .unwrap();
    assert_eq!(held.status, LeaseStatus::Leader);
    let fence_a = Fence::new(LEASE, held.fencing_token);
    write_fenced(&storage, &table, &fence_a, "instance-a")
        .await
        .expect("the live holder's fence passes in its own transaction");

    // Instance a checks its fence and keeps its transaction open past the ttl while instance b
    // tries to take the lease over: the takeover waits for the transaction.
    let mut transaction = storage.pool().begin().await.unwrap();
    storage
        .check_fence(&mut transaction, &fence_a)
        .await
        .expect("still live at the check");
    common::eventually(
        "the lease to expire on the database's clock",
        Duration::from_secs(10),
        || async {
            let now = other.storage_time().await.ok()?;
            let leases = other.get_leases().await.ok()?;
            leases
                .iter()
                .any(|l| l.lease_name == LEASE && l.is_expired_at(now))
                .then_some(())
        },
    )
    .await;
    let takeover = {
        let other = Arc::clone(&other);
        tokio::spawn(async move {
            other
                .request_lease(LeaseRequest::new(LEASE, "instance-b", 0, TTL * 20))
                .await
        })
    };
    common::eventually(
        "the takeover to wait for the checked transaction",
        Duration::from_secs(10),
        || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND query LIKE '%request_lease%' \
                   AND query NOT LIKE '%pg_stat_activity%'",
            )
            .fetch_one(&admin)
            .await
            .ok()?;
            (waiting >= 1).then_some(())
        },
    )
    .await;
    assert!(
        !takeover.is_finished(),
        "no takeover commits while the check holds"
    );
    sqlx::query(&format!(
        "INSERT INTO {table} (writer, token) VALUES ('instance-a', $1)"
    ))
    .bind(fence_a.token.0 as i64)
    .execute(&mut *transaction)
    .await
    .unwrap();
    transaction.commit().await.unwrap();
    let taken = takeover
        .await
        .unwrap()
        .expect("the takeover goes ahead after the commit");
    assert_eq!(
        (taken.status, taken.fencing_token),
        (LeaseStatus::Leader, fence_a.token.next()),
        "instance b leads with the next token"
    );

    // Now instance a is a zombie: its fence is refused and nothing of it is written.
    let refused = write_fenced(&storage, &table, &fence_a, "zombie").await;
    assert!(
        matches!(
            refused,
            Err(EventStorageError::Fenced { presented, current: Some(current), .. })
                if presented == fence_a.token && current == taken.fencing_token
        ),
        "the zombie's fence is refused: {refused:?}"
    );
    let fence_b = Fence::new(LEASE, taken.fencing_token);
    write_fenced(&storage, &table, &fence_b, "instance-b")
        .await
        .expect("the new holder's fence passes");
    assert_eq!(
        read_model_rows(&admin, &table).await,
        vec![
            ("instance-a".to_owned(), 1),
            ("instance-a".to_owned(), 1),
            ("instance-b".to_owned(), 2),
        ],
        "the read model holds the holders' writes and nothing of the zombie"
    );

    // The SQL function answers the same, for code outside Rust.
    let sql = format!("SELECT {prefix}check_fence($1, $2)");
    let mut transaction = admin.begin().await.unwrap();
    let error = sqlx::query(&sql)
        .bind(LEASE)
        .bind(fence_a.token.0 as i64)
        .execute(&mut *transaction)
        .await
        .expect_err("the SQL check refuses the stale token");
    let code = error
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned());
    assert_eq!(code.as_deref(), Some("EF001"), "{error}");
    transaction.rollback().await.unwrap();
    let mut transaction = admin.begin().await.unwrap();
    sqlx::query(&sql)
        .bind(LEASE)
        .bind(fence_b.token.0 as i64)
        .execute(&mut *transaction)
        .await
        .expect("the SQL check passes the live token");
    transaction.commit().await.unwrap();

    storage.close().await.unwrap();
    other.close().await.unwrap();
}

#[tokio::test]
async fn check_fence_outside_a_transaction_or_with_a_bad_fence_is_invalid_and_checks_nothing() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    storage
        .request_lease(LeaseRequest::new(LEASE, "instance-a", 0, TTL * 100))
        .await
        .unwrap();
    let fence = Fence::new(LEASE, FencingToken(1));

    let mut connection = storage.pool().acquire().await.unwrap();
    let outside = storage.check_fence(&mut connection, &fence).await;
    assert!(
        matches!(&outside, Err(EventStorageError::InvalidInput { field, .. }) if field.contains("check_fence")),
        "outside a transaction block: {outside:?}"
    );
    drop(connection);

    let mut transaction = storage.pool().begin().await.unwrap();
    let blank = storage
        .check_fence(&mut transaction, &Fence::new(" ", FencingToken(1)))
        .await;
    assert!(
        matches!(blank, Err(EventStorageError::InvalidInput { .. })),
        "a blank lease name: {blank:?}"
    );
    transaction.rollback().await.unwrap();

    let mut transaction = storage.pool().begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .persistent(false)
        .execute(&mut *transaction)
        .await
        .unwrap();
    let repeatable = storage.check_fence(&mut transaction, &fence).await;
    assert!(
        matches!(&repeatable, Err(EventStorageError::InvalidInput { value, .. }) if value.contains("repeatable read")),
        "REPEATABLE READ: {repeatable:?}"
    );
    transaction.rollback().await.unwrap();
    storage.close().await.unwrap();
}

/// A lease held by `instance-a` on a fresh storage, and a fence of its tenure.
async fn storage_with_a_fence() -> (PostgresEventStorage, Fence) {
    let storage = common::storage_on(&common::unique_prefix()).await;
    let granted = storage
        .request_lease(LeaseRequest::new(LEASE, "instance-a", 0, TTL * 100))
        .await
        .unwrap();
    (storage, Fence::new(LEASE, granted.fencing_token))
}

/// A caller's transaction that an earlier statement aborted is refused as such, not as a
/// connection outside a transaction block.
#[tokio::test]
async fn check_fence_in_a_transaction_an_error_aborted_is_refused_naming_that() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let (storage, fence) = storage_with_a_fence().await;
    let mut transaction = storage.pool().begin().await.unwrap();
    let failed = sqlx::query("SELECT 1/0")
        .persistent(false)
        .execute(&mut *transaction)
        .await;
    assert!(failed.is_err(), "the statement that aborts the transaction");
    let aborted = storage.check_fence(&mut transaction, &fence).await;
    assert!(
        matches!(&aborted, Err(EventStorageError::InvalidInput { value, .. })
            if value.contains("an earlier error aborted")),
        "an aborted transaction: {aborted:?}"
    );
    drop(transaction);
    storage.close().await.unwrap();
}

/// A caller's transaction whose connection the server killed: a `Backend` error, as every
/// call on a lost connection answers, not the caller's invalid input.
#[tokio::test]
async fn check_fence_on_a_killed_connection_is_a_backend_error() {
    if common::needs_direct_connection("it kills the caller's own server connection") {
        return;
    }
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let (storage, fence) = storage_with_a_fence().await;
    let mut transaction = storage.pool().begin().await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *transaction)
        .await
        .unwrap();
    let _: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&admin)
        .await
        .unwrap();
    common::eventually(
        "the backend to be gone",
        Duration::from_secs(10),
        || async {
            let gone: bool = sqlx::query_scalar(
                "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)",
            )
            .bind(pid)
            .fetch_one(&admin)
            .await
            .unwrap();
            gone.then_some(())
        },
    )
    .await;
    let checked = storage.check_fence(&mut transaction, &fence).await;
    assert!(
        matches!(checked, Err(EventStorageError::Backend { .. })),
        "a killed connection: {checked:?}"
    );
    drop(transaction);
    storage.close().await.unwrap();
}

/// The check waits for the lease lock under the storage's lock timeout, then leaves the
/// caller's own for the rest of the caller's transaction: from Rust and from SQL alike.
#[tokio::test]
async fn check_fence_leaves_the_callers_lock_timeout_as_it_was() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let (storage, fence) = storage_with_a_fence().await;
    let prefix = storage.prefix().to_owned();
    for from_sql in [false, true] {
        let mut transaction = storage.pool().begin().await.unwrap();
        // Unnamed statements, as a pooler in transaction mode needs.
        sqlx::query("SET LOCAL lock_timeout = '1234ms'")
            .persistent(false)
            .execute(&mut *transaction)
            .await
            .unwrap();
        if from_sql {
            sqlx::query(&format!("SELECT {prefix}check_fence($1, $2)"))
                .bind(&fence.lease_name)
                .bind(i64::try_from(fence.token.0).unwrap())
                .persistent(false)
                .execute(&mut *transaction)
                .await
                .unwrap();
        } else {
            storage.check_fence(&mut transaction, &fence).await.unwrap();
        }
        let after: String = sqlx::query_scalar("SHOW lock_timeout")
            .persistent(false)
            .fetch_one(&mut *transaction)
            .await
            .unwrap();
        transaction.rollback().await.unwrap();
        assert_eq!(after, "1234ms", "after the check (from SQL: {from_sql})");
    }
    storage.close().await.unwrap();
}
