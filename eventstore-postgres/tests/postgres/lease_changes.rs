//! Lease changes pushed through `pg_notify` and the storage's one `LISTEN` connection: what is
//! notified and in which order, what is not (renewals, refreshes, rolled-back changes), other
//! processes hearing them, a killed listener connection, no listener at all, and `close`.

use std::time::Duration;

use eventstore::EventStorageExt;
use eventstore::{
    Capability, EventStorage, EventStorageError, FencingToken, LeaseChange, LeaseChangeKind,
    LeaseChanges, LeaseNotice, LeaseRequest, LeaseScope, LeaseStatus,
};
use eventstore_postgres::PostgresEventStorage;
use sqlx::postgres::types::PgInterval;
use sqlx::PgPool;

use crate::common;
use crate::common::fault_proxy::FaultProxy;

/// The longest any notice may take to arrive.
const DEADLINE: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(60);

/// The `application_name` of every storage's listener connection.
const LISTENER_APPLICATION: &str = "eventstore-listener";

async fn next_notice(changes: &mut LeaseChanges) -> LeaseNotice {
    tokio::time::timeout(DEADLINE, changes.next())
        .await
        .unwrap_or_else(|_| panic!("no lease notice within {DEADLINE:?}"))
        .expect("the subscription ended")
}

/// The next change, which must be one of `lease`.
pub(crate) async fn next_change(changes: &mut LeaseChanges, lease: &str) -> LeaseChangeKind {
    match next_notice(changes).await {
        LeaseNotice::Changed(LeaseChange { lease_name, kind }) => {
            assert_eq!(lease_name, lease, "a change of another lease: {kind:?}");
            kind
        }
        LeaseNotice::Missed => panic!("no notice may be missed here"),
    }
}

/// The next `count` changes of `lease`, in order.
async fn next_changes(
    changes: &mut LeaseChanges,
    lease: &str,
    count: usize,
) -> Vec<LeaseChangeKind> {
    let mut kinds = Vec::with_capacity(count);
    for _ in 0..count {
        kinds.push(next_change(changes, lease).await);
    }
    kinds
}

fn joined(owner: &str, priority: i64) -> LeaseChangeKind {
    LeaseChangeKind::ContenderJoined {
        owner: owner.into(),
        priority,
    }
}

fn acquired(owner: &str, token: u64, after_expiry: bool) -> LeaseChangeKind {
    LeaseChangeKind::Acquired {
        owner: owner.into(),
        token: FencingToken(token),
        after_expiry,
    }
}

fn left(owner: &str) -> LeaseChangeKind {
    LeaseChangeKind::ContenderLeft {
        owner: owner.into(),
    }
}

async fn ask(
    storage: &PostgresEventStorage,
    lease: &str,
    owner: &str,
    priority: i64,
) -> LeaseStatus {
    storage
        .request_lease(LeaseRequest::new(lease, owner, priority, TTL))
        .await
        .unwrap()
        .status
}

/// The backend pids of the listener connections of `prefix` (one per storage), found by
/// their application name and the statement they ran last, which names a channel of the
/// prefix: the `LISTEN` of its channels, or a heartbeat's notice.
pub(crate) async fn listener_pids(admin: &PgPool, prefix: &str) -> sqlx::Result<Vec<i32>> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity \
         WHERE application_name = $1 AND position($2 IN query) > 0",
    )
    .bind(LISTENER_APPLICATION)
    .bind(prefix)
    .fetch_all(admin)
    .await
}

/// The backend pid of the one storage's listener connection of `prefix`.
pub(crate) async fn listener_pid(admin: &PgPool, prefix: &str) -> Option<i32> {
    listener_pids(admin, prefix).await.unwrap().first().copied()
}

