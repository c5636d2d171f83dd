//! The visibility barrier: reads stop below the oldest running transaction, so a reader
//! never skips an event that commits later with a lower position, and what it costs: a long
//! writing transaction holds readers back, but never lease decisions.
//!
//! A test binary of its own: the open transaction it holds holds back readers in the whole
//! cluster, which would disturb tests running beside it.

mod common;

use std::time::Duration;

use eventstore::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStreamId, EventToStore,
    LeaseRequest, LeaseStatus, Limit,
};
use serde_json::json;

#[tokio::test]
async fn an_event_committed_late_with_a_lower_position_is_never_skipped_and_leases_are_not_held_back(
) {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = common::builder(&prefix)
        .visibility_wait(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let stream = EventStreamId::for_context("orders");
    let read_all = || async {
        storage
            .query(
                &EventFilter::match_all(),
                &EventStreamId::any(),
                None,
                Limit::none(),
                Direction::Forward,
            )
            .await
            .unwrap()
    };

    // A slow writer: takes its position first, commits last.
    let mut slow = admin.begin().await.unwrap();
    sqlx::query(&format!(
        "INSERT INTO {prefix}events (id, tx, stream_context, stream_purpose, event_type, payload, tags) \
         VALUES (gen_random_uuid(), pg_current_xact_id(), 'orders', 'default', 'Slow', '{{}}', '{{}}')"
    ))
    .execute(&mut *slow)
    .await
    .unwrap();

    let fast = storage
        .append(
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("Fast", json!({}))],
        )
        .await
        .unwrap();
    assert!(
        read_all().await.is_empty(),
        "a reader saw the fast event while an older writer was open"
    );
    assert_eq!(storage.head(&stream).await.unwrap(), None);

    // Lease decisions are not behind the barrier.
    let ttl = Duration::from_millis(300);
    let first = storage
        .request_lease(LeaseRequest::new("l", "a", 0, ttl))
        .await
        .unwrap();
    assert_eq!(first.status, LeaseStatus::Leader);
    common::eventually(
        "the lease to expire while the writer is still open",
        Duration::from_secs(10),
        || async {
            let now = storage.storage_time().await.unwrap();
            storage
                .get_leases()
                .await
                .unwrap()
                .iter()
                .all(|lease| lease.is_expired_at(now))
                .then_some(())
        },
    )
    .await;
    let takeover = storage
        .request_lease(LeaseRequest::new("l", "b", 0, ttl))
        .await
        .unwrap();
    assert_eq!(
        (takeover.status, takeover.fencing_token),
        (LeaseStatus::Leader, first.fencing_token.next())
    );

    slow.commit().await.unwrap();
    let read = common::eventually(
        "both events to pass the barrier",
        Duration::from_secs(10),
        || async { Some(read_all().await).filter(|read| read.len() == 2) },
    )
    .await;
    assert_eq!(
        read[0].event_type.as_str(),
        "Slow",
        "the late commit with the lower position comes first: {read:?}"
    );
    assert_eq!(read[1].reference, fast[0].reference);
    assert!(read[0].reference < read[1].reference);
    storage.close().await.unwrap();
}
