//! What only a durable backend must prove: reopening, recovery from torn and damaged logs,
//! the directory lock, and appends from many tasks at once.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStorageError, EventStreamId,
    EventToStore, LeaseRequest, Limit, StoredEvent, Tags,
};
use eventstore_file::{Corruption, FileEventStorage, FileStorageOptions};
use eventstore_tck::support::assert_chain_repeats_no_text;
use serde_json::json;

fn stream() -> EventStreamId {
    EventStreamId::for_context("counting")
}

fn counted(n: u64) -> EventToStore {
    let parity = if n.is_multiple_of(2) { "even" } else { "odd" };
    EventToStore::new("Counted", json!({ "n": n, "text": "x".repeat(40) }))
        .with_tags(Tags::from_pairs([("parity", parity)]))
}

async fn append_one(storage: &FileEventStorage, n: u64) -> StoredEvent {
    storage
        .append(AppendCriteria::none(), &stream(), vec![counted(n)])
        .await
        .expect("append")
        .remove(0)
}

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

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.starts_with("events-") && name.ends_with(".log")
        })
        .collect();
    files.sort();
    files
}

/// The bytes of `segment` up to the end of its last frame. The zeros after it are space the
/// log preallocated; a frame never ends in a zero byte (its payload is JSON).
fn frames_of(segment: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(segment).unwrap();
    let end = bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |last| last + 1);
    bytes.truncate(end);
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_keeps_every_event_and_bookmark_and_drops_leases() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path()).await.unwrap();
    for n in 0..3 {
        append_one(&storage, n).await;
    }
    let batch: Vec<EventToStore> = (3..6)
        .map(|n| counted(n).with_idempotency_key(format!("k{n}")))
        .collect();
    storage
        .append(
            AppendCriteria::none(),
            &EventStreamId::new("counting", "batch"),
            batch,
        )
        .await
        .unwrap();
    let events = all_events(&storage).await;
    storage
        .bookmark(
            "projector",
            &events[2].reference,
            Tags::from_pairs([("v", "1")]),
        )
        .await
        .unwrap();
    storage
        .bookmark("other", &events[5].reference, Tags::none())
        .await
        .unwrap();
    storage.remove_bookmark("other").await.unwrap();
    let lease = storage
        .request_lease(LeaseRequest::new(
            "leader",
            "me",
            0,
            Duration::from_secs(60),
        ))
        .await
        .unwrap();
    assert!(lease.status.is_leader());
    let bookmarks = storage.get_bookmarks().await.unwrap();
    storage.close().await.unwrap();

    let reopened = FileEventStorage::open(dir.path()).await.unwrap();
    assert_eq!(all_events(&reopened).await, events);
    assert_eq!(reopened.get_bookmarks().await.unwrap(), bookmarks);
    assert_eq!(bookmarks.len(), 1);
    assert_eq!(
        reopened.get_bookmark("projector").await.unwrap(),
        Some(events[2].reference)
    );
    assert_eq!(reopened.get_leases().await.unwrap(), vec![]);
    assert_eq!(
        reopened.head(&EventStreamId::any()).await.unwrap(),
        Some(events[5].reference)
    );
    // Idempotency keys survive the reopen too.
    let retry: Vec<EventToStore> = (3..6)
        .map(|n| counted(n).with_idempotency_key(format!("k{n}")))
        .collect();
    let stored = reopened
        .append(
            AppendCriteria::none(),
            &EventStreamId::new("counting", "batch"),
            retry,
        )
        .await
        .unwrap();
    assert_eq!(
        stored,
        events[3..6],
        "a retry after reopen stores nothing and answers the events read back from disk"
    );
    assert_eq!(append_one(&reopened, 6).await.reference.position, 7);
    reopened.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_after_a_reopen_are_higher_than_every_token_before() {
    let dir = tempfile::tempdir().unwrap();
    let mut granted = Vec::new();
    for round in 0..3 {
        let storage = FileEventStorage::open(dir.path()).await.unwrap();
        for owner in 0..4 {
            let owner = format!("owner-{round}-{owner}");
            let response = storage
                .request_lease(LeaseRequest::new(
                    "leader",
                    &owner,
                    0,
                    Duration::from_secs(60),
                ))
                .await
                .unwrap();
            assert!(response.status.is_leader(), "{owner}: {response:?}");
            granted.push(response.fencing_token);
            storage.release_lease("leader", &owner).await.unwrap();
        }
        storage.close().await.unwrap();
    }
    assert!(
        granted.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens must strictly increase across reopens: {granted:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_cut_at_every_byte_of_its_last_record_reopens_to_the_acknowledged_events() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path()).await.unwrap();
    for n in 0..5 {
        append_one(&storage, n).await;
    }
    let before_last = all_events(&storage).await;
    let segment = segment_files(dir.path()).pop().unwrap();
    let intact_length = frames_of(&segment).len();
    storage
        .append(
            AppendCriteria::none(),
            &stream(),
            vec![counted(5), counted(6)],
        )
        .await
        .unwrap();
    let everything = all_events(&storage).await;
    storage.close().await.unwrap();
    let full = frames_of(&segment);
    let preallocated = std::fs::metadata(&segment).unwrap().len() as usize;
    assert!(full.len() > intact_length);
    assert!(preallocated > full.len(), "the log is zero-filled ahead");

    // A crash cuts the file short, or leaves the write's end unwritten in preallocated space.
    for zero_filled in [false, true] {
        for cut in intact_length..=full.len() {
            let mut damaged = full[..cut].to_vec();
            if zero_filled {
                damaged.resize(preallocated, 0);
            }
            std::fs::write(&segment, &damaged).unwrap();
            let reopened = FileEventStorage::open(dir.path())
                .await
                .unwrap_or_else(|error| panic!("cut at byte {cut}: {error}"));
            let found = all_events(&reopened).await;
            if cut == full.len() {
                assert_eq!(found, everything);
            } else {
                assert_eq!(
                    found, before_last,
                    "cut at byte {cut}, zero-filled {zero_filled}"
                );
                // The torn tail is gone: the next append lands right after the intact events.
                assert_eq!(append_one(&reopened, 99).await.reference.position, 6);
            }
            reopened.close().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_in_the_middle_of_the_log_is_an_error_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path()).await.unwrap();
    for n in 0..20 {
        append_one(&storage, n).await;
    }
    storage.close().await.unwrap();
    let segment = segment_files(dir.path()).pop().unwrap();
    let intact = std::fs::read(&segment).unwrap();
    let middle = frames_of(&segment).len() / 2;

    for flipped in [middle, middle + 1, 25, 30] {
        let mut damaged = intact.clone();
        damaged[flipped] ^= 0x10;
        std::fs::write(&segment, &damaged).unwrap();
        let error = FileEventStorage::open(dir.path()).await.unwrap_err();
        assert_chain_repeats_no_text(&error, "opening a log with a flipped byte");
        let message = error.report();
        assert!(
            matches!(error, EventStorageError::Backend { .. }),
            "{error:?}"
        );
        assert!(
            message.contains(&segment.display().to_string()),
            "{message}"
        );
        assert!(message.contains("byte offset"), "{message}");
        let corruption = std::error::Error::source(&error)
            .and_then(|source| source.downcast_ref::<Corruption>())
            .unwrap_or_else(|| panic!("the source names the damage: {error:?}"));
        assert_eq!(corruption.file, segment);
        assert!(
            corruption.offset <= flipped as u64,
            "the damaged record starts at or before byte {flipped}: {corruption}"
        );
        assert_eq!(
            std::fs::read(&segment).unwrap(),
            damaged,
            "nothing was cut off"
        );
    }

    std::fs::write(&segment, &intact).unwrap();
    let repaired = FileEventStorage::open(dir.path()).await.unwrap();
    assert_eq!(all_events(&repaired).await.len(), 20);
    repaired.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_open_is_refused_naming_directory_and_pid_until_the_first_closes() {
    let dir = tempfile::tempdir().unwrap();
    let first = FileEventStorage::open(dir.path()).await.unwrap();
    let error = FileEventStorage::open(dir.path()).await.unwrap_err();
    assert_chain_repeats_no_text(&error, "opening a store open elsewhere");
    let message = error.report();
    assert!(
        message.contains(&dir.path().display().to_string()),
        "{message}"
    );
    assert!(
        message.contains(&std::process::id().to_string()),
        "{message}"
    );

    first.clone().close().await.unwrap();
    assert!(matches!(
        first.head(&stream()).await,
        Err(EventStorageError::Closed)
    ));
    let second = FileEventStorage::open(dir.path()).await.unwrap();
    drop(second);
    // Dropping the last handle without close releases the directory too.
    let third = FileEventStorage::open(dir.path()).await.unwrap();
    third.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_appending_at_once_lose_nothing() {
    const TASKS: u64 = 16;
    const APPENDS: u64 = 30;
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open_with(
        dir.path(),
        FileStorageOptions::default().max_segment_bytes(16 * 1024),
    )
    .await
    .unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS as usize));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let storage = storage.clone();
        let barrier = Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut acknowledged = Vec::new();
            for n in 0..APPENDS {
                let size = 1 + (n % 3);
                let batch = (0..size)
                    .map(|i| EventToStore::new("Tick", json!({ "task": task, "n": n, "i": i })))
                    .collect();
                let stream = EventStreamId::new("ticks", format!("task-{task}"));
                acknowledged.extend(
                    storage
                        .append(AppendCriteria::none(), &stream, batch)
                        .await
                        .unwrap(),
                );
            }
            acknowledged
        }));
    }
    let mut acknowledged = Vec::new();
    for task in tasks {
        acknowledged.extend(task.await.unwrap());
    }
    let expected_count = TASKS * (0..APPENDS).map(|n| 1 + n % 3).sum::<u64>();
    assert_eq!(acknowledged.len() as u64, expected_count);
    let positions: HashSet<u64> = acknowledged.iter().map(|e| e.reference.position).collect();
    assert_eq!(
        positions,
        (1..=expected_count).collect(),
        "positions are dense and unique"
    );

    let by_position: BTreeMap<u64, StoredEvent> = acknowledged
        .into_iter()
        .map(|event| (event.reference.position, event))
        .collect();
    let expected: Vec<StoredEvent> = by_position.into_values().collect();
    assert_eq!(all_events(&storage).await, expected);
    assert!(segment_files(dir.path()).len() > 1, "the log rolled over");
    storage.close().await.unwrap();

    let reopened = FileEventStorage::open(dir.path()).await.unwrap();
    assert_eq!(all_events(&reopened).await, expected);
    for task in 0..TASKS {
        let stream = EventStreamId::new("ticks", format!("task-{task}"));
        let mine: Vec<u64> = reopened
            .query(
                &EventFilter::match_all(),
                &stream,
                None,
                Limit::none(),
                Direction::Forward,
            )
            .await
            .unwrap()
            .iter()
            .map(|event| event.payload["n"].as_u64().unwrap())
            .collect();
        assert!(
            mine.windows(2).all(|w| w[0] <= w[1]),
            "task {task} in its own order"
        );
    }
    reopened.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_span_segments_in_both_directions_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let options = FileStorageOptions::default().max_segment_bytes(2048);
    let storage = FileEventStorage::open_with(dir.path(), options.clone())
        .await
        .unwrap();
    for n in 0..60 {
        append_one(&storage, n).await;
    }
    storage.close().await.unwrap();
    assert!(segment_files(dir.path()).len() >= 5);

    let reopened = FileEventStorage::open_with(dir.path(), options)
        .await
        .unwrap();
    let forward = all_events(&reopened).await;
    let numbers: Vec<u64> = forward
        .iter()
        .map(|e| e.payload["n"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (0..60).collect::<Vec<_>>());
    let even_backward = reopened
        .query(
            &EventFilter::for_tags(Tags::from_pairs([("parity", "even")])),
            &stream(),
            Some(&forward[9].reference),
            Limit::to(5),
            Direction::Backward,
        )
        .await
        .unwrap();
    let numbers: Vec<u64> = even_backward
        .iter()
        .map(|e| e.payload["n"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, vec![58, 56, 54, 52, 50]);
    let first = reopened
        .get_event_by_id(forward[0].reference.id)
        .await
        .unwrap();
    assert_eq!(first.as_ref(), Some(&forward[0]));
    assert_eq!(append_one(&reopened, 60).await.reference.position, 61);
    reopened.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_bookmark_write_keeps_the_bookmarks_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path()).await.unwrap();
    let first = append_one(&storage, 0).await;
    let second = append_one(&storage, 1).await;
    storage
        .bookmark("reader", &first.reference, Tags::none())
        .await
        .unwrap();
    let journal = dir.path().join("bookmarks.log");
    let before = std::fs::read(&journal).unwrap();
    storage
        .bookmark("reader", &second.reference, Tags::none())
        .await
        .unwrap();
    storage.close().await.unwrap();
    let full = std::fs::read(&journal).unwrap();
    // The second record went into the zeros ahead of the first: where the bytes differ.
    let differs = |at: &usize| before.get(*at).copied().unwrap_or(0) != full[*at];
    let start = (0..full.len()).find(differs).expect("the second record");
    let end = (0..full.len()).rev().find(differs).unwrap() + 1;
    assert!(end - start > 12, "a whole record: bytes {start}..{end}");
    for cut in start..end {
        // A crash leaves the record cut short, followed by the zeros ahead or by nothing.
        let mut zeros_after = full[..cut].to_vec();
        zeros_after.resize(full.len(), 0);
        for torn in [&full[..cut], &zeros_after[..]] {
            std::fs::write(&journal, torn).unwrap();
            let reopened = FileEventStorage::open(dir.path()).await.unwrap();
            assert_eq!(
                reopened.get_bookmark("reader").await.unwrap(),
                Some(first.reference),
                "cut at byte {cut} of {}, {} bytes in the file",
                full.len(),
                torn.len()
            );
            reopened.close().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_to_a_sealed_segment_is_an_error_never_a_cut() {
    let dir = tempfile::tempdir().unwrap();
    let options = FileStorageOptions::default().max_segment_bytes(2048);
    let storage = FileEventStorage::open_with(dir.path(), options.clone())
        .await
        .unwrap();
    for n in 0..40 {
        append_one(&storage, n).await;
    }
    storage.close().await.unwrap();
    let segments = segment_files(dir.path());
    assert!(segments.len() >= 3);
    let sealed = &segments[1];
    let intact = std::fs::read(sealed).unwrap();
    assert_eq!(
        frames_of(sealed),
        intact,
        "a sealed segment is cut to its frames"
    );

    let refuses = |what: &'static str| {
        let dir = dir.path().to_owned();
        let options = options.clone();
        let sealed = sealed.clone();
        async move {
            let error = FileEventStorage::open_with(&dir, options)
                .await
                .unwrap_err();
            let message = error.report();
            assert!(
                message.contains(&sealed.display().to_string()),
                "{what}: {message}"
            );
        }
    };

    // A sealed segment that lost its last bytes: no torn write can do that.
    std::fs::write(sealed, &intact[..intact.len() - 3]).unwrap();
    refuses("a truncated sealed segment").await;
    assert_eq!(
        std::fs::read(sealed).unwrap().len(),
        intact.len() - 3,
        "not cut"
    );

    // Sealed segments end with their last frame; zeros after it are no preallocation.
    let mut padded = intact.clone();
    padded.resize(intact.len() + 4096, 0);
    std::fs::write(sealed, &padded).unwrap();
    refuses("a sealed segment with zeros after its frames").await;

    // A damaged segment header.
    let mut damaged = intact.clone();
    damaged[3] ^= 0xff;
    std::fs::write(sealed, &damaged).unwrap();
    refuses("a damaged segment header").await;

    // A missing segment leaves a gap in the positions, named at the segment after it.
    std::fs::write(sealed, &intact).unwrap();
    std::fs::remove_file(sealed).unwrap();
    let error = FileEventStorage::open_with(dir.path(), options.clone())
        .await
        .unwrap_err();
    assert!(
        error.report().contains(&segments[2].display().to_string()),
        "{}",
        error.report()
    );

    std::fs::write(sealed, &intact).unwrap();
    let repaired = FileEventStorage::open_with(dir.path(), options)
        .await
        .unwrap();
    assert_eq!(all_events(&repaired).await.len(), 40);
    repaired.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_segment_whose_header_never_reached_the_disk_is_started_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path()).await.unwrap();
    for n in 0..3 {
        append_one(&storage, n).await;
    }
    storage.close().await.unwrap();
    // The log rolls over by cutting its segment to its frames, then creating the next one.
    let sealed = segment_files(dir.path()).pop().unwrap();
    std::fs::write(&sealed, frames_of(&sealed)).unwrap();
    let next_segment = dir.path().join(format!("events-{:020}.log", 4));

    // A crash while the log rolled over can leave a new segment shorter than its header, or
    // as long as its header (or longer) with none of its bytes written.
    for length in [0, 7, 20, 4096] {
        std::fs::write(&next_segment, vec![0u8; length]).unwrap();
        let reopened = FileEventStorage::open(dir.path()).await.unwrap();
        assert_eq!(all_events(&reopened).await.len(), 3, "{length} zero bytes");
        reopened.close().await.unwrap();
        std::fs::remove_file(&next_segment).unwrap();
    }

    // The segment started afresh is appended to, and its events kept.
    std::fs::write(&next_segment, vec![0u8; 20]).unwrap();
    let reopened = FileEventStorage::open(dir.path()).await.unwrap();
    let appended = append_one(&reopened, 3).await;
    reopened.close().await.unwrap();
    let reopened = FileEventStorage::open(dir.path()).await.unwrap();
    let events = all_events(&reopened).await;
    assert_eq!(events.len(), 4);
    assert_eq!(events[3].reference, appended.reference);
    reopened.close().await.unwrap();

    // A zeroed header before written bytes is damage, never started afresh.
    let mut damaged = std::fs::read(&next_segment).unwrap();
    damaged[..20].fill(0);
    std::fs::write(&next_segment, &damaged).unwrap();
    let error = FileEventStorage::open(dir.path()).await.unwrap_err();
    assert!(
        error.report().contains(&next_segment.display().to_string()),
        "{}",
        error.report()
    );
    assert_eq!(std::fs::read(&next_segment).unwrap(), damaged, "not cut");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_whose_header_never_reached_the_disk_is_started_afresh() {
    for journal in ["bookmarks.log", "lease-tokens.log"] {
        let dir = tempfile::tempdir().unwrap();
        let storage = FileEventStorage::open(dir.path()).await.unwrap();
        let first = append_one(&storage, 0).await;
        storage.close().await.unwrap();
        let path = dir.path().join(journal);

        // A crash on the store's first open can keep a new journal's length and lose its
        // bytes, the header's included: no record in it was ever acknowledged.
        for length in [8, 4096, 65_544] {
            std::fs::write(&path, vec![0u8; length]).unwrap();
            let reader = FileEventStorage::open_read_only(dir.path()).await.unwrap();
            assert_eq!(reader.get_bookmarks().await.unwrap(), vec![], "{journal}");
            reader.close().await.unwrap();
            let reopened = FileEventStorage::open(dir.path()).await.unwrap();
            assert_eq!(all_events(&reopened).await.len(), 1, "{journal}, {length}");
            reopened.close().await.unwrap();
        }

        // The journal started afresh is written to, and what it holds kept.
        let reopened = FileEventStorage::open(dir.path()).await.unwrap();
        reopened
            .bookmark("reader", &first.reference, Tags::none())
            .await
            .unwrap();
        let granted = reopened
            .request_lease(LeaseRequest::new("l", "o", 0, Duration::from_secs(10)))
            .await
            .unwrap();
        reopened.close().await.unwrap();
        let reopened = FileEventStorage::open(dir.path()).await.unwrap();
        assert_eq!(
            reopened.get_bookmark("reader").await.unwrap(),
            Some(first.reference),
            "{journal}"
        );
        let again = reopened
            .request_lease(LeaseRequest::new("l", "o", 0, Duration::from_secs(10)))
            .await
            .unwrap();
        assert!(again.fencing_token > granted.fencing_token, "{journal}");
        reopened.close().await.unwrap();

        // A zeroed header before records is damage, never started afresh.
        let mut damaged = std::fs::read(&path).unwrap();
        damaged[..8].fill(0);
        std::fs::write(&path, &damaged).unwrap();
        let error = FileEventStorage::open(dir.path()).await.unwrap_err();
        assert!(
            error.report().contains(&path.display().to_string()),
            "{}",
            error.report()
        );
    }
}

/// Where a bookmark change's frame starts when it follows one for a reader of `reader_len`
/// bytes: the journal's header (8 bytes), the frame's (12), the record's length (4), and the
/// record, 53 bytes and the reader's name.
fn second_bookmark_frame_start(reader_len: usize) -> usize {
    8 + 12 + 4 + 53 + reader_len
}

/// The bookmark change after the first, whose first sector a power loss lost, starting at
/// several distances before a sector boundary, the shortest less than a frame header's worth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookmark_whose_first_sector_was_lost_is_cut_off_and_the_rest_kept() {
    for before_boundary in [1, 3, 5, 11, 429] {
        let reader = "r".repeat(512 - before_boundary - second_bookmark_frame_start(0));
        a_bookmark_whose_first_sector_was_lost_is_cut_off(&reader, 512 - before_boundary).await;
    }
}

async fn a_bookmark_whose_first_sector_was_lost_is_cut_off(reader: &str, second_frame: usize) {
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path()).await.unwrap();
    let first = append_one(&storage, 0).await;
    storage
        .bookmark(reader, &first.reference, Tags::none())
        .await
        .unwrap();
    let journal = dir.path().join("bookmarks.log");
    let before = std::fs::read(&journal).unwrap();
    // A bookmark large enough to span a sector boundary, written and synced; a power loss
    // during its sync could have kept its later sectors and lost its first.
    let tags = Tags::from_pairs((0..4).map(|n| (format!("k{n}"), "v".repeat(300))));
    storage
        .bookmark("other", &first.reference, tags)
        .await
        .unwrap();
    storage.close().await.unwrap();
    let mut crashed = std::fs::read(&journal).unwrap();
    let start = (0..crashed.len())
        .find(|&at| before.get(at).copied().unwrap_or(0) != crashed[at])
        .unwrap();
    assert_eq!(
        start, second_frame,
        "where the second bookmark's frame starts"
    );
    crashed[start..(start / 512 + 1) * 512].fill(0);
    std::fs::write(&journal, &crashed).unwrap();

    let read_only = FileEventStorage::open_read_only(dir.path()).await.unwrap();
    assert_eq!(
        read_only.get_bookmark(reader).await.unwrap(),
        Some(first.reference)
    );
    read_only.close().await.unwrap();
    let reopened = FileEventStorage::open(dir.path())
        .await
        .unwrap_or_else(|error| panic!("frame at {start}: {}", error.report()));
    assert_eq!(
        reopened.get_bookmark(reader).await.unwrap(),
        Some(first.reference),
        "the bookmark before is kept"
    );
    assert_eq!(reopened.get_bookmark("other").await.unwrap(), None);
    reopened
        .bookmark("other", &first.reference, Tags::none())
        .await
        .unwrap();
    reopened.close().await.unwrap();
    let reopened = FileEventStorage::open(dir.path()).await.unwrap();
    assert_eq!(
        reopened.get_bookmark("other").await.unwrap(),
        Some(first.reference)
    );
    reopened.close().await.unwrap();
}

