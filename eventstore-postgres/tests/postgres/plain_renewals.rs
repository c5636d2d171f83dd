//! Renewals sent as one `UPDATE`, which take the lease row's lock but not the lease's
//! advisory lock: one that waits for the row while another decision changes the lease
//! answers from what that decision left, as `request_lease` would; and a takeover that finds
//! a lease expired while such a renewal makes it live again leaves it to its holder.

use std::sync::Arc;
use std::time::Duration;

use eventstore::EventStorageExt;
use eventstore::{
    EventStorage, EventStorageError, FencingToken, LeaseChangeKind, LeaseRequest, LeaseResponse,
    LeaseScope, LeaseStatus,
};
use eventstore_postgres::PostgresEventStorage;
use sqlx::{PgPool, Postgres, Transaction};
use tokio::task::JoinHandle;

use crate::common;
use crate::lease_changes::next_change;

/// Renews `orders` for `a` (who holds it under token 1) while another transaction holds the
/// lease row's lock and runs `decision` before it commits; the renewal's answer.
async fn renew_across(decision: &str) -> Option<LeaseResponse> {
    let admin = common::try_pool().await?;
    let prefix = common::unique_prefix();
    let storage = Arc::new(common::storage_on(&prefix).await);
    let renewal = LeaseRequest::new("orders", "a", 0, Duration::from_secs(60));
    let first = storage.request_lease(renewal.clone()).await.unwrap();
    assert_eq!(first.fencing_token, FencingToken(1));

    let mut deciding = lock_lease_row(&admin, &prefix, "orders").await;
    let waiting = tokio::spawn({
        let storage = Arc::clone(&storage);
        async move { storage.request_lease(renewal).await }
    });
    wait_for_a_lock_wait(&admin, &prefix).await;
    sqlx::query(&decision.replace("__prefix__", &prefix))
        .execute(&mut *deciding)
        .await
        .unwrap();
    deciding.commit().await.unwrap();
    let answer = waiting.await.unwrap().expect("the renewal is answered");
    storage.close().await.unwrap();
    Some(answer)
}

/// A transaction holding the lock of `lease_name`'s row of `prefix`, as a decision on the
/// lease or a renewal in flight does, until it ends.
pub(crate) async fn lock_lease_row(
    admin: &PgPool,
    prefix: &str,
    lease_name: &str,
) -> Transaction<'static, Postgres> {
    let mut transaction = admin.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT FROM {prefix}leases WHERE lease_name = $1 FOR UPDATE"
    ))
    .bind(lease_name)
    .fetch_one(&mut *transaction)
    .await
    .expect("the lease row exists");
    transaction
}

/// Waits until a statement on `prefix`'s leases waits for a lock.
pub(crate) async fn wait_for_a_lock_wait(admin: &PgPool, prefix: &str) {
    common::eventually(
        "a lease request to wait for a lock",
        Duration::from_secs(10),
        || waiting_for_a_lock(admin, prefix),
    )
    .await;
}

