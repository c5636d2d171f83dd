//! Histories recorded through [`Recorder`] around a storage that applies the in-process lease
//! table, and around ones that break its rules.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use eventstore_api::in_process::LeaseTable;
use eventstore_api::{
    AppendCriteria, Bookmark, Capability, Direction, EventFilter, EventId, EventReference,
    EventStorage, EventStorageError, EventStreamId, EventToStore, LeaseRequest, LeaseResponse,
    Limit, StorageResult, StoredEvent, Tags,
};
use tokio::time::Instant;

use super::*;

/// How the test storage departs from the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    None,
    /// A release by anyone frees the lease.
    ReleasesForAnyone,
    /// One request in `n` is applied but its answer lost.
    LosesAnswers(u64),
}

/// Leases only, by the in-process lease table, on a clock read from tokio's.
#[derive(Debug)]
struct TableStorage {
    table: Mutex<LeaseTable>,
    start: Instant,
    calls: AtomicU64,
    flaw: Flaw,
}

impl TableStorage {
    fn new(flaw: Flaw) -> Self {
        TableStorage {
            table: Mutex::new(LeaseTable::new()),
            start: Instant::now(),
            calls: AtomicU64::new(0),
            flaw,
        }
    }

    fn now(&self) -> DateTime<Utc> {
        let wall = DateTime::<Utc>::from_timestamp_millis(1_700_000_000_000).unwrap();
        wall + chrono::Duration::from_std(self.start.elapsed()).unwrap()
    }

    /// A short, varying pause, so that concurrent calls overlap.
    async fn pause(&self) -> u64 {
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_micros(call * 7919 % 3_000)).await;
        call
    }

    fn unsupported<T>(&self, operation: &str) -> StorageResult<T> {
        Err(EventStorageError::unsupported(operation, "table"))
    }
}

#[async_trait]
impl EventStorage for TableStorage {
    fn name(&self) -> &str {
        "table"
    }

    fn supports(&self, capability: Capability) -> bool {
        capability == Capability::Lease
    }

    async fn append(
        &self,
        _criteria: AppendCriteria,
        _stream: &EventStreamId,
        _events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.unsupported("append")
    }

    async fn query(
        &self,
        _filter: &EventFilter,
        _stream: &EventStreamId,
        _after: Option<&EventReference>,
        _limit: Limit,
        _direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.unsupported("query")
    }

    async fn get_event_by_id(&self, _id: EventId) -> StorageResult<Option<StoredEvent>> {
        self.unsupported("get_event_by_id")
    }

    async fn bookmark(
        &self,
        _reader: &str,
        _reference: &EventReference,
        _tags: Tags,
    ) -> StorageResult<()> {
        self.unsupported("bookmark")
    }

    async fn remove_bookmark(&self, _reader: &str) -> StorageResult<()> {
        self.unsupported("remove_bookmark")
    }

    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        self.unsupported("get_bookmarks")
    }

    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        let call = self.pause().await;
        let response = self.table.lock().unwrap().request(&request, self.now());
        self.pause().await;
        if let Flaw::LosesAnswers(one_in) = self.flaw {
            if call % one_in == 0 {
                return Err(EventStorageError::timeout(
                    "request_lease",
                    Duration::from_millis(1),
                ));
            }
        }
        Ok(response)
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        self.pause().await;
        let mut table = self.table.lock().unwrap();
        let now = self.now();
        let holder = match (self.flaw, table.lease(lease_name)) {
            (Flaw::ReleasesForAnyone, Some(lease)) => lease.owner.clone(),
            _ => owner.to_owned(),
        };
        table.release(lease_name, &holder, now);
        Ok(())
    }

    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        Ok(self.now())
    }

    async fn close(&self) -> StorageResult<()> {
        Ok(())
    }
}

fn request(lease_name: &str, owner: &str) -> LeaseRequest {
    LeaseRequest::new(lease_name, owner, 0, Duration::from_millis(20))
}

