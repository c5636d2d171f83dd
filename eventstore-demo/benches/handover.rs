//! Handovers with pushed lease changes, measured through `LeaderElector` on every backend.
//!
//! - release: the leader shuts down; how long until the waiting standby's elector leads;
//! - priority: a higher-priority instance starts beside a holder and a standby of lower
//!   priority than both;
//!   how long until it leads, and whether the token rose by exactly one;
//! - wakeups: 1,000 electors on 100 leases of one memory storage; one leader releases; how
//!   many requests the electors of that lease and of the other leases send.
//!
//! Electors run with a 30 s ttl and the default request interval (10 s): without pushed
//! changes a handover would wait for the next poll. Run:
//!
//! ```sh
//! cargo bench -p eventstore-demo --bench handover                 # memory and file
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//!   cargo bench -p eventstore-demo --bench handover                # and PostgreSQL
//! cargo bench -p eventstore-demo --bench handover -- --rounds 100  # more rounds (default 50)
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use eventstore_api::elector::{LeaderElector, Leadership, LeadershipWatch};
use eventstore_api::validate::MAX_TTL;
use eventstore_api::{
    AppendCriteria, Bookmark, Capability, Direction, EventFilter, EventId, EventReference,
    EventStorage, EventStreamId, EventToStore, FencingToken, Lease, LeaseChanges, LeaseRequest,
    LeaseResponse, LeaseScope, Limit, StorageResult, StoredEvent, Tags,
};
use eventstore_file::FileEventStorage;
use eventstore_memory::MemoryEventStorage;

mod common;
use common::{handles_of, millis, percentile, postgres_handles, Handles};

const TTL: Duration = Duration::from_secs(30);
const PATIENCE: Duration = Duration::from_secs(10);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if !std::env::args().any(|arg| arg == "--bench") {
        return Ok(()); // `cargo test` builds benches and runs them without --bench.
    }
    let rounds: usize = std::env::args()
        .skip_while(|arg| arg != "--rounds")
        .nth(1)
        .map_or(Ok(50), |rounds| rounds.parse())?;

    let dir = tempfile::tempdir()?;
    let file = FileEventStorage::open(dir.path()).await?;
    let mut backends: Vec<(&str, Handles)> = vec![
        ("memory", handles_of(MemoryEventStorage::new())),
        ("file", handles_of(file)),
    ];
    if let Ok(url) = std::env::var("DATABASE_URL") {
        backends.push(("postgres", postgres_handles(&url, false).await?));
    }

    println!("# Handovers with pushed lease changes ({rounds} rounds each, ttl {TTL:?}, request interval {:?})\n", TTL / 3);
    println!("| backend | release → standby leads, p50 | p99 | priority start → it leads, p50 | p99 | planned handovers with token +1 |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, handles) in &backends {
        let released = release_handovers(handles, rounds).await?;
        let (taken, exact) = priority_takeovers(handles, rounds).await?;
        println!(
            "| {name} | {} | {} | {} | {} | {exact} of {rounds} |",
            millis(percentile(&released, 0.5)),
            millis(percentile(&released, 0.99)),
            millis(percentile(&taken, 0.5)),
            millis(percentile(&taken, 0.99)),
        );
        for handle in handles {
            handle.close().await?;
        }
    }

    wakeups().await?;
    Ok(())
}

/// The leader shuts down; the time until the standby leads. The stopped instance comes back
/// as the next standby.
async fn release_handovers(
    handles: &Handles,
    rounds: usize,
) -> Result<Vec<Duration>, Box<dyn std::error::Error>> {
    let lease = "release";
    let mut leader = start(&handles[0], lease, "first", 0)?;
    wait_to_lead(&leader.watch()).await?;
    let mut standby = start(&handles[1], lease, "second", 0)?;
    wait_to_stand_by(&standby.watch()).await?;
    let mut latencies = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let released = Instant::now();
        leader.shutdown().await?;
        wait_to_lead(&standby.watch()).await?;
        latencies.push(released.elapsed());
        leader = standby;
        standby = start(&handles[round % 2], lease, &format!("round-{round}"), 0)?;
        wait_to_stand_by(&standby.watch()).await?;
    }
    leader.shutdown().await?;
    standby.shutdown().await?;
    Ok(latencies)
}

