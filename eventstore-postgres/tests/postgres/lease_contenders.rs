//! The contenders table stays bounded: contenders that lapsed are forgotten by the next
//! request for their lease, even while one leader holds it for months and instances with
//! fresh identities come and go, and without touching any other lease's rows.

use std::time::Duration;

use eventstore_api::{EventStorage, LeaseRequest, LeaseStatus};
use sqlx::PgPool;

use crate::common;

/// The owners registered as contenders for `lease_name`, live or lapsed, by name.
async fn contender_rows(admin: &PgPool, prefix: &str, lease_name: &str) -> Vec<String> {
    sqlx::query_scalar(&format!(
        "SELECT owner FROM {prefix}lease_contenders WHERE lease_name = $1 ORDER BY owner"
    ))
    .bind(lease_name)
    .fetch_all(admin)
    .await
    .expect("reading the contenders table")
}

/// Waits until no contender of `prefix` is live on the server's clock.
async fn wait_until_every_contender_lapsed(admin: &PgPool, prefix: &str) {
    common::eventually(
        "every short-lived contender to lapse",
        Duration::from_secs(10),
        || async {
            let live: i64 = sqlx::query_scalar(&format!(
                "SELECT count(*) FROM {prefix}lease_contenders WHERE heartbeat_at + ttl >= now()"
            ))
            .fetch_one(admin)
            .await
            .unwrap();
            (live == 0).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn lapsed_contenders_are_forgotten_while_one_leader_keeps_its_lease() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let long = Duration::from_secs(600);
    let short = Duration::from_millis(1);

    let leader = storage
        .request_lease(LeaseRequest::new("orders", "leader", 0, long))
        .await
        .unwrap();
    assert_eq!(leader.status, LeaseStatus::Leader);
    storage
        .request_lease(LeaseRequest::new("invoices", "leader", 0, long))
        .await
        .unwrap();
    // Instances that asked once and vanished without releasing (crashed, or redeployed
    // under new identities).
    let gone: Vec<LeaseRequest> = (0..20)
        .map(|n| LeaseRequest::new("orders", format!("gone-{n:02}"), 5, short))
        .chain([LeaseRequest::new("invoices", "gone-invoices", 5, short)])
        .collect();
    for response in storage.request_leases(gone).await.unwrap() {
        assert_eq!(response.status, LeaseStatus::Standby);
    }
    assert_eq!(contender_rows(&admin, &prefix, "orders").await.len(), 20);
    wait_until_every_contender_lapsed(&admin, &prefix).await;

    // The leader renews: lapsed contenders ask for no step-down.
    let renewal = storage
        .request_lease(LeaseRequest::new("orders", "leader", 0, long))
        .await
        .unwrap();
    assert_eq!(renewal.status, LeaseStatus::Leader);
    // A new instance registers: the lapsed rows of this lease go.
    let fresh = storage
        .request_lease(LeaseRequest::new("orders", "fresh", 0, long))
        .await
        .unwrap();
    assert_eq!(fresh.status, LeaseStatus::Standby);
    assert_eq!(contender_rows(&admin, &prefix, "orders").await, ["fresh"]);
    // Another lease's rows are left to that lease's own requests.
    assert_eq!(
        contender_rows(&admin, &prefix, "invoices").await,
        ["gone-invoices"]
    );
    let other = storage
        .request_lease(LeaseRequest::new("invoices", "fresh", 0, long))
        .await
        .unwrap();
    assert_eq!(other.status, LeaseStatus::Standby);
    assert_eq!(contender_rows(&admin, &prefix, "invoices").await, ["fresh"]);
    storage.close().await.unwrap();
}
