//! `eventstore` against a real file store, held and written by this test process while the
//! command reads it.

mod common;

use std::time::Duration;

use common::eventstore;
use eventstore::{AppendCriteria, EventStorage, EventStreamId, EventToStore, Tags};
use eventstore_file::FileEventStorage;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_bookmarks_of_a_store_whose_process_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let writer = FileEventStorage::open(dir.path()).await.unwrap();
    let stream = EventStreamId::new("orders", "default");
    let stored = writer
        .append(
            AppendCriteria::none(),
            &stream,
            (1..=5)
                .map(|n| EventToStore::new("OrderPlaced", json!({ "order": n })))
                .collect(),
        )
        .await
        .unwrap();
    writer
        .bookmark("invoicing", &stored[3].reference, Tags::none())
        .await
        .unwrap();

    let document = eventstore(&[
        "events",
        "--dir",
        path,
        "--stream",
        "orders/default",
        "--limit",
        "3",
        "--json",
    ])
    .await
    .json();
    assert_eq!(document["backend"], "file");
    assert_eq!(document["dir"], path);
    let positions: Vec<u64> = document["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["position"].as_u64().unwrap())
        .collect();
    assert_eq!(positions, [3, 4, 5]);
    assert_eq!(document["events"][2]["payload"], json!({ "order": 5 }));

    let document = eventstore(&["bookmarks", "--dir", path, "--json"])
        .await
        .json();
    assert_eq!(document["bookmarks"][0]["reader"], "invoicing");
    assert_eq!(document["bookmarks"][0]["position"], 4);

    let run = eventstore(&["events", "--dir", path, "--stream", "orders/default"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.starts_with("5 events of orders/default"),
        "{}",
        run.stdout
    );

    // File leases live in the writer's memory: the command says so instead of listing none.
    let run = eventstore(&["leases", "--dir", path]).await;
    run.assert_refused(1, &["memory of the process", path]);
    let run = eventstore(&["leases", "--dir", path, "--json"]).await;
    run.assert_refused(1, &["memory of the process"]);
    writer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_read_while_another_process_appends_are_a_gapless_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_owned();
    let options = eventstore_file::FileStorageOptions::default().max_segment_bytes(4096);
    let writer = FileEventStorage::open_with(dir.path(), options)
        .await
        .unwrap();
    let appender = {
        let writer = writer.clone();
        tokio::spawn(async move {
            let stream = EventStreamId::for_context("counter");
            for n in 1..=1000u64 {
                writer
                    .append(
                        AppendCriteria::none(),
                        &stream,
                        vec![EventToStore::new("Counted", json!({ "n": n }))],
                    )
                    .await
                    .unwrap();
            }
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut seen = 0;
    let mut reads = 0;
    while !appender.is_finished() || reads == 0 {
        assert!(std::time::Instant::now() < deadline);
        let document = eventstore(&[
            "events",
            "--dir",
            &path,
            "--stream",
            "counter/default",
            "--limit",
            "1000",
            "--json",
        ])
        .await
        .json();
        let events = document["events"].as_array().unwrap();
        for (index, event) in events.iter().enumerate() {
            assert_eq!(event["position"], index as u64 + 1, "{document}");
            assert_eq!(event["payload"]["n"], index as u64 + 1);
        }
        assert!(events.len() >= seen);
        seen = events.len();
        reads += 1;
    }
    appender.await.unwrap();
    writer.close().await.unwrap();
}

#[tokio::test]
async fn a_directory_that_is_no_store_is_refused_in_one_line_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let empty_path = empty.to_str().unwrap();
    let missing = dir.path().join("missing");
    let missing_path = missing.to_str().unwrap();
    for args in [
        &["bookmarks", "--dir", empty_path][..],
        &["events", "--stream", "orders/default", "--dir", empty_path],
    ] {
        eventstore(args)
            .await
            .assert_refused(1, &["holds no event store", empty_path]);
    }
    eventstore(&["bookmarks", "--dir", missing_path])
        .await
        .assert_refused(1, &["No such file or directory", missing_path]);
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    assert!(!missing.exists());

    eventstore(&["schema", "check", "--dir", empty_path])
        .await
        .assert_refused(2, &["schema commands are for PostgreSQL"]);
}

#[tokio::test]
async fn usage_errors_exit_with_two() {
    eventstore(&["leases"])
        .await
        .assert_refused(2, &["no store given", "--url", "--dir"]);
    let run = eventstore(&["events", "--dir", "/tmp", "--stream", "no-slash"]).await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("CONTEXT/PURPOSE"), "{run:?}");
    let run = eventstore(&["leases", "--dir", "/tmp", "--url", "postgres://x/y"]).await;
    assert_eq!(run.code, 2, "{run:?}");
    let run = eventstore(&["contenders", "x"]).await;
    assert_eq!(run.code, 2, "{run:?}");
}

/// A failure names the directory as the operator gave it, two spaces and all.
#[tokio::test]
async fn a_failure_names_the_directory_exactly_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("orders  store");
    let missing_path = missing.to_str().unwrap();
    eventstore(&["bookmarks", "--dir", missing_path])
        .await
        .assert_refused(1, &["No such file or directory", missing_path]);
}

/// A stream whose context holds a `/` is listed under a name that, given back to `--stream`,
/// names that stream alone.
#[tokio::test]
async fn a_stream_listed_by_events_can_be_asked_for_by_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let writer = store_with_an_order(dir.path(), &EventStreamId::new("orders/eu", "default")).await;
    let all = eventstore(&["events", "--dir", path, "--stream", "*/*", "--json"])
        .await
        .json();
    let name = all["events"][0]["stream"].as_str().unwrap().to_owned();
    assert_eq!(name, r"orders\/eu/default");
    let run = eventstore(&["events", "--dir", path, "--stream", &name, "--json"]).await;
    assert_eq!(run.code, 0, "the stream {name} as listed: {run:?}");
    assert_eq!(run.json()["events"].as_array().unwrap().len(), 1);
    writer.close().await.unwrap();
}

