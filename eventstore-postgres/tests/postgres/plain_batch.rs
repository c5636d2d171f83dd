//! A batch's plain renewals and refreshes, sent as one statement without the leases' advisory
//! locks: they wait for no decision on their leases, and a takeover that finds a contender
//! lapsed while such a refresh makes it live again keeps it registered and counts it.

use std::sync::Arc;
use std::time::Duration;

use eventstore::EventStorageExt;
use eventstore::{
    EventStorage, FencingToken, LeaseChangeKind, LeaseRequest, LeaseResponse, LeaseScope,
    LeaseStatus,
};
use eventstore_postgres::PostgresEventStorage;
use sqlx::PgPool;

use crate::common;
use crate::lease_changes::next_change;
use crate::plain_renewals::{ask_for_orders, lock_lease_row, summary, wait_for_a_lock_wait};

const LONG: Duration = Duration::from_secs(60);

/// A storage on a fresh prefix where `a` holds `orders` and stands by for `billing`, which
/// `b` holds; `a`'s batch renewing the one and refreshing the other is all plain.
async fn holder_and_standby(prefix: &str) -> PostgresEventStorage {
    let storage = common::storage_on(prefix).await;
    for (lease, holder, standby) in [("orders", "a", "b"), ("billing", "b", "a")] {
        for owner in [holder, standby] {
            storage
                .request_lease(LeaseRequest::new(lease, owner, 0, LONG))
                .await
                .unwrap();
        }
    }
    storage
}

fn plain_batch_of_a() -> Vec<LeaseRequest> {
    vec![
        LeaseRequest::new("orders", "a", 0, LONG),
        LeaseRequest::new("billing", "a", 0, LONG),
    ]
}

/// What [`plain_batch_of_a`] answers: `a` leads `orders`, stands by for `billing`.
fn answered_to_a(answers: &[LeaseResponse]) {
    assert_eq!(
        answers.iter().map(summary).collect::<Vec<_>>(),
        [
            (LeaseStatus::Leader, FencingToken(1), "a"),
            (LeaseStatus::Standby, FencingToken(1), "b"),
        ]
    );
}

#[tokio::test]
async fn plain_renewals_and_refreshes_in_a_batch_wait_for_no_lease_lock() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = holder_and_standby(&prefix).await;
    let held = common::hold_lease_locks(&admin, &prefix, &["orders", "billing"]).await;
    let answers = tokio::time::timeout(
        Duration::from_secs(5),
        storage.request_leases(plain_batch_of_a()),
    )
    .await
    .expect("plain requests wait for no lease lock")
    .unwrap();
    held.rollback().await.unwrap();
    answered_to_a(&answers);
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_batch_whose_plain_statement_gives_up_waiting_is_answered_by_the_function() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = Arc::new(holder_and_standby(&prefix).await);
    // Held past the plain statement's short wait: the batch goes to the function, which
    // waits for the row as long as the storage's lock timeout allows.
    let locked = lock_lease_row(&admin, &prefix, "orders").await;
    let asking = tokio::spawn({
        let storage = Arc::clone(&storage);
        async move { storage.request_leases(plain_batch_of_a()).await }
    });
    common::eventually(
        "request_leases to wait for the row",
        Duration::from_secs(10),
        || function_waiting(&admin, &prefix),
    )
    .await;
    locked.commit().await.unwrap();
    answered_to_a(&asking.await.unwrap().expect("the batch is answered"));
    storage.close().await.unwrap();
}

/// `Some` once a call of `prefix`'s `request_leases` waits for a lock.
async fn function_waiting(admin: &PgPool, prefix: &str) -> Option<()> {
    let waiting: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
            AND query LIKE '%' || $1 || 'request_leases%'",
    )
    .bind(prefix)
    .fetch_one(admin)
    .await
    .ok()?;
    (waiting == 1).then_some(())
}

