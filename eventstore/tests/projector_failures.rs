//! Elected and partitioned projectors on a storage that fails for a while: a failure that may
//! pass (a lost connection) pauses them and they project everything once the storage is back;
//! a closed storage, which will not come back, ends them; a storage that hangs holds up no
//! stop.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use eventstore::elector::LeaderElector;
use eventstore::partitions::PartitionWatch;
use eventstore::projector::{
    ElectedProjector, PartitionedProjector, Projection, ProjectionError, Projector, ProjectorError,
    ProjectorRun,
};
use eventstore::{
    AppendCriteria, EventReference, EventStorage, EventStorageError, EventStreamId, EventToStore,
    PartitionElector, StoredEvent,
};
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::support::{eventually, DEADLINE};
use eventstore_tck::wrappers::Unreliable;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const TTL: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
const PARTITIONS: u32 = 2;

/// The numbers projected so far, in the order their batches committed.
#[derive(Clone, Default)]
struct Projected(Arc<Mutex<Vec<u64>>>);

impl Projected {
    fn sorted(&self) -> Vec<u64> {
        let mut numbers = self.0.lock().unwrap().clone();
        numbers.sort_unstable();
        numbers
    }
}

struct Recorder {
    projected: Projected,
    pending: Vec<u64>,
}

impl Recorder {
    fn new(projected: &Projected) -> Self {
        Recorder {
            projected: projected.clone(),
            pending: Vec::new(),
        }
    }
}

#[async_trait]
impl Projection for Recorder {
    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
        self.pending
            .push(event.payload["n"].as_u64().ok_or("a number")?);
        Ok(())
    }

    async fn after_batch(&mut self, _last: &EventReference) -> Result<(), ProjectionError> {
        self.projected.0.lock().unwrap().append(&mut self.pending);
        Ok(())
    }

    async fn cancel_batch(&mut self) {
        self.pending.clear();
    }
}

/// Appends the numbers to `stream`, past the wrapper, so that they land while it fails.
async fn append(
    storage: &Unreliable<MemoryEventStorage>,
    stream: &EventStreamId,
    numbers: impl IntoIterator<Item = u64>,
) {
    let events = numbers
        .into_iter()
        .map(|n| EventToStore::new("Numbered", serde_json::json!({ "n": n })))
        .collect();
    storage
        .inner()
        .append(AppendCriteria::none(), stream, events)
        .await
        .unwrap();
}

async fn wait_for(projected: &Projected, expected: &[u64]) {
    eventually(&format!("{expected:?} projected"), || async {
        projected.sorted() == expected
    })
    .await;
}

/// Fails the storage until its failures include at least three more calls, showing that the
/// projector kept trying, and checks the projector is still running.
async fn fail_for_a_while(storage: &Unreliable<MemoryEventStorage>, task: &Running) {
    let before = storage.failed_calls();
    storage.fail(true);
    eventually("the projector to try again and again", || async {
        storage.failed_calls() >= before + 3
    })
    .await;
    assert!(
        !task.is_finished(),
        "a failure that may pass does not end the projector"
    );
    storage.fail(false);
}

/// With events 4 to 6 appended, fails the storage for a while, then checks that the projector
/// projects all six, each once, and stops without error.
async fn outlasts_failures(
    storage: &Unreliable<MemoryEventStorage>,
    projected: &Projected,
    stop: oneshot::Sender<()>,
    task: Running,
) {
    fail_for_a_while(storage, &task).await;
    wait_for(projected, &[1, 2, 3, 4, 5, 6]).await;
    let _ = stop.send(());
    let totals = task.await.unwrap().expect("stopped without error");
    assert_eq!(totals.events_handled, 6, "every event handled once");
}

/// A projector's run, on its own task.
type Running = JoinHandle<Result<ProjectorRun, ProjectorError>>;

/// Starts `run` on a task of its own with a future that completes when the returned sender
/// sends (or is dropped).
fn spawn_until_stopped<Run, Fut>(run: Run) -> (oneshot::Sender<()>, Running)
where
    Run: FnOnce(Pin<Box<dyn Future<Output = ()> + Send>>) -> Fut,
    Fut: Future<Output = Result<ProjectorRun, ProjectorError>> + Send + 'static,
{
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(run(Box::pin(async {
        let _ = stopped.await;
    })));
    (stop, task)
}

/// An elected projector on `storage`, on its own task, once its elector leads.
async fn elected(
    storage: &Arc<Unreliable<MemoryEventStorage>>,
    projected: &Projected,
) -> (LeaderElector, oneshot::Sender<()>, Running) {
    let shared: Arc<dyn EventStorage> = storage.clone();
    let elector = LeaderElector::builder(Arc::clone(&shared), "numbers-projector")
        .ttl(TTL)
        .start()
        .unwrap();
    let mut watch = elector.watch();
    tokio::time::timeout(DEADLINE, watch.wait_for_leadership())
        .await
        .expect("leads in time")
        .expect("the elector runs");
    let projector = Projector::builder(shared, Recorder::new(projected))
        .stream(EventStreamId::for_context("numbers"))
        .bookmark("numbers-reader")
        .build()
        .unwrap();
    let mut elected = ElectedProjector::new(projector, watch).poll_interval(POLL_INTERVAL);
    let (stop, task) =
        spawn_until_stopped(move |stopped| async move { elected.run_until(stopped).await });
    (elector, stop, task)
}

