//! Elected and partitioned projectors whose tenure the storage ended before their elector
//! noticed: the fence refuses their writes, and they wait for the next tenure instead of
//! repeating a batch under the refused one; a new tenure starts from the bookmark, the first
//! tenure of a partition as well; and a stop ends either kind amid a backlog.
//!
//! The storage pushes nothing (`PollOnly`), so an elector sees a lease taken behind its back
//! only at its next renewal, a third of its ttl later: the window every test here runs in.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use eventstore::elector::{LeaderElector, LeadershipWatch};
use eventstore::projector::{
    BookmarkReading, ElectedProjector, PartitionedProjector, Projection, ProjectionError,
    Projector, ProjectorError, ProjectorRun, DEFAULT_BATCH_SIZE,
};
use eventstore::store::{EventStore, EventStoreError, NamedEvent};
use eventstore::{
    AppendCriteria, EventReference, EventStorage, EventStreamId, EventToStore, Fence, LeaseRequest,
    LeaseStatus, PartitionElector, PartitionWatch, StoredEvent, Tags,
};
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::support::{eventually, DEADLINE};
use eventstore_tck::wrappers::PollOnly;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Short enough that an elector notices a lost lease within a second, long enough that it
/// does not notice before the projector has been refused.
const TTL: Duration = Duration::from_secs(3);
const POLL_INTERVAL: Duration = Duration::from_millis(10);
const LEASE: &str = "numbers-projector";
const READER: &str = "numbers-reader";

fn stream() -> EventStreamId {
    EventStreamId::for_context("numbers")
}

/// What the projection committed, batch by batch, as the numbers of each batch, and how
/// many batches it tried to commit.
#[derive(Clone, Default)]
struct Commits(Arc<Mutex<Vec<Vec<u64>>>>, Arc<Mutex<usize>>);

impl Commits {
    fn attempts(&self) -> usize {
        *self.1.lock().unwrap()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn numbers(&self) -> Vec<u64> {
        self.0.lock().unwrap().concat()
    }
}

/// How the projection commits a batch.
#[derive(Clone)]
enum Commit {
    /// Only into its own record.
    Plain,
    /// Also as a fenced append to an outbox, under the tenure `leadership` says, as a
    /// projection that publishes what it derived would.
    Outbox {
        storage: Arc<dyn EventStorage>,
        leadership: LeadershipWatch,
    },
    /// As `Outbox`, through a typed stream fenced with the tenure, its error passed on with
    /// `?`, as the guide shows.
    TypedOutbox {
        storage: Arc<dyn EventStorage>,
        leadership: LeadershipWatch,
    },
}

/// What a typed outbox holds.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
struct Summed {
    n: u64,
}

impl NamedEvent for Summed {
    const EVENT_TYPE: &'static str = "Summed";
    fn tags(&self) -> Tags {
        Tags::none()
    }
}

struct Recorder {
    commits: Commits,
    commit: Commit,
    pending: Vec<u64>,
}

#[async_trait]
impl Projection for Recorder {
    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
        self.pending
            .push(event.payload["n"].as_u64().ok_or("a number")?);
        Ok(())
    }

    async fn after_batch(&mut self, _last: &EventReference) -> Result<(), ProjectionError> {
        *self.commits.1.lock().unwrap() += 1;
        if let Commit::Outbox {
            storage,
            leadership,
        } = &self.commit
        {
            let token = leadership.token().ok_or("not leading")?;
            let fence = Fence::new(LEASE, token);
            let summary = EventToStore::new("Summed", serde_json::json!({ "n": 0 }));
            let published = storage
                .append_fenced(
                    &fence,
                    AppendCriteria::none(),
                    &EventStreamId::new("outbox", "sums"),
                    vec![summary],
                )
                .await;
            if let Err(error) = published {
                return Err(Box::new(OutboxRefused(error)));
            }
        }
        if let Commit::TypedOutbox {
            storage,
            leadership,
        } = &self.commit
        {
            let fence = Fence::new(LEASE, leadership.token().ok_or("not leading")?);
            EventStore::new(Arc::clone(storage))
                .stream::<Summed>(EventStreamId::new("outbox", "sums"))
                .fenced(fence)
                .append(AppendCriteria::none(), [Summed { n: 0 }])
                .await?;
        }
        self.commits
            .0
            .lock()
            .unwrap()
            .push(std::mem::take(&mut self.pending));
        Ok(())
    }

