//! Append hints, measured through `ElectedProjector` on every backend.
//!
//! - latency: an append is committed; how long until the elected projector (poll interval
//!   1 s) has projected it;
//! - throughput: 8 clients append batches of 100 events, with and without a subscriber
//!   reading every hint, alternating rounds;
//! - quiet: 10 elected projectors and no appends for a while; how many queries they make (the
//!   safety-net polls are all there should be).
//!
//! ```sh
//! cargo bench -p eventstore-demo --bench append_hints                 # memory and file
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//!   cargo bench -p eventstore-demo --bench append_hints                # and PostgreSQL
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use eventstore::elector::LeaderElector;
use eventstore::projector::{ElectedProjector, Projection, ProjectionError, Projector};
use eventstore::EventStorageExt;
use eventstore::{AppendCriteria, EventStorage, EventStreamId, EventToStore, StoredEvent};
use eventstore_file::FileEventStorage;
use eventstore_memory::MemoryEventStorage;
use tokio::sync::watch;

mod common;
use common::{handles_of, millis, percentile, postgres_handles, Handles};

const POLL: Duration = Duration::from_secs(1);
const SAMPLES: usize = 50;
const CLIENTS: usize = 8;
const BATCH: usize = 100;
const ROUNDS: usize = 5;
const BATCHES_PER_CLIENT: usize = 10;
const QUIET: Duration = Duration::from_secs(10);
const QUIET_PROJECTORS: usize = 10;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> BenchResult<()> {
    if !std::env::args().any(|arg| arg == "--bench") {
        return Ok(()); // `cargo test` builds benches and runs them without --bench.
    }
    let dir = tempfile::tempdir()?;
    let file = FileEventStorage::open(dir.path()).await?;
    let mut backends: Vec<(&str, Handles)> = vec![
        ("memory", handles_of(MemoryEventStorage::new())),
        ("file", handles_of(file)),
    ];
    if let Ok(url) = std::env::var("DATABASE_URL") {
        backends.push(("postgres", postgres_handles(&url, true).await?));
    }

    println!("# Append hints ({SAMPLES} appends; poll interval {POLL:?}; {CLIENTS} clients × batches of {BATCH}, {ROUNDS} alternating rounds; {QUIET_PROJECTORS} projectors quiet for {QUIET:?})\n");
    println!("| backend | append → projected, p50 | p99 | events/s, no subscriber | with a subscriber | ratio | queries while quiet | safety-net polls in that time |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, handles) in &backends {
        let latencies = append_to_projected(&handles[0]).await?;
        let (without, with) = throughput(&handles[0]).await?;
        let (queries, polls) = quiet(&handles[0]).await?;
        println!(
            "| {name} | {} | {} | {without:.0} | {with:.0} | {:.2}× | {queries} | {polls} |",
            millis(percentile(&latencies, 0.5)),
            millis(percentile(&latencies, 0.99)),
            with / without,
        );
        for handle in handles {
            handle.close().await?;
        }
    }
    Ok(())
}

/// A projection that publishes the position of the last event it handled.
struct Progress(watch::Sender<u64>);

#[async_trait]
impl Projection for Progress {
    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
        self.0.send_replace(event.reference.position);
        Ok(())
    }
}

/// A projection that only counts.
struct Counting(Arc<AtomicU64>);

#[async_trait]
impl Projection for Counting {
    async fn handle(&mut self, _event: &StoredEvent) -> Result<(), ProjectionError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// An elected projector of `stream` on its own lease, running until `stop` changes.
fn spawn_projector<P: Projection + Sync + 'static>(
    storage: &Arc<dyn EventStorage>,
    name: &str,
    stream: EventStreamId,
    projection: P,
    stop: watch::Receiver<bool>,
) -> BenchResult<(LeaderElector, tokio::task::JoinHandle<u64>)> {
    let projector = Projector::builder(Arc::clone(storage), projection)
        .stream(stream)
        .bookmark(name)
        .build()?;
    let elector = LeaderElector::builder(Arc::clone(storage), name)
        .owner("bench")
        .start()?;
    let mut elected = ElectedProjector::new(projector, elector.watch()).poll_interval(POLL);
    let task = tokio::spawn(async move {
        let mut stop = stop;
        let _ = elected
            .run_until(async move {
                let _ = stop.changed().await;
            })
            .await;
        elected.totals().queries
    });
    Ok((elector, task))
}