#[tokio::test]
async fn every_change_of_a_lease_is_pushed_in_the_order_it_was_made() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let storage = common::storage_on(&common::unique_prefix()).await;
    assert!(storage.supports(Capability::LeaseChanges));
    let mut changes = storage
        .subscribe_lease_changes(LeaseScope::lease("orders"))
        .await
        .unwrap();

    assert_eq!(ask(&storage, "orders", "a", 0).await, LeaseStatus::Leader);
    assert_eq!(
        next_changes(&mut changes, "orders", 2).await,
        [joined("a", 0), acquired("a", 1, false)]
    );

    // A contender that outranks the holder asks it to step down; one that does not, only
    // joins.
    assert_eq!(
        ask(&storage, "orders", "low", -1).await,
        LeaseStatus::Standby
    );
    assert_eq!(ask(&storage, "orders", "b", 5).await, LeaseStatus::Standby);
    let step_down = LeaseChangeKind::StepDownRequested {
        holder: "a".into(),
        token: FencingToken(1),
        contender: "b".into(),
    };
    assert_eq!(
        next_changes(&mut changes, "orders", 3).await,
        [joined("low", -1), joined("b", 5), step_down]
    );

    storage.release_lease("orders", "a").await.unwrap();
    let released = LeaseChangeKind::Released {
        owner: "a".into(),
        token: FencingToken(1),
        successor: Some("b".into()),
    };
    assert_eq!(
        next_changes(&mut changes, "orders", 2).await,
        [released, left("a")]
    );

    // The successor was registered at the priority it asks with: it only acquires.
    assert_eq!(ask(&storage, "orders", "b", 5).await, LeaseStatus::Leader);
    assert_eq!(
        next_change(&mut changes, "orders").await,
        acquired("b", 2, false)
    );

    // The holder changing its priority joins again under the new one.
    assert_eq!(ask(&storage, "orders", "b", 7).await, LeaseStatus::Leader);
    assert_eq!(next_change(&mut changes, "orders").await, joined("b", 7));
    storage.close().await.unwrap();
}

/// Every change of `lease` up to and including the sentinel's registration, in order.
async fn changes_until_the_sentinel(
    changes: &mut LeaseChanges,
    lease: &str,
) -> Vec<LeaseChangeKind> {
    let mut kinds = Vec::new();
    loop {
        let kind = next_change(changes, lease).await;
        let done = kind == joined("sentinel", -10);
        kinds.push(kind);
        if done {
            return kinds;
        }
    }
}

