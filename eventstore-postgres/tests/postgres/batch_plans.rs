//! A batch reads its leases by key however large the lease table and whatever its
//! statistics: with `ANALYZE` done on a large table, the planner would cost a scan of the
//! whole table into a hash below a thousand lookups by key, and take it.

use eventstore_api::EventStorage;
use sqlx::Row;
use std::time::Duration;

use crate::common;

const LEASES: usize = 20_000;
const BATCH: usize = 1_000;

#[tokio::test]
async fn a_batch_scans_no_lease_table_after_analyze() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    // A large fleet's tables: leases held by "holder", each with a live standby.
    for sql in [
        format!(
            "INSERT INTO {prefix}leases (lease_name, owner, priority, fencing_token, \
                 acquired_at, heartbeat_at, ttl) \
             SELECT 'lease-' || g, 'holder', 0, 1, now(), now(), '1 hour' \
             FROM generate_series(1, {LEASES}) AS g"
        ),
        format!(
            "INSERT INTO {prefix}lease_contenders (lease_name, owner, priority, heartbeat_at, ttl) \
             SELECT 'lease-' || g, 'standby', 0, now(), '1 hour' \
             FROM generate_series(1, {LEASES}) AS g"
        ),
        format!("VACUUM ANALYZE {prefix}leases"),
        format!("VACUUM ANALYZE {prefix}lease_contenders"),
    ] {
        sqlx::query(&sql).execute(&pool).await.unwrap();
    }

    // The holder renews and the standby refreshes (the batch's first statement); a newcomer
    // registers as a standby (the statement for everything else).
    for owner in ["holder", "standby", "newcomer"] {
        let names: Vec<String> = (1..=BATCH).map(|n| format!("lease-{n}")).collect();
        let mut transaction = pool.begin().await.unwrap();
        let statuses: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT lease_status FROM {prefix}request_leases($1, $2, $3, $4, '10s') \
             ORDER BY lease_index"
        ))
        .bind(&names)
        .bind(vec![owner; BATCH])
        .bind(vec![0_i64; BATCH])
        .bind(vec![
            sqlx::postgres::types::PgInterval::try_from(
                Duration::from_secs(3600)
            )
            .unwrap();
            BATCH
        ])
        .fetch_all(&mut *transaction)
        .await
        .unwrap();
        let expected = if owner == "holder" {
            "leader"
        } else {
            "standby"
        };
        assert!(
            statuses.iter().all(|status| status == expected),
            "{owner}: {statuses:?}"
        );
        // This transaction's own scans, not yet reported to the statistics.
        let scans = sqlx::query(
            "SELECT relname, seq_scan, idx_scan FROM pg_stat_xact_user_tables \
             WHERE relname = ANY($1) ORDER BY relname",
        )
        .bind(vec![
            format!("{prefix}leases"),
            format!("{prefix}lease_contenders"),
        ])
        .fetch_all(&mut *transaction)
        .await
        .unwrap();
        assert_eq!(scans.len(), 2, "both tables in pg_stat_xact_user_tables");
        for row in &scans {
            let table: String = row.get("relname");
            let (seq, idx): (i64, i64) = (row.get("seq_scan"), row.get("idx_scan"));
            assert_eq!(seq, 0, "{owner}'s batch scanned {table} whole");
            assert!(idx > 0, "{owner}'s batch read {table} by no index");
        }
        transaction.commit().await.unwrap();
    }

    storage.close().await.unwrap();
}