/// `Some` once a statement on `prefix`'s leases waits for a lock.
async fn waiting_for_a_lock(admin: &PgPool, prefix: &str) -> Option<()> {
    let waiting: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() \
         AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'",
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

#[tokio::test]
async fn a_renewal_that_waits_while_its_owner_releases_takes_the_lease_anew() {
    // Released while the renewal waited, its heartbeat left as it was: a released lease is
    // free whatever its heartbeat says, so the renewal starts a new tenure, never extends
    // the released one.
    renewing_across_answers(
        "UPDATE __prefix__leases SET released = true WHERE lease_name = 'orders'",
        (LeaseStatus::Leader, FencingToken(2), "a"),
    )
    .await;
}

/// Checks that the renewal across `decision` (see [`renew_across`]) answers `expected`:
/// status, token and holder.
async fn renewing_across_answers(decision: &str, expected: (LeaseStatus, FencingToken, &str)) {
    let Some(answer) = renew_across(decision).await else {
        return;
    };
    assert_eq!(summary(&answer), expected);
}

/// An answer's status, token and holder, to compare in one assertion.
pub(crate) fn summary(answer: &LeaseResponse) -> (LeaseStatus, FencingToken, &str) {
    (
        answer.status,
        answer.fencing_token,
        answer.current_owner.as_str(),
    )
}

/// Lets `orders`, held by `a` under token 1 with a short ttl, expire; then, while a renewal
/// that makes it live again (as one that started before the expiry does) holds its row,
/// `asker` asks for it, through `request_lease` or in a batch. Returns the answer for
/// `orders` and the changes of `orders` notified from then until `a` released it after.
async fn ask_while_a_renewal_revives(
    asker: &str,
    in_a_batch: bool,
) -> Option<(LeaseResponse, Vec<LeaseChangeKind>)> {
    let admin = common::try_pool().await?;
    let prefix = common::unique_prefix();
    let storage = Arc::new(common::storage_on(&prefix).await);
    let short = LeaseRequest::new("orders", "a", 0, Duration::from_millis(200));
    assert!(storage
        .request_lease(short)
        .await
        .unwrap()
        .status
        .is_leader());
    common::eventually("the lease to expire", Duration::from_secs(10), || {
        lease_expired(&admin, &prefix)
    })
    .await;
    let mut changes = storage
        .subscribe_lease_changes(LeaseScope::lease("orders"))
        .await
        .unwrap();

    let mut renewing = lock_lease_row(&admin, &prefix, "orders").await;
    sqlx::query(&format!(
        "UPDATE {prefix}leases SET heartbeat_at = now(), ttl = interval '60 seconds' \
          WHERE lease_name = 'orders'"
    ))
    .execute(&mut *renewing)
    .await
    .unwrap();
    let asking = ask_for_orders(&storage, asker, in_a_batch);
    wait_for_a_lock_wait(&admin, &prefix).await;
    renewing.commit().await.unwrap();
    let answer = asking.await.unwrap().expect("the asker is answered");

    storage.release_lease("orders", "a").await.unwrap();
    let mut notified = Vec::new();
    loop {
        match next_change(&mut changes, "orders").await {
            LeaseChangeKind::Released { .. } => break,
            change => notified.push(change),
        }
    }
    storage.close().await.unwrap();
    Some((answer, notified))
}

/// `asker` asks for `orders` (ttl 60 s) in a task of its own: through `request_lease`, or in
/// a batch after a request for `invoices`. The task gives the answer for `orders`.
pub(crate) fn ask_for_orders(
    storage: &Arc<PostgresEventStorage>,
    asker: &str,
    in_a_batch: bool,
) -> JoinHandle<Result<LeaseResponse, EventStorageError>> {
    let storage = Arc::clone(storage);
    let request = |lease: &str| LeaseRequest::new(lease, asker, 0, Duration::from_secs(60));
    let (other, request) = (request("invoices"), request("orders"));
    tokio::spawn(async move {
        if in_a_batch {
            storage
                .request_leases(vec![other, request])
                .await
                .map(|mut answers| answers.remove(1))
        } else {
            storage.request_lease(request).await
        }
    })
}

/// `Some` once `orders` of `prefix` is past its expiry by the database's clock.
async fn lease_expired(admin: &PgPool, prefix: &str) -> Option<()> {
    let expired: bool = sqlx::query_scalar(&format!(
        "SELECT heartbeat_at + ttl < now() FROM {prefix}leases WHERE lease_name = 'orders'"
    ))
    .fetch_one(admin)
    .await
    .ok()?;
    expired.then_some(())
}

#[tokio::test]
async fn a_takeover_that_finds_a_lease_expired_while_a_renewal_revives_it_answers_standby() {
    let joined = LeaseChangeKind::ContenderJoined {
        owner: "b".into(),
        priority: 0,
    };
    asking_while_a_renewal_revives_answers(
        "b",
        (LeaseStatus::Standby, FencingToken(1), "a"),
        &[joined],
    )
    .await;
}

#[tokio::test]
async fn a_holder_that_finds_its_lease_expired_while_its_renewal_revives_it_leads_on_quietly() {
    asking_while_a_renewal_revives_answers("a", (LeaseStatus::Leader, FencingToken(1), "a"), &[])
        .await;
}

/// Checks what [`ask_while_a_renewal_revives`] gives `asker`, through `request_lease` and in
/// a batch: the answer (status, token, holder) and the changes notified.
async fn asking_while_a_renewal_revives_answers(
    asker: &str,
    expected: (LeaseStatus, FencingToken, &str),
    expected_changes: &[LeaseChangeKind],
) {
    for in_a_batch in [false, true] {
        let Some((answer, notified)) = ask_while_a_renewal_revives(asker, in_a_batch).await else {
            return;
        };
        assert_eq!(summary(&answer), expected, "in a batch: {in_a_batch}");
        assert_eq!(notified, expected_changes, "in a batch: {in_a_batch}");
    }
}