async fn append_to_projected(storage: &Arc<dyn EventStorage>) -> BenchResult<Vec<Duration>> {
    let stream = EventStreamId::for_context("latency");
    let (progress, mut seen) = watch::channel(0);
    let (stop, stopped) = watch::channel(false);
    let (elector, task) = spawn_projector(
        storage,
        "latency",
        stream.clone(),
        Progress(progress),
        stopped,
    )?;
    elector
        .watch()
        .wait_for_leadership_within(Duration::from_secs(10))
        .await?;
    let mut latencies = Vec::with_capacity(SAMPLES);
    for sample in 0..SAMPLES {
        let event = EventToStore::new("Sampled", serde_json::json!({ "sample": sample }));
        let stored = storage
            .append(AppendCriteria::none(), &stream, vec![event])
            .await?;
        let committed = Instant::now();
        let position = stored[0].reference.position;
        tokio::time::timeout(Duration::from_secs(10), seen.wait_for(|&at| at >= position))
            .await??;
        latencies.push(committed.elapsed());
    }
    let _ = stop.send(true);
    task.await?;
    elector.shutdown().await?;
    Ok(latencies)
}

/// Events per second of 8 clients appending batches, without and with a subscriber reading
/// every hint, medians of alternating rounds: what the hints themselves cost an append.
async fn throughput(storage: &Arc<dyn EventStorage>) -> BenchResult<(f64, f64)> {
    let mut without = Vec::with_capacity(ROUNDS);
    let mut with = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        without.push(append_round(storage, &format!("plain-{round}")).await?);
        let context = format!("hinted-{round}");
        let mut hints = storage
            .subscribe_appends(&EventStreamId::for_context(context.clone()).any_purpose())
            .await?;
        let reader = tokio::spawn(async move {
            let mut heard = 0_u64;
            while hints.next().await.is_some() {
                heard += 1;
            }
            heard
        });
        with.push(append_round(storage, &context).await?);
        reader.abort();
    }
    Ok((median(without), median(with)))
}

/// One round: 8 clients, each appending batches to a stream of its own in `context`.
async fn append_round(storage: &Arc<dyn EventStorage>, context: &str) -> BenchResult<f64> {
    let started = Instant::now();
    let mut clients = Vec::with_capacity(CLIENTS);
    for client in 0..CLIENTS {
        let storage = Arc::clone(storage);
        let stream = EventStreamId::new(context, format!("client-{client}"));
        clients.push(tokio::spawn(async move {
            for _ in 0..BATCHES_PER_CLIENT {
                let batch = (0..BATCH)
                    .map(|n| EventToStore::new("Appended", serde_json::json!({ "n": n })))
                    .collect();
                storage
                    .append(AppendCriteria::none(), &stream, batch)
                    .await?;
            }
            Ok::<_, eventstore::EventStorageError>(())
        }));
    }
    for client in clients {
        client.await??;
    }
    let events = (CLIENTS * BATCHES_PER_CLIENT * BATCH) as f64;
    Ok(events / started.elapsed().as_secs_f64())
}

/// 10 elected projectors, no appends: the queries they make, and the polls the safety net
/// accounts for.
async fn quiet(storage: &Arc<dyn EventStorage>) -> BenchResult<(u64, u64)> {
    let (stop, stopped) = watch::channel(false);
    let mut running = Vec::with_capacity(QUIET_PROJECTORS);
    for projector in 0..QUIET_PROJECTORS {
        let name = format!("quiet-{projector}");
        let stream = EventStreamId::for_context(name.clone());
        let (elector, task) = spawn_projector(
            storage,
            &name,
            stream,
            Counting(Arc::new(AtomicU64::new(0))),
            stopped.clone(),
        )?;
        elector
            .watch()
            .wait_for_leadership_within(Duration::from_secs(10))
            .await?;
        running.push((elector, task));
    }
    let started = Instant::now();
    tokio::time::sleep(QUIET).await;
    let _ = stop.send(true);
    let mut queries = 0;
    for (elector, task) in running {
        queries += task.await?;
        elector.shutdown().await?;
    }
    // Each projector's first run queries once, then one poll per interval.
    let polls = QUIET_PROJECTORS as u64
        * (1 + started.elapsed().as_millis() as u64 / POLL.as_millis() as u64);
    Ok((queries, polls))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
