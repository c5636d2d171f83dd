//! What the command line tests share: running the built binary, and the PostgreSQL server.

#![allow(dead_code, unreachable_pub)]

use std::process::Command;
use std::time::Duration;

use eventstore_postgres::{DatabaseInitMode, PostgresEventStorage};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

/// The server tests run against, unless `DATABASE_URL` names another.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A url on which nothing listens.
pub const DEAD_URL: &str = "postgres://postgres@127.0.0.1:1/test";

/// What one run of `eventstore` did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The JSON document on standard output, asserting a successful run.
    pub fn json(&self) -> serde_json::Value {
        assert_eq!(self.code, 0, "{self:?}");
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|error| panic!("not one JSON document ({error}): {}", self.stdout))
    }

    /// Asserts a failure with `code`, nothing on standard output and one line on standard
    /// error holding each of `words`.
    pub fn assert_refused(&self, code: i32, words: &[&str]) {
        assert_eq!(self.code, code, "{self:?}");
        assert!(self.stdout.is_empty(), "{self:?}");
        assert_eq!(self.stderr.lines().count(), 1, "one line: {self:?}");
        assert!(self.stderr.starts_with("eventstore: "), "{self:?}");
        for word in words {
            assert!(self.stderr.contains(word), "{word:?} in {self:?}");
        }
    }
}

/// Runs the built `eventstore` with `args`, without `DATABASE_URL` from the environment.
pub async fn eventstore(args: &[&str]) -> Run {
    let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let output = Command::new(env!("CARGO_BIN_EXE_eventstore"))
            .args(&args)
            .env_remove("DATABASE_URL")
            .output()
            .expect("run eventstore");
        Run {
            code: output.status.code().expect("exited, not killed"),
            stdout: String::from_utf8(output.stdout).expect("utf-8 output"),
            stderr: String::from_utf8(output.stderr).expect("utf-8 errors"),
        }
    })
    .await
    .unwrap()
}

/// The database url the tests use.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned())
}

/// Whether a test must fail, rather than skip, when PostgreSQL cannot be reached.
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|ci| ci == "true" || ci == "1")
}

/// A prefix no other test uses: `cli` and 16 random hex digits.
pub fn unique_prefix() -> String {
    format!("cli{:016x}_", rand::random::<u64>())
}

/// A small pool on the test database, or `None` (after saying why) when the server cannot
/// be reached outside CI. Under `CI=true` an unreachable server fails the test.
pub async fn try_pool() -> Option<PgPool> {
    let url = database_url();
    let connected = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&url)
        .await;
    match connected {
        Ok(pool) => Some(pool),
        Err(error) if required() => {
            panic!("PostgreSQL at {url} is required (CI=true) but unreachable: {error}")
        }
        Err(error) => {
            eprintln!("SKIPPED: PostgreSQL at {url} is unreachable ({error}); set DATABASE_URL");
            None
        }
    }
}

/// A storage on `prefix`, its schema created.
pub async fn storage_on(prefix: &str) -> PostgresEventStorage {
    PostgresEventStorage::builder()
        .url(database_url())
        .prefix(prefix)
        .init_mode(DatabaseInitMode::Ensure)
        .max_connections(2)
        .build()
        .await
        .unwrap_or_else(|error| panic!("opening a storage on prefix {prefix}: {error}"))
}

/// The tables of `prefix` that exist.
pub async fn tables_of(pool: &PgPool, prefix: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE starts_with(tablename, $1) ORDER BY 1",
    )
    .bind(prefix)
    .fetch_all(pool)
    .await
    .expect("reading the catalog")
}

/// Polls `attempt` every few milliseconds until it gives a value; panics naming `what`
/// after `deadline`.
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
