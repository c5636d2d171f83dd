//! A batch of 1,000 lease requests on the in-process backends: the first (1,000 acquisitions)
//! and the renewals after it, each the median of 51 batches.
//!
//! ```sh
//! cargo bench -p eventstore-demo --bench lease_batches
//! ```

use std::time::{Duration, Instant};

use eventstore_api::{EventStorage, LeaseRequest, LeaseStatus};
use eventstore_file::FileEventStorage;
use eventstore_memory::MemoryEventStorage;

mod common;
use common::{millis, percentile};

const BATCH: usize = 1_000;
const BATCHES: usize = 51;
const TTL: Duration = Duration::from_secs(3600);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if !std::env::args().any(|arg| arg == "--bench") {
        return Ok(()); // `cargo test` builds benches and runs them without --bench.
    }
    let dir = tempfile::tempdir()?;
    let backends: Vec<(&str, Box<dyn EventStorage>)> = vec![
        ("memory", Box::new(MemoryEventStorage::new())),
        ("file", Box::new(FileEventStorage::open(dir.path()).await?)),
    ];
    println!("# A batch of {BATCH} lease requests (median of {BATCHES} batches)\n");
    println!("| backend | first batch: {BATCH} acquisitions | renewal batch, p50 | p99 |");
    println!("|---|---:|---:|---:|");
    for (name, storage) in &backends {
        let batch = || -> Vec<LeaseRequest> {
            (0..BATCH)
                .map(|i| LeaseRequest::new(format!("partition-{i}"), "pod-a", 0, TTL))
                .collect()
        };
        let started = Instant::now();
        let first = storage.request_leases(batch()).await?;
        let acquired = started.elapsed();
        assert!(first.iter().all(|r| r.status == LeaseStatus::Leader));
        let mut renewals = Vec::with_capacity(BATCHES);
        for _ in 0..BATCHES {
            let started = Instant::now();
            let answers = storage.request_leases(batch()).await?;
            renewals.push(started.elapsed());
            assert_eq!(answers.len(), BATCH);
        }
        println!(
            "| {name} | {} | {} | {} |",
            millis(acquired),
            millis(percentile(&renewals, 0.5)),
            millis(percentile(&renewals, 0.99)),
        );
        storage.close().await?;
    }
    Ok(())
}
