//! `FileEventStorage::open_read_only`: beside a writer that holds the directory, without a
//! lock, tolerating a torn tail, refusing every change and creating nothing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStorageError, EventStreamId,
    EventToStore, LeaseRequest, Limit, StoredEvent, Tags,
};
use eventstore_file::FileEventStorage;
use serde_json::json;

/// Long enough for any healthy run on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(60);

async fn all_events(storage: &FileEventStorage) -> Vec<StoredEvent> {
    storage
        .query(
            &EventFilter::match_all(),
            &EventStreamId::any(),
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .expect("query")
}

fn event(n: u64) -> EventToStore {
    EventToStore::new("Counted", json!({ "n": n }))
}

fn files_in(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

fn assert_refused_as_read_only<T: std::fmt::Debug>(result: Result<T, EventStorageError>) {
    let error = result.expect_err("a read-only store refuses changes");
    assert!(
        matches!(error, EventStorageError::Unsupported { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("read-only"), "{error}");
}

#[tokio::test]
async fn a_read_only_open_beside_the_writer_sees_its_events_and_bookmarks() {
    let dir = tempfile::tempdir().unwrap();
    let writer = FileEventStorage::open(dir.path()).await.unwrap();
    let stream = EventStreamId::new("orders", "eu");
    let stored = writer
        .append(AppendCriteria::none(), &stream, vec![event(1), event(2)])
        .await
        .unwrap();
    writer
        .bookmark("projector", &stored[1].reference, Tags::none())
        .await
        .unwrap();

    // The writer still holds the directory's lock.
    let reader = FileEventStorage::open_read_only(dir.path()).await.unwrap();
    assert!(reader.is_read_only());
    assert!(!writer.is_read_only());
    assert_eq!(all_events(&reader).await, stored);
    assert_eq!(
        reader.head(&stream).await.unwrap(),
        Some(stored[1].reference)
    );
    assert_eq!(
        reader
            .get_event_by_id(stored[0].reference.id)
            .await
            .unwrap(),
        Some(stored[0].clone())
    );
    let bookmarks = reader.get_bookmarks().await.unwrap();
    assert_eq!(bookmarks.len(), 1);
    assert_eq!(bookmarks[0].reader, "projector");
    assert_eq!(bookmarks[0].reference, stored[1].reference);

    // Two read-only handles at once, and the writer goes on writing.
    let second = FileEventStorage::open_read_only(dir.path()).await.unwrap();
    writer
        .append(AppendCriteria::none(), &stream, vec![event(3)])
        .await
        .unwrap();
    assert_eq!(all_events(&second).await.len(), 2, "a snapshot at open");
    let third = FileEventStorage::open_read_only(dir.path()).await.unwrap();
    assert_eq!(all_events(&third).await.len(), 3);
    for handle in [reader, second, third] {
        handle.close().await.unwrap();
    }
    writer.close().await.unwrap();
}

#[tokio::test]
async fn every_change_on_a_read_only_store_is_refused_naming_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let writer = FileEventStorage::open(dir.path()).await.unwrap();
    let stream = EventStreamId::for_context("orders");
    let stored = writer
        .append(AppendCriteria::none(), &stream, vec![event(1)])
        .await
        .unwrap();
    writer.close().await.unwrap();
    let before = files_in(dir.path());

    let reader = FileEventStorage::open_read_only(dir.path()).await.unwrap();
    assert_refused_as_read_only(
        reader
            .append(AppendCriteria::none(), &stream, vec![event(2)])
            .await,
    );
    assert_refused_as_read_only(
        reader
            .bookmark("projector", &stored[0].reference, Tags::none())
            .await,
    );
    assert_refused_as_read_only(reader.remove_bookmark("projector").await);
    let request = LeaseRequest::new("leader", "pod-a", 0, Duration::from_secs(10));
    assert_refused_as_read_only(reader.request_lease(request.clone()).await);
    assert_refused_as_read_only(reader.request_leases(vec![request]).await);
    assert_refused_as_read_only(reader.release_lease("leader", "pod-a").await);
    assert_refused_as_read_only(reader.get_leases().await);
    for capability in [
        eventstore_api::Capability::Lease,
        eventstore_api::Capability::FencedWrites,
    ] {
        assert!(!reader.supports(capability));
    }
    assert_eq!(all_events(&reader).await, stored);
    reader.close().await.unwrap();
    assert_eq!(files_in(dir.path()), before, "nothing on disk changed");

    // The store opens for writing afterwards as before.
    let writer = FileEventStorage::open(dir.path()).await.unwrap();
    assert_eq!(all_events(&writer).await, stored);
    writer.close().await.unwrap();
}

#[tokio::test]
async fn a_directory_that_is_not_a_store_is_refused_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let error = FileEventStorage::open_read_only(&empty).await.unwrap_err();
    let report = error.report();
    assert!(report.contains("holds no event store"), "{report}");
    assert!(
        report.contains(&empty.display().to_string()),
        "names the directory: {report}"
    );
    assert!(files_in(&empty).is_empty(), "nothing created in {empty:?}");

    // What the system says is passed on: missing (ENOENT), a name too long (ENAMETOOLONG).
    let missing = dir.path().join("missing");
    let too_long = dir.path().join("n".repeat(300));
    for (path, errno) in [(&missing, "(os error 2)"), (&too_long, "(os error 36)")] {
        let error = FileEventStorage::open_read_only(path).await.unwrap_err();
        let report = error.report();
        assert!(report.contains(errno), "{report}");
        assert!(!report.contains("not a directory"), "{report}");
        assert!(!path.exists(), "the directory is not created");
    }

    let file = dir.path().join("file");
    std::fs::write(&file, b"no store").unwrap();
    let error = FileEventStorage::open_read_only(&file).await.unwrap_err();
    let report = error.report();
    assert!(report.contains("is not a directory"), "{report}");
}

#[tokio::test]
async fn a_torn_tail_ends_what_a_read_only_open_reads_and_stays_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let frames = two_frames(dir.path()).await;
    // Keep only the second frame's first bytes, as a reader sees a frame that the writer is
    // in the middle of writing.
    let (start, mut torn) = (frames.start, frames.with_one.clone());
    torn[start..start + 100].copy_from_slice(&frames.with_two[start..start + 100]);
    std::fs::write(&frames.segment, &torn).unwrap();

    let reader = FileEventStorage::open_read_only(dir.path()).await.unwrap();
    assert_eq!(all_events(&reader).await, frames.first);
    reader.close().await.unwrap();
    assert_eq!(
        std::fs::read(&frames.segment).unwrap(),
        torn,
        "a read-only open cuts nothing off"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_opens_while_appends_go_on_see_a_growing_gapless_log() {
    let dir = tempfile::tempdir().unwrap();
    // Small segments, so that the writer seals segments and starts new ones under the reads.
    let options = eventstore_file::FileStorageOptions::default().max_segment_bytes(4096);
    let writer = FileEventStorage::open_with(dir.path(), options)
        .await
        .unwrap();
    let stream = EventStreamId::for_context("counter");
    let appender = {
        let writer = writer.clone();
        let stream = stream.clone();
        tokio::spawn(async move {
            for n in 1..=400u64 {
                writer
                    .append(AppendCriteria::none(), &stream, vec![event(n)])
                    .await
                    .unwrap();
            }
        })
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut seen = 0;
    let mut opens = 0;
    while !appender.is_finished() {
        assert!(tokio::time::Instant::now() < deadline, "appends stalled");
        let reader = FileEventStorage::open_read_only(dir.path()).await.unwrap();
        let events = all_events(&reader).await;
        for (index, stored) in events.iter().enumerate() {
            assert_eq!(stored.reference.position, index as u64 + 1);
            assert_eq!(stored.payload, json!({ "n": index as u64 + 1 }));
        }
        assert!(events.len() >= seen, "{} after {seen}", events.len());
        seen = events.len();
        opens += 1;
        reader.close().await.unwrap();
    }
    appender.await.unwrap();
    let reader = FileEventStorage::open_read_only(dir.path()).await.unwrap();
    assert_eq!(all_events(&reader).await.len(), 400);
    assert!(opens > 0);
    writer.close().await.unwrap();
}

const CHILD_DIR: &str = "EVENTSTORE_FILE_READ_ONLY_CHILD_DIR";
const CHILD_TEST: &str = "child_appends_for_the_read_only_test";
/// How many appends the child makes.
const CHILD_APPENDS: u64 = 600;

#[test]
#[ignore = "the child process of read_only_opens_while_another_process_appends_see_every_acknowledged_event"]
fn child_appends_for_the_read_only_test() {
    use std::io::Write;
    let dir =
        std::env::var(CHILD_DIR).expect("run by the read-only test, which sets the directory");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        // Small segments, so that segments are sealed and started under the reader.
        let options = eventstore_file::FileStorageOptions::default().max_segment_bytes(64 << 10);
        let storage = FileEventStorage::open_with(&dir, options).await.unwrap();
        let stream = EventStreamId::for_context("counter");
        for n in 1..=CHILD_APPENDS {
            // Large enough that a reader often finds a frame half written.
            let event = EventToStore::new("Counted", json!({ "n": n, "filler": "f".repeat(2048) }));
            storage
                .append(AppendCriteria::none(), &stream, vec![event])
                .await
                .unwrap();
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "ACK {n}").unwrap();
            stdout.flush().unwrap();
        }
        storage.close().await.unwrap();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_opens_while_another_process_appends_see_every_acknowledged_event() {
    use std::io::BufRead;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    // The child creates the store; wait for it before the first read-only open.
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            CHILD_TEST,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let acknowledged = Arc::new(AtomicU64::new(0));
    let stdout = child.stdout.take().unwrap();
    let reader = {
        let acknowledged = Arc::clone(&acknowledged);
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("ACK ") {
                    acknowledged.store(n.parse().unwrap(), Ordering::SeqCst);
                }
            }
        })
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut opens = 0;
    let mut seen = 0;
    loop {
        assert!(tokio::time::Instant::now() < deadline, "the child stalled");
        let acked_before_open = acknowledged.load(Ordering::SeqCst);
        if acked_before_open == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        let reader = FileEventStorage::open_read_only(dir.path()).await.unwrap();
        let events = all_events(&reader).await;
        reader.close().await.unwrap();
        for (index, stored) in events.iter().enumerate() {
            assert_eq!(stored.reference.position, index as u64 + 1);
            assert_eq!(stored.payload["n"], index as u64 + 1);
        }
        let count = events.len() as u64;
        assert!(
            count >= acked_before_open,
            "{count} events read, but {acked_before_open} were acknowledged before the open"
        );
        assert!(count as usize >= seen, "{count} after {seen}");
        seen = count as usize;
        opens += 1;
        if acked_before_open == CHILD_APPENDS {
            break;
        }
    }
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
    assert!(opens > 1, "{opens} read-only opens");
    eprintln!("{opens} read-only opens while another process appended {CHILD_APPENDS} events");
}

/// The first segment of a store, as it was after one small event and after a large one more.
struct TwoFrames {
    /// The small event.
    first: Vec<StoredEvent>,
    segment: PathBuf,
    with_one: Vec<u8>,
    with_two: Vec<u8>,
    /// Where the second frame starts: where the two contents first differ.
    start: usize,
}

async fn two_frames(dir: &Path) -> TwoFrames {
    let stream = EventStreamId::for_context("orders");
    let writer = FileEventStorage::open(dir).await.unwrap();
    let first = writer
        .append(AppendCriteria::none(), &stream, vec![event(1)])
        .await
        .unwrap();
    writer.close().await.unwrap();
    let segment = dir.join(format!("events-{:020}.log", 1));
    let with_one = std::fs::read(&segment).unwrap();
    let writer = FileEventStorage::open(dir).await.unwrap();
    let big = EventToStore::new("Big", json!({ "text": "x".repeat(4096) }));
    writer
        .append(AppendCriteria::none(), &stream, vec![big])
        .await
        .unwrap();
    writer.close().await.unwrap();
    let with_two = std::fs::read(&segment).unwrap();
    let start = with_one
        .iter()
        .zip(&with_two)
        .position(|(one, two)| one != two)
        .expect("the second append changed the segment");
    TwoFrames {
        first,
        segment,
        with_one,
        with_two,
        start,
    }
}

impl TwoFrames {
    /// The segment with the second frame's 12-byte header still zero and its payload there:
    /// a frame being copied in, as a reader may catch it.
    fn with_unwritten_header(&self) -> Vec<u8> {
        let mut caught = self.with_two.clone();
        caught[self.start..self.start + 12].fill(0);
        caught
    }
}

#[tokio::test]
async fn a_frame_caught_while_it_is_copied_in_is_read_again_not_reported_as_damage() {
    let dir = tempfile::tempdir().unwrap();
    let frames = two_frames(dir.path()).await;
    let segment = frames.segment.clone();
    std::fs::write(&segment, frames.with_unwritten_header()).unwrap();
    let written = frames.with_two.clone();
    // The writer finishes the frame a moment after the reader first looked.
    let finisher = {
        let segment = segment.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            std::fs::write(&segment, &written).unwrap();
        })
    };
    let reader = FileEventStorage::open_read_only(dir.path()).await.unwrap();
    let events = all_events(&reader).await;
    assert_eq!(events.len(), 2, "the finished frame is read: {events:?}");
    assert_eq!(events[..1], frames.first[..]);
    reader.close().await.unwrap();
    finisher.join().unwrap();
}

