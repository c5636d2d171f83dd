//! A batch reads its leases by key however large the lease table and whatever its
//! statistics: with `ANALYZE` done on a large table, the planner would cost a scan of the
//! whole table into a hash below a thousand lookups by key, and take it.

use eventstore::EventStorage;
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
                 acquired_at, heartbeat_at, ttl, contender_priority_ceiling) \
             SELECT 'lease-' || g, 'holder', 0, 1, now(), now(), '1 hour', 0 \
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

    // The holder renews and the standby refreshes (the plain batch the storage sends first,
    // and the function's first statement); a newcomer registers as a standby (the function's
    // statement for everything else; the plain batch serves none of it).
    let names: Vec<String> = (1..=BATCH).map(|n| format!("lease-{n}")).collect();
    let hour = sqlx::postgres::types::PgInterval::try_from(Duration::from_secs(3600)).unwrap();
    for owner in ["holder", "standby", "newcomer"] {
        let expected = if owner == "holder" {
            "leader"
        } else {
            "standby"
        };
        for plain in [true, false] {
            let mut transaction = pool.begin().await.unwrap();
            let function = format!(
                "SELECT lease_status FROM {prefix}request_leases($1, $2, $3, $4, $5) \
                 ORDER BY lease_index"
            );
            let rows = sqlx::query(if plain {
                storage.plain_batch_statement()
            } else {
                &function
            })
            .bind(&names)
            .bind(vec![owner; BATCH])
            .bind(vec![0_i64; BATCH])
            .bind(vec![hour; BATCH])
            .bind("10s")
            .fetch_all(&mut *transaction)
            .await
            .unwrap();
            // The plain batch says whether each request it served was a standby's.
            let statuses: Vec<String> = rows
                .iter()
                .map(|row| match plain {
                    true if row.get::<bool, _>("lease_standby") => "standby".to_owned(),
                    true => "leader".to_owned(),
                    false => row.get("lease_status"),
                })
                .collect();
            let served = if plain && owner == "newcomer" {
                0
            } else {
                BATCH
            };
            assert_eq!(statuses.len(), served, "{owner}, plain: {plain}");
            assert!(
                statuses.iter().all(|status| status == expected),
                "{owner}, plain: {plain}: {statuses:?}"
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
                assert_eq!(
                    seq, 0,
                    "{owner}'s batch (plain: {plain}) scanned {table} whole"
                );
                // A holder at its lease's priority ceiling needs no contender.
                let needs_contenders = owner != "holder";
                assert!(
                    idx > 0 || table.ends_with("lease_contenders") && !needs_contenders,
                    "{owner}'s batch (plain: {plain}) read {table} by no index"
                );
            }
            // The plain batch's writes roll back, so the function meets the same rows.
            if plain {
                transaction.rollback().await.unwrap();
            } else {
                transaction.commit().await.unwrap();
            }
        }
    }

    storage.close().await.unwrap();
}
