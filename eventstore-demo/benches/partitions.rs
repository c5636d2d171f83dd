//! Partitioned work at fleet size: `PartitionElector`s sharing many partitions.
//!
//! Nine members share the partitions of one group (1,000 by default), each on its own handle
//! (on PostgreSQL its own pool, as separate processes would have). Then, per cycle, a tenth
//! member joins and later shuts down. Measured:
//!
//! - join → balanced: from the joiner's start until every member holds ⌊M/N⌋ or ⌈M/N⌉ and
//!   every partition has exactly one holder; the same for the graceful leave;
//! - partitions moved by the join (goal ≤ ⌈M/N⌉ + 1);
//! - round trips per member per request interval in steady state, by method;
//! - after a crash (no release), the time until every partition is held again (bound: a ttl
//!   and a request interval).
//!
//! Members run with a 3 s ttl and a 1 s request interval, so steady state is seen quickly.
//!
//! ```sh
//! cargo bench -p eventstore-demo --bench partitions                      # memory
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//!   cargo bench -p eventstore-demo --bench partitions                    # and PostgreSQL
//! cargo bench -p eventstore-demo --bench partitions -- --partitions 100 --cycles 10
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventstore::partitions::{PartitionElector, PartitionWatch};
use eventstore::{EventStorage, Fence};
use eventstore_memory::MemoryEventStorage;
use eventstore_postgres::PostgresEventStorage;
use tokio::task::JoinHandle;

mod common;
use common::{millis, percentile, CountingStorage};

const TTL: Duration = Duration::from_secs(3);
const INTERVAL: Duration = Duration::from_secs(1);
const MEMBERS: usize = 10;
const PATIENCE: Duration = Duration::from_secs(30);

type Counted = Arc<CountingStorage<Arc<dyn EventStorage>>>;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if !std::env::args().any(|arg| arg == "--bench") {
        return Ok(()); // `cargo test` builds benches and runs them without --bench.
    }
    let partitions: u32 = argument("--partitions", 1000)?;
    let cycles: usize = argument("--cycles", 5)?;

    let mut backends: Vec<(&str, Vec<Counted>)> = vec![("memory", memory_handles())];
    if let Ok(url) = std::env::var("DATABASE_URL") {
        backends.push(("postgres", postgres_handles(&url).await?));
    }
    println!(
        "# Partitioned work: {MEMBERS} members × {partitions} partitions ({cycles} join/leave \
         cycles, ttl {TTL:?}, request interval {INTERVAL:?})\n"
    );
    println!("| backend | join → balanced, p50 | max | partitions moved per join, max (goal) | leave → balanced, p50 | max | crash → all held again | round trips per member per interval |");
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    for (name, handles) in &backends {
        let report = measure(handles, partitions, cycles).await?;
        println!(
            "| {name} | {} | {} | {} ({}) | {} | {} | {} | {} |",
            millis(percentile(&report.joins, 0.5)),
            millis(percentile(&report.joins, 1.0)),
            report.moved.iter().max().copied().unwrap_or(0),
            partitions.div_ceil(MEMBERS as u32) + 1,
            millis(percentile(&report.leaves, 0.5)),
            millis(percentile(&report.leaves, 1.0)),
            millis(report.crash),
            report.round_trips,
        );
        for handle in handles {
            handle.close().await?;
        }
    }
    Ok(())
}

fn argument<T: std::str::FromStr>(name: &str, default: T) -> Result<T, T::Err> {
    std::env::args()
        .skip_while(|arg| arg != name)
        .nth(1)
        .map_or(Ok(default), |value| value.parse())
}

fn memory_handles() -> Vec<Counted> {
    let storage = MemoryEventStorage::new();
    (0..MEMBERS)
        .map(|_| {
            Arc::new(CountingStorage::new(
                Arc::new(storage.clone()) as Arc<dyn EventStorage>
            ))
        })
        .collect()
}

async fn postgres_handles(url: &str) -> Result<Vec<Counted>, Box<dyn std::error::Error>> {
    let prefix = format!("partitions{}_", std::process::id());
    let mut handles = Vec::new();
    for _ in 0..MEMBERS {
        let storage = PostgresEventStorage::builder()
            .url(url)
            .prefix(&prefix)
            .max_connections(4)
            .build()
            .await?;
        handles.push(Arc::new(CountingStorage::new(
            Arc::new(storage) as Arc<dyn EventStorage>
        )));
    }
    Ok(handles)
}

struct Report {
    joins: Vec<Duration>,
    leaves: Vec<Duration>,
    moved: Vec<usize>,
    crash: Duration,
    round_trips: String,
}

