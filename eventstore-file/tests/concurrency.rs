//! Races the file backend must survive: a close while appends are in flight, and fenced
//! appends while the lease they are fenced by changes hands.

use std::sync::Arc;
use std::time::Duration;

use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStorageError, EventStreamId,
    EventToStore, Fence, LeaseRequest, Limit, StoredEvent,
};
use eventstore_file::FileEventStorage;
use serde_json::json;

/// Long enough for any healthy run on a loaded machine; only a deadlock reaches it.
const DEADLINE: Duration = Duration::from_secs(60);

async fn all_events(storage: &FileEventStorage) -> Vec<StoredEvent> {
    storage
        .query(
            &EventFilter::match_all(),
            &EventStreamId::any(),
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .expect("query")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_close_racing_appends_answers_each_as_stored_or_closed_and_keeps_every_stored_one() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path()).await.unwrap();
    let started = Arc::new(tokio::sync::Barrier::new(9));
    let mut appenders = Vec::new();
    for task in 0..8 {
        let storage = storage.clone();
        let started = Arc::clone(&started);
        appenders.push(tokio::spawn(async move {
            let stream = EventStreamId::new("race", format!("task-{task}"));
            let mut stored = Vec::new();
            started.wait().await;
            for n in 0u64.. {
                let event = EventToStore::new("Raced", json!({ "task": task, "n": n }));
                match storage
                    .append(AppendCriteria::none(), &stream, vec![event])
                    .await
                {
                    Ok(events) => stored.extend(events),
                    Err(EventStorageError::Closed) => return stored,
                    Err(other) => panic!("task {task}: neither stored nor closed: {other}"),
                }
            }
            unreachable!("appends stop at the close")
        }));
    }
    started.wait().await;
    // Let the appenders get going, then close while they are in full flight.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while all_events(&storage).await.len() < 50 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "appends make no progress"
        );
        tokio::task::yield_now().await;
    }
    storage.close().await.unwrap();
    let mut acknowledged = Vec::new();
    for appender in appenders {
        acknowledged.extend(
            tokio::time::timeout(DEADLINE, appender)
                .await
                .expect("every append is answered after a close")
                .unwrap(),
        );
    }
    acknowledged.sort_by_key(|event| event.reference);

    let reopened = FileEventStorage::open(dir.path()).await.unwrap();
    assert_eq!(all_events(&reopened).await, acknowledged);
    reopened.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn once_a_newer_token_has_written_an_older_one_never_writes_again() {
    const CONTENDERS: usize = 6;
    const ROUNDS: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path()).await.unwrap();
    let stream = EventStreamId::for_context("fenced");
    let mut contenders = Vec::new();
    for contender in 0..CONTENDERS {
        let storage = storage.clone();
        let stream = stream.clone();
        contenders.push(tokio::spawn(async move {
            let owner = format!("owner-{contender}");
            for round in 0..ROUNDS {
                // A ttl this short makes leases expire between request and write, too.
                let ttl = Duration::from_millis(1 + (round % 3) as u64);
                let response = storage
                    .request_lease(LeaseRequest::new("writer", &owner, 0, ttl))
                    .await
                    .unwrap();
                // Everyone writes with the token it last saw, leader or not.
                let fence = Fence::new("writer", response.fencing_token);
                let event = EventToStore::new(
                    "Fenced",
                    json!({ "token": response.fencing_token.0, "owner": owner }),
                );
                match storage
                    .append_fenced(&fence, AppendCriteria::none(), &stream, vec![event])
                    .await
                {
                    Ok(_) | Err(EventStorageError::Fenced { .. }) => {}
                    Err(other) => panic!("{owner}: {other}"),
                }
                if round % 4 == 0 {
                    storage.release_lease("writer", &owner).await.unwrap();
                }
            }
        }));
    }
    for contender in contenders {
        tokio::time::timeout(DEADLINE, contender)
            .await
            .expect("no deadlock between leases and the writer")
            .unwrap();
    }
    let tokens: Vec<u64> = all_events(&storage)
        .await
        .iter()
        .map(|event| event.payload["token"].as_u64().unwrap())
        .collect();
    assert!(!tokens.is_empty(), "some fenced append got through");
    assert!(
        tokens.windows(2).all(|pair| pair[0] <= pair[1]),
        "a write under an older token followed a newer one: {tokens:?}"
    );
    storage.close().await.unwrap();
}
