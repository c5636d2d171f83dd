//! Contention between storages with separate pools, as between processes.

use std::sync::Arc;
use std::time::Duration;

use eventstore_api::{
    AppendCriteria, EventFilter, EventStorage, EventStorageError, EventStreamId, EventToStore,
    FencingToken, LeaseRequest, LeaseStatus,
};
use eventstore_postgres::PostgresEventStorage;
use serde_json::json;
use tokio::sync::Barrier;

use crate::common;

async fn two_pools() -> Option<[Arc<PostgresEventStorage>; 2]> {
    common::try_pool().await?;
    let prefix = common::unique_prefix();
    Some([
        Arc::new(common::storage_on(&prefix).await),
        Arc::new(common::storage_on(&prefix).await),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn separate_pools_elect_exactly_one_leader_per_tenure() {
    const CONTENDERS: usize = 8;
    let Some(storages) = two_pools().await else {
        return;
    };
    for round in 1..=5u64 {
        let barrier = Arc::new(Barrier::new(CONTENDERS));
        let tasks: Vec<_> = (0..CONTENDERS)
            .map(|n| {
                let storage = Arc::clone(&storages[n % 2]);
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    let owner = format!("node-{n}");
                    barrier.wait().await;
                    let response = storage
                        .request_lease(LeaseRequest::new(
                            "orders",
                            &owner,
                            0,
                            Duration::from_secs(60),
                        ))
                        .await
                        .expect("request_lease");
                    (owner, response)
                })
            })
            .collect();
        let mut leaders = Vec::new();
        let mut answers = Vec::new();
        for task in tasks {
            let (owner, response) = task.await.unwrap();
            if response.status == LeaseStatus::Leader {
                leaders.push(owner.clone());
            }
            answers.push((owner, response));
        }
        assert_eq!(leaders.len(), 1, "round {round}: {answers:?}");
        for (_, response) in &answers {
            assert_eq!(
                response.fencing_token,
                FencingToken(round),
                "round {round}: {answers:?}"
            );
            assert_eq!(
                response.current_owner, leaders[0],
                "round {round}: {answers:?}"
            );
        }
        storages[0]
            .release_lease("orders", &leaders[0])
            .await
            .unwrap();
    }
    for storage in storages {
        storage.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_batches_in_opposite_orders_never_deadlock() {
    let Some(storages) = two_pools().await else {
        return;
    };
    let names: Vec<String> = (0..20).map(|n| format!("partition-{n:02}")).collect();
    let tasks: Vec<_> = (0..6)
        .map(|n| {
            let storage = Arc::clone(&storages[n % 2]);
            let mut names = names.clone();
            if n % 2 == 1 {
                names.reverse();
            }
            tokio::spawn(async move {
                for _ in 0..10 {
                    let requests = names
                        .iter()
                        .map(|name| {
                            LeaseRequest::new(name, format!("node-{n}"), 0, Duration::from_secs(60))
                        })
                        .collect();
                    let responses = storage.request_leases(requests).await.expect("a batch");
                    assert_eq!(responses.len(), 20);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let leases = storages[0].get_leases().await.unwrap();
    assert_eq!(leases.len(), 20);
    assert!(
        leases
            .iter()
            .all(|lease| lease.fencing_token == FencingToken(1)),
        "{leases:?}"
    );
    for storage in storages {
        storage.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conditional_appends_from_separate_pools_have_one_winner_per_boundary() {
    let Some(storages) = two_pools().await else {
        return;
    };
    let stream = EventStreamId::for_context("accounts");
    for round in 0..10 {
        let head = storages[0].head(&stream).await.unwrap();
        let barrier = Arc::new(Barrier::new(6));
        let tasks: Vec<_> = (0..6)
            .map(|n| {
                let storage = Arc::clone(&storages[n % 2]);
                let stream = stream.clone();
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    storage
                        .append(
                            AppendCriteria::of(EventFilter::match_all(), head),
                            &stream,
                            vec![EventToStore::new(
                                "Debited",
                                json!({"round": round, "by": n}),
                            )],
                        )
                        .await
                })
            })
            .collect();
        let mut winners = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(stored) => {
                    assert_eq!(stored.len(), 1);
                    winners += 1;
                }
                Err(EventStorageError::OptimisticLock { .. }) => {}
                Err(other) => panic!("round {round}: {other}"),
            }
        }
        assert_eq!(winners, 1, "round {round}");
    }
    for storage in storages {
        storage.close().await.unwrap();
    }
}
