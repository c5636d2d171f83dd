//! Init modes: Ensure (also from eight processes at once), Validate against drifted
//! schemas, None, Recreate, and the shipped DDL applied by hand.

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use eventstore::EventStorageExt;
use eventstore::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStorageError, EventStreamId,
    EventToStore, LeaseRequest, Limit, Tags,
};
use eventstore_postgres::{schema_sql, DatabaseInitMode};
use serde_json::{json, Value};
use sqlx::{Executor, PgPool};

use crate::common;

const CHILD_PREFIX: &str = "EVENTSTORE_ENSURE_CHILD_PREFIX";
const CHILD_START_AT_MS: &str = "EVENTSTORE_ENSURE_CHILD_START_AT_MS";

async fn open(
    prefix: &str,
    mode: DatabaseInitMode,
) -> Result<eventstore_postgres::PostgresEventStorage, EventStorageError> {
    common::builder(prefix).init_mode(mode).build().await
}

/// A storage on `prefix` opened with `Ensure`, which creates what is missing.
async fn ensured(prefix: &str) -> eventstore_postgres::PostgresEventStorage {
    open(prefix, DatabaseInitMode::Ensure)
        .await
        .expect("ensure")
}

/// Creates the prefix's schema with `Ensure`, then lets the storage go.
async fn create_schema(prefix: &str) {
    ensured(prefix).await.close().await.unwrap();
}

#[tokio::test]
async fn validate_on_an_empty_prefix_names_the_missing_table_and_creates_nothing() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    common::assert_schema_error(
        open(&prefix, DatabaseInitMode::Validate).await,
        &format!("table {prefix}events"),
        "missing",
    );
    assert!(!common::table_exists(&pool, &format!("{prefix}events")).await);
}

#[tokio::test]
async fn ensure_creates_the_schema_that_validate_accepts() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    create_schema(&prefix).await;
    for table in ["events", "bookmarks", "leases", "lease_contenders"] {
        assert!(
            common::table_exists(&pool, &format!("{prefix}{table}")).await,
            "{table}"
        );
    }
    let validated = open(&prefix, DatabaseInitMode::Validate)
        .await
        .expect("validate");
    validated
        .append(
            AppendCriteria::none(),
            &EventStreamId::for_context("c"),
            vec![EventToStore::new("A", json!(1))],
        )
        .await
        .expect("append through a validated storage");
    validated.close().await.unwrap();
    // Ensure on a complete schema changes nothing and succeeds again.
    open(&prefix, DatabaseInitMode::Ensure)
        .await
        .expect("ensure again")
        .close()
        .await
        .unwrap();
}