/// An append that a power loss interrupted, having kept its later sectors and lost its first,
/// starting at several distances before a sector boundary, the shortest less than a frame
/// header's worth: the open cuts it off and keeps the append before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_whose_first_sector_was_lost_is_cut_off_and_the_rest_kept() {
    let probe = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(probe.path()).await.unwrap();
    append_with_text(&storage, 0).await;
    storage.close().await.unwrap();
    let unpadded = frames_of(&segment_files(probe.path())[0]).len();
    for before_boundary in [1, 2, 3, 4, 5, 11] {
        let padding = (1024 - before_boundary - unpadded % 512) % 512;
        let dir = tempfile::tempdir().unwrap();
        let storage = FileEventStorage::open(dir.path()).await.unwrap();
        let first = append_with_text(&storage, padding).await;
        let segment = segment_files(dir.path())[0].clone();
        let start = frames_of(&segment).len();
        assert_eq!(
            start % 512,
            512 - before_boundary,
            "where the next append starts"
        );
        append_with_text(&storage, 2_000).await;
        storage.close().await.unwrap();
        let end = frames_of(&segment).len();
        let written = std::fs::read(&segment).unwrap();
        // Its first sector lost; then its first and its last (partial) sector, the ones
        // between kept.
        for last_lost_too in [false, true] {
            let mut crashed = written.clone();
            crashed[start..(start / 512 + 1) * 512].fill(0);
            if last_lost_too {
                crashed[(end - 1) / 512 * 512..end].fill(0);
            }
            std::fs::write(&segment, &crashed).unwrap();
            let reopened = FileEventStorage::open(dir.path())
                .await
                .unwrap_or_else(|error| {
                    panic!(
                        "append at {start}, last sector lost too: {last_lost_too}: {}",
                        error.report()
                    )
                });
            assert_eq!(all_events(&reopened).await, vec![first.clone()]);
            reopened.close().await.unwrap();
        }
    }
}

