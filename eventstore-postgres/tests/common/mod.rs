//! What the PostgreSQL tests share: the server to test against and fresh prefixes on it.

#![allow(dead_code, unreachable_pub)]

pub mod app_role;
pub mod fault_proxy;
pub mod sessions;

use std::time::Duration;

use eventstore_postgres::{DatabaseInitMode, PostgresEventStorage};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

/// The server tests run against, unless `DATABASE_URL` names another.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The database url the storages under test connect with: on CI's second pass, a PgBouncer
/// in transaction mode, with `?pgbouncer=true`.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned())
}

/// A url that reaches the server directly (`EVENTSTORE_PG_DIRECT_URL`, else
/// [`database_url`]): for what the tests inspect or set up themselves with their own
/// statements, and for the storages' notification listeners, which must `LISTEN`.
pub fn direct_url() -> String {
    std::env::var("EVENTSTORE_PG_DIRECT_URL").unwrap_or_else(|_| database_url())
}

/// Whether [`database_url`] goes through a pooler in transaction mode
/// (`EVENTSTORE_PG_VIA_PGBOUNCER=1`).
pub fn via_pgbouncer() -> bool {
    std::env::var("EVENTSTORE_PG_VIA_PGBOUNCER").is_ok_and(|via| via == "1")
}

/// Whether the test must skip because it needs its storage on a direct connection (`why`),
/// saying so, on the pass through PgBouncer. It runs on the direct pass.
pub fn needs_direct_connection(why: &str) -> bool {
    if via_pgbouncer() {
        skip(&format!(
            "runs only on the direct pass, it needs a direct connection: {why}"
        ));
    }
    via_pgbouncer()
}

/// Whether a test must fail, rather than skip, when PostgreSQL cannot be reached.
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|ci| ci == "true" || ci == "1")
}

/// A prefix no other test uses: `t` and 16 random hex digits.
pub fn unique_prefix() -> String {
    format!("t{:016x}_", rand::random::<u64>())
}

/// Why the server is unreachable, found out once per test process: without a server,
/// every test would otherwise wait out a connection timeout of its own.
static UNREACHABLE: tokio::sync::OnceCell<Option<String>> = tokio::sync::OnceCell::const_new();

/// A small pool on the test database, or `None` (after saying why) when the server cannot
/// be reached outside CI. Under `CI=true` an unreachable server fails the test.
pub async fn try_pool() -> Option<PgPool> {
    let url = direct_url();
    let connect = || {
        PgPoolOptions::new()
            .max_connections(2)
            .idle_timeout(Duration::from_secs(5))
            .acquire_timeout(Duration::from_secs(10))
            .connect(&url)
    };
    let unreachable = UNREACHABLE
        .get_or_init(|| async { connect().await.err().map(|error| error.to_string()) })
        .await;
    let outcome = match unreachable {
        None => connect().await.map_err(|error| error.to_string()),
        Some(error) => Err(error.clone()),
    };
    match outcome {
        Ok(pool) => Some(pool),
        Err(error) if required() => {
            panic!("PostgreSQL at {url} is required (CI=true) but unreachable: {error}")
        }
        Err(error) => {
            skip(&format!(
                "PostgreSQL at {url} is unreachable ({error}); set DATABASE_URL"
            ));
            None
        }
    }
}

/// A storage on a fresh prefix with a small pool of its own.
pub async fn storage_on(prefix: &str) -> PostgresEventStorage {
    builder(prefix)
        .build()
        .await
        .unwrap_or_else(|error| panic!("opening a storage on prefix {prefix}: {error}"))
}

/// A storage on `prefix` as [`storage_on`] opens it, with append hints on.
pub async fn hinting_storage_on(prefix: &str) -> PostgresEventStorage {
    builder(prefix)
        .append_hints(true)
        .build()
        .await
        .unwrap_or_else(|error| panic!("opening a storage on prefix {prefix}: {error}"))
}

