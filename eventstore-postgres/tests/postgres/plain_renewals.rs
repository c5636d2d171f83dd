//! Renewals sent as one `UPDATE`: one that waits for the lease's lock while another decision
//! changes the lease answers from what that decision left, as `request_lease` would.

use std::sync::Arc;
use std::time::Duration;

use eventstore_api::{EventStorage, FencingToken, LeaseRequest, LeaseResponse, LeaseStatus};
use sqlx::PgPool;

use crate::common;

/// Renews `orders` for `a` (who holds it under token 1) while another transaction holds the
/// lease's lock and runs `decision` before it commits; the renewal's answer.
async fn renew_across(decision: &str) -> Option<LeaseResponse> {
    let admin = common::try_pool().await?;
    let prefix = common::unique_prefix();
    let storage = Arc::new(common::storage_on(&prefix).await);
    let renewal = LeaseRequest::new("orders", "a", 0, Duration::from_secs(60));
    let first = storage.request_lease(renewal.clone()).await.unwrap();
    assert_eq!(first.fencing_token, FencingToken(1));

    let mut deciding = common::hold_lease_lock(&admin, &prefix, "orders").await;
    let waiting = tokio::spawn({
        let storage = Arc::clone(&storage);
        async move { storage.request_lease(renewal).await }
    });
    common::eventually(
        "the renewal to wait for the lock",
        Duration::from_secs(10),
        || waiting_for_a_lock(&admin, &prefix),
    )
    .await;
    sqlx::query(&decision.replace("__prefix__", &prefix))
        .execute(&mut *deciding)
        .await
        .unwrap();
    deciding.commit().await.unwrap();
    let answer = waiting.await.unwrap().expect("the renewal is answered");
    storage.close().await.unwrap();
    Some(answer)
}

/// `Some` once a statement on `prefix`'s leases waits for a lock.
async fn waiting_for_a_lock(admin: &PgPool, prefix: &str) -> Option<()> {
    let waiting: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() \
         AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || 'leases%'",
    )
    .bind(prefix)
    .fetch_one(admin)
    .await
    .ok()?;
    (waiting == 1).then_some(())
}

#[tokio::test]
async fn a_renewal_that_waits_while_the_lease_is_taken_over_answers_standby() {
    renewing_across_answers(
        "UPDATE __prefix__leases SET owner = 'b', fencing_token = fencing_token + 1, \
         acquired_at = now(), heartbeat_at = now() WHERE lease_name = 'orders'",
        (LeaseStatus::Standby, FencingToken(2), "b"),
    )
    .await;
}

#[tokio::test]
async fn a_renewal_that_waits_while_an_outranking_contender_joins_is_asked_to_step_down() {
    renewing_across_answers(
        "WITH joined AS (INSERT INTO __prefix__lease_contenders \
             (lease_name, owner, priority, heartbeat_at, ttl) \
             VALUES ('orders', 'c', 5, now(), interval '60 seconds')) \
         UPDATE __prefix__leases SET contender_priority_ceiling = 5 \
          WHERE lease_name = 'orders'",
        (LeaseStatus::LeaderStepDownRequested, FencingToken(1), "a"),
    )
    .await;
}

/// Checks that the renewal across `decision` (see [`renew_across`]) answers `expected`:
/// status, token and holder.
async fn renewing_across_answers(decision: &str, expected: (LeaseStatus, FencingToken, &str)) {
    let Some(answer) = renew_across(decision).await else {
        return;
    };
    assert_eq!(
        (
            answer.status,
            answer.fencing_token,
            answer.current_owner.as_str()
        ),
        expected
    );
}
