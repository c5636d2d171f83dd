//! `eventstore` against a real PostgreSQL, on a prefix of each test's own, filled through
//! the library.

mod common;

use std::process::Child;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{
    database_url, eventstore, eventually, storage_on, tables_of, try_pool, unique_prefix, DEAD_URL,
};
use eventstore::EventStorageExt;
use eventstore::{
    AppendCriteria, EventStorage, EventStreamId, EventToStore, LeaseRequest, PartitionElector, Tags,
};
use serde_json::{json, Value};

fn time(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .unwrap_or_else(|| panic!("a timestamp, not {value}"))
        .parse()
        .unwrap()
}

fn lease<'a>(document: &'a Value, name: &str) -> &'a Value {
    document["leases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|lease| lease["lease_name"] == name)
        .unwrap_or_else(|| panic!("no lease {name} in {document}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_json_says_live_on_the_storage_clock_for_live_expired_and_released_leases() {
    let Some(_pool) = try_pool().await else {
        return;
    };
    let prefix = unique_prefix();
    let storage = storage_on(&prefix).await;
    let hour = Duration::from_secs(3600);
    storage
        .request_lease(LeaseRequest::new("live-lease", "pod-a", 5, hour))
        .await
        .unwrap();
    storage
        .request_lease(LeaseRequest::new("released-lease", "pod-b", 0, hour))
        .await
        .unwrap();
    storage
        .release_lease("released-lease", "pod-b")
        .await
        .unwrap();
    let short = Duration::from_millis(50);
    storage
        .request_lease(LeaseRequest::new("expired-lease", "pod-c", 0, short))
        .await
        .unwrap();
    // Expired on the storage's clock, not on this process's.
    eventually("the short lease to expire", Duration::from_secs(30), || {
        let storage = storage.clone();
        async move {
            let now = storage.storage_time().await.unwrap();
            let leases = storage.get_leases().await.unwrap();
            let lease = leases.iter().find(|l| l.lease_name == "expired-lease")?;
            lease.is_expired_at(now).then_some(())
        }
    })
    .await;

    let url = database_url();
    let run = eventstore(&["leases", "--url", &url, "--prefix", &prefix, "--json"]).await;
    let document = run.json();
    let storage_time = time(&document["storage_time"]);
    assert_eq!(document["backend"], "postgres");
    assert_eq!(document["prefix"], json!(prefix));
    assert_eq!(document["leases"].as_array().unwrap().len(), 3);
    for (name, owner, live) in [
        ("live-lease", "pod-a", true),
        ("released-lease", "pod-b", false),
        ("expired-lease", "pod-c", false),
    ] {
        let lease = lease(&document, name);
        assert_eq!(lease["owner"], owner, "{lease}");
        assert_eq!(lease["live"], live, "{name}: {lease}");
        assert_eq!(lease["fencing_token"], 1, "{lease}");
        let heartbeat_at = time(&lease["heartbeat_at"]);
        let expires_at = time(&lease["expires_at"]);
        let ttl_ms = lease["ttl_ms"].as_i64().unwrap();
        assert_eq!(
            expires_at,
            heartbeat_at + chrono::Duration::milliseconds(ttl_ms),
            "{lease}"
        );
        assert_eq!(live, storage_time <= expires_at, "{name}: {lease}");
        // Whole milliseconds, rounded down.
        let expires_in_us = (expires_at - storage_time).num_microseconds().unwrap();
        assert_eq!(
            lease["expires_in_ms"].as_i64().unwrap(),
            expires_in_us.div_euclid(1000)
        );
        assert!(time(&lease["acquired_at"]) <= heartbeat_at || !live);
    }
    assert_eq!(lease(&document, "live-lease")["priority"], 5);
    assert_eq!(lease(&document, "live-lease")["ttl_ms"], 3_600_000);
    assert_eq!(lease(&document, "expired-lease")["ttl_ms"], 50);

    // The table says the same.
    let run = eventstore(&["leases", "--url", &url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.starts_with("3 leases (1 live)"),
        "{}",
        run.stdout
    );
    let row = |name: &str| {
        run.stdout
            .lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_else(|| panic!("no row {name}: {}", run.stdout))
            .to_owned()
    };
    assert!(row("live-lease").ends_with("live"), "{}", run.stdout);
    assert!(row("live-lease").contains("in 59m"), "{}", run.stdout);
    assert!(row("expired-lease").contains("expired"), "{}", run.stdout);
    assert!(row("released-lease").ends_with("no"), "{}", run.stdout);
    storage.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_of_one_group_are_listed_by_their_prefix() {
    let Some(_pool) = try_pool().await else {
        return;
    };
    let prefix = unique_prefix();
    let storage = storage_on(&prefix).await;
    let hour = Duration::from_secs(3600);
    for name in ["work/1", "work/0", "work/members/pod-a", "workers", "other"] {
        storage
            .request_lease(LeaseRequest::new(name, "pod-a", 0, hour))
            .await
            .unwrap();
    }
    let url = database_url();
    let listed = |lease_prefix: &'static str| {
        let (url, prefix) = (url.clone(), prefix.clone());
        async move {
            let args = ["leases", "--url", &url, "--prefix", &prefix, "--json"];
            let document = eventstore(&[&args[..], &["--lease-prefix", lease_prefix]].concat())
                .await
                .json();
            document["leases"]
                .as_array()
                .unwrap()
                .iter()
                .map(|lease| lease["lease_name"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        listed("work/").await,
        ["work/0", "work/1", "work/members/pod-a"]
    );
    assert_eq!(
        listed("").await.len(),
        5,
        "an empty prefix lists every lease"
    );

    let too_long = "x".repeat(513);
    let run = eventstore(&[
        "leases",
        "--url",
        &url,
        "--prefix",
        &prefix,
        "--lease-prefix",
        &too_long,
    ])
    .await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("lease name prefix"), "{run:?}");
    storage.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_are_listed_live_or_not_and_counted_in_leases() {
    let Some(_pool) = try_pool().await else {
        return;
    };
    let prefix = unique_prefix();
    let storage = storage_on(&prefix).await;
    let hour = Duration::from_secs(3600);
    for (owner, priority, ttl) in [
        ("pod-a", 0, hour),
        ("pod-b", 5, hour),
        ("pod-c", 0, Duration::from_millis(50)),
    ] {
        storage
            .request_lease(LeaseRequest::new("orders", owner, priority, ttl))
            .await
            .unwrap();
    }
    eventually(
        "pod-c's registration to lapse",
        Duration::from_secs(30),
        || {
            let storage = storage.clone();
            async move {
                let now = storage.storage_time().await.unwrap();
                let contenders = storage.get_contenders("orders").await.unwrap();
                contenders
                    .iter()
                    .any(|c| c.owner == "pod-c" && !c.is_live_at(now))
                    .then_some(())
            }
        },
    )
    .await;

    let url = database_url();
    let run = eventstore(&[
        "contenders",
        "orders",
        "--url",
        &url,
        "--prefix",
        &prefix,
        "--json",
    ])
    .await;
    let document = run.json();
    assert_eq!(document["lease_name"], "orders");
    assert_eq!(document["holder"], "pod-a");
    assert_eq!(document["last_holder"], "pod-a");
    let contenders = document["contenders"].as_array().unwrap();
    let listed: Vec<(&str, i64, bool)> = contenders
        .iter()
        .map(|c| {
            (
                c["owner"].as_str().unwrap(),
                c["priority"].as_i64().unwrap(),
                c["live"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [("pod-b", 5, true), ("pod-c", 0, false)],
        "{document}"
    );
    let storage_time = time(&document["storage_time"]);
    for contender in contenders {
        let expires_at = time(&contender["expires_at"]);
        assert_eq!(contender["live"], storage_time <= expires_at, "{contender}");
    }

    let run = eventstore(&["contenders", "orders", "--url", &url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .starts_with("lease orders: held by pod-a; 2 contenders (1 live)"),
        "{}",
        run.stdout
    );

    let run = eventstore(&["leases", "--url", &url, "--prefix", &prefix, "--json"]).await;
    assert_eq!(
        lease(&run.json(), "orders")["live_contenders"],
        json!(["pod-b"]),
        "leases names the live contenders only"
    );

    let run = eventstore(&[
        "contenders",
        "no-such-lease",
        "--url",
        &url,
        "--prefix",
        &prefix,
    ])
    .await;
    run.assert_refused(1, &["no lease named", "no-such-lease"]);
    let run = eventstore(&["contenders", " ", "--url", &url, "--prefix", &prefix]).await;
    run.assert_refused(2, &["lease name"]);
    storage.close().await.unwrap();
}

/// A released (or expired) lease is free: nobody is named as holding it, the last holder is
/// named as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_of_a_released_lease_name_no_holder() {
    let Some(_pool) = try_pool().await else {
        return;
    };
    let prefix = unique_prefix();
    let storage = storage_on(&prefix).await;
    let hour = Duration::from_secs(3600);
    for owner in ["pod-a", "pod-b"] {
        storage
            .request_lease(LeaseRequest::new("orders", owner, 0, hour))
            .await
            .unwrap();
    }
    storage.release_lease("orders", "pod-a").await.unwrap();

    let url = database_url();
    let args = ["contenders", "orders", "--url", &url, "--prefix", &prefix];
    let run = eventstore(&[&args[..], &["--json"]].concat()).await;
    let document = run.json();
    assert_eq!(document["holder"], Value::Null, "{document}");
    assert_eq!(document["last_holder"], "pod-a", "{document}");
    assert!(
        time(&document["tenure_expires_at"]) < time(&document["storage_time"]),
        "{document}"
    );
    let run = eventstore(&args).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .starts_with("lease orders: free, last held by pod-a (ended "),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("held by pod-a;"), "{}", run.stdout);
    storage.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_watch_prints_one_json_document_per_refresh() {
    let Some(_pool) = try_pool().await else {
        return;
    };
    let prefix = unique_prefix();
    let storage = storage_on(&prefix).await;
    storage
        .request_lease(LeaseRequest::new(
            "watched",
            "pod-a",
            0,
            Duration::from_secs(60),
        ))
        .await
        .unwrap();
    let (mut child, stdout, _stderr) = watch_leases(&prefix);
    let mut lines = Vec::new();
    for _ in 0..3 {
        lines.push(next_line(&stdout, "a document").await);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let times: Vec<DateTime<Utc>> = lines
        .iter()
        .map(|line| {
            let document: Value = serde_json::from_str(line).unwrap();
            assert_eq!(document["leases"][0]["lease_name"], "watched");
            time(&document["storage_time"])
        })
        .collect();
    assert!(times.windows(2).all(|pair| pair[0] < pair[1]), "{times:?}");
    storage.close().await.unwrap();
}

/// A watch outlives a refresh that fails: the failure is one line on standard error, and the
/// next refresh that succeeds prints again. The tables are dropped and made again under it,
/// as a restore would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_watch_reports_a_failed_refresh_and_goes_on() {
    let Some(_pool) = try_pool().await else {
        return;
    };
    let prefix = unique_prefix();
    let storage = storage_on(&prefix).await;
    let lease = LeaseRequest::new("watched", "pod-a", 0, Duration::from_secs(60));
    storage.request_lease(lease).await.unwrap();
    let (mut child, stdout, stderr) = watch_leases(&prefix);
    let url = database_url();
    let first = next_line(&stdout, "a first document").await;
    assert!(first.contains("\"watched\""), "{first}");

    let run = eventstore(&[
        "schema", "drop", "--yes", "--url", &url, "--prefix", &prefix,
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    let failed = next_line(&stderr, "a failed refresh").await;
    assert!(failed.starts_with("eventstore: "), "{failed}");
    assert!(failed.contains("trying again in 200ms"), "{failed}");

    let run = eventstore(&["schema", "apply", "--url", &url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");
    // Another holder, so that no document printed before the drop can pass for a new one.
    let again = storage_on(&prefix).await;
    let lease = LeaseRequest::new("watched", "pod-b", 0, Duration::from_secs(60));
    again.request_lease(lease).await.unwrap();
    let document = eventually(
        "a document once the tables are back",
        Duration::from_secs(30),
        || {
            let stdout = &stdout;
            async move {
                let line = stdout.try_recv().ok()?;
                line.contains("\"pod-b\"").then_some(line)
            }
        },
    )
    .await;
    let document: Value = serde_json::from_str(&document).unwrap();
    assert_eq!(document["leases"][0]["lease_name"], "watched");
    assert!(
        child.try_wait().unwrap().is_none(),
        "the watch is still running"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    again.close().await.unwrap();
    storage.close().await.unwrap();
}

/// `eventstore leases --json --watch --interval 0.2` on `prefix`, and the lines of its
/// standard output and error.
fn watch_leases(prefix: &str) -> (Child, Receiver<String>, Receiver<String>) {
    let url = database_url();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_eventstore"))
        .args(["leases", "--url", &url, "--prefix", prefix])
        .args(["--json", "--watch", "--interval", "0.2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = lines_of(child.stdout.take().unwrap());
    let stderr = lines_of(child.stderr.take().unwrap());
    (child, stdout, stderr)
}

/// The lines `output` gives, each as it comes, from a thread of their own.
fn lines_of(output: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(output).lines() {
            let Ok(line) = line else { return };
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    receiver
}

/// The next of `lines`, within 30 s.
async fn next_line(lines: &Receiver<String>, what: &str) -> String {
    eventually(what, Duration::from_secs(30), || async {
        lines.try_recv().ok()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_and_events_are_listed_as_stored() {
    let Some(_pool) = try_pool().await else {
        return;
    };
    let prefix = unique_prefix();
    let storage = storage_on(&prefix).await;
    let stream = EventStreamId::new("orders", "eu");
    let stored = storage
        .append(
            AppendCriteria::none(),
            &stream,
            (1..=3)
                .map(|n| {
                    EventToStore::new("OrderPlaced", json!({ "order": n }))
                        .with_tags(Tags::from_pairs([("order", n.to_string())]))
                })
                .collect(),
        )
        .await
        .unwrap();
    storage
        .append(
            AppendCriteria::none(),
            &EventStreamId::new("orders", "us"),
            vec![EventToStore::new("OrderPlaced", json!({ "order": 9 }))],
        )
        .await
        .unwrap();
    storage
        .bookmark("invoicing", &stored[1].reference, Tags::none())
        .await
        .unwrap();
    let url = database_url();

    let document = eventstore(&["bookmarks", "--url", &url, "--prefix", &prefix, "--json"])
        .await
        .json();
    let bookmarks = document["bookmarks"].as_array().unwrap();
    assert_eq!(bookmarks.len(), 1, "{document}");
    assert_eq!(bookmarks[0]["reader"], "invoicing");
    assert_eq!(bookmarks[0]["position"], stored[1].reference.position);
    assert_eq!(bookmarks[0]["tx"], stored[1].reference.tx);
    assert_eq!(
        bookmarks[0]["event_id"],
        stored[1].reference.id.0.to_string()
    );
    assert!(time(&bookmarks[0]["updated_at"]) <= time(&document["storage_time"]));

    let document = eventstore(&[
        "events",
        "--url",
        &url,
        "--prefix",
        &prefix,
        "--stream",
        "orders/eu",
        "--limit",
        "2",
        "--json",
    ])
    .await
    .json();
    let events = document["events"].as_array().unwrap();
    assert_eq!(document["stream"], "orders/eu");
    assert_eq!(events.len(), 2, "the last two: {document}");
    for (event, expected) in events.iter().zip(&stored[1..]) {
        assert_eq!(event["position"], expected.reference.position);
        assert_eq!(event["id"], expected.reference.id.0.to_string());
        assert_eq!(event["event_type"], "OrderPlaced");
        assert_eq!(event["stream"], "orders/eu");
        assert_eq!(event["payload"], expected.payload);
        assert_eq!(
            event["tags"],
            json!(expected
                .tags
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>())
        );
    }

    let document = eventstore(&[
        "events", "--url", &url, "--prefix", &prefix, "--stream", "orders/*", "--json",
    ])
    .await
    .json();
    assert_eq!(document["events"].as_array().unwrap().len(), 4);

    let run = eventstore(&[
        "events",
        "--url",
        &url,
        "--prefix",
        &prefix,
        "--stream",
        "orders/eu",
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("POSITION  TYPE"), "{}", run.stdout);
    assert!(run.stdout.contains(r#"{"order":3}"#), "{}", run.stdout);
    let run = eventstore(&["bookmarks", "--url", &url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("invoicing"), "{}", run.stdout);
    storage.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_print_check_apply_and_drop_do_what_they_say() {
    let Some(pool) = try_pool().await else { return };
    let prefix = unique_prefix();
    let url = database_url();

    let run = eventstore(&["schema", "print", "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains(&format!("{prefix}events")),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("__prefix__"));
    assert_eq!(
        run.stdout,
        eventstore_postgres::schema_sql(&prefix).unwrap()
    );

    let run = eventstore(&["schema", "check", "--url", &url, "--prefix", &prefix]).await;
    run.assert_refused(1, &["unknown prefix", &prefix]);
    assert!(
        tables_of(&pool, &prefix).await.is_empty(),
        "check creates nothing"
    );

    let run = eventstore(&["schema", "apply", "--url", &url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.starts_with("created the schema"), "{run:?}");
    assert_eq!(tables_of(&pool, &prefix).await.len(), 5);
    let run = eventstore(&["schema", "apply", "--url", &url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("is in place"), "{run:?}");

    let run = eventstore(&["schema", "check", "--url", &url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("is complete"), "{run:?}");

    // A missing piece fails the check, naming it.
    sqlx::query(&format!("DROP TABLE {prefix}bookmarks"))
        .execute(&pool)
        .await
        .unwrap();
    let run = eventstore(&["schema", "check", "--url", &url, "--prefix", &prefix]).await;
    run.assert_refused(1, &["incomplete", &format!("{prefix}bookmarks")]);
    // Applying again creates what is missing, and says that it created only that.
    let run = eventstore(&["schema", "apply", "--url", &url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.stdout,
        format!(
            "completed the schema of prefix {prefix}: created tables {prefix}bookmarks; tables \
             {prefix}events, {prefix}event_tags, {prefix}leases, {prefix}lease_contenders were \
             in place\n"
        )
    );
    let run = eventstore(&["schema", "check", "--url", &url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");

    let run = eventstore(&["schema", "drop", "--url", &url, "--prefix", &prefix]).await;
    run.assert_refused(2, &["--yes", &prefix]);
    assert_eq!(tables_of(&pool, &prefix).await.len(), 5, "nothing dropped");

    let run = eventstore(&[
        "schema", "drop", "--yes", "--url", &url, "--prefix", &prefix,
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.starts_with("dropped the schema"), "{run:?}");
    assert!(tables_of(&pool, &prefix).await.is_empty());

    let run = eventstore(&[
        "schema", "drop", "--yes", "--url", &url, "--prefix", &prefix,
    ])
    .await;
    run.assert_refused(1, &["no schema of prefix", &prefix]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_one_line_with_the_right_exit_code_and_creates_nothing() {
    let Some(pool) = try_pool().await else { return };
    let prefix = unique_prefix();
    let url = database_url();
    for command in [
        &["leases"][..],
        &["bookmarks"],
        &["events", "--stream", "orders/default"],
    ] {
        let with = |extra: &[&str]| {
            let mut args: Vec<&str> = command.to_vec();
            args.extend_from_slice(extra);
            args.iter()
                .map(|arg| (*arg).to_owned())
                .collect::<Vec<String>>()
        };
        let args = with(&["--url", &url, "--prefix", &prefix]);
        let run = eventstore(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        run.assert_refused(1, &["unknown prefix", &prefix, "schema apply"]);

        let args = with(&["--url", &url, "--prefix", "Tenant1_"]);
        let run = eventstore(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        run.assert_refused(2, &["Tenant1_", "^[a-z][a-z0-9_]{0,30}_$"]);

        let args = with(&["--url", DEAD_URL, "--prefix", &prefix]);
        let run = eventstore(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        run.assert_refused(1, &["cannot connect to PostgreSQL at 127.0.0.1:1/test"]);

        let args = with(&["--url", "not a url", "--prefix", &prefix]);
        let run = eventstore(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        run.assert_refused(2, &["--url is not a PostgreSQL url"]);

        // The server's own address under another scheme: refused, not connected to.
        let (_, address) = url.split_once("://").expect("a url with a scheme");
        let mysql = format!("mysql://{address}");
        let args = with(&["--url", &mysql, "--prefix", &prefix]);
        let run = eventstore(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
        run.assert_refused(2, &["--url is not a PostgreSQL url", "postgres://"]);
    }
    // What the argument parser refuses: exit code 2, naming the flag.
    for (args, words) in [
        (
            &["events", "--stream", "orders/default", "--limit", "0"][..],
            ["--limit", "1..=100000"],
        ),
        (&["leases", "--interval", "5"], ["--interval", "--watch"]),
    ] {
        let run = eventstore(&[args, &["--url", &url, "--prefix", &prefix]].concat()).await;
        assert_eq!(run.code, 2, "{run:?}");
        assert!(
            words.iter().all(|word| run.stderr.contains(word)),
            "{run:?}"
        );
    }
    let run = eventstore(&["schema", "print", "--prefix", "1bad"]).await;
    run.assert_refused(2, &["1bad"]);
    let run = eventstore(&["schema", "apply", "--url", DEAD_URL, "--prefix", &prefix]).await;
    run.assert_refused(1, &["cannot connect"]);
    let run = eventstore(&["schema", "drop", "--yes", "--url", &url, "--prefix", "Bad_"]).await;
    run.assert_refused(2, &["Bad_"]);
    assert!(
        tables_of(&pool, &prefix).await.is_empty(),
        "no command created a table"
    );
}

/// Behind a PgBouncer in transaction mode, with the url the library takes (`?pgbouncer=true`):
/// the commands connect (a pooler refuses the driver's default startup settings), and
/// `schema apply`, run again over the pooler's reused server connections, reads the catalog
/// without a named statement that clashes with one left there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commands_work_behind_pgbouncer_with_the_url_the_library_takes() {
    let Ok(url) = std::env::var("EVENTSTORE_CLI_PGBOUNCER_URL") else {
        eprintln!(
            "skipping: runs in CI's PgBouncer pass, which sets EVENTSTORE_CLI_PGBOUNCER_URL to \
             the pooler's url"
        );
        return;
    };
    let prefix = unique_prefix();
    let run = eventstore(&["schema", "apply", "--url", &url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.starts_with("created the schema"), "{run:?}");
    for _ in 0..3 {
        let run = eventstore(&["schema", "apply", "--url", &url, "--prefix", &prefix]).await;
        assert_eq!(run.code, 0, "{run:?}");
        assert!(run.stdout.contains("is in place"), "{run:?}");
    }
    let run = eventstore(&["schema", "check", "--url", &url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let run = eventstore(&["leases", "--url", &url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let run = eventstore(&[
        "schema", "drop", "--yes", "--url", &url, "--prefix", &prefix,
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.starts_with("dropped the schema"), "{run:?}");
}

/// `schema apply` that fails on an object it cannot change does not advise running
/// `schema apply`: it says the object is left to the operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_schema_apply_says_what_to_change_by_hand() {
    let Some(pool) = try_pool().await else { return };
    let url = database_url();
    let prefix = prefix_with_schema(&url).await;
    sqlx::query(&format!(
        "ALTER TABLE {prefix}leases ALTER COLUMN priority TYPE integer"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let run = eventstore(&["schema", "apply", "--url", &url, "--prefix", &prefix]).await;
    run.assert_refused(1, &[&format!("{prefix}leases.priority"), "by hand"]);
    assert!(
        !run.stderr.contains("`eventstore schema apply --prefix"),
        "a failed apply advises apply: {}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_groups_members_and_holdings_are_shown() {
    let Some(_pool) = try_pool().await else {
        return;
    };
    let prefix = unique_prefix();
    let storage: std::sync::Arc<dyn EventStorage> = std::sync::Arc::new(storage_on(&prefix).await);
    let start = |owner: &str| {
        eventstore::PartitionElector::builder(storage.clone(), "work", 6)
            .owner(owner)
            .ttl(Duration::from_secs(10))
            .start()
            .unwrap()
    };
    let members = [start("pod-a"), start("pod-b")];
    eventually(
        "the two members to hold three each",
        Duration::from_secs(30),
        || {
            let counts: Vec<usize> = members.iter().map(|m| m.held().len()).collect();
            async move { (counts == [3, 3]).then_some(()) }
        },
    )
    .await;
    let url = database_url();
    let args = ["partitions", "work", "--url", &url, "--prefix", &prefix];
    let document = eventstore(&[&args[..], &["--json"]].concat()).await.json();
    assert_eq!(document["group"], "work", "{document}");
    assert_eq!(document["partitions"], 6, "{document}");
    assert_eq!(document["balanced"], true, "{document}");
    assert_eq!(document["unheld"], json!([]), "{document}");
    let shown = document["members"].as_array().unwrap();
    let owners: Vec<&str> = shown.iter().map(|m| m["owner"].as_str().unwrap()).collect();
    assert_eq!(owners, ["pod-a", "pod-b"], "{document}");
    assert_ne!(shown[0]["seat"], shown[1]["seat"], "{document}");
    for member in shown {
        assert_eq!(member["held"].as_array().unwrap().len(), 3, "{document}");
        assert_eq!(member["partitions"], 6, "{document}");
    }

    let text = eventstore(&args).await;
    assert_eq!(text.code, 0, "{text:?}");
    assert!(
        text.stdout
            .contains("2 live members, 6 partitions, balanced"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("MEMBER") && text.stdout.contains("pod-b"),
        "{}",
        text.stdout
    );

    for member in members {
        member.shutdown().await.unwrap();
    }
    let gone = eventstore(&args).await;
    assert_eq!(gone.code, 1, "{gone:?}");
    assert!(
        gone.stderr
            .contains("no live member of partition group \"work\""),
        "{gone:?}"
    );
    storage.close().await.unwrap();
}

/// A group name the library refuses (`/` in it, or blank) is bad usage, not a group: given
/// `work/seats`, the seats of group `work` would be read as partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_refuses_a_group_name_the_library_refuses() {
    let Some(_pool) = try_pool().await else {
        return;
    };
    let prefix = unique_prefix();
    let storage: Arc<dyn EventStorage> = Arc::new(storage_on(&prefix).await);
    let member = PartitionElector::builder(storage.clone(), "work", 2)
        .owner("pod-a")
        .ttl(Duration::from_secs(10))
        .start()
        .unwrap();
    eventually("pod-a to hold both", Duration::from_secs(30), || {
        let held = member.held().len();
        async move { (held == 2).then_some(()) }
    })
    .await;
    let url = database_url();
    for group in ["work/seats", " ", ""] {
        let run = eventstore(&["partitions", group, "--url", &url, "--prefix", &prefix]).await;
        assert_eq!(run.code, 2, "group {group:?}: {run:?}");
        assert!(run.stderr.contains("partition group"), "{run:?}");
    }
    member.shutdown().await.unwrap();
    storage.close().await.unwrap();
}

/// `expires_at` is `heartbeat_at + ttl_ms`, also for a ttl with a fraction of a millisecond
/// (storages keep microseconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_json_ttl_agrees_with_expires_at() {
    let Some(_pool) = try_pool().await else {
        return;
    };
    let prefix = unique_prefix();
    let storage = storage_on(&prefix).await;
    storage
        .request_lease(LeaseRequest::new(
            "short",
            "pod-a",
            0,
            Duration::from_micros(1_500),
        ))
        .await
        .unwrap();
    let url = database_url();
    let document = eventstore(&["leases", "--url", &url, "--prefix", &prefix, "--json"])
        .await
        .json();
    let lease = &document["leases"][0];
    let heartbeat_at = time(&lease["heartbeat_at"]);
    let expires_at = time(&lease["expires_at"]);
    let ttl_ms = lease["ttl_ms"].as_f64().unwrap();
    assert_eq!(
        expires_at,
        heartbeat_at + chrono::Duration::microseconds((ttl_ms * 1000.0).round() as i64),
        "{lease}"
    );
    assert_eq!(lease["ttl_ms"], json!(1.5));
    storage.close().await.unwrap();
}

/// A refusal quotes the lease name as given, two spaces and all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_quotes_a_lease_name_exactly_as_given() {
    let Some(_pool) = try_pool().await else {
        return;
    };
    let prefix = unique_prefix();
    let storage = storage_on(&prefix).await;
    let url = database_url();
    eventstore(&[
        "contenders",
        "order  projector",
        "--url",
        &url,
        "--prefix",
        &prefix,
    ])
    .await
    .assert_refused(1, &["no lease named", "\"order  projector\""]);
    storage.close().await.unwrap();
}

/// A prefix whose tables record a newer, incompatible schema version is not "unknown": its
/// events table exists. The command must not say that the table is missing, nor advise
/// `schema apply`, which refuses to touch a newer schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_not_reported_as_a_missing_table() {
    let Some(pool) = try_pool().await else {
        return;
    };
    let url = database_url();
    let prefix = prefix_with_schema(&url).await;
    sqlx::query(&format!(
        "COMMENT ON TABLE {prefix}events IS \
         'eventstore-postgres schema_version=9 oldest_compatible=9'"
    ))
    .execute(&pool)
    .await
    .unwrap();
    for command in [&["schema", "check"][..], &["leases"], &["bookmarks"]] {
        let args = [command, &["--url", &url, "--prefix", &prefix]].concat();
        let run = eventstore(&args).await;
        assert_eq!(run.code, 1, "{run:?}");
        assert!(
            !run.stderr.contains(&format!("has no table {prefix}events")),
            "{command:?}: the table exists, the message says it does not: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains("schema version 9"),
            "{command:?}: the reason (a newer schema) is lost: {}",
            run.stderr
        );
    }
    // `schema apply` refuses, and does not advise dropping the newer tables by hand.
    let run = eventstore(&["schema", "apply", "--url", &url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        !run.stderr.contains("drop it by hand"),
        "advises dropping the tables of a newer version: {}",
        run.stderr
    );
}

/// A command that connected and then failed (here: DDL refused in a read-only session) does
/// not say it could not connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_connecting_is_not_called_a_connection_failure() {
    let Some(_pool) = try_pool().await else {
        return;
    };
    let url = database_url();
    let separator = if url.contains('?') { '&' } else { '?' };
    let read_only = format!("{url}{separator}options=-c%20default_transaction_read_only%3Don");
    let prefix = unique_prefix();
    let run = eventstore(&["schema", "apply", "--url", &read_only, "--prefix", &prefix]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("read-only transaction"), "{run:?}");
    assert!(
        !run.stderr.contains("cannot connect"),
        "connected, yet reported as a connection failure: {}",
        run.stderr
    );
}

/// Each schema action answers `--json` with one document: the prefix and what the action
/// found or did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_actions_answer_one_json_document_each() {
    let Some(_pool) = try_pool().await else {
        return;
    };
    let url = database_url();
    let prefix = unique_prefix();
    let tables: Vec<String> = [
        "events",
        "event_tags",
        "bookmarks",
        "leases",
        "lease_contenders",
    ]
    .iter()
    .map(|table| format!("{prefix}{table}"))
    .collect();
    let schema = |action: &[&str]| {
        let args: Vec<String> = ["schema"]
            .iter()
            .chain(action)
            .chain(&["--json", "--url", url.as_str(), "--prefix", prefix.as_str()])
            .map(|arg| (*arg).to_owned())
            .collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let run = eventstore(&args).await;
            assert_eq!(run.code, 0, "{args:?}: {run:?}");
            run.json()
        }
    };
    let print = schema(&["print"]).await;
    assert_eq!(print["prefix"], json!(prefix));
    assert_eq!(print["backend"], json!("postgres"));
    let sql = print["sql"].as_str().expect("the DDL");
    assert!(sql.contains(&format!("CREATE TABLE IF NOT EXISTS {prefix}events")));

    let created = schema(&["apply"]).await;
    assert_eq!(created["created"], json!(tables));
    assert_eq!(created["in_place"], json!([]));
    assert_eq!(created["complete"], json!(true));
    let again = schema(&["apply"]).await;
    assert_eq!(again["created"], json!([]));
    assert_eq!(again["in_place"], json!(tables));
    assert_eq!(schema(&["check"]).await["complete"], json!(true));
    assert_eq!(schema(&["drop", "--yes"]).await["dropped"], json!(tables));
}

/// A prefix whose tables record a newer version that this one may use, with an index this
/// version needs missing: no command of this version repairs a newer schema, so neither
/// `check` nor `apply` sends the operator to `schema apply`; both say the schema is newer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_compatible_schema_missing_an_object_is_not_sent_to_schema_apply() {
    let Some(pool) = try_pool().await else {
        return;
    };
    let url = database_url();
    let prefix = prefix_with_schema(&url).await;
    for statement in [
        format!(
            "COMMENT ON TABLE {prefix}events IS \
             'eventstore-postgres schema_version=9 oldest_compatible=1'"
        ),
        format!("DROP INDEX {prefix}events_type_idx"),
    ] {
        sqlx::query(&statement).execute(&pool).await.unwrap();
    }
    for action in ["check", "apply"] {
        let run = eventstore(&["schema", action, "--url", &url, "--prefix", &prefix]).await;
        assert_eq!(run.code, 1, "{action}: {run:?}");
        assert!(
            run.stderr.contains("is of a newer version") && !run.stderr.contains("schema apply"),
            "{action}: {}",
            run.stderr
        );
    }
}

/// A fresh prefix whose schema `eventstore schema apply` has created.
async fn prefix_with_schema(url: &str) -> String {
    let prefix = unique_prefix();
    let run = eventstore(&["schema", "apply", "--url", url, "--prefix", &prefix]).await;
    assert_eq!(run.code, 0, "{run:?}");
    prefix
}