async fn measure(
    handles: &[Counted],
    partitions: u32,
    cycles: usize,
) -> Result<Report, Box<dyn std::error::Error>> {
    let group = format!("bench-{partitions}");
    let mut members: Vec<Member> = (0..MEMBERS - 1)
        .map(|i| Member::start(&handles[i], &group, partitions, &format!("member-{i}")))
        .collect::<Result<_, _>>()?;
    wait_balanced(&members, partitions).await?;

    // Steady state: once the rounds that follow the start have run out, count what the members
    // ask for over a few intervals.
    tokio::time::sleep(2 * INTERVAL).await;
    wait_balanced(&members, partitions).await?;
    let window = 3 * INTERVAL;
    for handle in handles {
        handle.reset();
    }
    tokio::time::sleep(window).await;
    let round_trips = round_trips_per_interval(&handles[..MEMBERS - 1], window);

    let (mut joins, mut leaves, mut moved) = (Vec::new(), Vec::new(), Vec::new());
    for cycle in 0..cycles {
        let before = wait_balanced(&members, partitions).await?;
        let joined = Instant::now();
        let joiner = format!("joiner-{cycle}");
        members.push(Member::start(
            &handles[MEMBERS - 1],
            &group,
            partitions,
            &joiner,
        )?);
        let after = wait_balanced(&members, partitions).await?;
        joins.push(joined.elapsed());
        moved.push(
            before
                .iter()
                .filter(|(partition, owner)| after.get(partition) != Some(owner))
                .count(),
        );
        let left = Instant::now();
        if let Some(member) = members.pop() {
            member.shutdown().await?;
        }
        wait_balanced(&members, partitions).await?;
        leaves.push(left.elapsed());
    }

    let crashed = Instant::now();
    if let Some(member) = members.pop() {
        member.crash();
    }
    wait_balanced(&members, partitions).await?;
    let crash = crashed.elapsed();
    for member in members {
        member.shutdown().await?;
    }
    Ok(Report {
        joins,
        leaves,
        moved,
        crash,
        round_trips,
    })
}

/// Calls per member per request interval, by method, over `window`.
fn round_trips_per_interval(handles: &[Counted], window: Duration) -> String {
    let mut calls: BTreeMap<&str, usize> = BTreeMap::new();
    for handle in handles {
        for (method, count) in handle.calls() {
            *calls.entry(method).or_default() += count;
        }
    }
    let per = |count: usize| {
        count as f64 / handles.len() as f64 / (window.as_secs_f64() / INTERVAL.as_secs_f64())
    };
    let total: usize = calls.values().sum();
    let by_method: Vec<String> = calls
        .iter()
        .map(|(method, count)| format!("{method} {:.2}", per(*count)))
        .collect();
    format!("{:.2}: {}", per(total), by_method.join(", "))
}

/// One member: an elector and a task that hands partitions over as soon as asked.
struct Member {
    elector: PartitionElector,
    watch: PartitionWatch,
    releaser: JoinHandle<()>,
}

impl Member {
    fn start(
        storage: &Counted,
        group: &str,
        partitions: u32,
        owner: &str,
    ) -> Result<Member, Box<dyn std::error::Error>> {
        let storage: Arc<dyn EventStorage> = storage.clone();
        let elector = PartitionElector::builder(storage, group, partitions)
            .owner(owner)
            .ttl(TTL)
            .request_interval(INTERVAL)
            .start()?;
        let watch = elector.watch();
        let mut handing_over = watch.clone();
        let releaser = tokio::spawn(async move {
            loop {
                for partition in handing_over.handing_over().into_keys() {
                    handing_over.hand_over(partition);
                }
                if handing_over.changed().await.is_err() {
                    return;
                }
            }
        });
        Ok(Member {
            elector,
            watch,
            releaser,
        })
    }

    async fn shutdown(self) -> Result<(), Box<dyn std::error::Error>> {
        self.elector.shutdown().await?;
        self.releaser.abort();
        Ok(())
    }

    fn crash(self) {
        self.elector.abort();
        self.releaser.abort();
    }
}

/// Partition → owner once every partition has exactly one holder and the members are balanced.
async fn wait_balanced(
    members: &[Member],
    partitions: u32,
) -> Result<BTreeMap<u32, String>, Box<dyn std::error::Error>> {
    let floor = partitions as usize / members.len();
    let ceil = (partitions as usize).div_ceil(members.len());
    let started = Instant::now();
    loop {
        let held: Vec<BTreeMap<u32, Fence>> = members.iter().map(|m| m.watch.held()).collect();
        let mut owners = BTreeMap::new();
        let mut twice = false;
        for (member, held) in members.iter().zip(&held) {
            for partition in held.keys() {
                twice |= owners
                    .insert(*partition, member.watch.owner().to_owned())
                    .is_some();
            }
        }
        let balanced = held.iter().all(|h| h.len() == floor || h.len() == ceil);
        if balanced && !twice && owners.len() == partitions as usize {
            return Ok(owners);
        }
        if started.elapsed() > PATIENCE {
            let counts: Vec<usize> = held.iter().map(BTreeMap::len).collect();
            return Err(format!("not balanced after {PATIENCE:?}: {counts:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