/// A batch pushes what its requests made one by one push, also where two of them make the
/// same change: a transaction delivers identical notifications once, so each change carries
/// its place among those its transaction notified, whichever way the batch is answered.
#[tokio::test]
async fn a_batch_pushes_every_change_its_requests_push_one_by_one() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let storage = common::storage_on(&common::unique_prefix()).await;
    // c registers at 1, again at 2, and at 1 once more: a batch answered in layers. Five
    // requests for one lease are answered step by step, each by the single request's
    // function, inside the batch's transaction.
    for (case, priorities) in [("layers", vec![1, 2, 1]), ("steps", vec![1, 2, 1, 2, 1])] {
        let mut heard = Vec::new();
        for batched in [false, true] {
            let lease = format!("{case}-{}", if batched { "batched" } else { "one-by-one" });
            let mut changes = storage
                .subscribe_lease_changes(LeaseScope::lease(lease.as_str()))
                .await
                .unwrap();
            assert_eq!(ask(&storage, &lease, "h", 0).await, LeaseStatus::Leader);
            let requests: Vec<LeaseRequest> = priorities
                .iter()
                .map(|priority| LeaseRequest::new(lease.as_str(), "c", *priority, TTL))
                .collect();
            if batched {
                storage.request_leases(requests).await.unwrap();
            } else {
                for request in requests {
                    storage.request_lease(request).await.unwrap();
                }
            }
            // A change after them all, so that every change before it is known to have come.
            assert_eq!(
                ask(&storage, &lease, "sentinel", -10).await,
                LeaseStatus::Standby
            );
            heard.push(changes_until_the_sentinel(&mut changes, &lease).await);
        }
        assert_eq!(
            heard[1], heard[0],
            "{case}: the batch pushes what the requests one by one push"
        );
        let last_of_c = heard[1].iter().rev().find(
            |kind| matches!(kind, LeaseChangeKind::ContenderJoined { owner, .. } if owner == "c"),
        );
        assert_eq!(
            last_of_c,
            Some(&joined("c", 1)),
            "{case}: c stands at 1: {:?}",
            heard[1]
        );
    }
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_successor_is_the_highest_priority_then_the_smallest_owner_among_live_contenders() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let storage = common::storage_on(&common::unique_prefix()).await;
    let mut changes = storage
        .subscribe_lease_changes(LeaseScope::lease("orders"))
        .await
        .unwrap();
    ask(&storage, "orders", "holder", 9).await;
    for (owner, priority) in [("c", 3), ("b", 3), ("d", 1)] {
        ask(&storage, "orders", owner, priority).await;
    }
    // A contender that lapsed is no successor, whatever its priority.
    storage
        .request_lease(LeaseRequest::new(
            "orders",
            "gone",
            8,
            Duration::from_millis(1),
        ))
        .await
        .unwrap();
    next_changes(&mut changes, "orders", 6).await;
    let registered = storage.storage_time().await.unwrap();
    common::eventually("the short-lived contender to lapse", DEADLINE, || async {
        let now = storage.storage_time().await.unwrap();
        (now > registered + chrono::Duration::milliseconds(2)).then_some(())
    })
    .await;

    storage.release_lease("orders", "holder").await.unwrap();
    assert_eq!(
        next_change(&mut changes, "orders").await,
        LeaseChangeKind::Released {
            owner: "holder".into(),
            token: FencingToken(1),
            successor: Some("b".into()),
        }
    );
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_takeover_of_an_expired_tenure_says_so() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let storage = common::storage_on(&common::unique_prefix()).await;
    let mut changes = storage
        .subscribe_lease_changes(LeaseScope::All)
        .await
        .unwrap();
    let short = Duration::from_millis(200);
    storage
        .request_lease(LeaseRequest::new("orders", "a", 0, short))
        .await
        .unwrap();
    next_changes(&mut changes, "orders", 2).await;
    let expires_at = storage.get_leases().await.unwrap()[0].expires_at();
    common::eventually("the lease to expire", DEADLINE, || async {
        (storage.storage_time().await.unwrap() > expires_at).then_some(())
    })
    .await;

    assert_eq!(ask(&storage, "orders", "b", 0).await, LeaseStatus::Leader);
    assert_eq!(
        next_changes(&mut changes, "orders", 3).await,
        [left("a"), joined("b", 0), acquired("b", 2, true)]
    );
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_subscriber_of_one_lease_hears_nothing_of_another() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let storage = common::storage_on(&common::unique_prefix()).await;
    let mut orders = storage
        .subscribe_lease_changes(LeaseScope::lease("orders"))
        .await
        .unwrap();
    let mut all = storage
        .subscribe_lease_changes(LeaseScope::All)
        .await
        .unwrap();

    ask(&storage, "billing", "a", 0).await;
    ask(&storage, "orders", "a", 0).await;
    assert_eq!(next_change(&mut all, "billing").await, joined("a", 0));
    assert_eq!(next_change(&mut orders, "orders").await, joined("a", 0));
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_renewal_and_a_standby_refresh_notify_nothing() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let storage = common::storage_on(&common::unique_prefix()).await;
    let mut changes = storage
        .subscribe_lease_changes(LeaseScope::lease("orders"))
        .await
        .unwrap();
    ask(&storage, "orders", "a", 0).await;
    ask(&storage, "orders", "b", 0).await;
    next_changes(&mut changes, "orders", 3).await;

    for _ in 0..5 {
        assert_eq!(ask(&storage, "orders", "a", 0).await, LeaseStatus::Leader);
        assert_eq!(ask(&storage, "orders", "b", 0).await, LeaseStatus::Standby);
    }
    let renewals: Vec<LeaseRequest> = (0..3)
        .map(|_| LeaseRequest::new("orders", "a", 0, TTL))
        .collect();
    storage.request_leases(renewals).await.unwrap();
    storage.release_lease("orders", "a").await.unwrap();

    // Notifications arrive in commit order: had a renewal notified, it would come first.
    assert_eq!(
        next_change(&mut changes, "orders").await,
        LeaseChangeKind::Released {
            owner: "a".into(),
            token: FencingToken(1),
            successor: Some("b".into()),
        }
    );
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_rolled_back_change_never_notifies() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let mut changes = storage
        .subscribe_lease_changes(LeaseScope::lease("orders"))
        .await
        .unwrap();

    // The call the storage makes, on a connection of its own, in a transaction rolled back.
    let mut transaction = admin.begin().await.unwrap();
    let (status, token): (String, i64) = sqlx::query_as(&format!(
        "SELECT lease_status, lease_token FROM {prefix}request_leases($1, $2, $3, $4, $5)"
    ))
    .bind(vec!["orders"])
    .bind(vec!["ghost"])
    .bind(vec![0_i64])
    .bind(vec![PgInterval {
        months: 0,
        days: 0,
        microseconds: 60_000_000,
    }])
    .bind("10000ms")
    .fetch_one(&mut *transaction)
    .await
    .unwrap();
    assert_eq!(
        (status.as_str(), token),
        ("leader", 1),
        "the ghost acquired"
    );
    let released: bool = sqlx::query_scalar(&format!("SELECT {prefix}release_lease($1, $2, $3)"))
        .bind("orders")
        .bind("ghost")
        .bind("10000ms")
        .fetch_one(&mut *transaction)
        .await
        .unwrap();
    assert!(released, "the ghost released");
    transaction.rollback().await.unwrap();

    ask(&storage, "orders", "a", 0).await;
    assert_eq!(
        next_changes(&mut changes, "orders", 2).await,
        [joined("a", 0), acquired("a", 1, false)]
    );
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_killed_listener_reconnects_and_says_notices_may_have_been_missed() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let mut changes = storage
        .subscribe_lease_changes(LeaseScope::lease("orders"))
        .await
        .unwrap();
    let killed = listener_pid(&admin, &prefix)
        .await
        .expect("the subscription's listener connection");

    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(killed)
        .fetch_one(&admin)
        .await
        .unwrap();
    assert!(terminated);
    assert_eq!(next_notice(&mut changes).await, LeaseNotice::Missed);

    // Told after listening again: what changes from now on is pushed.
    ask(&storage, "orders", "a", 0).await;
    assert_eq!(
        next_changes(&mut changes, "orders", 2).await,
        [joined("a", 0), acquired("a", 1, false)]
    );
    let reconnected = listener_pid(&admin, &prefix).await;
    assert!(
        reconnected.is_some_and(|pid| pid != killed),
        "the listener should listen on a new connection, got {reconnected:?}"
    );
    storage.close().await.unwrap();
}