/// Three owners contend for two leases through one recorder, alone and in batches.
async fn contend(storage: TableStorage) -> History {
    let recorder = Arc::new(Recorder::new(storage));
    let tasks: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|owner| {
            let recorder = Arc::clone(&recorder);
            tokio::spawn(async move {
                for round in 0..40_u64 {
                    let _ = match round % 8 {
                        5 => recorder.release_lease("l", owner).await.map(drop),
                        6 => recorder
                            .request_leases(vec![request("l", owner), request("m", owner)])
                            .await
                            .map(drop),
                        7 => recorder
                            .release_leases(&["l".to_owned(), "m".to_owned()], owner)
                            .await
                            .map(drop),
                        _ => recorder.request_lease(request("l", owner)).await.map(drop),
                    };
                    // Now and then long enough for the lease to expire.
                    let pause = if round % 11 == 10 { 25 } else { 2 };
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    recorder.history()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_recorded_from_the_lease_table_linearizes() {
    let history = contend(TableStorage::new(Flaw::None)).await;
    // 40 rounds of 3 owners, 10 of them batches of two leases.
    assert_eq!(history.len(), 3 * (40 + 10));
    let summary = check(&history).unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(summary.leases, 2);
    assert_eq!(summary.unknown, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_calls_are_recorded_as_unknown_and_still_linearize() {
    let history = contend(TableStorage::new(Flaw::LosesAnswers(4))).await;
    let summary = check(&history).unwrap_or_else(|failure| panic!("{failure}"));
    assert!(summary.unknown > 0, "{summary:?}");
    // The calls fail at once: bounding their effect in time changes nothing but the work.
    CheckOptions::new()
        .unknown_horizon(Duration::from_millis(10))
        .check(&history)
        .unwrap_or_else(|failure| panic!("{failure}"));
}

#[tokio::test]
async fn a_release_by_another_owner_that_frees_the_lease_is_caught() {
    let recorder = Recorder::new(TableStorage::new(Flaw::ReleasesForAnyone));
    let ttl = Duration::from_secs(60);
    let held = recorder
        .request_lease(LeaseRequest::new("l", "a", 0, ttl))
        .await
        .unwrap();
    assert!(held.status.is_leader());
    recorder.release_lease("l", "b").await.unwrap();
    let taken = recorder
        .request_lease(LeaseRequest::new("l", "c", 0, ttl))
        .await
        .unwrap();
    assert!(taken.status.is_leader(), "the flawed storage lets c in");
    match check(&recorder.history()) {
        Err(CheckFailure::Violation(violation)) => {
            assert!(
                violation.to_string().contains("request by \"c\""),
                "{violation}"
            );
        }
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[tokio::test]
async fn everything_but_lease_operations_passes_unrecorded() {
    let recorder = Recorder::new(TableStorage::new(Flaw::None));
    assert!(recorder.storage_time().await.is_ok());
    assert!(recorder.get_bookmarks().await.is_err());
    assert!(recorder.supports(Capability::Lease));
    assert!(recorder.history().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_call_its_caller_drops_is_recorded_as_unknown() {
    let recorder = Recorder::new(TableStorage::new(Flaw::None));
    let ttl = Duration::from_secs(60);
    // The table applies the first call at once and answers it 1.9 ms later: a caller that
    // waits 1 ms gives up on a request that took effect.
    let dropped = tokio::time::timeout(
        Duration::from_millis(1),
        recorder.request_lease(LeaseRequest::new("l", "a", 0, ttl)),
    )
    .await;
    assert!(dropped.is_err(), "the caller gave up first");
    let seen = recorder
        .request_lease(LeaseRequest::new("l", "b", 0, ttl))
        .await
        .unwrap();
    assert_eq!(seen.current_owner, "a", "the dropped request took effect");
    let history = recorder.history();
    assert_eq!(history.len(), 2);
    assert_eq!(history.entries()[0].outcome, Outcome::Unknown);
    let summary = check(&history).unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(summary.unknown, 1);
}
