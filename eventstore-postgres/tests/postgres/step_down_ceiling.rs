//! A renewal answers "step down" from the lease row alone when no contender can outrank its
//! holder (`contender_priority_ceiling`), and looks at the contenders whenever one might:
//! after a higher-priority registration, and on rows whose ceiling is unknown.

use std::time::Duration;

use eventstore::{EventStorage, LeaseRequest, LeaseStatus};
use sqlx::{PgConnection, PgPool};

use crate::common;

const TTL: Duration = Duration::from_secs(3600);
const LEASES: usize = 200;

/// How often this transaction has read the contenders table by an index so far.
async fn contender_index_reads(transaction: &mut PgConnection, prefix: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(sum(idx_scan), 0)::bigint FROM pg_stat_xact_user_tables \
         WHERE relname = $1",
    )
    .bind(format!("{prefix}lease_contenders"))
    .fetch_one(&mut *transaction)
    .await
    .unwrap()
}

/// The `contender_priority_ceiling` of `lease_name`'s row.
async fn ceiling(pool: &PgPool, prefix: &str, lease_name: &str) -> Option<i64> {
    sqlx::query_scalar(&format!(
        "SELECT contender_priority_ceiling FROM {prefix}leases WHERE lease_name = $1"
    ))
    .bind(lease_name)
    .fetch_one(pool)
    .await
    .unwrap()
}

fn requests(owner: &str, priority: i64) -> Vec<LeaseRequest> {
    (0..LEASES)
        .map(|n| LeaseRequest::new(format!("lease-{n}"), owner, priority, TTL))
        .collect()
}

/// Renews every lease as `holder`, one request at a time and as one batch, in a transaction
/// of its own; returns the statuses and how many index reads of the contenders it took.
async fn renew_in_transaction(pool: &PgPool, prefix: &str) -> (Vec<String>, i64) {
    let mut transaction = pool.begin().await.unwrap();
    let mut statuses = Vec::new();
    for n in 0..LEASES {
        let status: String = sqlx::query_scalar(&format!(
            "SELECT lease_status FROM {prefix}request_lease($1, 'holder', 0, '1 hour', '10s')"
        ))
        .bind(format!("lease-{n}"))
        .fetch_one(&mut *transaction)
        .await
        .unwrap();
        statuses.push(status);
    }
    let names: Vec<String> = (0..LEASES).map(|n| format!("lease-{n}")).collect();
    let batch: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT lease_status FROM {prefix}request_leases($1, $2, $3, $4, '10s') \
         ORDER BY lease_index"
    ))
    .bind(&names)
    .bind(vec!["holder"; LEASES])
    .bind(vec![0_i64; LEASES])
    .bind(vec![
        sqlx::postgres::types::PgInterval::try_from(TTL)
            .unwrap();
        LEASES
    ])
    .fetch_all(&mut *transaction)
    .await
    .unwrap();
    statuses.extend(batch);
    let reads = contender_index_reads(&mut transaction, prefix).await;
    transaction.commit().await.unwrap();
    (statuses, reads)
}

#[tokio::test]
async fn renewals_beside_contenders_of_equal_priority_read_no_contender() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    storage.request_leases(requests("holder", 0)).await.unwrap();
    for standby in ["standby-1", "standby-2"] {
        storage.request_leases(requests(standby, 0)).await.unwrap();
    }

    let (statuses, reads) = renew_in_transaction(&pool, &prefix).await;
    assert!(statuses.iter().all(|s| s == "leader"), "{statuses:?}");
    assert_eq!(
        reads, 0,
        "renewals outranked by no contender read the contenders table"
    );

    // A contender above the holder's priority: the holder is asked to step down, and its
    // renewals look at the contenders again.
    storage
        .request_lease(LeaseRequest::new("lease-7", "preferred", 5, TTL))
        .await
        .unwrap();
    let (statuses, reads) = renew_in_transaction(&pool, &prefix).await;
    for (index, status) in statuses.iter().enumerate() {
        let expected = if index % LEASES == 7 {
            "step_down_requested"
        } else {
            "leader"
        };
        assert_eq!(status, expected, "request {index}");
    }
    assert!(reads > 0, "the outranked renewals read no contender");

    // The preferred contender withdraws: the ceiling stays (it only ever errs high), so the
    // renewal looks, finds nobody above it, and leads.
    storage.release_lease("lease-7", "preferred").await.unwrap();
    let renewed = storage
        .request_lease(LeaseRequest::new("lease-7", "holder", 0, TTL))
        .await
        .unwrap();
    assert_eq!(renewed.status, LeaseStatus::Leader);
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_lease_whose_ceiling_is_unknown_still_asks_its_holder_to_step_down() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let granted = storage
        .request_lease(LeaseRequest::new("orders", "holder", 0, TTL))
        .await
        .unwrap();
    // As a row written before the column existed, with a contender above the holder.
    sqlx::query(&format!(
        "UPDATE {prefix}leases SET contender_priority_ceiling = NULL WHERE lease_name = 'orders'"
    ))
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {prefix}lease_contenders (lease_name, owner, priority, heartbeat_at, ttl) \
         VALUES ('orders', 'preferred', 9, now(), '1 hour')"
    ))
    .execute(&pool)
    .await
    .unwrap();

    let single = storage
        .request_lease(LeaseRequest::new("orders", "holder", 0, TTL))
        .await
        .unwrap();
    let batch = storage
        .request_leases(vec![
            LeaseRequest::new("orders", "holder", 0, TTL),
            LeaseRequest::new("other", "holder", 0, TTL),
        ])
        .await
        .unwrap();
    for response in [&single, &batch[0]] {
        assert_eq!(response.status, LeaseStatus::LeaderStepDownRequested);
        assert_eq!(response.fencing_token, granted.fencing_token);
    }
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_new_holder_takes_the_ceiling_of_the_contenders_left() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let short = Duration::from_millis(300);
    storage
        .request_lease(LeaseRequest::new("orders", "first", 0, short))
        .await
        .unwrap();
    for (owner, priority) in [("low", 1), ("high", 4)] {
        storage
            .request_lease(LeaseRequest::new("orders", owner, priority, TTL))
            .await
            .unwrap();
    }
    assert_eq!(ceiling(&pool, &prefix, "orders").await, Some(4));

    // "first" lets the lease expire; "high" takes it over. Left: "low", at priority 1.
    let taken = common::eventually(
        "the lease to be taken over",
        Duration::from_secs(10),
        || async {
            let response = storage
                .request_lease(LeaseRequest::new("orders", "high", 4, TTL))
                .await
                .unwrap();
            response.status.is_leader().then_some(response)
        },
    )
    .await;
    assert_eq!(taken.status, LeaseStatus::Leader);
    assert_eq!(ceiling(&pool, &prefix, "orders").await, Some(1));
    storage.close().await.unwrap();
}