/// A storage whose listener connects through `proxy` with a heartbeat of 500 ms, and a
/// subscription to the lease `orders` that has heard a first change pushed.
///
/// The heartbeat is short, so that a silent connection is found out quickly, and long enough
/// that a loaded machine answers it in time: a late answer makes the listener connect again
/// and say `Missed` where the setup expects the changes pushed.
async fn listening_through(proxy: &FaultProxy) -> (PostgresEventStorage, LeaseChanges) {
    let storage = common::builder(&common::unique_prefix())
        .listen_url(proxy.url())
        .listener_heartbeat(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let mut changes = storage
        .subscribe_lease_changes(LeaseScope::lease("orders"))
        .await
        .unwrap();
    ask(&storage, "orders", "a", 0).await;
    assert_eq!(
        next_changes(&mut changes, "orders", 2).await,
        [joined("a", 0), acquired("a", 1, false)]
    );
    (storage, changes)
}

/// A server that vanished without closing the connection leaves the listener on a socket
/// that never delivers again; the heartbeat finds that out, and the listener reconnects and
/// says so.
#[tokio::test]
async fn a_listener_whose_server_went_silent_reconnects_and_says_notices_may_have_been_missed() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let proxy = FaultProxy::start(&common::direct_url()).await;
    let (storage, mut changes) = listening_through(&proxy).await;

    proxy.silence_open_connections();
    assert_eq!(next_notice(&mut changes).await, LeaseNotice::Missed);

    // Told after listening again, on a new connection: what changes from now on is pushed.
    // On a loaded machine a heartbeat can still be answered late, and the listener then
    // connects once more and says so again; a change made meanwhile is not pushed. So each
    // further `Missed` is answered with a new contender, and one of them must be pushed.
    let mut asked = Vec::new();
    for owner in ["b", "c", "d", "e"] {
        ask(&storage, "orders", owner, 0).await;
        asked.push(joined(owner, 0));
        match next_notice(&mut changes).await {
            LeaseNotice::Changed(LeaseChange { lease_name, kind }) => {
                assert_eq!(lease_name, "orders", "a change of another lease: {kind:?}");
                assert!(asked.contains(&kind), "{kind:?} is none of {asked:?}");
                storage.close().await.unwrap();
                return;
            }
            LeaseNotice::Missed => continue,
        }
    }
    panic!("no change pushed after {} reconnects", asked.len());
}

