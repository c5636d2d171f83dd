//! The settings every operation consults, fixed when the storage is built.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use super::connection_health::ConnectionHealth;
use super::errors::Failing;
use super::isolation::BEGIN_READ_COMMITTED;

/// Settings every operation consults.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The longest any statement waits for a lock.
    pub(crate) lock_timeout: Duration,
    /// How long an append waits for its events to pass the visibility barrier.
    pub(crate) visibility_wait: Duration,
    /// How long a call waits for a pooled connection.
    pub(crate) acquire_timeout: Duration,
    /// Whether each append's insert notifies `<prefix>appends` (append hints).
    pub(crate) append_hints: bool,
    /// Whether statements are prepared under names the connection caches; when not, each is
    /// unnamed and every call runs in a transaction (see `statements`).
    pub(crate) prepared_statements: bool,
    /// Whether every connection starts with the lock timeout and `READ COMMITTED` as its
    /// session defaults (the storage's own pool, on direct connections), so that a single
    /// statement need neither set nor check them.
    pub(crate) session_defaults: bool,
    /// Whether the storage has a connection that can `LISTEN`, so that lease changes and
    /// append hints can be pushed to its subscribers.
    pub(crate) push: bool,
    /// How often the listener's connection must answer a query to count as alive.
    pub(crate) listener_heartbeat: Duration,
    /// Which connections the storage has seen break, shared with its own pool.
    pub(crate) health: Arc<ConnectionHealth>,
}

impl Settings {
    /// How to map a driver error of `operation`.
    pub(crate) fn failing<'a>(&'a self, operation: &'a str) -> Failing<'a> {
        Failing {
            operation,
            health: &self.health,
            lock_timeout: self.lock_timeout,
            acquire_timeout: self.acquire_timeout,
        }
    }

    /// What begins a call's transaction: `READ COMMITTED` and, unless every connection has
    /// the lock timeout as its session default, the lock timeout too, in the same round trip.
    /// A statement that sets the timeout itself takes its table's lock when it is parsed,
    /// before the setting runs, and so would wait for a table locked by DDL without limit.
    pub(crate) fn begin_statement(&self) -> Cow<'static, str> {
        if self.session_defaults {
            Cow::Borrowed(BEGIN_READ_COMMITTED)
        } else {
            Cow::Owned(format!(
                "{BEGIN_READ_COMMITTED}; SET LOCAL lock_timeout = '{}'",
                self.lock_timeout_setting()
            ))
        }
    }

    /// The lock timeout as a PostgreSQL setting value, e.g. `10000ms`.
    pub(crate) fn lock_timeout_setting(&self) -> String {
        format!("{}ms", self.lock_timeout.as_millis().max(1))
    }
}
