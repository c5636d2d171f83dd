//! What the PostgreSQL tests share: the server to test against and fresh prefixes on it.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use eventstore_postgres::{DatabaseInitMode, PostgresEventStorage};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

/// The server tests run against, unless `DATABASE_URL` names another.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The database url the tests use.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned())
}

/// Whether a test must fail, rather than skip, when PostgreSQL cannot be reached.
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|ci| ci == "true" || ci == "1")
}

/// A prefix no other test uses: `t` and 16 random hex digits.
pub fn unique_prefix() -> String {
    format!("t{:016x}_", rand::random::<u64>())
}

/// A small pool on the test database, or `None` (after saying why) when the server cannot
/// be reached outside CI. Under `CI=true` an unreachable server fails the test.
pub async fn try_pool() -> Option<PgPool> {
    let url = database_url();
    match PgPoolOptions::new()
        .max_connections(2)
        .idle_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::from_secs(10))
        .connect(&url)
        .await
    {
        Ok(pool) => Some(pool),
        Err(error) if required() => {
            panic!("PostgreSQL at {url} is required (CI=true) but unreachable: {error}")
        }
        Err(error) => {
            eprintln!("skipping: PostgreSQL at {url} is unreachable ({error}); set DATABASE_URL");
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

/// A builder for `prefix` on the test database, with a pool small enough for many
/// parallel tests.
pub fn builder(prefix: &str) -> eventstore_postgres::PostgresEventStorageBuilder {
    PostgresEventStorage::builder()
        .url(database_url())
        .prefix(prefix)
        .init_mode(DatabaseInitMode::Ensure)
        .max_connections(4)
        .idle_timeout(Some(Duration::from_secs(2)))
        .acquire_timeout(Duration::from_secs(20))
}
