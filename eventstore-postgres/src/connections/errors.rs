//! How driver errors become [`EventStorageError`]s.

use std::time::Duration;

use eventstore_api::EventStorageError;

use super::connection_health::ConnectionHealth;

/// SQLSTATE `lock_not_available`: `lock_timeout` ran out.
const LOCK_NOT_AVAILABLE: &str = "55P03";
/// SQLSTATE `deadlock_detected`.
const DEADLOCK_DETECTED: &str = "40P01";
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
    /// Told of every driver error, to learn of broken connections.
    pub(crate) health: &'a ConnectionHealth,
}

/// Whether `error` says a statement gave up waiting for a lock: its lock timeout ran out, or
/// it was chosen to end a deadlock. Either way the statement changed nothing.
pub(crate) fn gave_up_waiting(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db)
        if matches!(db.code().as_deref(), Some(LOCK_NOT_AVAILABLE | DEADLOCK_DETECTED)))
}

impl Failing<'_> {
    /// Maps `error`: a lock or pool wait that ran out becomes `Timeout`, a closed pool `Closed`,
    /// a missing table or function `Schema`, anything else `Backend` with its source.
    pub(crate) fn map(&self, error: sqlx::Error) -> EventStorageError {
        self.health.observe(&error);
        match &error {
            sqlx::Error::PoolClosed => EventStorageError::Closed,
            sqlx::Error::PoolTimedOut => EventStorageError::timeout(
                format!("{}: waiting for a pooled connection", self.operation),
                self.acquire_timeout,
            ),
            sqlx::Error::Database(db) => match db.code().as_deref() {
                Some(LOCK_NOT_AVAILABLE) => EventStorageError::timeout(
                    format!("{}: waiting for a lock", self.operation),
                    self.lock_timeout,
                ),
                Some(UNDEFINED_TABLE | UNDEFINED_FUNCTION) => EventStorageError::schema(
                    db.message().to_owned(),
                    format!(
                        "missing while trying to {}; create the schema (init mode Ensure, or \
                         apply the shipped DDL by hand)",
                        self.operation
                    ),
                ),
                _ => self.backend(error),
            },
            _ => self.backend(error),
        }
    }

    fn backend(&self, error: sqlx::Error) -> EventStorageError {
        let message = format!("PostgreSQL failed to {}", self.operation);
        match error {
            // The driver's wrapper repeats the server's message in its own; the server's error
            // alone is the source, so that the chain shows that text once.
            sqlx::Error::Database(server) => {
                let server: Box<dyn std::error::Error + Send + Sync> = server;
                EventStorageError::backend(message, server)
            }
            other => EventStorageError::backend(message, other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static HEALTH: ConnectionHealth = ConnectionHealth::new();

    const FAILING: Failing<'static> = Failing {
        operation: "append to stream orders/default",
        health: &HEALTH,
        lock_timeout: Duration::from_secs(10),
        acquire_timeout: Duration::from_secs(30),
    };

    #[test]
    fn a_closed_pool_is_closed_and_an_exhausted_one_a_timeout() {
        assert!(matches!(
            FAILING.map(sqlx::Error::PoolClosed),
            EventStorageError::Closed
        ));
        match FAILING.map(sqlx::Error::PoolTimedOut) {
            EventStorageError::Timeout {
                operation, after, ..
            } => {
                assert_eq!(after, Duration::from_secs(30));
                assert!(
                    operation.starts_with("append to stream orders/default"),
                    "{operation}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn anything_else_is_a_backend_error_that_says_what_was_being_done_and_keeps_its_source() {
        let error = FAILING.map(sqlx::Error::Protocol("unexpected message".into()));
        assert!(matches!(error, EventStorageError::Backend { .. }));
        assert!(
            error
                .to_string()
                .contains("failed to append to stream orders/default"),
            "{error}"
        );
        assert!(std::error::Error::source(&error).is_some());
    }
}
