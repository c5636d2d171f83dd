//! The contenders table stays bounded: contenders that lapsed are forgotten by the next
//! request for their lease, even while one leader holds it for months and instances with
//! fresh identities come and go, and without touching any other lease's rows.

use std::time::Duration;

use eventstore::{EventStorage, LeaseRequest, LeaseStatus};
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

/// Asks as `request` alone, or in a batch beside a request for another lease (a batch of one
/// is answered as a single request).
async fn ask(
    storage: &eventstore_postgres::PostgresEventStorage,
    request: LeaseRequest,
    batched: bool,
) -> LeaseStatus {
    if !batched {
        return storage.request_lease(request).await.unwrap().status;
    }
    let beside = LeaseRequest::new("elsewhere", request.owner.clone(), 0, request.ttl);
    storage.request_leases(vec![request, beside]).await.unwrap()[0].status
}

/// Waits until `owner`'s registration for `lease_name` has lapsed on the server's clock.
async fn wait_until_lapsed(admin: &PgPool, prefix: &str, lease_name: &str, owner: &str) {
    common::eventually(
        "a short registration to lapse",
        Duration::from_secs(10),
        || async {
            let lapsed: bool = sqlx::query_scalar(&format!(
                "SELECT heartbeat_at + ttl < now() FROM {prefix}lease_contenders \
                 WHERE lease_name = $1 AND owner = $2"
            ))
            .bind(lease_name)
            .bind(owner)
            .fetch_one(admin)
            .await
            .unwrap();
            lapsed.then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_standbys_plain_refresh_forgets_contenders_that_lapsed_since_it_registered() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    for batched in [false, true] {
        let prefix = common::unique_prefix();
        let storage = common::storage_on(&prefix).await;
        let long = Duration::from_secs(600);
        let short = Duration::from_millis(200);
        let standby = |owner: &str, ttl| LeaseRequest::new("orders", owner, 0, ttl);
        ask(
            &storage,
            LeaseRequest::new("orders", "leader", 0, long),
            batched,
        )
        .await;
        for owner in ["steady", "other"] {
            assert_eq!(
                ask(&storage, standby(owner, long), batched).await,
                LeaseStatus::Standby
            );
        }

        // A newcomer that lapses long before the standbys registered earlier.
        ask(&storage, standby("brief", short), batched).await;
        wait_until_lapsed(&admin, &prefix, "orders", "brief").await;
        ask(&storage, standby("steady", long), batched).await;
        assert_eq!(
            contender_rows(&admin, &prefix, "orders").await,
            ["other", "steady"],
            "batched: {batched}"
        );

        // A standby that refreshes with a shorter ttl, then lapses.
        ask(&storage, standby("steady", short), batched).await;
        wait_until_lapsed(&admin, &prefix, "orders", "steady").await;
        ask(&storage, standby("other", long), batched).await;
        assert_eq!(
            contender_rows(&admin, &prefix, "orders").await,
            ["other"],
            "batched: {batched}"
        );
        storage.close().await.unwrap();
    }
}
