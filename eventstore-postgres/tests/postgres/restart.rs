//! Fencing tokens are ordinary durable rows: they survive a server crash and restart, and
//! the storage works again once the server is back. The server is a throwaway cluster this
//! test creates ([`ThrowawayCluster`]); no shared server is restarted.

use std::time::Duration;

use eventstore::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStreamId, EventToStore,
    FencingToken, LeaseRequest, LeaseStatus, Limit,
};
use eventstore_postgres::PostgresEventStorage;
use serde_json::json;

use crate::common;
use crate::throwaway_cluster::ThrowawayCluster;

async fn request(storage: &PostgresEventStorage, owner: &str) -> (LeaseStatus, FencingToken) {
    let response = storage
        .request_lease(LeaseRequest::new(
            "orders",
            owner,
            0,
            Duration::from_secs(120),
        ))
        .await
        .expect("request_lease");
    (response.status, response.fencing_token)
}

#[tokio::test]
async fn fencing_tokens_and_events_survive_a_server_crash_and_restart() {
    let Some(cluster) = ThrowawayCluster::start_or_skip() else {
        return;
    };
    let storage = PostgresEventStorage::builder()
        .url(cluster.url())
        .prefix("restart_")
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(3))
        .build()
        .await
        .expect("a storage on the throwaway cluster");

    assert_eq!(
        request(&storage, "a").await,
        (LeaseStatus::Leader, FencingToken(1))
    );
    storage.release_lease("orders", "a").await.unwrap();
    assert_eq!(
        request(&storage, "b").await,
        (LeaseStatus::Leader, FencingToken(2))
    );
    storage.release_lease("orders", "b").await.unwrap();
    assert_eq!(
        request(&storage, "a").await,
        (LeaseStatus::Leader, FencingToken(3))
    );
    let stream = EventStreamId::for_context("orders");
    let before = storage
        .append(
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("Placed", json!({"n": 1}))],
        )
        .await
        .unwrap();

    cluster.crash().expect("stopping the cluster");
    let down = storage
        .request_lease(LeaseRequest::new(
            "orders",
            "a",
            0,
            Duration::from_secs(120),
        ))
        .await;
    assert!(
        down.is_err(),
        "a request to a stopped server succeeded: {down:?}"
    );
    let down = down.unwrap_err().to_string();
    assert!(
        down.contains("request a lease") || down.contains("connection"),
        "unclear error: {down}"
    );
    cluster.pg_ctl_start().expect("starting the cluster again");

    let renewed = common::eventually(
        "the storage to work again after the restart",
        Duration::from_secs(30),
        || async {
            storage
                .request_lease(LeaseRequest::new(
                    "orders",
                    "a",
                    0,
                    Duration::from_secs(120),
                ))
                .await
                .ok()
        },
    )
    .await;
    assert_eq!(
        (renewed.status, renewed.fencing_token),
        (LeaseStatus::Leader, FencingToken(3)),
        "the live lease and its token survive"
    );

    storage.release_lease("orders", "a").await.unwrap();
    assert_eq!(
        request(&storage, "b").await,
        (LeaseStatus::Leader, FencingToken(4)),
        "tokens never repeat"
    );
    let after = storage
        .query(
            &EventFilter::match_all(),
            &stream,
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .unwrap();
    assert_eq!(after, before);
    storage.close().await.unwrap();
}
