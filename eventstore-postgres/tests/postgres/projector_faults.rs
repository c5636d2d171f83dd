//! An elected projector woken by append hints when the push channel fails: a killed listener
//! connection and a server restart cost hints, never events. The projector keeps projecting
//! (the lost-notice signal makes it read at once when the listener is back, and its poll
//! interval is the safety net), skips nothing, and is woken by hints again afterwards, far
//! sooner than its poll interval; events the lost hints announced that readers cannot see yet
//! are found once they can.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use eventstore::elector::LeaderElector;
use eventstore::projector::{ElectedProjector, Projection, ProjectionError, Projector};
use eventstore::{
    AppendCriteria, EventStorage, EventStreamId, EventToStore, StorageResult, StoredEvent,
};
use eventstore_postgres::PostgresEventStorage;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::common;
use crate::lease_changes::listener_pids;
use crate::throwaway_cluster::ThrowawayCluster;

/// Far longer than any wait below: a projection that keeps up was woken by a hint (or by the
/// lost-notice signal), never by the poll.
const POLL_INTERVAL: Duration = Duration::from_secs(60);
/// How soon a hinted append must be projected: half the poll interval, so that only a hint
/// (or the lost-notice signal) can meet it, with room for a machine loaded by the rest of the
/// suite (2 s was once missed under such load, and 10 s once through PgBouncer: a transaction
/// held open anywhere in the cluster holds every reader's visibility barrier back).
const PUSHED: Duration = Duration::from_secs(30);
/// The longest the listener may take to come back.
const SETTLE: Duration = Duration::from_secs(15);

fn orders() -> EventStreamId {
    EventStreamId::for_context("orders")
}

/// Every order number projected, in projection order.
#[derive(Clone, Default)]
struct Projected(Arc<Mutex<Vec<u64>>>);

impl Projected {
    fn numbers(&self) -> Vec<u64> {
        self.0.lock().unwrap().clone()
    }

    /// Waits until orders `1..=last` are projected, each once and in order.
    async fn wait_for(&self, last: u64, within: Duration) -> Duration {
        let started = Instant::now();
        common::eventually(&format!("orders 1..={last} projected"), within, || async {
            (self.numbers().len() as u64 >= last).then_some(())
        })
        .await;
        let expected: Vec<u64> = (1..=last).collect();
        assert_eq!(
            self.numbers(),
            expected,
            "every order projected once, in order, none skipped"
        );
        started.elapsed()
    }
}

struct Recorder {
    projected: Projected,
    pending: Vec<u64>,
}

#[async_trait]
impl Projection for Recorder {
    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
        let order = event.payload["order"].as_u64().ok_or("an order number")?;
        self.pending.push(order);
        Ok(())
    }

    async fn after_batch(
        &mut self,
        _last: &eventstore::EventReference,
    ) -> Result<(), ProjectionError> {
        self.projected.0.lock().unwrap().append(&mut self.pending);
        Ok(())
    }

    async fn cancel_batch(&mut self) {
        self.pending.clear();
    }
}

/// An elector and an elected projector with a long poll interval, on their own task.
struct ProjectingInstance {
    elector: LeaderElector,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl ProjectingInstance {
    async fn start(storage: &Arc<dyn EventStorage>, projected: &Projected) -> Self {
        let elector = LeaderElector::builder(Arc::clone(storage), "orders-projector")
            .ttl(Duration::from_secs(30))
            .start()
            .expect("starting the elector");
        let mut watch = elector.watch();
        tokio::time::timeout(SETTLE, watch.wait_for_leadership())
            .await
            .expect("leading within the settle time")
            .expect("the elector runs");
        let recorder = Recorder {
            projected: projected.clone(),
            pending: Vec::new(),
        };
        let projector = Projector::builder(Arc::clone(storage), recorder)
            .stream(orders())
            .bookmark("orders-reader")
            .build()
            .expect("a projector");
        let mut elected = ElectedProjector::new(projector, watch).poll_interval(POLL_INTERVAL);
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            elected
                .run_until(async {
                    let _ = stopped.await;
                })
                .await
                .expect("the projector runs");
        });
        ProjectingInstance {
            elector,
            stop,
            task,
        }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.expect("the projector task");
        self.elector.shutdown().await.expect("shutdown releases");
    }
}

/// A hinting storage on a prefix of its own, and an instance projecting its orders.
struct Scene {
    prefix: String,
    storage: Arc<dyn EventStorage>,
    projected: Projected,
    instance: ProjectingInstance,
}

impl Scene {
    async fn start() -> Scene {
        let prefix = common::unique_prefix();
        let storage: Arc<dyn EventStorage> = Arc::new(common::hinting_storage_on(&prefix).await);
        let projected = Projected::default();
        let instance = ProjectingInstance::start(&storage, &projected).await;
        Scene {
            prefix,
            storage,
            projected,
            instance,
        }
    }

    /// Stops the instance and closes the storage.
    async fn stop(self) {
        self.instance.stop().await;
        self.storage.close().await.unwrap();
    }
}

/// Appends orders `numbers`, one append each.
async fn append(
    storage: &Arc<dyn EventStorage>,
    numbers: std::ops::RangeInclusive<u64>,
) -> StorageResult<()> {
    for order in numbers {
        let event = EventToStore::new("OrderPlaced", serde_json::json!({ "order": order }));
        storage
            .append(AppendCriteria::none(), &orders(), vec![event])
            .await?;
    }
    Ok(())
}

