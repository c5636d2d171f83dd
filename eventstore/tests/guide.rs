//! The complete example of the guide "Leader-elected projectors" (`eventstore::guide`),
//! run on the in-memory backend: two instances of a revenue projection share one storage;
//! one leads and projects, and when it shuts down the other takes over from its bookmark.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventstore::elector::LeaderElector;
use eventstore::projector::{ElectedProjector, Projection, ProjectionError, Projector};
use eventstore::store::{Envelope, EventStore, NamedEvent};
use eventstore::{AppendCriteria, EventReference, EventStorage, EventStreamId, StoredEvent};
use eventstore_memory::MemoryEventStorage;

/// The event, stored under an explicit name that a Rust rename does not change.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct OrderPlaced {
    amount: u64,
}

impl NamedEvent for OrderPlaced {
    const EVENT_TYPE: &'static str = "OrderPlaced";
}

/// The read model: revenue, committed once per batch.
struct Revenue {
    committed: Arc<Mutex<u64>>,
    pending: u64,
}

#[async_trait::async_trait]
impl Projection for Revenue {
    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
        let order = Envelope::<OrderPlaced>::decode(event.clone())?;
        self.pending += order.event.amount;
        Ok(())
    }
    async fn after_batch(&mut self, _last: &EventReference) -> Result<(), ProjectionError> {
        *self.committed.lock().unwrap() += std::mem::take(&mut self.pending);
        Ok(())
    }
    async fn cancel_batch(&mut self) {
        self.pending = 0;
    }
}

/// One instance: an elector, and a projector that runs while the elector leads.
struct Instance {
    elector: LeaderElector,
    stop: tokio::sync::oneshot::Sender<()>,
    work: tokio::task::JoinHandle<()>,
}

fn start(storage: Arc<dyn EventStorage>, owner: &str, revenue: Arc<Mutex<u64>>) -> Instance {
    let elector = LeaderElector::builder(storage.clone(), "revenue-projector")
        .owner(owner)
        .ttl(Duration::from_millis(600))
        .start()
        .expect("a storage with leases");
    let projector = Projector::builder(
        storage,
        Revenue {
            committed: revenue,
            pending: 0,
        },
    )
    .stream(EventStreamId::for_context("orders"))
    .bookmark("revenue")
    .batch_size(100)
    .build()
    .expect("valid settings");
    let mut elected =
        ElectedProjector::new(projector, elector.watch()).poll_interval(Duration::from_millis(20));
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let work = tokio::spawn(async move {
        let stop = async {
            let _ = stopped.await;
        };
        elected
            .run_until(stop)
            .await
            .expect("the projection never fails");
    });
    Instance {
        elector,
        stop,
        work,
    }
}

impl Instance {
    /// Stop the work first, then release the lease: the standby takes over at once.
    async fn shut_down(self) {
        let _ = self.stop.send(());
        self.work.await.unwrap();
        self.elector.shutdown().await.unwrap();
    }
}

async fn until(mut condition: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("in time");
}

#[tokio::test]
async fn the_standby_resumes_from_the_bookmark_of_the_instance_that_shut_down() {
    let storage: Arc<dyn EventStorage> = Arc::new(MemoryEventStorage::new());
    let orders = EventStore::new(storage.clone())
        .stream::<OrderPlaced>(EventStreamId::for_context("orders"));

    // Each instance keeps its read model; only the leader's moves.
    let (revenue_a, revenue_b) = (Arc::new(Mutex::new(0)), Arc::new(Mutex::new(0)));
    let a = start(storage.clone(), "instance-a", revenue_a.clone());
    let mut leadership_a = a.elector.watch();
    leadership_a.wait_for_leadership().await; // a asked first, so a leads
    let b = start(storage.clone(), "instance-b", revenue_b.clone());

    orders
        .append(
            AppendCriteria::none(),
            [OrderPlaced { amount: 30 }, OrderPlaced { amount: 12 }],
        )
        .await
        .unwrap();
    until(|| *revenue_a.lock().unwrap() == 42).await;

    // A deploy: a shuts down gracefully and b resumes from a's bookmark, so b projects only
    // what a did not (b's read model starts empty here, so it counts the new order alone).
    a.shut_down().await;
    orders
        .append(AppendCriteria::none(), [OrderPlaced { amount: 8 }])
        .await
        .unwrap();
    until(|| *revenue_b.lock().unwrap() == 8).await;
    assert_eq!(b.elector.token().map(|t| t.0), Some(2), "the second tenure");
    b.shut_down().await;
}
