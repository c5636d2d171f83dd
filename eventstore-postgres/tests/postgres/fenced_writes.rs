//! Fenced writes racing a takeover from another pool: every write of the old tenure is
//! judged before the new tenure began, and none succeeds after it.

use std::sync::Arc;
use std::time::Duration;

use eventstore::{
    AppendCriteria, EventStorage, EventStorageError, EventStreamId, EventToStore, Fence,
    FencingToken, LeaseRequest, LeaseStatus,
};
use serde_json::json;

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zombie_writer_racing_a_takeover_never_writes_into_the_new_tenure() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let old = Arc::new(common::storage_on(&prefix).await);
    let new = common::storage_on(&prefix).await;
    let stream = EventStreamId::for_context("orders");

    let granted = old
        .request_lease(LeaseRequest::new(
            "orders",
            "old",
            0,
            Duration::from_millis(300),
        ))
        .await
        .unwrap();
    assert_eq!(granted.fencing_token, FencingToken(1));
    let fence = Fence::new("orders", granted.fencing_token);

    // The old holder never renews and keeps writing until the store refuses it.
    let writer = {
        let (old, stream, fence) = (Arc::clone(&old), stream.clone(), fence.clone());
        tokio::spawn(async move {
            let mut written = Vec::new();
            for n in 0.. {
                let event = EventToStore::new("Dispatched", json!({ "n": n }));
                match old
                    .append_fenced(&fence, AppendCriteria::none(), &stream, vec![event])
                    .await
                {
                    Ok(stored) => written.extend(stored),
                    Err(EventStorageError::Fenced { .. }) => return written,
                    Err(other) => panic!("a fenced append failed with {other}"),
                }
            }
            unreachable!()
        })
    };

    let takeover = common::eventually(
        "the new owner to take over",
        Duration::from_secs(10),
        || async {
            let response = new
                .request_lease(LeaseRequest::new(
                    "orders",
                    "new",
                    0,
                    Duration::from_secs(60),
                ))
                .await
                .unwrap();
            (response.status == LeaseStatus::Leader).then_some(response)
        },
    )
    .await;
    assert_eq!(takeover.fencing_token, FencingToken(2));
    let acquired_at = new.get_leases().await.unwrap()[0].acquired_at;

    let written = writer.await.unwrap();
    assert!(
        !written.is_empty(),
        "the old holder never wrote while it held the lease"
    );
    for event in &written {
        assert!(
            event.timestamp < acquired_at,
            "{event:?} was written into the new tenure ({acquired_at})"
        );
    }

    let count = common::stored_event_count(&admin, &prefix).await;
    let refused = old
        .append_fenced(
            &fence,
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("Late", json!({}))],
        )
        .await;
    match refused {
        Err(EventStorageError::Fenced {
            presented,
            current,
            live,
            ..
        }) => {
            assert_eq!(
                (presented, current, live),
                (FencingToken(1), Some(FencingToken(2)), true)
            );
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
    let bookmark = old
        .bookmark_fenced(
            &fence,
            "dispatcher",
            &written[0].reference,
            Default::default(),
        )
        .await;
    assert!(
        matches!(bookmark, Err(EventStorageError::Fenced { .. })),
        "{bookmark:?}"
    );
    assert_eq!(
        common::stored_event_count(&admin, &prefix).await,
        count,
        "a refused write stored something"
    );
    assert_eq!(new.get_bookmark("dispatcher").await.unwrap(), None);

    let fresh = Fence::new("orders", takeover.fencing_token);
    new.append_fenced(
        &fresh,
        AppendCriteria::none(),
        &stream,
        vec![EventToStore::new("Dispatched", json!({}))],
    )
    .await
    .expect("the new holder writes");
    old.close().await.unwrap();
    new.close().await.unwrap();
}
