//! Benchmarks of the file backend, run by hand (not in CI):
//!
//! ```text
//! cargo bench -p eventstore-file --bench file_storage
//! ```
//!
//! Prints markdown tables: append throughput with sync beside two floors (the same bytes
//! written and synced to a plain file, appended to a growing file, and written into a
//! zero-filled one), read throughput, and open time. `EVENTSTORE_BENCH_OPEN_EVENTS` sets the
//! size of the log whose open is timed (default 1 000 000).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStreamId, EventToStore, Limit, Tags,
};
use eventstore_file::FileEventStorage;
use serde_json::json;

/// Appends per run (split among the appenders) for batches of one; batches of 100 do a
/// tenth as many.
const APPENDS_OF_ONE: usize = 4000;

fn appends_per_run(batch: usize) -> usize {
    if batch == 1 {
        APPENDS_OF_ONE
    } else {
        APPENDS_OF_ONE / 10
    }
}
const READ_EVENTS: u64 = 100_000;
/// Rounds of each append measurement, storage and floors alternating; medians are reported.
const ROUNDS: usize = 7;

fn event(n: u64) -> EventToStore {
    EventToStore::new(
        "OrderPlaced",
        json!({ "order": n, "amount": n % 1000, "note": "a typical small payload of some bytes" }),
    )
    .with_tags(Tags::from_pairs([
        ("customer", format!("c-{}", n % 100)),
        ("region", "eu".to_owned()),
    ]))
}

/// The segments of the log in `dir`, in order.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("events-")
        })
        .collect();
    segments.sort();
    segments
}

/// The bytes of the log in `dir`: every segment up to its last frame. The last segment is
/// zero-filled past its last frame (preallocated space), and a frame never ends in a zero
/// byte (its payload is JSON).
fn log_content(dir: &Path) -> Vec<u8> {
    let mut content = Vec::new();
    for segment in segments(dir) {
        content.extend(std::fs::read(segment).unwrap());
    }
    let end = content
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |last| last + 1);
    content.truncate(end);
    content
}

/// How many bytes the log in `dir` holds, preallocated zeros excluded.
fn log_bytes(dir: &Path) -> u64 {
    let segments = segments(dir);
    let (last, sealed) = segments.split_last().expect("a log has a segment");
    let sealed: u64 = sealed
        .iter()
        .map(|segment| std::fs::metadata(segment).unwrap().len())
        .sum();
    let last = std::fs::read(last).unwrap();
    sealed + last.iter().rposition(|&b| b != 0).map_or(0, |end| end + 1) as u64
}

struct AppendRun {
    events_per_second: f64,
    appends_per_second: f64,
    bytes_per_append: usize,
    /// The bytes the run appended to the log, for the floors to write again.
    written: Vec<u8>,
}