/// Terminates the listener connections of `prefix`; returns their pids.
async fn kill_listeners(admin: &PgPool, prefix: &str) -> Vec<i32> {
    let pids = listener_pids(admin, prefix).await.unwrap();
    for pid in &pids {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(admin)
            .await
            .unwrap();
    }
    pids
}

/// Waits until `prefix` has one listener again, not one of `killed`.
async fn listener_back(admin: &PgPool, prefix: &str, killed: &[i32]) {
    common::eventually("the listener to listen again", SETTLE, || async {
        let pids = listener_pids(admin, prefix).await.ok()?;
        (pids.len() == 1 && pids.iter().all(|pid| !killed.contains(pid))).then_some(())
    })
    .await
}

#[tokio::test]
async fn an_elected_projector_skips_nothing_across_a_killed_listener_and_is_woken_again() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let scene = Scene::start().await;
    let (prefix, storage, projected) = (&scene.prefix, &scene.storage, &scene.projected);

    append(storage, 1..=5).await.unwrap();
    let before = projected.wait_for(5, PUSHED).await;

    let killed = kill_listeners(&admin, prefix).await;
    assert_eq!(killed.len(), 1, "one listener per storage");
    // Appended while nobody listens: their hints are lost.
    append(storage, 6..=10).await.unwrap();
    listener_back(&admin, prefix, &killed).await;
    let recovered = projected.wait_for(10, SETTLE).await;

    append(storage, 11..=15).await.unwrap();
    let after = projected.wait_for(15, PUSHED).await;
    eprintln!(
        "projected in {before:?} before the kill, {recovered:?} after the listener came back, \
         {after:?} after that (poll interval {POLL_INTERVAL:?})"
    );
    scene.stop().await;
}

/// Hints lost while the listener was down, for an append readers cannot see yet (an older
/// transaction elsewhere holds the visibility barrier): the listener's lost-notice signal
/// makes the projector read, and it finds nothing. It keeps looking at the retry pace for a
/// while, so it projects the append soon after the barrier passes, not at its minute-long
/// poll.
#[tokio::test]
async fn hints_missed_for_an_append_out_of_sight_are_made_up_once_it_comes_in_sight() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let scene = Scene::start().await;
    let (prefix, storage, projected) = (&scene.prefix, &scene.storage, &scene.projected);
    append(storage, 1..=1).await.unwrap();
    projected.wait_for(1, PUSHED).await;

    // A transaction with an id, older than the append: readers see nothing committed later.
    let mut barrier = admin.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *barrier)
        .await
        .unwrap();
    let killed = kill_listeners(&admin, prefix).await;
    // Committed while nobody listens, and out of sight (the append gives up waiting for it).
    append(storage, 2..=2).await.unwrap();
    listener_back(&admin, prefix, &killed).await;
    // The projector reads on the lost-notice signal now, and finds nothing. Only the test's
    // power to tell a projector that looks again from one that waits for its poll depends on
    // this pause, never whether a correct projector passes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(projected.numbers(), [1], "order 2 is out of sight");
    barrier.rollback().await.unwrap();
    projected.wait_for(2, PUSHED).await;
    scene.stop().await;
}

// Two workers: the cluster is stopped and started with blocking commands while the projector
// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elected_projector_skips_nothing_across_a_server_restart_and_is_woken_again() {
    let Some(cluster) = ThrowawayCluster::start_or_skip() else {
        return;
    };
    let storage = PostgresEventStorage::builder()
        .url(cluster.url())
        .prefix("projector_")
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(1))
        .append_hints(true)
        .build()
        .await
        .expect("a storage on the throwaway cluster");
    let storage: Arc<dyn EventStorage> = Arc::new(storage);
    let projected = Projected::default();
    let instance = ProjectingInstance::start(&storage, &projected).await;
    append(&storage, 1..=5).await.unwrap();
    projected.wait_for(5, PUSHED).await;

    tokio::task::block_in_place(|| cluster.crash()).expect("crashing the cluster");
    tokio::task::block_in_place(|| cluster.pg_ctl_start()).expect("starting the cluster again");
    let restarted = Instant::now();
    // The pool may hand out a connection the crash broke: append until the server takes it.
    let mut next = 6;
    while next <= 10 {
        match append(&storage, next..=next).await {
            Ok(()) => next += 1,
            Err(error) => {
                assert!(
                    restarted.elapsed() < SETTLE,
                    "appends fail after {SETTLE:?}: {error}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&cluster.url())
        .await
        .expect("an admin connection to the restarted cluster");
    listener_back(&admin, "projector_", &[]).await;
    let recovered = projected.wait_for(10, SETTLE).await;

    append(&storage, 11..=15).await.unwrap();
    let after = projected.wait_for(15, PUSHED).await;
    eprintln!(
        "after the restart: orders 6..=10 projected {recovered:?} after the listener came back, \
         orders 11..=15 in {after:?} (poll interval {POLL_INTERVAL:?})"
    );
    instance.stop().await;
    storage.close().await.unwrap();
    admin.close().await;
}