/// The silent connection a listener left for a new one is closed within moments, and the
/// new one at `close`: the driver's `UNLISTEN` on a silent connection waits for ever, and
/// would otherwise hold its socket open for as long as the process runs.
#[tokio::test]
async fn a_silent_connection_the_listener_left_is_closed() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let proxy = FaultProxy::start(&common::direct_url()).await;
    let (storage, mut changes) = listening_through(&proxy).await;
    assert_eq!(proxy.open_connections(), 1, "the listener's connection");

    proxy.silence_open_connections();
    assert_eq!(next_notice(&mut changes).await, LeaseNotice::Missed);
    // Far beyond the five seconds the listener gives a connection it left to unlisten.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while proxy.open_connections() > 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} connections still open through the proxy; only the new listener's should be",
            proxy.open_connections()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    storage.close().await.unwrap();
    while proxy.open_connections() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} connections still open through the proxy after close",
            proxy.open_connections()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A connection that answers queries but never delivers a notification, as behind a pooler
/// in transaction mode, is found out by the heartbeat's own notice: the listener connects
/// again, and subscribers hear that they may have missed notices, so that electors ask the
/// storage instead of waiting for pushes that never come.
#[tokio::test]
async fn a_listener_whose_notifications_are_not_delivered_says_notices_may_have_been_missed() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    // The listener's task runs on this thread (a current-thread runtime), so it logs here.
    let logs = log_capture::Logs::default();
    let _capture = tracing::subscriber::set_default(logs.subscriber());
    let proxy = FaultProxy::start(&common::direct_url()).await;
    let (storage, mut changes) = listening_through(&proxy).await;

    proxy.drop_notifications();
    ask(&storage, "orders", "b", 0).await;
    assert_eq!(next_notice(&mut changes).await, LeaseNotice::Missed);
    // Again at every new connection, with one warning in all.
    assert_eq!(next_notice(&mut changes).await, LeaseNotice::Missed);
    common::eventually(
        "a second connection to go undelivered",
        DEADLINE,
        || async { (logs.count(tracing::Level::DEBUG, "still do not reach") >= 1).then_some(()) },
    )
    .await;
    let warnings = logs.all(tracing::Level::WARN);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("pooler in transaction mode") && warnings[0].contains("listen url"),
        "{}",
        warnings[0]
    );
    storage.close().await.unwrap();
}

#[tokio::test]
async fn another_storage_on_the_same_prefix_hears_the_changes() {
    // The reader's own pool, as another process would have.
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let writer = common::storage_on(&prefix).await;
    let reader = PostgresEventStorage::builder()
        .pool(pool.clone())
        .prefix(&prefix)
        .build()
        .await
        .unwrap();
    let mut changes = reader
        .subscribe_lease_changes(LeaseScope::lease("orders"))
        .await
        .unwrap();

    ask(&writer, "orders", "a", 0).await;
    writer.release_lease("orders", "a").await.unwrap();
    assert_eq!(
        next_changes(&mut changes, "orders", 4).await,
        [
            joined("a", 0),
            acquired("a", 1, false),
            LeaseChangeKind::Released {
                owner: "a".into(),
                token: FencingToken(1),
                successor: None,
            },
            left("a"),
        ]
    );
    writer.close().await.unwrap();
    reader.close().await.unwrap();
    pool.close().await;
}

#[tokio::test]
async fn clones_share_one_listener_connection() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let clone = storage.clone();
    let mut first = storage
        .subscribe_lease_changes(LeaseScope::All)
        .await
        .unwrap();
    let mut second = clone
        .subscribe_lease_changes(LeaseScope::lease("orders"))
        .await
        .unwrap();
    let listeners = listener_pids(&admin, &prefix).await.unwrap();
    assert_eq!(listeners.len(), 1, "{listeners:?}");

    ask(&clone, "orders", "a", 0).await;
    assert_eq!(next_change(&mut first, "orders").await, joined("a", 0));
    assert_eq!(next_change(&mut second, "orders").await, joined("a", 0));
    storage.close().await.unwrap();
}