#[tokio::test]
async fn damage_that_stays_is_reported_after_the_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let frames = two_frames(dir.path()).await;
    std::fs::write(&frames.segment, frames.with_unwritten_header()).unwrap();
    let start = frames.start;
    let error = tokio::time::timeout(DEADLINE, FileEventStorage::open_read_only(dir.path()))
        .await
        .expect("the open gives up")
        .unwrap_err();
    let report = error.report();
    assert!(
        report.contains("zeros where a frame header belongs")
            && report.contains(&format!("offset {start}")),
        "{report}"
    );
}

/// A writer appends an event and bookmarks it, again and again, while read-only opens run
/// beside it: a bookmark a handle lists names an event that handle holds, never one past the
/// log it read (on tmpfs where there is one, so that appends come fast).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_open_never_lists_a_bookmark_past_the_log_it_read() {
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::Builder::new().tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let writer = FileEventStorage::open(dir.path()).await.unwrap();
    let counter = EventStreamId::for_context("counter");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let appender = {
        let (writer, counter) = (writer.clone(), counter.clone());
        tokio::spawn(async move {
            for n in 0.. {
                if *stopped.borrow() {
                    return;
                }
                let stored = writer
                    .append(AppendCriteria::none(), &counter, vec![event(n)])
                    .await
                    .unwrap();
                writer
                    .bookmark("projector", &stored[0].reference, Tags::none())
                    .await
                    .unwrap();
            }
        })
    };
    let started = std::time::Instant::now();
    let mut opens = 0;
    while opens < 50 || started.elapsed() < Duration::from_secs(3) {
        let reader = FileEventStorage::open_read_only(dir.path()).await.unwrap();
        opens += 1;
        if let Some(bookmark) = reader.get_bookmark("projector").await.unwrap() {
            let head = reader.head(&counter).await.unwrap();
            assert!(
                reader.get_event_by_id(bookmark.id).await.unwrap().is_some(),
                "open {opens}: the bookmark stands at position {}, the log read ends at {:?}",
                bookmark.position,
                head.map(|head| head.position)
            );
        }
        reader.close().await.unwrap();
    }
    stop.send_replace(true);
    appender.await.unwrap();
    writer.close().await.unwrap();
}