    async fn cancel_batch(&mut self) {
        self.pending.clear();
    }
}

/// A projection's own error whose source is the storage's refusal, as a projection that
/// wraps the errors it meets would return it.
#[derive(Debug)]
struct OutboxRefused(eventstore::EventStorageError);

impl std::fmt::Display for OutboxRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the outbox refused the batch")
    }
}

impl std::error::Error for OutboxRefused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

async fn append(storage: &MemoryEventStorage, numbers: impl IntoIterator<Item = u64>) {
    let events = numbers
        .into_iter()
        .map(|n| EventToStore::new("Numbered", serde_json::json!({ "n": n })))
        .collect();
    storage
        .append(AppendCriteria::none(), &stream(), events)
        .await
        .unwrap();
}

/// An elector of `owner` on `storage`, once it leads.
async fn leading(storage: &Arc<dyn EventStorage>, owner: &str) -> LeaderElector {
    let elector = LeaderElector::builder(Arc::clone(storage), LEASE)
        .owner(owner)
        .ttl(TTL)
        .start()
        .unwrap();
    tokio::time::timeout(DEADLINE, elector.watch().wait_for_leadership())
        .await
        .expect("leads in time")
        .expect("the elector runs");
    elector
}

type Running = JoinHandle<Result<ProjectorRun, ProjectorError>>;

/// A sender that stops a run, and the future the run is given to wait on.
fn stop_signal() -> (oneshot::Sender<()>, impl Future<Output = ()> + Send) {
    let (stop, stopped) = oneshot::channel::<()>();
    (stop, async {
        let _ = stopped.await;
    })
}

/// Runs an elected projector of `elector`'s lease, in batches of `batch_size`, bookmarked as
/// [`READER`].
fn run_elected(
    storage: &Arc<dyn EventStorage>,
    elector: &LeaderElector,
    commits: &Commits,
    commit: Commit,
    reading: BookmarkReading,
    batch_size: u64,
) -> (oneshot::Sender<()>, Running) {
    let recorder = Recorder {
        commits: commits.clone(),
        commit,
        pending: Vec::new(),
    };
    let projector = Projector::builder(Arc::clone(storage), recorder)
        .stream(stream())
        .bookmark(READER)
        .bookmark_reading(reading)
        .batch_size(batch_size)
        .build()
        .unwrap();
    let mut elected =
        ElectedProjector::new(projector, elector.watch()).poll_interval(POLL_INTERVAL);
    let (stop, stopped) = stop_signal();
    let task = tokio::spawn(async move { elected.run_until(stopped).await });
    (stop, task)
}

/// Runs a partitioned projector on `watch`'s partitions, one event a batch, each partition
/// bookmarked as [`READER`].
fn run_partitioned(
    storage: &Arc<dyn EventStorage>,
    watch: &PartitionWatch,
    commits: &Commits,
    reading: BookmarkReading,
) -> (oneshot::Sender<()>, Running) {
    let mut projector = PartitionedProjector::new(watch.clone(), {
        let storage = Arc::clone(storage);
        let commits = commits.clone();
        move |_| {
            let recorder = Recorder {
                commits: commits.clone(),
                commit: Commit::Plain,
                pending: Vec::new(),
            };
            Projector::builder(Arc::clone(&storage), recorder)
                .stream(stream())
                .bookmark(READER)
                .bookmark_reading(reading)
                .batch_size(1)
                .build()
        }
    })
    .poll_interval(POLL_INTERVAL);
    let (stop, stopped) = stop_signal();
    let task = tokio::spawn(async move { projector.run_until(stopped).await });
    (stop, task)
}