/// `orders` is held by `a` (priority 0) and contended by `c` (priority 5), both with a short
/// ttl. A refresh of `c` starts while `c` is live (as the plain batch's does, without the
/// lease's lock) and holds `c`'s row until both have lapsed on the database's clock; `b` then
/// asks for `orders` (see [`ask_for_orders`]), and the refresh commits while
/// `b` waits for `c`'s row. Returns `b`'s answer, the changes of `orders` notified until `b`
/// acquired it, whether `c` is still registered, and the lease's priority ceiling.
async fn take_over_while_a_refresh_lands(
    in_a_batch: bool,
) -> Option<(LeaseResponse, Vec<LeaseChangeKind>, bool, i64)> {
    let admin = common::try_pool().await?;
    let prefix = common::unique_prefix();
    let storage = Arc::new(common::storage_on(&prefix).await);
    let short = Duration::from_millis(300);
    for (owner, priority) in [("a", 0), ("c", 5)] {
        storage
            .request_lease(LeaseRequest::new("orders", owner, priority, short))
            .await
            .unwrap();
    }
    let mut refreshing = admin.begin().await.unwrap();
    sqlx::query(&format!(
        "UPDATE {prefix}lease_contenders \
            SET heartbeat_at = greatest(heartbeat_at, now()), ttl = interval '60 seconds' \
          WHERE lease_name = 'orders' AND owner = 'c' AND heartbeat_at + ttl >= now()"
    ))
    .execute(&mut *refreshing)
    .await
    .unwrap();
    common::eventually(
        "the lease and c's registration to lapse",
        Duration::from_secs(10),
        || both_lapsed(&admin, &prefix),
    )
    .await;
    let mut changes = storage
        .subscribe_lease_changes(LeaseScope::lease("orders"))
        .await
        .unwrap();

    let asking = ask_for_orders(&storage, "b", in_a_batch);
    wait_for_a_lock_wait(&admin, &prefix).await;
    refreshing.commit().await.unwrap();
    let answer = asking.await.unwrap().expect("b is answered");

    let mut notified = Vec::new();
    loop {
        match next_change(&mut changes, "orders").await {
            LeaseChangeKind::Acquired { .. } => break,
            change => notified.push(change),
        }
    }
    let c_registered: bool = sqlx::query_scalar(&format!(
        "SELECT EXISTS (SELECT 1 FROM {prefix}lease_contenders \
                         WHERE lease_name = 'orders' AND owner = 'c')"
    ))
    .fetch_one(&admin)
    .await
    .unwrap();
    let ceiling: i64 = sqlx::query_scalar(&format!(
        "SELECT contender_priority_ceiling FROM {prefix}leases WHERE lease_name = 'orders'"
    ))
    .fetch_one(&admin)
    .await
    .unwrap();
    storage.close().await.unwrap();
    Some((answer, notified, c_registered, ceiling))
}

/// `Some` once `orders` of `prefix` and `c`'s registration for it, as committed, have both
/// lapsed by the database's clock.
async fn both_lapsed(admin: &PgPool, prefix: &str) -> Option<()> {
    let lapsed: bool = sqlx::query_scalar(&format!(
        "SELECT (SELECT heartbeat_at + ttl < now() FROM {prefix}leases \
                  WHERE lease_name = 'orders') \
            AND (SELECT heartbeat_at + ttl < now() FROM {prefix}lease_contenders \
                  WHERE lease_name = 'orders' AND owner = 'c')"
    ))
    .fetch_one(admin)
    .await
    .ok()?;
    lapsed.then_some(())
}

#[tokio::test]
async fn a_takeover_keeps_a_contender_whose_refresh_lands_while_it_looks() {
    for in_a_batch in [false, true] {
        let Some((answer, notified, c_registered, ceiling)) =
            take_over_while_a_refresh_lands(in_a_batch).await
        else {
            return;
        };
        assert_eq!(
            summary(&answer),
            (LeaseStatus::LeaderStepDownRequested, FencingToken(2), "b"),
            "c, live again and above b, asks b to step down (in a batch: {in_a_batch})"
        );
        assert_eq!(
            notified,
            [
                LeaseChangeKind::ContenderLeft { owner: "a".into() },
                LeaseChangeKind::ContenderJoined {
                    owner: "b".into(),
                    priority: 0
                },
            ],
            "a left, b joined, c did not leave (in a batch: {in_a_batch})"
        );
        assert!(
            c_registered,
            "c stays registered (in a batch: {in_a_batch})"
        );
        assert_eq!(
            ceiling, 5,
            "c counts for the ceiling (in a batch: {in_a_batch})"
        );
    }
}
