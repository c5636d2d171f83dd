//! A batch of 1,000 lease requests on the in-process backends: the first (1,000 acquisitions,
//! each on a fresh storage) and the renewals after it, each the median of 51 batches.
//!
//! ```sh
//! cargo bench -p eventstore-demo --bench lease_batches
//! ```

use std::time::{Duration, Instant};

use eventstore::{EventStorage, LeaseRequest, LeaseStatus};
use eventstore_file::FileEventStorage;
use eventstore_memory::MemoryEventStorage;

mod common;
use common::{millis_to, percentile};

const BATCH: usize = 1_000;
const BATCHES: usize = 51;
const TTL: Duration = Duration::from_secs(3600);

fn batch() -> Vec<LeaseRequest> {
    (0..BATCH)
        .map(|i| LeaseRequest::new(format!("partition-{i}"), "pod-a", 0, TTL))
        .collect()
}

/// A fresh storage of the backend `name`; the directory a file storage lives in.
async fn fresh(
    name: &str,
) -> Result<(Box<dyn EventStorage>, Option<tempfile::TempDir>), Box<dyn std::error::Error>> {
    Ok(match name {
        "memory" => (Box::new(MemoryEventStorage::new()), None),
        _ => {
            let dir = tempfile::tempdir()?;
            let storage = FileEventStorage::open(dir.path()).await?;
            (Box::new(storage), Some(dir))
        }
    })
}

/// Milliseconds to the hundredth: the goal is 1 ms, so tenths say too little.
fn millis(duration: Duration) -> String {
    millis_to(duration, 2)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if !std::env::args().any(|arg| arg == "--bench") {
        return Ok(()); // `cargo test` builds benches and runs them without --bench.
    }
    println!("# A batch of {BATCH} lease requests (median of {BATCHES} batches)\n");
    println!(
        "| backend | first batch: {BATCH} acquisitions, p50 | p99 | renewal batch, p50 | p99 |"
    );
    println!("|---|---:|---:|---:|---:|");
    for name in ["memory", "file"] {
        let mut firsts = Vec::with_capacity(BATCHES);
        let mut renewals = Vec::with_capacity(BATCHES);
        for round in 0..BATCHES {
            let (storage, _dir) = fresh(name).await?;
            let requests = batch();
            let started = Instant::now();
            let first = storage.request_leases(requests).await?;
            firsts.push(started.elapsed());
            assert!(first.iter().all(|r| r.status == LeaseStatus::Leader));
            if round == 0 {
                for _ in 0..BATCHES {
                    let requests = batch();
                    let started = Instant::now();
                    let answers = storage.request_leases(requests).await?;
                    renewals.push(started.elapsed());
                    assert_eq!(answers.len(), BATCH);
                }
            }
            storage.close().await?;
        }
        println!(
            "| {name} | {} | {} | {} | {} |",
            millis(percentile(&firsts, 0.5)),
            millis(percentile(&firsts, 0.99)),
            millis(percentile(&renewals, 0.5)),
            millis(percentile(&renewals, 0.99)),
        );
    }
    Ok(())
}