/// Releases the lease as its holder `owner` and takes it as `intruder`, behind the back of
/// the holder's elector: the storage's fence moves on while that elector still leads.
async fn take_behind_the_back(inner: &MemoryEventStorage, owner: &str, intruder: &str) -> Fence {
    inner.release_lease(LEASE, owner).await.unwrap();
    let taken = inner
        .request_lease(LeaseRequest::new(LEASE, intruder, 0, TTL))
        .await
        .unwrap();
    assert_eq!(taken.status, LeaseStatus::Leader);
    Fence::new(LEASE, taken.fencing_token)
}

/// After its bookmark or its own fenced append was refused, an elected projector waits: by
/// the time its elector sees the lease gone, it tried the refused batch once, not once per
/// poll.
async fn refused_once_then_waits(
    commit: impl FnOnce(Arc<dyn EventStorage>, &LeaderElector) -> Commit,
) {
    let inner = MemoryEventStorage::new();
    let storage: Arc<dyn EventStorage> = Arc::new(PollOnly::new(inner.clone()));
    let elector = leading(&storage, "node-a").await;
    let commits = Commits::default();
    let commit = commit(Arc::clone(&storage), &elector);
    let (stop, task) = run_elected(
        &storage,
        &elector,
        &commits,
        commit,
        BookmarkReading::default(),
        DEFAULT_BATCH_SIZE,
    );
    append(&inner, 1..=3).await;
    eventually("the first batch to be committed", || async {
        commits.count() == 1
    })
    .await;

    take_behind_the_back(&inner, "node-a", "node-b").await;
    append(&inner, 4..=5).await;
    eventually(
        "the projection to commit the batch the fence refuses",
        || async { commits.attempts() == 2 },
    )
    .await;
    let watch = elector.watch();
    eventually("the elector to see the lease gone", || async {
        !watch.is_leader()
    })
    .await;
    assert_eq!(
        commits.attempts(),
        2,
        "the refused batch was tried once, not again under the refused tenure"
    );
    assert!(
        !task.is_finished(),
        "a refused fence does not end the projector"
    );
    let _ = stop.send(());
    task.await.unwrap().expect("stops without error");
    elector.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_elected_projector_whose_bookmark_is_refused_waits_for_the_next_tenure() {
    refused_once_then_waits(|_, _| Commit::Plain).await;
}

#[tokio::test]
async fn an_elected_projector_whose_own_fenced_append_is_refused_waits_for_the_next_tenure() {
    refused_once_then_waits(|storage, elector| Commit::Outbox {
        storage,
        leadership: elector.watch(),
    })
    .await;
}

#[tokio::test]
async fn an_elected_projector_whose_typed_fenced_append_is_refused_waits_for_the_next_tenure() {
    refused_once_then_waits(|storage, elector| Commit::TypedOutbox {
        storage,
        leadership: elector.watch(),
    })
    .await;
}

/// A storage's refusal of a stale fence.
fn stale_fence_refusal() -> eventstore::EventStorageError {
    eventstore::EventStorageError::fenced(
        LEASE.to_owned(),
        eventstore::FencingToken(3),
        Some(eventstore::FencingToken(4)),
        true,
    )
}

#[test]
fn a_refusal_wrapped_by_the_projection_counts_as_fenced() {
    let refused = stale_fence_refusal();
    let wrapped = ProjectorError::Projection {
        batch_start: None,
        source: Box::new(OutboxRefused(refused)),
    };
    assert!(wrapped.is_fenced());
    let typed = ProjectorError::Projection {
        batch_start: None,
        source: Box::new(EventStoreError::Storage(stale_fence_refusal())),
    };
    assert!(typed.is_fenced(), "the typed facade's refusal");
    eventstore_tck::support::assert_chain_repeats_no_text(&typed, "a projection's error");
    let other = ProjectorError::Projection {
        batch_start: None,
        source: "cannot project".into(),
    };
    assert!(!other.is_fenced());
}

/// With the bookmark read once or on request only, a new tenure still starts from the
/// bookmark the other leader moved, not from this instance's own old cursor.
#[tokio::test]
async fn a_new_tenure_starts_from_the_bookmark_whatever_the_bookmark_reading() {
    for reading in [BookmarkReading::Once, BookmarkReading::OnRequest] {
        let inner = MemoryEventStorage::new();
        let storage: Arc<dyn EventStorage> = Arc::new(PollOnly::new(inner.clone()));
        let elector = leading(&storage, "node-a").await;
        let commits = Commits::default();
        let (stop, task) = run_elected(
            &storage,
            &elector,
            &commits,
            Commit::Plain,
            reading,
            DEFAULT_BATCH_SIZE,
        );
        append(&inner, 1..=3).await;
        eventually("the first batch to be committed", || async {
            commits.numbers() == [1, 2, 3]
        })
        .await;

        // Another leader projects 4 to 6 and bookmarks them, then lets go; the old tenure's
        // projector commits them too, but its bookmark is refused.
        let fence = take_behind_the_back(&inner, "node-a", "node-b").await;
        append(&inner, 4..=6).await;
        let sixth = inner
            .query(
                &eventstore::EventFilter::match_all(),
                &stream(),
                None,
                eventstore::Limit::none(),
                eventstore::Direction::Forward,
            )
            .await
            .unwrap()[5]
            .reference;
        inner
            .bookmark_fenced(&fence, READER, &sixth, Tags::none())
            .await
            .unwrap();
        let watch = elector.watch();
        eventually("the elector to see the lease gone", || async {
            !watch.is_leader()
        })
        .await;
        inner.release_lease(LEASE, "node-b").await.unwrap();
        append(&inner, [7]).await;
        eventually("the event after the other leader's bookmark", || async {
            commits.numbers().ends_with(&[7])
        })
        .await;
        // 4 to 6 once, in the batch the fence refused before the elector saw the lease gone,
        // and never again.
        assert_eq!(
            commits.numbers(),
            (1..=7).collect::<Vec<u64>>(),
            "{reading:?}: nothing the other leader bookmarked is projected again"
        );
        let _ = stop.send(());
        task.await.unwrap().expect("stops without error");
        elector.shutdown().await.unwrap();
    }
}

/// A partitioned projector whose partition was taken behind its elector's back commits the
/// refused batch once, and a stop ends it while its partition still has a backlog.
#[tokio::test]
async fn a_partitioned_projector_waits_after_a_refusal_and_stops_amid_a_backlog() {
    let inner = MemoryEventStorage::new();
    let storage: Arc<dyn EventStorage> = Arc::new(PollOnly::new(inner.clone()));
    let elector = PartitionElector::builder(Arc::clone(&storage), "numbers", 1)
        .owner("node-a")
        .ttl(TTL)
        .start()
        .unwrap();
    let watch = elector.watch();
    eventually("the only member to hold the partition", || async {
        watch.held().len() == 1
    })
    .await;
    let (_partition, fence) = watch.held().into_iter().next().unwrap();
    let lease = fence.lease_name;
    let commits = Commits::default();
    let (stop, task) = run_partitioned(&storage, &watch, &commits, BookmarkReading::default());
    append(&inner, [1]).await;
    eventually("the first batch", || async { commits.count() == 1 }).await;

    inner.release_lease(&lease, "node-a").await.unwrap();
    inner
        .request_lease(LeaseRequest::new(lease.as_str(), "node-b", 0, TTL))
        .await
        .unwrap();
    append(&inner, [2]).await;
    eventually("the refused batch", || async { commits.count() == 2 }).await;
    eventually("the elector to see the partition gone", || async {
        watch.held().is_empty()
    })
    .await;
    assert_eq!(commits.count(), 2, "the refused batch was committed once");

    // Back to node-a, with a backlog far longer than one turn: a stop still ends the run.
    inner.release_lease(&lease, "node-b").await.unwrap();
    append(&inner, 3..=100_000).await;
    eventually("node-a to hold the partition again", || async {
        watch.held().len() == 1
    })
    .await;
    eventually("the backlog to be under way", || async {
        commits.count() > 3
    })
    .await;
    let _ = stop.send(());
    let ended = tokio::time::timeout(DEADLINE, task)
        .await
        .expect("a stop ends the run amid a backlog")
        .unwrap();
    ended.expect("stops without error");
    assert!(
        commits.count() < 100_000,
        "stopped before the backlog ran out"
    );
    elector.shutdown().await.unwrap();
}

/// A member that takes a partition over for the first time, a projector of its own made for
/// it, starts from the bookmark the member before left, whatever the bookmark reading.
#[tokio::test]
async fn a_partitions_first_tenure_starts_from_the_bookmark_whatever_the_bookmark_reading() {
    for reading in [
        BookmarkReading::BeforeEachRun,
        BookmarkReading::Once,
        BookmarkReading::OnRequest,
    ] {
        let inner = MemoryEventStorage::new();
        let storage: Arc<dyn EventStorage> = Arc::new(PollOnly::new(inner.clone()));
        // The member before projected 1 to 3 and bookmarked the third.
        append(&inner, 1..=3).await;
        let third = inner
            .query(
                &eventstore::EventFilter::match_all(),
                &stream(),
                None,
                eventstore::Limit::none(),
                eventstore::Direction::Forward,
            )
            .await
            .unwrap()[2]
            .reference;
        inner.bookmark(READER, &third, Tags::none()).await.unwrap();

        let elector = PartitionElector::builder(Arc::clone(&storage), "numbers", 1)
            .owner("node-b")
            .ttl(TTL)
            .start()
            .unwrap();
        let commits = Commits::default();
        let (stop, task) = run_partitioned(&storage, &elector.watch(), &commits, reading);
        append(&inner, [4]).await;
        eventually("the event after the bookmark", || async {
            commits.numbers().ends_with(&[4])
        })
        .await;
        assert_eq!(
            commits.numbers(),
            [4],
            "{reading:?}: nothing the member before bookmarked is projected again"
        );
        let _ = stop.send(());
        task.await.unwrap().expect("stops without error");
        elector.shutdown().await.unwrap();
    }
}

/// A stop ends an elected projector's run amid a backlog, after the batch in hand, as it
/// ends a partitioned one's: a deploy that stops the work before it releases the lease does
/// not wait for a replay.
#[tokio::test]
async fn an_elected_projector_stops_amid_a_backlog() {
    let inner = MemoryEventStorage::new();
    let storage: Arc<dyn EventStorage> = Arc::new(PollOnly::new(inner.clone()));
    let elector = leading(&storage, "node-a").await;
    append(&inner, 1..=100_000).await;
    let commits = Commits::default();
    let (stop, task) = run_elected(
        &storage,
        &elector,
        &commits,
        Commit::Plain,
        BookmarkReading::default(),
        1,
    );
    eventually("the backlog to be under way", || async {
        commits.count() > 3
    })
    .await;
    let _ = stop.send(());
    let ended = tokio::time::timeout(DEADLINE, task)
        .await
        .expect("a stop ends the run amid a backlog")
        .unwrap();
    let run = ended.expect("stops without error");
    let committed = commits.count();
    assert!(committed < 100_000, "stopped before the backlog ran out");
    assert_eq!(
        run.batches as usize, committed,
        "every batch begun was finished and counted"
    );
    elector.shutdown().await.unwrap();
}