#[tokio::test]
async fn validate_names_each_kind_of_drift() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let drifts: [(&str, &str, &str); 14] = [
        (
            "ALTER TABLE {p}events ALTER COLUMN tx SET DEFAULT '1'::xid8",
            "column {p}events.tx",
            "has default '1'::xid8, expected default pg_current_xact_id()",
        ),
        (
            "ALTER TABLE {p}events ALTER COLUMN position DROP DEFAULT",
            "column {p}events.position",
            "has no default, expected default nextval('{p}events_position_seq'::regclass)",
        ),
        (
            "ALTER TABLE {p}leases ALTER COLUMN released SET DEFAULT true",
            "column {p}leases.released",
            "has default true, expected default false",
        ),
        (
            "CREATE OR REPLACE FUNCTION {p}release_lease(p_name text, p_owner text, p_lock_timeout text) RETURNS boolean \
             LANGUAGE sql AS $$ SELECT false $$",
            "function {p}release_lease(text, text, text)",
            "differs from the shipped definition",
        ),
        (
            "DROP INDEX {p}event_tags_order_idx",
            "index {p}event_tags_order_idx",
            "missing",
        ),
        (
            "DROP TRIGGER {p}events_tags_trigger ON {p}events",
            "trigger {p}events_tags_trigger",
            "is missing on table {p}events",
        ),
        (
            "DROP TRIGGER {p}events_tags_trigger ON {p}events; \
             CREATE TRIGGER {p}events_tags_trigger AFTER INSERT ON {p}events \
             REFERENCING NEW TABLE AS added_events \
             FOR EACH ROW EXECUTE FUNCTION {p}index_event_tags()",
            "trigger {p}events_tags_trigger",
            "FOR EACH ROW EXECUTE FUNCTION {p}index_event_tags(), expected",
        ),
        (
            "DROP INDEX {p}events_type_idx; \
             CREATE INDEX {p}events_type_idx ON {p}events (event_type)",
            "index {p}events_type_idx",
            r#"is btree (event_type), expected btree (event_type, tx, "position")"#,
        ),
        (
            "DROP INDEX {p}events_idempotency_idx; \
             CREATE UNIQUE INDEX {p}events_idempotency_idx \
             ON {p}events (stream_context, stream_purpose, idempotency_key)",
            "index {p}events_idempotency_idx",
            "expected btree (stream_context, stream_purpose, idempotency_key) \
             WHERE (idempotency_key IS NOT NULL)",
        ),
        (
            "ALTER TABLE {p}events ALTER COLUMN payload TYPE text",
            "column {p}events.payload",
            "is text, expected json",
        ),
        (
            "ALTER TABLE {p}leases ALTER COLUMN owner DROP NOT NULL",
            "column {p}leases.owner",
            "nullable, expected NOT NULL",
        ),
        (
            "ALTER TABLE {p}lease_contenders DROP COLUMN ttl",
            "column {p}lease_contenders.ttl",
            "missing",
        ),
        (
            "DROP FUNCTION {p}release_lease(text, text, text)",
            "function {p}release_lease(text, text, text)",
            "missing",
        ),
        ("DROP TABLE {p}bookmarks", "table {p}bookmarks", "missing"),
    ];
    for (drift, object, problem) in drifts {
        let prefix = common::unique_prefix();
        create_schema(&prefix).await;
        pool.execute(drift.replace("{p}", &prefix).as_str())
            .await
            .expect(drift);
        common::assert_schema_error(
            open(&prefix, DatabaseInitMode::Validate).await,
            &object.replace("{p}", &prefix),
            &problem.replace("{p}", &prefix),
        );
    }
}

#[tokio::test]
async fn ensure_repairs_what_is_missing_but_not_what_differs() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    create_schema(&prefix).await;
    pool.execute(format!("DROP INDEX {prefix}events_context_idx; DROP TRIGGER {prefix}events_tags_trigger ON {prefix}events; DROP FUNCTION {prefix}request_leases(text[], text[], bigint[], interval[], text); CREATE OR REPLACE FUNCTION {prefix}release_lease(p_name text, p_owner text, p_lock_timeout text) RETURNS boolean LANGUAGE sql AS $$ SELECT false $$").as_str())
        .await
        .unwrap();
    open(&prefix, DatabaseInitMode::Ensure)
        .await
        .expect("ensure repairs")
        .close()
        .await
        .unwrap();
    open(&prefix, DatabaseInitMode::Validate)
        .await
        .expect("validate after repair")
        .close()
        .await
        .unwrap();

    pool.execute(format!("ALTER TABLE {prefix}leases ALTER COLUMN priority TYPE integer").as_str())
        .await
        .unwrap();
    common::assert_schema_error(
        open(&prefix, DatabaseInitMode::Ensure).await,
        &format!("column {prefix}leases.priority"),
        "is integer, expected bigint",
    );
}