/// Appends one event whose payload holds `length` letters.
async fn append_with_text(storage: &FileEventStorage, length: usize) -> StoredEvent {
    storage
        .append(
            AppendCriteria::none(),
            &stream(),
            vec![EventToStore::new(
                "Padded",
                json!({ "p": "x".repeat(length) }),
            )],
        )
        .await
        .expect("append")
        .remove(0)
}

/// A write whose sync failed stays in the page cache with its pages counted clean: a sync
/// after reopening would not write them, yet the reopened store reads them, and would answer a
/// retry of the failed append from them as if it were stored. So an open for appending writes
/// the last group of the log, and the last append of each journal, again and syncs them before
/// it answers anyone. A sync alone leaves a file's modification time alone; writing again
/// moves it, which is what this test sees, while every byte stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_for_appending_writes_the_tail_it_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FileEventStorage::open(dir.path()).await.unwrap();
    let first = append_one(&storage, 0).await;
    append_one(&storage, 1).await;
    storage
        .bookmark("reader", &first.reference, Tags::none())
        .await
        .unwrap();
    storage
        .request_lease(LeaseRequest::new("l", "o", 0, Duration::from_secs(10)))
        .await
        .unwrap();
    storage.close().await.unwrap();

    let segment = segment_files(dir.path()).pop().unwrap();
    let files = [
        segment,
        dir.path().join("bookmarks.log"),
        dir.path().join("lease-tokens.log"),
    ];
    let long_ago = std::time::UNIX_EPOCH + Duration::from_secs(86_400);
    let bytes_before: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    for file in &files {
        let handle = std::fs::OpenOptions::new().write(true).open(file).unwrap();
        handle.set_modified(long_ago).unwrap();
    }
    let modified = |file: &Path| std::fs::metadata(file).unwrap().modified().unwrap();

    // A reader changes nothing.
    let reader = FileEventStorage::open_read_only(dir.path()).await.unwrap();
    assert_eq!(all_events(&reader).await.len(), 2);
    reader.close().await.unwrap();
    for file in &files {
        assert_eq!(modified(file), long_ago, "{} read only", file.display());
    }

    let reopened = FileEventStorage::open(dir.path()).await.unwrap();
    for (file, before) in files.iter().zip(&bytes_before) {
        assert!(
            modified(file) > long_ago,
            "{} was not written again by the open",
            file.display()
        );
        assert_eq!(
            &std::fs::read(file).unwrap(),
            before,
            "{} changed",
            file.display()
        );
    }
    assert_eq!(all_events(&reopened).await.len(), 2);
    assert_eq!(
        reopened.get_bookmark("reader").await.unwrap(),
        Some(first.reference)
    );
    reopened.close().await.unwrap();
}
