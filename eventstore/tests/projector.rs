//! Projectors on the in-memory backend: batches and bookmarks, resuming, bookmark reading,
//! cancelled batches, stopping between batches, stale fences, refused settings, a position
//! kept in the projection's own store, the next batch read while one is projected, and the
//! turns of a partitioned projector.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use eventstore::decorator::Decorator;
use eventstore::elector::{LeaderElector, Leadership};
use eventstore::projector::{
    BookmarkReading, ElectedProjector, PartitionedProjector, Projection, ProjectionError,
    Projector, ProjectorError, ProjectorRun,
};
use eventstore::{
    AppendCriteria, Direction, EventFilter, EventReference, EventStorage, EventStorageError,
    EventStreamId, EventToStore, Fence, FencingToken, LeaseRequest, LeaseStatus, Limit,
    PartitionElector, StorageResult, StoredEvent,
};
use eventstore_memory::MemoryEventStorage;

/// Collects the positions it handled; fails on the position given, if any.
#[derive(Debug, Default)]
struct Recorder {
    committed: Vec<u64>,
    pending: Vec<u64>,
    fail_at: Option<u64>,
    hooks: Vec<&'static str>,
}

#[async_trait]
impl Projection for Recorder {
    async fn before_batch(&mut self) -> Result<(), ProjectionError> {
        self.hooks.push("before");
        Ok(())
    }

    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
        let n = event.payload["n"].as_u64().expect("n");
        if self.fail_at == Some(n) {
            return Err(format!("cannot project event {n}").into());
        }
        self.pending.push(n);
        Ok(())
    }

    async fn after_batch(&mut self, _last: &EventReference) -> Result<(), ProjectionError> {
        self.hooks.push("after");
        self.committed.append(&mut self.pending);
        Ok(())
    }

    async fn cancel_batch(&mut self) {
        self.hooks.push("cancel");
        self.pending.clear();
    }
}

fn stream() -> EventStreamId {
    EventStreamId::for_context("numbers")
}

async fn storage_with(count: u64) -> Arc<MemoryEventStorage> {
    let storage = Arc::new(MemoryEventStorage::new());
    append(&storage, 1..=count).await;
    storage
}

async fn append(storage: &MemoryEventStorage, numbers: impl IntoIterator<Item = u64>) {
    let events = numbers
        .into_iter()
        .map(|n| EventToStore::new("Number", serde_json::json!({ "n": n })))
        .collect();
    storage
        .append(AppendCriteria::none(), &stream(), events)
        .await
        .unwrap();
}