#[tokio::test]
async fn ensure_upgrades_a_leases_table_of_an_earlier_version() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let ttl = Duration::from_secs(60);
    let storage = ensured(&prefix).await;
    storage
        .request_lease(LeaseRequest::new("orders", "a", 0, ttl))
        .await
        .unwrap();
    storage.close().await.unwrap();
    // Leases tables created before releases were recorded have no such column, nor, before
    // renewals skipped reading the contenders, a contender priority ceiling.
    pool.execute(
        format!(
            "ALTER TABLE {prefix}leases DROP COLUMN released, \
             DROP COLUMN contender_priority_ceiling"
        )
        .as_str(),
    )
    .await
    .unwrap();
    common::assert_schema_error(
        open(&prefix, DatabaseInitMode::Validate).await,
        &format!("column {prefix}leases.released"),
        "missing",
    );

    let storage = open(&prefix, DatabaseInitMode::Ensure)
        .await
        .expect("ensure adds the column");
    storage.release_lease("orders", "a").await.unwrap();
    let next = storage
        .request_lease(LeaseRequest::new("orders", "b", 0, ttl))
        .await
        .unwrap();
    assert_eq!(next.fencing_token, eventstore::FencingToken(2));
    // The new holder's row knows its ceiling: no contender at all.
    let ceiling: Option<i64> = sqlx::query_scalar(&format!(
        "SELECT contender_priority_ceiling FROM {prefix}leases WHERE lease_name = 'orders'"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(ceiling, Some(i64::MIN));
    storage.close().await.unwrap();
}

/// Events tables created before payloads were stored as `json` hold them as `jsonb`: such a
/// store still opens, appends and reads its payloads as written.
#[tokio::test]
async fn an_events_table_with_jsonb_payloads_keeps_working() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let stream = EventStreamId::for_context("orders");
    let written = json!({ "n": 1, "label": "before", "nested": { "list": [1, 2.5, null] } });
    let storage = ensured(&prefix).await;
    storage
        .append(
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("Placed", written.clone())],
        )
        .await
        .unwrap();
    storage.close().await.unwrap();
    let payload_type: String = sqlx::query_scalar(&format!(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute \
         WHERE attrelid = '{prefix}events'::regclass AND attname = 'payload'"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(payload_type, "json", "new tables store payloads as json");
    pool.execute(format!("ALTER TABLE {prefix}events ALTER COLUMN payload TYPE jsonb").as_str())
        .await
        .unwrap();

    let storage = open(&prefix, DatabaseInitMode::Validate)
        .await
        .expect("a jsonb payload column passes validation");
    let appended = json!({ "n": 2, "label": "after", "big": u64::MAX });
    storage
        .append(
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("Placed", appended.clone())],
        )
        .await
        .unwrap();
    let payloads: Vec<_> = storage
        .query(
            &EventFilter::match_all(),
            &stream,
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .unwrap()
        .into_iter()
        .map(|event| event.payload)
        .collect();
    assert_eq!(payloads, vec![written.clone(), appended.clone()]);
    // Typed reads take the payloads' text, which a jsonb column sends behind a version byte.
    let texts: Vec<Value> = storage
        .query_raw(
            &EventFilter::match_all(),
            &stream,
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .unwrap()
        .into_iter()
        .map(|event| serde_json::from_str(event.payload.get()).unwrap())
        .collect();
    assert_eq!(texts, vec![written, appended]);

    // jsonb writes numbers in a form of its own (the float 1.5e16 comes back as the integer
    // 15000000000000000): an exact retry is still a retry, its numbers compared by value.
    let keyed = || {
        EventToStore::new("Placed", json!({ "at": 1.5e16, "ratio": 0.1 }))
            .with_idempotency_key("placed-3")
    };
    let first = storage
        .append(AppendCriteria::none(), &stream, vec![keyed()])
        .await
        .unwrap();
    let retried = storage
        .append(AppendCriteria::none(), &stream, vec![keyed()])
        .await
        .unwrap_or_else(|error| panic!("the exact retry: {}", error.report()));
    assert_eq!(retried[0].reference, first[0].reference);
    storage.close().await.unwrap();
}

/// The identifier columns of the events table, whose collation [`event_key_collations`] reads.
const EVENT_KEYS: [&str; 5] = [
    "stream_context",
    "stream_purpose",
    "event_type",
    "tags",
    "idempotency_key",
];

/// The collation of each of the events table's [`EVENT_KEYS`], in that order.
async fn event_key_collations(pool: &PgPool, prefix: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.collname::text FROM unnest($2::text[]) WITH ORDINALITY AS k(column_name, n) \
         JOIN pg_attribute AS a ON a.attrelid = to_regclass($1) AND a.attname = k.column_name \
         JOIN pg_collation AS c ON c.oid = a.attcollation ORDER BY k.n",
    )
    .bind(format!("{prefix}events"))
    .bind(EVENT_KEYS)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The events of `stream` with the `order:o-1` tag, by label.
async fn labels_of_order_one(
    storage: &eventstore_postgres::PostgresEventStorage,
    stream: &EventStreamId,
) -> Vec<Value> {
    let filter = EventFilter::for_tags(Tags::from_pairs([("order", "o-1")]));
    storage
        .query(&filter, stream, None, Limit::none(), Direction::Forward)
        .await
        .unwrap()
        .into_iter()
        .map(|event| event.payload["label"].clone())
        .collect()
}

/// New events tables compare streams, types, tags and keys byte by byte; a table made before,
/// under the database's collation, is left as it is by the shipped DDL and keeps working.
#[tokio::test]
async fn new_events_tables_compare_identifiers_byte_by_byte_and_older_ones_keep_working() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let stream = EventStreamId::for_context("orders");
    let event = |label: &str, order: &str| {
        EventToStore::new("Placed", json!({ "label": label }))
            .with_tags(Tags::from_pairs([("order", order)]))
    };
    let storage = ensured(&prefix).await;
    assert_eq!(event_key_collations(&pool, &prefix).await, ["C"; 5]);
    storage
        .append(
            AppendCriteria::none(),
            &stream,
            vec![event("first", "o-1"), event("other", "o-2")],
        )
        .await
        .unwrap();
    storage.close().await.unwrap();

    let columns = EVENT_KEYS
        .iter()
        .map(|column| {
            let kind = if *column == "tags" { "text[]" } else { "text" };
            format!("ALTER COLUMN {column} TYPE {kind} COLLATE \"default\"")
        })
        .collect::<Vec<_>>()
        .join(", ");
    pool.execute(format!("ALTER TABLE {prefix}events {columns}").as_str())
        .await
        .unwrap();
    apply_shipped_ddl(&pool, &prefix).await;
    assert_eq!(
        event_key_collations(&pool, &prefix).await,
        ["default"; 5],
        "the DDL leaves an older table's collation and indexes as they are"
    );

    let storage = open(&prefix, DatabaseInitMode::Validate)
        .await
        .expect("an older table passes validation");
    assert_eq!(labels_of_order_one(&storage, &stream).await, ["first"]);
    storage
        .append(
            AppendCriteria::none(),
            &stream,
            vec![event("second", "o-1"), event("another", "o-3")],
        )
        .await
        .unwrap();
    assert_eq!(
        labels_of_order_one(&storage, &stream).await,
        ["first", "second"]
    );
    storage.close().await.unwrap();
}

/// The collation of each lease table's `lease_name` and `owner` columns, in that order.
async fn lease_key_collations(pool: &PgPool, prefix: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.collname::text FROM unnest($1::text[]) WITH ORDINALITY AS t(name, n) \
         CROSS JOIN unnest(ARRAY['lease_name', 'owner']) WITH ORDINALITY AS k(column_name, m) \
         JOIN pg_attribute AS a ON a.attrelid = to_regclass(t.name) AND a.attname = k.column_name \
         JOIN pg_collation AS c ON c.oid = a.attcollation ORDER BY t.n, k.m",
    )
    .bind(vec![
        format!("{prefix}leases"),
        format!("{prefix}lease_contenders"),
    ])
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Applies the shipped DDL for `prefix` by hand, as an upgrade does.
async fn apply_shipped_ddl(pool: &PgPool, prefix: &str) {
    let mut transaction = pool.begin().await.unwrap();
    transaction
        .execute(schema_sql(prefix).unwrap().as_str())
        .await
        .expect("applying the shipped DDL");
    transaction.commit().await.unwrap();
}

#[tokio::test]
async fn the_shipped_ddl_makes_lease_names_compare_byte_by_byte_unless_a_view_depends_on_them() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let ttl = Duration::from_secs(60);
    let storage = ensured(&prefix).await;
    assert_eq!(lease_key_collations(&pool, &prefix).await, ["C"; 4]);
    let granted = storage
        .request_lease(LeaseRequest::new("orders", "a", 0, ttl))
        .await
        .unwrap();
    storage
        .request_lease(LeaseRequest::new("orders", "b", 0, ttl))
        .await
        .unwrap();

    // Tables created before, under the database's collation, and a view of the operator's
    // on one of them: the DDL leaves that table as it is and converts the other.
    for table in ["leases", "lease_contenders"] {
        pool.execute(
            format!(
                "ALTER TABLE {prefix}{table} ALTER COLUMN lease_name TYPE text COLLATE \"default\", \
                 ALTER COLUMN owner TYPE text COLLATE \"default\""
            )
            .as_str(),
        )
        .await
        .unwrap();
    }
    pool.execute(
        format!("CREATE VIEW {prefix}held AS SELECT lease_name, owner FROM {prefix}leases")
            .as_str(),
    )
    .await
    .unwrap();
    apply_shipped_ddl(&pool, &prefix).await;
    assert_eq!(
        lease_key_collations(&pool, &prefix).await,
        ["default", "default", "C", "C"]
    );
    let renewed = storage
        .request_lease(LeaseRequest::new("orders", "a", 0, ttl))
        .await
        .unwrap();
    assert_eq!(renewed.fencing_token, granted.fencing_token);
    let contenders = storage.get_contenders("orders").await.unwrap();
    assert_eq!(contenders.len(), 1, "{contenders:?}");
    assert_eq!(contenders[0].owner, "b");

    pool.execute(format!("DROP VIEW {prefix}held").as_str())
        .await
        .unwrap();
    apply_shipped_ddl(&pool, &prefix).await;
    assert_eq!(lease_key_collations(&pool, &prefix).await, ["C"; 4]);
    let standby = storage
        .request_lease(LeaseRequest::new("orders", "b", 0, ttl))
        .await
        .unwrap();
    assert_eq!(
        (standby.current_owner.as_str(), standby.fencing_token),
        ("a", granted.fencing_token)
    );
    storage.close().await.unwrap();
}