#[tokio::test]
async fn an_elected_projector_pauses_through_storage_failures_and_projects_everything_after() {
    let storage = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    let stream = EventStreamId::for_context("numbers");
    let projected = Projected::default();
    let (elector, stop, task) = elected(&storage, &projected).await;
    append(&storage, &stream, 1..=3).await;
    wait_for(&projected, &[1, 2, 3]).await;

    append(&storage, &stream, 4..=6).await;
    outlasts_failures(&storage, &projected, stop, task).await;
    elector.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_elected_projector_ends_on_a_closed_storage() {
    let storage = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    let projected = Projected::default();
    let (elector, _stop, task) = elected(&storage, &projected).await;
    storage.inner().close().await.unwrap();
    let ended = tokio::time::timeout(DEADLINE, task)
        .await
        .expect("the projector ends")
        .unwrap();
    assert!(
        matches!(
            ended,
            Err(ProjectorError::Storage(EventStorageError::Closed))
        ),
        "{ended:?}"
    );
    elector.abort();
}

#[tokio::test]
async fn a_partitioned_projector_pauses_through_storage_failures_and_projects_everything_after() {
    let storage = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    let shared: Arc<dyn EventStorage> = storage.clone();
    let (elector, watch) = sole_member(Arc::clone(&shared)).await;
    let projected = Projected::default();
    let mut projector = PartitionedProjector::new(watch, {
        let projected = projected.clone();
        move |partition| {
            Projector::builder(Arc::clone(&shared), Recorder::new(&projected))
                .stream(partition_stream(partition))
                .bookmark(format!("numbers-{partition}"))
                .build()
        }
    })
    .poll_interval(POLL_INTERVAL);
    let (stop, task) =
        spawn_until_stopped(move |stopped| async move { projector.run_until(stopped).await });
    append(&storage, &partition_stream(0), [1, 2]).await;
    append(&storage, &partition_stream(1), [3]).await;
    wait_for(&projected, &[1, 2, 3]).await;

    append(&storage, &partition_stream(0), [4]).await;
    append(&storage, &partition_stream(1), [5, 6]).await;
    outlasts_failures(&storage, &projected, stop, task).await;
    elector.shutdown().await.unwrap();
}

/// The only member of the group `numbers` on `storage`, once it holds every partition.
async fn sole_member(storage: Arc<dyn EventStorage>) -> (PartitionElector, PartitionWatch) {
    let elector = PartitionElector::builder(storage, "numbers", PARTITIONS)
        .ttl(TTL)
        .start()
        .unwrap();
    let watch = elector.watch();
    eventually("the only member to hold every partition", || async {
        watch.held().len() == PARTITIONS as usize
    })
    .await;
    (elector, watch)
}

fn partition_stream(partition: u32) -> EventStreamId {
    EventStreamId::new("numbers", partition.to_string())
}

/// A stop while the projector's read hangs (no batch in hand) ends the run at once: the read
/// is dropped, to be read again by the next run. The elector leases on a storage that answers.
async fn stops_while_its_read_hangs<Run, Running>(events: &Unreliable<MemoryEventStorage>, run: Run)
where
    Run: FnOnce(Pin<Box<dyn Future<Output = ()> + Send>>) -> Running,
    Running: Future<Output = Result<ProjectorRun, ProjectorError>> + Send + 'static,
{
    let (stop, task) = spawn_until_stopped(run);
    eventually("the projector's read to hang", || async {
        events.hung_calls() >= 1
    })
    .await;
    stop.send(()).unwrap();
    let ended = tokio::time::timeout(DEADLINE, task).await;
    assert!(
        matches!(ended, Ok(Ok(Ok(_)))),
        "run_until did not end when stopped while its read hung: {ended:?}"
    );
}

#[tokio::test]
async fn an_elected_projector_stops_while_its_read_hangs() {
    let leases: Arc<dyn EventStorage> = Arc::new(MemoryEventStorage::new());
    let events = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    let elector = LeaderElector::builder(leases, "numbers-projector")
        .ttl(TTL)
        .start()
        .unwrap();
    let mut watch = elector.watch();
    watch
        .wait_for_leadership_within(DEADLINE)
        .await
        .expect("leads");
    events.hang(true);
    let shared: Arc<dyn EventStorage> = events.clone();
    let projector = Projector::builder(shared, Recorder::new(&Projected::default()))
        .stream(EventStreamId::for_context("numbers"))
        .build()
        .unwrap();
    let mut elected = ElectedProjector::new(projector, watch).poll_interval(POLL_INTERVAL);
    stops_while_its_read_hangs(&events, move |stopped| async move {
        elected.run_until(stopped).await
    })
    .await;
    elector.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_partitioned_projector_stops_while_its_read_hangs() {
    let leases: Arc<dyn EventStorage> = Arc::new(MemoryEventStorage::new());
    let events = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    let (elector, watch) = sole_member(leases).await;
    events.hang(true);
    let shared: Arc<dyn EventStorage> = events.clone();
    let mut partitioned = PartitionedProjector::new(watch, move |partition| {
        Projector::builder(Arc::clone(&shared), Recorder::new(&Projected::default()))
            .stream(partition_stream(partition))
            .bookmark(format!("numbers-{partition}"))
            .build()
    })
    .poll_interval(POLL_INTERVAL);
    stops_while_its_read_hangs(&events, move |stopped| async move {
        partitioned.run_until(stopped).await
    })
    .await;
    elector.shutdown().await.unwrap();
}