async fn append_run(batch: usize, appenders: usize) -> AppendRun {
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path()).await.unwrap();
    let appends_each = appends_per_run(batch) / appenders;
    let before = log_bytes(dir.path());
    // The events are made before the clock starts: the floor's bytes are ready too.
    let batches: Vec<Vec<Vec<EventToStore>>> = (0..appenders)
        .map(|_| {
            (0..appends_each)
                .map(|round| {
                    (0..batch)
                        .map(|i| event((round * batch + i) as u64))
                        .collect()
                })
                .collect()
        })
        .collect();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (appender, batches) in batches.into_iter().enumerate() {
        let storage = storage.clone();
        tasks.push(tokio::spawn(async move {
            let stream = EventStreamId::new("bench", format!("appender-{appender}"));
            for events in batches {
                storage
                    .append(AppendCriteria::none(), &stream, events)
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let appends = appends_each * appenders;
    let bytes = log_bytes(dir.path()) - before;
    let written = log_content(dir.path()).split_off(before as usize);
    storage.close().await.unwrap();
    AppendRun {
        events_per_second: (appends * batch) as f64 / elapsed,
        appends_per_second: appends as f64 / elapsed,
        bytes_per_append: (bytes / appends as u64) as usize,
        written,
    }
}

/// How a floor run lays out its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Floor {
    /// Appends to a file that grows with every write (`O_APPEND`).
    Growing,
    /// Writes into a file zero-filled and synced before the clock starts.
    Preallocated,
}

/// A floor: `appenders` threads writing the bytes the storage appended, in pieces of `bytes`
/// and syncing (`fdatasync`) after each, as often as the run appended, to one plain file.
fn floor_run(written: &[u8], bytes: usize, appenders: usize, appends: usize, floor: Floor) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("floor.log");
    let file = match floor {
        Floor::Growing => OpenOptions::new().create(true).append(true).open(&path),
        Floor::Preallocated => OpenOptions::new().create_new(true).write(true).open(&path),
    }
    .unwrap();
    let each = appends / appenders;
    if floor == Floor::Preallocated {
        let zeros = vec![0u8; 1 << 20];
        let mut left = each * appenders * bytes + zeros.len();
        while left > 0 {
            let chunk = left.min(zeros.len());
            (&file).write_all(&zeros[..chunk]).unwrap();
            left -= chunk;
        }
        file.sync_all().unwrap();
    }
    let file = Arc::new(file);
    let next_offset = AtomicU64::new(0);
    let pieces: Vec<&[u8]> = written.chunks(bytes).collect();
    let start = Instant::now();
    std::thread::scope(|scope| {
        for appender in 0..appenders {
            let file: Arc<File> = Arc::clone(&file);
            let (pieces, next_offset) = (&pieces, &next_offset);
            scope.spawn(move || {
                for round in 0..each {
                    let piece = pieces[(round * appenders + appender) % pieces.len()];
                    match floor {
                        Floor::Growing => (&*file).write_all(piece).unwrap(),
                        Floor::Preallocated => {
                            let at = next_offset.fetch_add(piece.len() as u64, Ordering::Relaxed);
                            file.write_all_at(piece, at).unwrap();
                        }
                    }
                    file.sync_data().unwrap();
                }
            });
        }
    });
    (each * appenders) as f64 / start.elapsed().as_secs_f64()
}

/// The middle value of `values`.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn fill(storage: &FileEventStorage, events: u64, batch: u64) {
    let stream = EventStreamId::for_context("orders");
    let mut n = 0;
    while n < events {
        let size = batch.min(events - n);
        let batch = (n..n + size).map(event).collect();
        storage
            .append(AppendCriteria::none(), &stream, batch)
            .await
            .unwrap();
        n += size;
    }
}

fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Set for the child process that times an open of the directory it names.
const OPEN_DIR: &str = "EVENTSTORE_BENCH_OPEN_DIR";

/// The child's part: open the store, report time and resident memory, close.
fn time_open(dir: &str, runtime: &tokio::runtime::Runtime) {
    let before = resident_bytes().unwrap_or(0);
    let start = Instant::now();
    let storage = runtime.block_on(FileEventStorage::open(dir)).unwrap();
    let elapsed = start.elapsed();
    let after = resident_bytes().unwrap_or(0);
    let head = runtime
        .block_on(storage.head(&EventStreamId::any()))
        .unwrap()
        .map_or(0, |head| head.position);
    println!(
        "OPENED {:.2} {:.0}",
        elapsed.as_secs_f64(),
        after.saturating_sub(before) as f64 / (1 << 20) as f64
    );
    eprintln!("opened {head} events");
    runtime.block_on(storage.close()).unwrap();
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if let Ok(dir) = std::env::var(OPEN_DIR) {
        return time_open(&dir, &runtime);
    }
    let open_events: u64 = std::env::var("EVENTSTORE_BENCH_OPEN_EVENTS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(1_000_000);

    println!("## Appends with sync\n");
    println!(
        "| batch | appenders | events/s | appends/s | bytes/append | floor appends/s | ratio to floor \
         | preallocated floor appends/s | ratio to preallocated floor |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (batch, appenders) in [(1, 1), (100, 1), (1, 16), (100, 16)] {
        // Storage and floors alternate, round after round; the medians are reported (the
        // ratios are the medians of each round's ratio), so that a burst of disk activity
        // elsewhere skews no side alone.
        let mut runs = Vec::new();
        let (mut floors, mut preallocated_floors) = (Vec::new(), Vec::new());
        let (mut ratios, mut preallocated_ratios) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let run = runtime.block_on(append_run(batch, appenders));
            let appends = appends_per_run(batch);
            let floor = floor_run(
                &run.written,
                run.bytes_per_append,
                appenders,
                appends,
                Floor::Growing,
            );
            let preallocated = floor_run(
                &run.written,
                run.bytes_per_append,
                appenders,
                appends,
                Floor::Preallocated,
            );
            ratios.push(run.appends_per_second / floor);
            preallocated_ratios.push(run.appends_per_second / preallocated);
            floors.push(floor);
            preallocated_floors.push(preallocated);
            runs.push(run);
        }
        runs.sort_by(|a, b| a.appends_per_second.total_cmp(&b.appends_per_second));
        let run = &runs[ROUNDS / 2];
        println!(
            "| {batch} | {appenders} | {:.0} | {:.0} | {} | {:.0} | {:.2} | {:.0} | {:.2} |",
            run.events_per_second,
            run.appends_per_second,
            run.bytes_per_append,
            median(floors),
            median(ratios),
            median(preallocated_floors),
            median(preallocated_ratios),
        );
    }

    runtime.block_on(async {
        println!("\n## Reads ({READ_EVENTS} events, warm page cache)\n");
        let dir = tempfile::tempdir().unwrap();
        let storage = FileEventStorage::open(dir.path()).await.unwrap();
        fill(&storage, READ_EVENTS, 1000).await;
        let any = EventStreamId::any();
        let scan = |filter: EventFilter| {
            let storage = storage.clone();
            let any = any.clone();
            async move {
                let start = Instant::now();
                let found = storage
                    .query(&filter, &any, None, Limit::none(), Direction::Forward)
                    .await
                    .unwrap();
                (found.len(), start.elapsed())
            }
        };
        scan(EventFilter::match_all()).await; // warm-up
        println!("| query | events returned | time | events returned/s | events scanned/s |");
        println!("|---|---:|---:|---:|---:|");
        for (name, filter) in [
            ("full scan (match_all)", EventFilter::match_all()),
            (
                "filtered: tag customer:c-7 (1 %)",
                EventFilter::for_tags(Tags::from_pairs([("customer", "c-7")])),
            ),
        ] {
            let (found, elapsed) = scan(filter).await;
            println!(
                "| {name} | {found} | {:.1} ms | {:.0} | {:.0} |",
                elapsed.as_secs_f64() * 1e3,
                found as f64 / elapsed.as_secs_f64(),
                READ_EVENTS as f64 / elapsed.as_secs_f64()
            );
        }
        storage.close().await.unwrap();

        println!("\n## Open ({open_events} events)\n");
        let dir = tempfile::tempdir().unwrap();
        let storage = FileEventStorage::open(dir.path()).await.unwrap();
        let start = Instant::now();
        fill(&storage, open_events, 1000).await;
        let fill_time = start.elapsed();
        storage.close().await.unwrap();
        drop(storage);
        let size = log_bytes(dir.path());
        // Opened in a fresh process, so that its resident memory is the open's alone.
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .env(OPEN_DIR, dir.path())
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&output.stdout);
        let (seconds, memory) = report
            .lines()
            .find_map(|line| line.strip_prefix("OPENED "))
            .and_then(|rest| rest.split_once(' '))
            .unwrap_or_else(|| panic!("the open process reported nothing: {output:?}"));
        println!("| log size | written in | open time | resident memory after open |");
        println!("|---:|---:|---:|---:|");
        println!(
            "| {:.0} MiB | {:.1} s | {seconds} s | {memory} MiB |",
            size as f64 / (1 << 20) as f64,
            fill_time.as_secs_f64(),
        );
    });
}
