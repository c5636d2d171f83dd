//! What the benchmarks of the examples crate share: storages to run on and percentiles.

#![allow(dead_code)] // each bench uses a part

mod counting;

use std::sync::Arc;
use std::time::Duration;

use eventstore::EventStorage;
use eventstore_postgres::PostgresEventStorage;

#[allow(unused_imports)] // not every bench counts
pub(crate) use counting::CountingStorage;

/// Handles of one storage, as separate processes would hold them.
pub(crate) type Handles = Vec<Arc<dyn EventStorage>>;

pub(crate) fn handles_of<S: EventStorage + Clone + 'static>(storage: S) -> Handles {
    (0..3)
        .map(|_| Arc::new(storage.clone()) as Arc<dyn EventStorage>)
        .collect()
}

/// Three handles on one fresh prefix, each with its own pool, as three processes would have.
/// With `append_hints`, appends notify readers (`PostgresEventStorageBuilder::append_hints`).
pub(crate) async fn postgres_handles(
    url: &str,
    append_hints: bool,
) -> Result<Handles, Box<dyn std::error::Error>> {
    let prefix = format!("handover{:08x}_", rand_suffix());
    let mut handles: Handles = Vec::new();
    for _ in 0..3 {
        let storage = PostgresEventStorage::builder()
            .url(url)
            .prefix(&prefix)
            .max_connections(4)
            .append_hints(append_hints)
            .build()
            .await?;
        handles.push(Arc::new(storage));
    }
    Ok(handles)
}

fn rand_suffix() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    nanos ^ std::process::id()
}

pub(crate) fn percentile(samples: &[Duration], fraction: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

pub(crate) fn millis(duration: Duration) -> String {
    millis_to(duration, 1)
}

/// `duration` in milliseconds with `decimals` digits after the point.
pub(crate) fn millis_to(duration: Duration, decimals: usize) -> String {
    format!("{:.decimals$} ms", duration.as_secs_f64() * 1000.0)
}
