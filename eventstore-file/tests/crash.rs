//! A process killed with SIGKILL while appending leaves a store that opens with every event it
//! acknowledged.
//!
//! The test binary runs itself as the child: the ignored test below is the child's body, and
//! only runs when the parent names it and passes the store's directory in the environment.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStreamId, EventToStore, Limit,
};
use eventstore_file::FileEventStorage;
use serde_json::json;

const CHILD_DIR: &str = "EVENTSTORE_FILE_CRASH_CHILD_DIR";
const CHILD_TEST: &str = "child_appends_until_killed";
const WRITERS: u64 = 4;
/// The child is killed once this many appends were acknowledged.
const KILL_AFTER: usize = 400;
const DEADLINE: Duration = Duration::from_secs(60);

#[test]
#[ignore = "the child process of a_process_killed_while_appending_keeps_every_acknowledged_event"]
fn child_appends_until_killed() {
    let dir = std::env::var(CHILD_DIR).expect("run by the crash test, which sets the directory");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let storage = FileEventStorage::open(&dir).await.unwrap();
        let mut writers = Vec::new();
        for writer in 0..WRITERS {
            let storage = storage.clone();
            writers.push(tokio::spawn(async move {
                let stream = EventStreamId::new("crash", format!("writer-{writer}"));
                for n in 0u64.. {
                    // Large enough that the kill often lands in the middle of a write.
                    let event = EventToStore::new(
                        "Written",
                        json!({ "writer": writer, "n": n, "filler": "f".repeat(4096) }),
                    );
                    storage
                        .append(AppendCriteria::none(), &stream, vec![event])
                        .await
                        .unwrap();
                    let mut stdout = std::io::stdout().lock();
                    writeln!(stdout, "ACK {writer} {n}").unwrap();
                    stdout.flush().unwrap();
                }
            }));
        }
        for writer in writers {
            writer.await.unwrap();
        }
    });
}

#[test]
fn a_process_killed_while_appending_keeps_every_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            CHILD_TEST,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines, received) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });

    let mut acknowledged: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    let mut count = 0;
    let mut record = |line: String| {
        if let Some(ack) = line.strip_prefix("ACK ") {
            let (writer, n) = ack.split_once(' ').expect("ACK <writer> <n>");
            acknowledged
                .entry(writer.parse().unwrap())
                .or_default()
                .insert(n.parse().unwrap());
            count += 1;
        }
        count
    };
    let start = Instant::now();
    loop {
        let remaining = DEADLINE.checked_sub(start.elapsed()).unwrap_or_else(|| {
            let _ = child.kill();
            panic!("the child acknowledged fewer than {KILL_AFTER} appends within {DEADLINE:?}")
        });
        match received.recv_timeout(remaining) {
            Ok(line) => {
                if record(line) >= KILL_AFTER {
                    break;
                }
            }
            Err(error) => {
                let _ = child.kill();
                panic!("the child stopped early ({error}) after {count} acknowledgements")
            }
        }
    }
    child.kill().unwrap(); // SIGKILL on Unix: no destructor, no flush, no close.
    child.wait().unwrap();
    // Acknowledgements written before the kill are still in the pipe.
    for line in received.iter() {
        record(line);
    }
    reader.join().unwrap();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let storage = FileEventStorage::open(dir.path()).await.unwrap();
        for (writer, acked) in &acknowledged {
            let stream = EventStreamId::new("crash", format!("writer-{writer}"));
            let stored: Vec<u64> = storage
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
            // Each writer appended in order, so what is stored is a gap-free prefix holding at
            // least every acknowledged append (plus, perhaps, one synced but not yet answered).
            assert_eq!(
                stored,
                (0..stored.len() as u64).collect::<Vec<_>>(),
                "writer {writer}"
            );
            let missing: Vec<&u64> = acked
                .iter()
                .filter(|n| **n >= stored.len() as u64)
                .collect();
            assert!(
                missing.is_empty(),
                "writer {writer} lost acknowledged appends {missing:?}"
            );
        }
        let stream = EventStreamId::new("crash", "after");
        let appended = storage
            .append(
                AppendCriteria::none(),
                &stream,
                vec![EventToStore::new("After", json!({}))],
            )
            .await
            .unwrap();
        let total = storage
            .query(
                &EventFilter::match_all(),
                &EventStreamId::any(),
                None,
                Limit::none(),
                Direction::Forward,
            )
            .await
            .unwrap()
            .len() as u64;
        assert_eq!(
            appended[0].reference.position, total,
            "the recovered log continues densely"
        );
        storage.close().await.unwrap();
    });
}
