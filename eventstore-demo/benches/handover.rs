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

use std::sync::Arc;
use std::time::{Duration, Instant};

use eventstore::elector::{LeaderElector, Leadership, LeadershipWatch};
use eventstore::validate::MAX_TTL;
use eventstore::{EventStorage, FencingToken, StorageResult};
use eventstore_file::FileEventStorage;
use eventstore_memory::MemoryEventStorage;

mod common;
use common::{handles_of, millis, percentile, postgres_handles, CountingStorage, Handles};

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