#[tokio::test]
async fn close_ends_every_subscription_and_the_listener_connection() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let mut one = storage
        .subscribe_lease_changes(LeaseScope::lease("orders"))
        .await
        .unwrap();
    let mut all = storage
        .clone()
        .subscribe_lease_changes(LeaseScope::All)
        .await
        .unwrap();
    assert!(listener_pid(&admin, &prefix).await.is_some());

    storage.close().await.unwrap();
    for changes in [&mut one, &mut all] {
        let end = tokio::time::timeout(DEADLINE, changes.next()).await;
        assert_eq!(end, Ok(None), "a subscription outlived close");
    }
    assert!(matches!(
        storage.subscribe_lease_changes(LeaseScope::All).await,
        Err(EventStorageError::Closed)
    ));
    common::eventually("the listener connection to close", DEADLINE, || async {
        listener_pid(&admin, &prefix).await.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn dropping_every_handle_stops_the_listener() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let mut changes = storage
        .clone()
        .subscribe_lease_changes(LeaseScope::All)
        .await
        .unwrap();
    assert!(listener_pid(&admin, &prefix).await.is_some());

    drop(storage);
    let end = tokio::time::timeout(DEADLINE, changes.next()).await;
    assert_eq!(end, Ok(None), "the subscription outlived every handle");
    common::eventually("the listener connection to close", DEADLINE, || async {
        listener_pid(&admin, &prefix).await.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_notification_that_does_not_decode_is_heard_as_missed() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::storage_on(&prefix).await;
    let mut changes = storage
        .subscribe_lease_changes(LeaseScope::lease("orders"))
        .await
        .unwrap();
    sqlx::query("SELECT pg_notify($1, 'not a lease change')")
        .bind(format!("{prefix}lease_changes"))
        .execute(&admin)
        .await
        .unwrap();
    assert_eq!(next_notice(&mut changes).await, LeaseNotice::Missed);
    ask(&storage, "orders", "a", 0).await;
    assert_eq!(next_change(&mut changes, "orders").await, joined("a", 0));
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_change_too_long_for_a_notification_is_made_and_heard_as_missed() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    let storage = common::storage_on(&common::unique_prefix()).await;
    let mut changes = storage
        .subscribe_lease_changes(LeaseScope::All)
        .await
        .unwrap();
    // JSON writes each of these characters as six: a step-down naming three such names of
    // 512 bytes is longer than PostgreSQL's 8000-byte payload limit.
    let lease = "\u{1}".repeat(512);
    let holder = "\u{2}".repeat(512);
    let contender = "\u{3}".repeat(512);
    assert_eq!(ask(&storage, &lease, &holder, 0).await, LeaseStatus::Leader);
    next_changes(&mut changes, &lease, 2).await;

    assert_eq!(
        ask(&storage, &lease, &contender, 1).await,
        LeaseStatus::Standby
    );
    assert_eq!(
        next_change(&mut changes, &lease).await,
        joined(&contender, 1)
    );
    assert_eq!(next_notice(&mut changes).await, LeaseNotice::Missed);
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_listener_that_cannot_listen_warns_once_and_subscriptions_stay_silent() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    // The listener's task runs on this thread (a current-thread runtime), so it logs here.
    let logs = log_capture::Logs::default();
    let _capture = tracing::subscriber::set_default(logs.subscriber());
    // The server refuses the listener at once: its database does not exist.
    let url = common::direct_url();
    let (server, _) = url.rsplit_once('/').expect("a url with a database");
    let storage = common::builder(&common::unique_prefix())
        .listen_url(format!("{server}/eventstore_no_such_database"))
        .build()
        .await
        .unwrap();
    assert!(storage.supports(Capability::LeaseChanges));
    let mut changes = tokio::time::timeout(
        DEADLINE,
        storage.subscribe_lease_changes(LeaseScope::lease("orders")),
    )
    .await
    .expect("subscribing waits for the listener's first attempt only")
    .unwrap();

    common::eventually("the listener to retry twice", DEADLINE, || async {
        (logs.count(tracing::Level::DEBUG, "still cannot LISTEN") >= 2).then_some(())
    })
    .await;
    let warnings = logs.all(tracing::Level::WARN);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("lease changes fall back to polling")
            && warnings[0].contains("eventstore_no_such_database"),
        "{}",
        warnings[0]
    );

    assert_eq!(ask(&storage, "orders", "a", 0).await, LeaseStatus::Leader);
    storage.release_lease("orders", "a").await.unwrap();
    assert_eq!(
        changes.try_next(),
        None,
        "nothing can be heard without a listener"
    );
    storage.close().await.unwrap();
    assert_eq!(
        tokio::time::timeout(DEADLINE, changes.next()).await,
        Ok(None)
    );
}

#[tokio::test]
async fn a_refused_listener_delays_the_first_subscription_by_one_attempt_at_most() {
    let Some(_admin) = common::try_pool().await else {
        return;
    };
    // Nothing listens on port 1: every attempt is refused until it times out.
    let storage = common::builder(&common::unique_prefix())
        .listen_url("postgres://postgres@127.0.0.1:1/test")
        .build()
        .await
        .unwrap();
    let mut changes = tokio::time::timeout(
        DEADLINE,
        storage.subscribe_lease_changes(LeaseScope::lease("orders")),
    )
    .await
    .expect("subscribing waits for the listener's first attempt only")
    .unwrap();
    let later = tokio::time::timeout(
        Duration::from_millis(100),
        storage.subscribe_lease_changes(LeaseScope::All),
    )
    .await;
    assert!(later.is_ok(), "a later subscription waits for nothing");

    assert_eq!(ask(&storage, "orders", "a", 0).await, LeaseStatus::Leader);
    assert_eq!(changes.try_next(), None);
    storage.close().await.unwrap();
    assert_eq!(
        tokio::time::timeout(DEADLINE, changes.next()).await,
        Ok(None)
    );
}

#[tokio::test]
async fn a_bad_listen_url_is_refused_before_connecting() {
    let result = PostgresEventStorage::builder()
        .url(common::database_url())
        .listen_url("not a url")
        .build()
        .await;
    match result {
        Err(EventStorageError::InvalidInput { .. }) => {}
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

/// The events the crate logs while a test runs, through a subscriber of the test's own.
mod log_capture {
    use std::fmt::{Debug, Write};
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::subscriber::Interest;
    use tracing::{Event, Level, Metadata, Subscriber};

    /// Every event of the crate, as its level and its fields written out.
    #[derive(Clone, Default)]
    pub(super) struct Logs(Arc<Mutex<Vec<(Level, String)>>>);

    impl Logs {
        pub(super) fn subscriber(&self) -> impl Subscriber + Send + Sync {
            Capture(self.clone())
        }

        pub(super) fn all(&self, level: Level) -> Vec<String> {
            let events = self.0.lock().unwrap();
            events
                .iter()
                .filter(|(l, _)| *l == level)
                .map(|(_, text)| text.clone())
                .collect()
        }

        pub(super) fn count(&self, level: Level, needle: &str) -> usize {
            self.all(level)
                .iter()
                .filter(|text| text.contains(needle))
                .count()
        }
    }

    struct Capture(Logs);

    struct Text(String);

    impl Visit for Text {
        fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
            let _ = write!(self.0, "{}={value:?} ", field.name());
        }
    }

    impl Subscriber for Capture {
        fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
            // Asked every time: other tests' threads have no subscriber.
            Interest::sometimes()
        }

        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            metadata.target().starts_with("eventstore_postgres")
        }

        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }

        fn record(&self, _: &Id, _: &Record<'_>) {}

        fn record_follows_from(&self, _: &Id, _: &Id) {}

        fn event(&self, event: &Event<'_>) {
            let mut text = Text(String::new());
            event.record(&mut text);
            let level = *event.metadata().level();
            (self.0).0.lock().unwrap().push((level, text.0));
        }

        fn enter(&self, _: &Id) {}

        fn exit(&self, _: &Id) {}
    }
}