/// A directory name with a newline cannot split the header line and forge a row.
#[tokio::test]
async fn a_directory_name_cannot_forge_lines_of_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("orders\nREADER  POSITION  forged");
    std::fs::create_dir(&store).unwrap();
    let writer = FileEventStorage::open(&store).await.unwrap();
    writer
        .append(
            AppendCriteria::none(),
            &EventStreamId::for_context("orders"),
            vec![EventToStore::new("OrderPlaced", json!({}))],
        )
        .await
        .unwrap();
    let path = store.to_str().unwrap();
    let run = eventstore(&["bookmarks", "--dir", path]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.stdout.lines().count(),
        1,
        "no bookmark, one header line: {run:?}"
    );
    let run = eventstore(&["events", "--dir", path, "--stream", "orders/default"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.stdout.lines().count(),
        3,
        "a header, the column names and one event: {}",
        run.stdout
    );
    writer.close().await.unwrap();
}

/// What the argument parser refuses is one line too, as every failure is, and still says
/// what was wrong.
#[tokio::test]
async fn a_usage_error_of_the_argument_parser_is_one_line() {
    eventstore(&["events", "--dir", "/tmp", "--stream", "no-slash"])
        .await
        .assert_refused(2, &["CONTEXT/PURPOSE", "no-slash"]);
    eventstore(&["events", "--dir", "/tmp"])
        .await
        .assert_refused(2, &["--stream"]);
    eventstore(&["leases", "--interval", "0"])
        .await
        .assert_refused(2, &["between 0.1 and 86400"]);
}

/// A directory whose name holds a line break is named with the break escaped, not as another
/// directory (`orders store`).
#[tokio::test]
async fn a_failure_names_a_directory_with_a_newline_unmistakably() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("orders\n  store");
    let other = dir.path().join("orders store");
    let run = eventstore(&["bookmarks", "--dir", missing.to_str().unwrap()]).await;
    run.assert_refused(1, &[r"orders\n  store"]);
    assert!(!run.stderr.contains(other.to_str().unwrap()), "{run:?}");
}

/// A stream whose name holds a control character is printed in the table with it escaped,
/// and that name, given back to `--stream`, names the stream.
#[tokio::test]
async fn a_stream_name_printed_in_the_table_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let writer =
        store_with_an_order(dir.path(), &EventStreamId::new("orders\teu", "default")).await;
    let run = eventstore(&["events", "--dir", path, "--stream", "*/*"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let row = run.stdout.lines().nth(2).unwrap();
    let name = row.split_whitespace().nth(1).unwrap().to_owned();
    assert_eq!(name, r"orders\teu/default");
    let run = eventstore(&["events", "--dir", path, "--stream", &name, "--json"]).await;
    assert_eq!(run.code, 0, "the stream {name} as printed: {run:?}");
    assert_eq!(run.json()["events"].as_array().unwrap().len(), 1);
    writer.close().await.unwrap();
}

/// A file store in `dir` holding one `OrderPlaced` event in `stream`, open.
async fn store_with_an_order(dir: &std::path::Path, stream: &EventStreamId) -> FileEventStorage {
    let writer = FileEventStorage::open(dir).await.unwrap();
    let order = EventToStore::new("OrderPlaced", json!({ "order": 1 }));
    writer
        .append(AppendCriteria::none(), stream, vec![order])
        .await
        .unwrap();
    writer
}