/// A builder for `prefix` on the test database, with a pool small enough for many
/// parallel tests. Through PgBouncer its notification listener connects directly, as a
/// deployment behind a pooler in transaction mode would set it up.
pub fn builder(prefix: &str) -> eventstore_postgres::PostgresEventStorageBuilder {
    let builder = PostgresEventStorage::builder()
        .url(database_url())
        .prefix(prefix)
        .init_mode(DatabaseInitMode::Ensure)
        .max_connections(4)
        .idle_timeout(Some(Duration::from_secs(2)))
        .acquire_timeout(Duration::from_secs(20));
    if via_pgbouncer() {
        builder.listen_url(direct_url())
    } else {
        builder
    }
}

/// Polls `attempt` every few milliseconds until it gives a value; panics naming `what`
/// after `deadline`. Tests never rely on a bare sleep being long enough.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = std::time::Instant::now();
    loop {
        if let Some(value) = attempt().await {
            return value;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether a table of this name exists in the search path.
pub async fn table_exists(pool: &PgPool, table: &str) -> bool {
    sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(table)
        .fetch_one(pool)
        .await
        .expect("reading the catalog")
}

/// How many events the prefix's table holds, committed or not yet past the barrier.
pub async fn stored_event_count(pool: &PgPool, prefix: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {prefix}events"))
        .fetch_one(pool)
        .await
        .expect("counting events")
}

/// Takes the lock that serializes requests for `lease_name` of `prefix` in a transaction
/// of its own, held until the returned transaction ends.
pub async fn hold_lease_lock(
    pool: &PgPool,
    prefix: &str,
    lease_name: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    hold_lease_locks(pool, prefix, &[lease_name]).await
}

/// Takes the locks that serialize requests for each of `lease_names` of `prefix` in one
/// transaction of its own, held until the returned transaction ends.
pub async fn hold_lease_locks(
    pool: &PgPool,
    prefix: &str,
    lease_names: &[&str],
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut transaction = pool.begin().await.expect("begin");
    sqlx::query(
        "SELECT pg_advisory_xact_lock(hashtext($1), hashtext(n)) FROM unnest($2::text[]) AS n",
    )
    .bind(format!("{prefix}leases"))
    .bind(lease_names)
    .execute(&mut *transaction)
    .await
    .expect("taking the lease locks");
    transaction
}

/// Takes the lock of appends to `context/purpose` of `prefix` as an append that checks
/// before it writes does (exclusively), held until the returned transaction ends.
pub async fn hold_stream_lock(
    pool: &PgPool,
    prefix: &str,
    context: &str,
    purpose: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    take_stream_lock(pool, "pg_advisory_xact_lock", prefix, context, purpose).await
}

/// Takes the lock of appends to `context/purpose` of `prefix` as an unconditional append
/// does (shared), held until the returned transaction ends.
pub async fn hold_stream_lock_shared(
    pool: &PgPool,
    prefix: &str,
    context: &str,
    purpose: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    take_stream_lock(
        pool,
        "pg_advisory_xact_lock_shared",
        prefix,
        context,
        purpose,
    )
    .await
}

async fn take_stream_lock(
    pool: &PgPool,
    function: &str,
    prefix: &str,
    context: &str,
    purpose: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut transaction = pool.begin().await.expect("begin");
    sqlx::query(&format!("SELECT {function}(hashtext($1), hashtext($2))"))
        .bind(format!("{prefix}events"))
        .bind(format!("{context}\u{1f}{purpose}"))
        .execute(&mut *transaction)
        .await
        .expect("taking the stream lock");
    transaction
}

/// Says why a test is skipped, straight to stderr: past the test harness's output capture,
/// so that the reason shows even though the test passes.
pub fn skip(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipping: {why}");
}

/// Asserts that `result` is a `Schema` error about `object` whose problem says `problem`.
pub fn assert_schema_error<T: std::fmt::Debug>(
    result: Result<T, eventstore::EventStorageError>,
    object: &str,
    problem: &str,
) {
    match result {
        Err(eventstore::EventStorageError::Schema {
            object: o,
            problem: p,
            ..
        }) => {
            assert_eq!(o, object, "problem: {p}");
            assert!(p.contains(problem), "{o}: {p:?} should say {problem:?}");
        }
        other => panic!("expected a Schema error about {object}, got {other:?}"),
    }
}