#[tokio::test]
async fn none_touches_nothing_and_calls_name_the_missing_schema() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let storage = open(&prefix, DatabaseInitMode::None).await.expect("none");
    assert!(!common::table_exists(&pool, &format!("{prefix}events")).await);
    let appended = storage
        .append(
            AppendCriteria::none(),
            &EventStreamId::for_context("c"),
            vec![EventToStore::new("A", json!(1))],
        )
        .await;
    assert!(
        matches!(&appended, Err(EventStorageError::Schema { object, .. }) if object.contains(&format!("{prefix}events"))),
        "{appended:?}"
    );
    let requested = storage
        .request_lease(LeaseRequest::new("l", "o", 0, Duration::from_secs(1)))
        .await;
    assert!(
        matches!(&requested, Err(EventStorageError::Schema { object, .. }) if object.contains("request_lease")),
        "{requested:?}"
    );
    storage.close().await.unwrap();
}

#[tokio::test]
async fn recreate_drops_everything_of_the_prefix_and_starts_empty() {
    if common::try_pool().await.is_none() {
        return;
    }
    let prefix = common::unique_prefix();
    let storage = ensured(&prefix).await;
    let stream = EventStreamId::for_context("c");
    let stored = storage
        .append(
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("A", json!(1))],
        )
        .await
        .unwrap();
    storage
        .bookmark("reader", &stored[0].reference, Default::default())
        .await
        .unwrap();
    storage
        .request_lease(LeaseRequest::new("l", "o", 0, Duration::from_secs(60)))
        .await
        .unwrap();
    storage.close().await.unwrap();

    let recreated = open(&prefix, DatabaseInitMode::Recreate)
        .await
        .expect("recreate");
    let everything = recreated
        .query(
            &EventFilter::match_all(),
            &EventStreamId::any(),
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .unwrap();
    assert!(everything.is_empty(), "{everything:?}");
    assert!(recreated.get_bookmarks().await.unwrap().is_empty());
    assert!(recreated.get_leases().await.unwrap().is_empty());
    recreated.close().await.unwrap();
}

