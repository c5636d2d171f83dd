//! How driver errors become [`EventStorageError`]s.

use std::time::Duration;

use eventstore_api::EventStorageError;

/// SQLSTATE `lock_not_available`: `lock_timeout` ran out.
const LOCK_NOT_AVAILABLE: &str = "55P03";
/// SQLSTATE `query_canceled`: `statement_timeout` ran out (or a cancel request arrived).
const QUERY_CANCELED: &str = "57014";
/// SQLSTATE `undefined_table`.
const UNDEFINED_TABLE: &str = "42P01";
/// SQLSTATE `undefined_function`.
const UNDEFINED_FUNCTION: &str = "42883";

/// What an operation was doing and how long it would wait for a lock, to turn a driver
/// error into a storage error that says so.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failing<'a> {
    /// What was being done, e.g. `append to orders/default`.
    pub(crate) operation: &'a str,
    /// The storage's lock timeout.
    pub(crate) lock_timeout: Duration,
    /// The pool's acquire timeout.
    pub(crate) acquire_timeout: Duration,
}

impl Failing<'_> {
    /// Maps `error`: lock and statement timeouts become `Timeout`, a closed pool `Closed`,
    /// a missing table or function `Schema`, anything else `Backend` with its source.
    pub(crate) fn map(&self, error: sqlx::Error) -> EventStorageError {
        match &error {
            sqlx::Error::PoolClosed => EventStorageError::Closed,
            sqlx::Error::PoolTimedOut => EventStorageError::Timeout {
                operation: format!("{}: waiting for a pooled connection", self.operation),
                after: self.acquire_timeout,
            },
            sqlx::Error::Database(db) => match db.code().as_deref() {
                Some(LOCK_NOT_AVAILABLE) => EventStorageError::Timeout {
                    operation: format!("{}: waiting for a lock", self.operation),
                    after: self.lock_timeout,
                },
                Some(QUERY_CANCELED) => EventStorageError::Timeout {
                    operation: format!("{}: statement canceled ({})", self.operation, db.message()),
                    after: self.lock_timeout,
                },
                Some(UNDEFINED_TABLE | UNDEFINED_FUNCTION) => EventStorageError::Schema {
                    object: db.message().to_owned(),
                    problem: format!(
                        "missing while trying to {}; create the schema (init mode Ensure, or \
                         apply the shipped DDL by hand)",
                        self.operation
                    ),
                },
                _ => self.backend(error),
            },
            _ => self.backend(error),
        }
    }

    fn backend(&self, error: sqlx::Error) -> EventStorageError {
        EventStorageError::backend(
            format!("PostgreSQL failed to {}: {error}", self.operation),
            error,
        )
    }
}