fn projector(storage: &Arc<MemoryEventStorage>, batch_size: u64) -> Projector<Recorder> {
    Projector::builder(storage.clone(), Recorder::default())
        .stream(stream())
        .bookmark("numbers-reader")
        .batch_size(batch_size)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_run_projects_everything_in_batches_and_bookmarks_each_batch() {
    let storage = storage_with(7).await;
    let mut projector = projector(&storage, 3);
    let run = projector.run().await.unwrap();
    assert_eq!(
        projector.projection().committed,
        (1..=7).collect::<Vec<_>>()
    );
    assert_eq!(
        run,
        ProjectorRun {
            events_read: 7,
            events_handled: 7,
            queries: 3,
            batches: 3,
            last_reference: projector.position(),
        }
    );
    assert_eq!(
        storage.get_bookmark("numbers-reader").await.unwrap(),
        projector.position()
    );
    assert_eq!(
        projector.projection().hooks,
        ["before", "after", "before", "after", "before", "after"]
    );
}

#[tokio::test]
async fn the_default_batch_size_is_500() {
    let storage = storage_with(501).await;
    let mut projector = Projector::builder(storage.clone(), Recorder::default())
        .build()
        .unwrap();
    let run = projector.run().await.unwrap();
    assert_eq!((run.batches, run.queries, run.events_handled), (2, 2, 501));
}

#[tokio::test]
async fn a_new_projector_resumes_from_the_bookmark_another_one_left() {
    let storage = storage_with(4).await;
    projector(&storage, 10).run().await.unwrap();
    append(&storage, 5..=6).await;

    let mut next_owner = projector(&storage, 10);
    next_owner.run().await.unwrap();
    assert_eq!(next_owner.projection().committed, [5, 6]);
}

#[tokio::test]
async fn bookmark_reading_before_each_run_follows_a_bookmark_moved_elsewhere() {
    let storage = storage_with(3).await;
    let mut mine = projector(&storage, 10);
    mine.run().await.unwrap();
    append(&storage, 4..=5).await;
    // another instance projects 4 and 5 meanwhile
    projector(&storage, 10).run().await.unwrap();
    append(&storage, [6]).await;
    mine.run().await.unwrap();
    assert_eq!(mine.projection().committed, [1, 2, 3, 6]);
}

#[tokio::test]
async fn bookmark_reading_once_or_on_request_keeps_the_own_cursor() {
    let storage = storage_with(2).await;
    let mut once = Projector::builder(storage.clone(), Recorder::default())
        .stream(stream())
        .bookmark("r")
        .bookmark_reading(BookmarkReading::Once)
        .build()
        .unwrap();
    once.run().await.unwrap();
    storage.remove_bookmark("r").await.unwrap();
    append(&storage, [3]).await;
    once.run().await.unwrap();
    assert_eq!(once.projection().committed, [1, 2, 3], "not re-read");

    let mut on_request = Projector::builder(storage.clone(), Recorder::default())
        .stream(stream())
        .bookmark("r")
        .bookmark_reading(BookmarkReading::OnRequest)
        .build()
        .unwrap();
    on_request.seek(once.position());
    assert_eq!(on_request.run().await.unwrap().events_read, 0);
    on_request.read_bookmark().await.unwrap();
    assert_eq!(on_request.position(), once.position());
}

#[tokio::test]
async fn a_failing_batch_is_cancelled_and_the_cursor_goes_back_to_its_start() {
    let storage = storage_with(6).await;
    let mut projector = projector(&storage, 3);
    projector.projection_mut().fail_at = Some(5);
    let error = projector.run().await.unwrap_err();
    let first_batch_end = storage.get_bookmark("numbers-reader").await.unwrap();
    assert!(
        matches!(&error, ProjectorError::Projection { batch_start, .. } if *batch_start == first_batch_end),
        "{error}"
    );
    assert!(
        error.report().contains("cannot project event 5"),
        "{}",
        error.report()
    );
    assert_eq!(projector.position(), first_batch_end);
    assert_eq!(projector.projection().committed, [1, 2, 3]);
    assert_eq!(projector.projection().hooks.last(), Some(&"cancel"));

    projector.projection_mut().fail_at = None;
    projector.run().await.unwrap();
    assert_eq!(
        projector.projection().committed,
        (1..=6).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn run_while_stops_between_batches() {
    let storage = storage_with(9).await;
    let mut projector = projector(&storage, 3);
    let mut batches_allowed = 2;
    let run = projector
        .run_while(move || {
            batches_allowed -= 1;
            batches_allowed >= 0
        })
        .await
        .unwrap();
    assert_eq!(run.batches, 2);
    assert_eq!(
        projector.projection().committed,
        (1..=6).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_stale_fence_keeps_the_bookmark_where_the_current_leader_put_it() {
    let storage = storage_with(4).await;
    let ttl = Duration::from_secs(60);
    let first = storage
        .request_lease(LeaseRequest::new("numbers", "a", 0, ttl))
        .await
        .unwrap();
    assert_eq!(first.status, LeaseStatus::Leader);
    storage.release_lease("numbers", "a").await.unwrap();
    let second = storage
        .request_lease(LeaseRequest::new("numbers", "b", 0, ttl))
        .await
        .unwrap();
    assert_eq!(second.fencing_token, FencingToken(2));

    let mut current = projector(&storage, 10);
    current.set_fence(Some(Fence::new("numbers", second.fencing_token)));
    current.run().await.unwrap();
    let bookmark = storage.get_bookmark("numbers-reader").await.unwrap();

    // the zombie starts from scratch and would move the bookmark back to event 2
    let mut zombie = Projector::builder(storage.clone(), Recorder::default())
        .stream(stream())
        .bookmark("numbers-reader")
        .batch_size(2)
        .bookmark_reading(BookmarkReading::OnRequest)
        .fence(Fence::new("numbers", first.fencing_token))
        .build()
        .unwrap();
    let error = zombie.run().await.unwrap_err();
    assert!(error.is_fenced(), "{error}");
    assert_eq!(zombie.position(), None, "cursor back at the batch start");
    assert_eq!(
        storage.get_bookmark("numbers-reader").await.unwrap(),
        bookmark
    );
}

#[test]
fn invalid_settings_are_refused_with_a_clear_error() {
    let storage = Arc::new(MemoryEventStorage::new());
    let error = Projector::builder(storage.clone(), Recorder::default())
        .batch_size(0)
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("batch size"), "{error}");
    let error = Projector::builder(storage, Recorder::default())
        .bookmark(" ")
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("blank"), "{error}");
}

/// The projection's own store of the module's example "Exactly-once against your own
/// store": its data and its position, committed together.
#[derive(Default)]
struct OwnStore {
    count: u64,
    position: Option<EventReference>,
}

struct Counter {
    store: Arc<Mutex<OwnStore>>,
    pending: u64,
}

#[async_trait]
impl Projection for Counter {
    async fn handle(&mut self, _event: &StoredEvent) -> Result<(), ProjectionError> {
        self.pending += 1;
        Ok(())
    }
    async fn after_batch(&mut self, last: &EventReference) -> Result<(), ProjectionError> {
        let mut store = self.store.lock().unwrap();
        store.count += std::mem::take(&mut self.pending);
        store.position = Some(*last);
        Ok(())
    }
    async fn cancel_batch(&mut self) {
        self.pending = 0;
    }
}

#[tokio::test]
async fn runs_that_seek_to_the_position_of_the_own_store_count_each_event_once() {
    let storage = storage_with(3).await;
    let store = Arc::new(Mutex::new(OwnStore::default()));
    for _ in 0..2 {
        // every run (on whichever instance) starts where the own store says
        let counter = Counter {
            store: store.clone(),
            pending: 0,
        };
        let mut projector = Projector::builder(storage.clone(), counter)
            .stream(stream())
            .bookmark_reading(BookmarkReading::OnRequest)
            .build()
            .unwrap();
        let position = store.lock().unwrap().position;
        projector.seek(position);
        projector.run().await.unwrap();
    }
    assert_eq!(store.lock().unwrap().count, 3, "each event counted once");
}

/// The in-memory backend, telling when it is asked for its second batch of events.
#[derive(Debug, Default)]
struct ObservedReads {
    inner: MemoryEventStorage,
    queries: AtomicUsize,
    second_query: tokio::sync::Notify,
}

#[async_trait]
impl Decorator for ObservedReads {
    type Inner = MemoryEventStorage;

    fn inner(&self) -> &MemoryEventStorage {
        &self.inner
    }

    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        let asked = self.queries.fetch_add(1, Ordering::SeqCst) + 1;
        if asked == 2 {
            self.second_query.notify_one();
        }
        self.inner
            .query(filter, stream, after, limit, direction)
            .await
    }
}

/// Finishes its first batch only once the storage has been asked for the second one, as a
/// projection that commits to a database of its own waits for it.
struct WaitsForTheNextRead {
    storage: Arc<ObservedReads>,
    batches: usize,
    handled: Vec<u64>,
}

#[async_trait]
impl Projection for WaitsForTheNextRead {
    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
        self.handled.push(event.payload["n"].as_u64().expect("n"));
        Ok(())
    }

    async fn after_batch(&mut self, _last: &EventReference) -> Result<(), ProjectionError> {
        self.batches += 1;
        if self.batches == 1 {
            let asked = self.storage.second_query.notified();
            tokio::time::timeout(Duration::from_secs(10), asked)
                .await
                .map_err(|_| "the next batch was not read while this one was projected")?;
        }
        Ok(())
    }
}

#[tokio::test]
async fn the_next_batch_is_read_while_a_full_batch_is_projected() {
    let storage = Arc::new(ObservedReads::default());
    append(&storage.inner, 1..=7).await;
    let projection = WaitsForTheNextRead {
        storage: storage.clone(),
        batches: 0,
        handled: Vec::new(),
    };
    let mut projector = Projector::builder(storage.clone(), projection)
        .stream(stream())
        .bookmark("numbers-reader")
        .batch_size(3)
        .build()
        .unwrap();
    let run = projector.run().await.unwrap();
    assert_eq!(projector.projection().handled, (1..=7).collect::<Vec<_>>());
    assert_eq!((run.batches, run.queries, run.events_handled), (3, 3, 7));
    assert_eq!(
        storage.queries.load(Ordering::SeqCst),
        3,
        "a batch short of full is the last: nothing is read after it"
    );
    assert_eq!(
        storage.get_bookmark("numbers-reader").await.unwrap(),
        projector.position()
    );
}

/// What `run` did until every task waited, then stopped. Under a paused clock, which moves on
/// only once every task waits, so that a projector has gone idle when the sleep here ends,
/// however slow the machine.
async fn run_until_idle<Run, Running>(run: Run) -> ProjectorRun
where
    Run: FnOnce(futures_util::future::BoxFuture<'static, ()>) -> Running,
    Running: std::future::Future<Output = Result<ProjectorRun, ProjectorError>> + Send + 'static,
{
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(run(Box::pin(async {
        let _ = stopped.await;
    })));
    tokio::time::sleep(Duration::from_secs(60)).await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap()
}

/// A partition's turn is four batches. A turn whose last batch came back short has caught up,
/// so the partition waits for the next poll like the others, instead of taking another turn
/// at once only to read nothing.
#[tokio::test(start_paused = true)]
async fn a_partitions_turn_that_caught_up_in_its_last_batch_waits_for_the_next_poll() {
    // Batches of 2 over 7 events: 2, 2, 2 and a short 1 in one turn.
    let storage = storage_with(7).await;
    let shared: Arc<dyn EventStorage> = storage.clone();
    let elector = PartitionElector::builder(Arc::clone(&shared), "numbers", 1)
        .ttl(Duration::from_secs(30))
        .start()
        .unwrap();
    let watch = elector.watch();
    eventstore_tck::support::eventually("the only member to hold the partition", || async {
        watch.held().len() == 1
    })
    .await;
    let mut partitioned =
        PartitionedProjector::new(watch, move |_partition| Ok(projector(&storage, 2)))
            .poll_interval(Duration::from_secs(3600));
    let run = run_until_idle(|stopped| async move { partitioned.run_until(stopped).await }).await;
    assert_eq!(run.events_handled, 7);
    assert_eq!(
        (run.batches, run.queries),
        (4, 4),
        "a turn that had caught up was followed by another: {run:?}"
    );
    elector.shutdown().await.unwrap();
}

/// An elected projector that starts after its elector came to lead reads up to the end once,
/// and then waits for the next poll: the leadership it started under is no change to run
/// again for.
#[tokio::test(start_paused = true)]
async fn an_elected_projector_started_under_a_leadership_runs_once_until_the_next_poll() {
    // Batches of 2 over 3 events: 2, then a short 1.
    let storage = storage_with(3).await;
    let shared: Arc<dyn EventStorage> = storage.clone();
    let elector = LeaderElector::builder(Arc::clone(&shared), "numbers-projector")
        .ttl(Duration::from_secs(30))
        .start()
        .unwrap();
    let leadership = elector.watch();
    eventstore_tck::support::eventually("the elector to lead", || async { leadership.is_leader() })
        .await;
    let mut elected = ElectedProjector::new(projector(&storage, 2), leadership)
        .poll_interval(Duration::from_secs(3600));
    let run = run_until_idle(|stopped| async move { elected.run_until(stopped).await }).await;
    assert_eq!(run.events_handled, 3);
    assert_eq!(
        (run.batches, run.queries),
        (2, 2),
        "a run that had caught up was followed by another: {run:?}"
    );
    elector.shutdown().await.unwrap();
}

/// A poll interval of zero would have a projector that caught up read the storage without a
/// pause: both looping projectors refuse it, naming it, before they read anything.
#[tokio::test]
async fn a_poll_interval_of_zero_is_refused_before_anything_is_read() {
    let storage = storage_with(3).await;
    let shared: Arc<dyn EventStorage> = storage.clone();
    let refused = |error: ProjectorError| {
        assert!(
            matches!(
                error,
                ProjectorError::Storage(EventStorageError::InvalidInput { .. })
            ) && error.to_string().contains("poll interval"),
            "{error}"
        );
    };
    let leader = LeaderElector::builder(Arc::clone(&shared), "numbers-projector")
        .start()
        .unwrap();
    let mut elected =
        ElectedProjector::new(projector(&storage, 2), leader.watch()).poll_interval(Duration::ZERO);
    let ended = tokio::time::timeout(
        Duration::from_secs(10),
        elected.run_until(std::future::pending()),
    )
    .await
    .expect("refused at once");
    refused(ended.unwrap_err());
    assert_eq!(elected.totals().queries, 0);

    let members = PartitionElector::builder(shared, "numbers", 1)
        .start()
        .unwrap();
    let mut partitioned =
        PartitionedProjector::new(members.watch(), move |_| Ok(projector(&storage, 2)))
            .poll_interval(Duration::ZERO);
    let ended = tokio::time::timeout(
        Duration::from_secs(10),
        partitioned.run_until(std::future::pending()),
    )
    .await
    .expect("refused at once");
    refused(ended.unwrap_err());
    assert_eq!(partitioned.totals().queries, 0);
    leader.shutdown().await.unwrap();
    members.shutdown().await.unwrap();
}

/// A partitioned projector stopped by the same change that asks it to hand a partition over
/// lets the partition go as it stops: nothing of it is in hand, so the elector need not wait
/// out its drain timeout before the newcomer takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_projector_stopped_as_a_handover_is_asked_lets_the_partition_go() {
    let storage = storage_with(3).await;
    let shared: Arc<dyn EventStorage> = storage.clone();
    let member = |owner: &str| {
        PartitionElector::builder(Arc::clone(&shared), "numbers", 2)
            .owner(owner)
            .ttl(Duration::from_secs(30))
            .drain_timeout(Duration::from_secs(25))
            .start()
            .unwrap()
    };
    let first = member("pod-a");
    let watch = first.watch();
    eventstore_tck::support::eventually("pod-a to hold both partitions", || async {
        watch.held().len() == 2
    })
    .await;
    let mut partitioned = PartitionedProjector::new(watch.clone(), {
        let storage = Arc::clone(&storage);
        move |_| Ok(projector(&storage, 2))
    })
    .poll_interval(Duration::from_secs(3600));
    let mut asked = watch.clone();
    let stop = async move {
        while asked.handing_over().is_empty() {
            if asked.changed().await.is_err() {
                return;
            }
        }
    };
    let run = tokio::spawn(async move { partitioned.run_until(stop).await });
    bookmarked(&storage).await;

    let second = member("pod-b");
    let joined = second.watch();
    run.await.unwrap().unwrap();
    eventstore_tck::support::eventually("pod-b to hold a partition", || async {
        joined.held().len() == 1
    })
    .await;
    second.shutdown().await.unwrap();
    first.shutdown().await.unwrap();
}

/// An elected projector stopped by the same change that asks its leader to step down
/// acknowledges as it stops: nothing of the tenure is in hand, and the elector, which keeps
/// the lease until the work acknowledges, hands it to the contender at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elected_projector_stopped_as_a_step_down_is_asked_acknowledges_it() {
    let storage = storage_with(3).await;
    let shared: Arc<dyn EventStorage> = storage.clone();
    let elector = |owner: &str, priority: i64| {
        LeaderElector::builder(Arc::clone(&shared), "numbers-projector")
            .owner(owner)
            .priority(priority)
            .ttl(Duration::from_secs(30))
            .start()
            .unwrap()
    };
    let first = elector("pod-a", 0);
    let leadership = first.watch();
    eventstore_tck::support::eventually("pod-a to lead", || async { leadership.is_leader() }).await;
    let mut elected = ElectedProjector::new(projector(&storage, 2), leadership.clone())
        .poll_interval(Duration::from_secs(3600));
    let mut asked = leadership.clone();
    let stop = async move {
        while !matches!(asked.current(), Leadership::StepDownRequested { .. }) {
            if asked.changed().await.is_err() {
                return;
            }
        }
    };
    let run = tokio::spawn(async move { elected.run_until(stop).await });
    bookmarked(&storage).await;

    let second = elector("pod-b", 5);
    let newcomer = second.watch();
    run.await.unwrap().unwrap();
    eventstore_tck::support::eventually("pod-b to lead", || async { newcomer.is_leader() }).await;
    second.shutdown().await.unwrap();
    first.shutdown().await.unwrap();
}

/// Waits until the projectors' bookmark is placed: the events were projected.
async fn bookmarked(storage: &MemoryEventStorage) {
    eventstore_tck::support::eventually("the events projected", || async {
        let bookmark = storage.get_bookmark("numbers-reader").await.unwrap();
        bookmark.is_some()
    })
    .await;
}