/// A holder (priority 5) and a standby (priority 0) run; an instance with priority 10 starts.
/// The time until it leads, and how many handovers took exactly one token.
async fn priority_takeovers(
    handles: &Handles,
    rounds: usize,
) -> Result<(Vec<Duration>, usize), Box<dyn std::error::Error>> {
    let mut latencies = Vec::with_capacity(rounds);
    let mut exact = 0;
    for round in 0..rounds {
        let lease = format!("priority-{round}");
        let holder = start(&handles[0], &lease, "middle", 5)?;
        let _holder_work = AcknowledgingWork::spawn(holder.watch());
        let token = wait_to_lead(&holder.watch()).await?;
        let standby = start(&handles[1], &lease, "low", 0)?;
        let _standby_work = AcknowledgingWork::spawn(standby.watch());
        wait_to_stand_by(&standby.watch()).await?;

        let asked = Instant::now();
        let preferred = start(&handles[2], &lease, "high", 10)?;
        let taken = wait_to_lead(&preferred.watch()).await?;
        latencies.push(asked.elapsed());
        if taken == token.next() {
            exact += 1;
        }
        for elector in [preferred, standby, holder] {
            elector.shutdown().await?;
        }
    }
    Ok((latencies, exact))
}

/// 1,000 electors on 100 leases; one leader releases; requests sent afterwards, by lease.
async fn wakeups() -> Result<(), Box<dyn std::error::Error>> {
    const LEASES: usize = 100;
    const PER_LEASE: usize = 10;
    const GRACE: Duration = Duration::from_millis(50);
    let counting = Arc::new(CountingStorage::new(MemoryEventStorage::new()));
    let storage: Arc<dyn EventStorage> = counting.clone();
    let mut electors = Vec::with_capacity(LEASES * PER_LEASE);
    for lease in 0..LEASES {
        for instance in 0..PER_LEASE {
            // A ttl of 7 days: no elector polls during the measurement.
            let elector = LeaderElector::builder(Arc::clone(&storage), format!("lease-{lease}"))
                .owner(format!("lease-{lease}-instance-{instance}"))
                .ttl(MAX_TTL)
                .handover_grace(GRACE)
                .start()?;
            electors.push(elector);
        }
    }
    // Everyone has asked once and the first of each lease leads.
    let started = Instant::now();
    while electors.iter().filter(|e| e.is_leader()).count() < LEASES
        || counting.total() < LEASES * PER_LEASE
    {
        if started.elapsed() > PATIENCE {
            return Err("the electors did not settle".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    counting.reset();

    let leader = electors
        .iter()
        .position(|e| e.is_leader() && e.watch().lease_name() == "lease-0")
        .ok_or("lease-0 has a leader")?;
    let released = Instant::now();
    electors.remove(leader).shutdown().await?;
    let successor = electors
        .iter()
        .find(|e| e.watch().lease_name() == "lease-0" && e.is_leader());
    let mut successor = successor.map(LeaderElector::watch);
    while successor.is_none() {
        if released.elapsed() > PATIENCE {
            return Err("nobody took lease-0 over".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        successor = electors
            .iter()
            .find(|e| e.watch().lease_name() == "lease-0" && e.is_leader())
            .map(LeaderElector::watch);
    }
    let took = released.elapsed();
    // Past the grace, so that the contenders that defer have asked too.
    tokio::time::sleep(GRACE * 4).await;
    let counts = counting.by_lease();
    let released_lease = counts.get("lease-0").copied().unwrap_or(0);
    let others: usize = counts
        .iter()
        .filter(|(lease, _)| lease.as_str() != "lease-0")
        .map(|(_, count)| count)
        .sum();
    println!(
        "\n# Wakeups: {} electors on {LEASES} leases of one memory storage\n",
        LEASES * PER_LEASE
    );
    println!("| after one leader released | requests |");
    println!("|---|---:|");
    println!("| by the {} other electors of that lease (1 at once, the rest after a {GRACE:?} grace) | {released_lease} |", PER_LEASE - 1);
    println!(
        "| by the {} electors of the other {} leases | {others} |",
        (LEASES - 1) * PER_LEASE,
        LEASES - 1
    );
    println!(
        "| release → a standby of that lease leads | {} |",
        millis(took)
    );
    for elector in electors {
        elector.shutdown().await?;
    }
    Ok(())
}

fn start(
    storage: &Arc<dyn EventStorage>,
    lease: &str,
    owner: &str,
    priority: i64,
) -> StorageResult<LeaderElector> {
    LeaderElector::builder(Arc::clone(storage), lease)
        .owner(owner)
        .priority(priority)
        .ttl(TTL)
        .start()
}

async fn wait_to_lead(watch: &LeadershipWatch) -> Result<FencingToken, Box<dyn std::error::Error>> {
    Ok(watch.clone().wait_for_leadership_within(PATIENCE).await?)
}

async fn wait_to_stand_by(watch: &LeadershipWatch) -> Result<(), Box<dyn std::error::Error>> {
    let mut watch = watch.clone();
    tokio::time::timeout(PATIENCE, async {
        while !matches!(watch.current(), Leadership::Standby { .. }) {
            if watch.changed().await.is_err() {
                return;
            }
        }
    })
    .await?;
    Ok(())
}

/// Work that can always stop at once: it acknowledges every step-down request.
struct AcknowledgingWork(tokio::task::JoinHandle<()>);

impl AcknowledgingWork {
    fn spawn(mut watch: LeadershipWatch) -> Self {
        AcknowledgingWork(tokio::spawn(async move {
            loop {
                if let Leadership::StepDownRequested { token } = watch.current() {
                    watch.acknowledge_step_down(token);
                }
                if watch.changed().await.is_err() {
                    return;
                }
            }
        }))
    }
}

impl Drop for AcknowledgingWork {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A storage that counts lease requests by lease and forwards everything.
#[derive(Debug)]
struct CountingStorage<S> {
    inner: S,
    requests: Mutex<HashMap<String, usize>>,
}

impl<S> CountingStorage<S> {
    fn new(inner: S) -> Self {
        CountingStorage {
            inner,
            requests: Mutex::new(HashMap::new()),
        }
    }

    fn count(&self, lease: &str) {
        let mut requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *requests.entry(lease.to_owned()).or_default() += 1;
    }

    fn total(&self) -> usize {
        self.by_lease().values().sum()
    }

    fn by_lease(&self) -> HashMap<String, usize> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn reset(&self) {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

#[async_trait]
impl<S: EventStorage> EventStorage for CountingStorage<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn supports(&self, capability: Capability) -> bool {
        self.inner.supports(capability)
    }
    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.inner.append(criteria, stream, events).await
    }
    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.inner
            .query(filter, stream, after, limit, direction)
            .await
    }
    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        self.inner.get_event_by_id(id).await
    }
    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        self.inner.head(stream).await
    }
    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        self.inner.bookmark(reader, reference, tags).await
    }
    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        self.inner.get_bookmark(reader).await
    }
    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        self.inner.remove_bookmark(reader).await
    }
    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        self.inner.get_bookmarks().await
    }
    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        self.count(&request.lease_name);
        self.inner.request_lease(request).await
    }
    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        self.inner.release_lease(lease_name, owner).await
    }
    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        self.inner.get_leases().await
    }
    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        self.inner.storage_time().await
    }
    async fn subscribe_lease_changes(&self, scope: LeaseScope) -> StorageResult<LeaseChanges> {
        self.inner.subscribe_lease_changes(scope).await
    }
    async fn close(&self) -> StorageResult<()> {
        self.inner.close().await
    }
}