#[tokio::test]
async fn the_shipped_ddl_applied_by_hand_passes_validate() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    apply_shipped_ddl(&pool, &prefix).await;
    let storage = open(&prefix, DatabaseInitMode::Validate)
        .await
        .expect("validate");
    let response = storage
        .request_lease(LeaseRequest::new("l", "o", 0, Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(response.status.is_leader());
    storage.close().await.unwrap();
    assert!(matches!(
        schema_sql("Bad"),
        Err(EventStorageError::InvalidInput { .. })
    ));
}

#[tokio::test]
async fn ensure_from_eight_processes_at_once_creates_one_schema() {
    let Some(pool) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let start_at =
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + Duration::from_millis(1500);
    let exe = std::env::current_exe().expect("the test binary");
    let children: Vec<_> = (0..8)
        .map(|_| {
            tokio::process::Command::new(&exe)
                .args([
                    "init_modes::ensure_child_process",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_PREFIX, &prefix)
                .env(CHILD_START_AT_MS, start_at.as_millis().to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawning a child process")
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().await.expect("a child process");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "a child failed: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains("1 passed"),
            "the child ran no test: {stdout}"
        );
    }
    open(&prefix, DatabaseInitMode::Validate)
        .await
        .expect("validate after the race")
        .close()
        .await
        .unwrap();
    assert_one_lease_table(&pool, &prefix).await;
}

async fn assert_one_lease_table(pool: &PgPool, prefix: &str) {
    let tables: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_class WHERE relname = $1")
        .bind(format!("{prefix}leases"))
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(tables, 1);
}

/// One of the processes `ensure_from_eight_processes_at_once_creates_one_schema` starts:
/// waits for the common start instant, then opens the storage with `Ensure` and uses it.
#[tokio::test]
#[ignore = "a child process of ensure_from_eight_processes_at_once_creates_one_schema"]
async fn ensure_child_process() {
    let prefix = std::env::var(CHILD_PREFIX).expect("run only by its parent test");
    let start_at: u64 = std::env::var(CHILD_START_AT_MS).unwrap().parse().unwrap();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    if let Some(wait) = Duration::from_millis(start_at).checked_sub(now) {
        tokio::time::sleep(wait).await;
    }
    let storage = open(&prefix, DatabaseInitMode::Ensure)
        .await
        .expect("ensure from a child process");
    let response = storage
        .request_lease(LeaseRequest::new(
            "l",
            format!("pid-{}", std::process::id()),
            0,
            Duration::from_secs(60),
        ))
        .await
        .expect("request_lease");
    println!("child {} got {:?}", std::process::id(), response.status);
    storage.close().await.unwrap();
}

/// A rolling upgrade: a new process's `Ensure` finds the schema of an earlier version (the
/// tags index without its pending-list option) and applies the DDL while a running process
/// makes a fenced append. The append reads the leases (its fence), then inserts events; the
/// script takes the events table first. Ensure locks the lease tables before anything else,
/// so both go through, one after the other, instead of one failing with a deadlock.
#[tokio::test]
async fn ensure_repairing_the_schema_beside_a_fenced_append_does_not_deadlock() {
    use eventstore::Fence;
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    let running = common::storage_on(&prefix).await;
    let leader = running
        .request_lease(LeaseRequest::new("l", "a", 0, Duration::from_secs(60)))
        .await
        .unwrap();
    admin
        .execute(format!("DROP TRIGGER {prefix}events_tags_trigger ON {prefix}events").as_str())
        .await
        .unwrap();

    // Holds the append between its fence check and its insert.
    let stream_lock =
        common::hold_stream_lock(&admin, &prefix, "c", EventStreamId::DEFAULT_PURPOSE).await;
    let append = tokio::spawn({
        let running = running.clone();
        let fence = Fence::new("l", leader.fencing_token);
        async move {
            running
                .append_fenced(
                    &fence,
                    AppendCriteria::none(),
                    &EventStreamId::for_context("c"),
                    vec![EventToStore::new("A", json!(1))],
                )
                .await
                .map(|_| ())
        }
    });
    common::eventually(
        "the append to wait for the stream lock",
        Duration::from_secs(10),
        || lock_waiters(&admin, "locktype = 'advisory'", None),
    )
    .await;
    let ensure = tokio::spawn({
        let prefix = prefix.clone();
        async move {
            common::builder(&prefix)
                .init_mode(DatabaseInitMode::Ensure)
                .build()
                .await
                .map(drop)
        }
    });
    let leases = format!("{prefix}leases");
    common::eventually(
        "Ensure to wait for the leases table",
        Duration::from_secs(10),
        || {
            lock_waiters(
                &admin,
                "relation = to_regclass($1) AND mode = 'AccessExclusiveLock'",
                Some(&leases),
            )
        },
    )
    .await;
    stream_lock.commit().await.unwrap();

    let appended = append.await.unwrap();
    let ensured = ensure.await.unwrap();
    running.close().await.unwrap();
    assert!(appended.is_ok(), "fenced append: {appended:?}");
    assert!(ensured.is_ok(), "ensure: {ensured:?}");
}

/// `Some` once a lock `condition` describes (on `pg_locks`, `$1` bound to `relation`) is
/// waited for.
async fn lock_waiters(admin: &PgPool, condition: &str, relation: Option<&str>) -> Option<()> {
    let sql = format!("SELECT count(*) FROM pg_locks WHERE NOT granted AND {condition}");
    let query = sqlx::query_scalar(&sql);
    let query = match relation {
        Some(relation) => query.bind(relation),
        None => query,
    };
    let waiting: i64 = query.fetch_one(admin).await.unwrap();
    (waiting > 0).then_some(())
}
