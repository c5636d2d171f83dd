//! What the storage has learned about its server connections: when a pooled connection must
//! be pinged before a call uses it, and which failures mean the connection broke rather than
//! the statement.
//!
//! A connection back from a call less than [`ALIVE_WITHOUT_PING`] ago is handed out without a
//! ping, which saves a round trip on back-to-back calls. Connections die together, though (a
//! server restart, a failover, a broken network), so once any call finds its connection
//! broken, every connection is pinged for the next [`DISTRUST_FOR`], and a read that failed on
//! a broken connection is run once more: a read changes nothing, so repeating it is safe.
//! Writes are not repeated; their caller cannot tell whether the server committed them.
//!
//! Some failures condemn every connection made before them, each replaced before its next
//! use instead of failing calls until the pool retires it:
//! - a write refused because its session is read-only (SQLSTATE `25006`): the connection
//!   reached a standby, as sessions made before a failover behind a DNS name or a virtual
//!   address may, still reaching the former primary;
//! - a ping unanswered within [`PING_TIMEOUT`]: the server went away without closing the
//!   connection (a failed host, a dropped network path, an address moved to a new primary),
//!   and every connection to it waits on a socket that never delivers again.
//!
//! The driver closes a connection it rejects by telling the server, and waits for a server
//! that is gone. So a call takes its connection through [`ConnectionHealth::acquire`] (or
//! [`ConnectionHealth::begin`], for a call that starts with a transaction): the pool's hook
//! only says what the connection needs (see [`Handling`]), and the call pings it with a
//! timeout and drops the socket of one it gives up, without waiting for anything.

use std::borrow::Cow;
use std::cell::Cell;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventstore_api::{EventStorageError, StorageResult};
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgDatabaseError;
use sqlx::{Connection, PgConnection, PgPool, Postgres, Transaction};
use tokio::time::timeout;

/// A connection back from a call this recently is handed out without a ping, unless a broken
/// connection was seen lately: the driver checked it alive when the pool took it back.
pub(crate) const ALIVE_WITHOUT_PING: Duration = Duration::from_millis(500);

/// How long after a broken connection every connection is pinged before use.
pub(crate) const DISTRUST_FOR: Duration = Duration::from_secs(5);

/// How long a ping before a call may take: a healthy server answers in a millisecond or so.
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// What a pooled connection needs before a call may use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handling {
    /// Nothing: back from a call moments ago.
    Use,
    /// A ping: idle for a while, or connections broke lately.
    Ping,
    /// Replacing: made before a failure that condemns connections.
    Discard,
}

tokio::task_local! {
    /// What the pool's hook found the connection it handed to [`ConnectionHealth::acquire`]
    /// needs; unset for any other acquisition, where the hook sees to it itself.
    static HANDED_OUT: Cell<Handling>;
}

/// SQLSTATE `admin_shutdown` and `crash_shutdown`: the server ended the session.
const SESSION_ENDED: [&str; 2] = ["57P01", "57P02"];
/// SQLSTATE class `connection_exception`.
const CONNECTION_EXCEPTION_CLASS: &str = "08";
/// SQLSTATE `read_only_sql_transaction`: a write in a read-only session, as on a standby.
const READ_ONLY_TRANSACTION: &str = "25006";

/// When the storage last saw a call fail because its connection broke, and since when
/// connections made before are condemned.
#[derive(Debug, Default)]
pub(crate) struct ConnectionHealth {
    broken_at: Mutex<Option<Instant>>,
    condemned_before: Mutex<Option<Instant>>,
    /// When a call last gave its connection back part-way (see [`CallInProgress`]).
    given_back_part_way_at: Mutex<Option<Instant>>,
}

impl ConnectionHealth {
    /// Health with no broken connection seen.
    pub(crate) const fn new() -> Self {
        ConnectionHealth {
            broken_at: Mutex::new(None),
            condemned_before: Mutex::new(None),
            given_back_part_way_at: Mutex::new(None),
        }
    }

    /// What a pooled connection made `age` ago and idle for `idle_for` needs before a call;
    /// for the pool's hook, which hands the answer to [`ConnectionHealth::acquire`] when that
    /// is who asked (`true`), and must see to the connection itself otherwise.
    pub(crate) fn on_acquire(&self, age: Duration, idle_for: Duration) -> (Handling, bool) {
        let handling = if self.condemned(age) {
            Handling::Discard
        } else if self.needs_ping(idle_for) {
            Handling::Ping
        } else {
            Handling::Use
        };
        let delegated = HANDED_OUT.try_with(|cell| cell.set(handling)).is_ok();
        (handling, delegated)
    }

    /// A connection of `pool` fit for a call: one that needs a ping gets it, within
    /// [`PING_TIMEOUT`]; one that fails it, does not answer it, or is condemned is dropped
    /// (its socket closed, nothing sent) and another taken, a new one in the end.
    pub(crate) async fn acquire(
        &self,
        pool: &PgPool,
    ) -> Result<PoolConnection<Postgres>, sqlx::Error> {
        loop {
            let acquired = HANDED_OUT.scope(Cell::new(Handling::Use), async {
                let connection = pool.acquire().await?;
                Ok::<_, sqlx::Error>((connection, HANDED_OUT.with(Cell::get)))
            });
            let (mut connection, handling) = acquired.await?;
            match handling {
                Handling::Use => return Ok(connection),
                Handling::Discard => {}
                Handling::Ping => match timeout(PING_TIMEOUT, connection.ping()).await {
                    Ok(Ok(())) => return Ok(connection),
                    Ok(Err(error)) => self.observe(&error),
                    Err(_elapsed) => {
                        tracing::info!(after = ?PING_TIMEOUT,
                            "a pooled connection did not answer a ping; replacing every \
                             connection made before it");
                        self.condemn_connections_made_until_now();
                    }
                },
            }
            // Given up: closed here, without a word to a server that may be gone.
            drop(connection.detach());
        }
    }

    /// A transaction begun with `statement` on a connection of `pool` taken as
    /// [`ConnectionHealth::acquire`] takes it: a call that starts with a transaction waits no
    /// longer on a silent connection than any other.
    pub(crate) async fn begin(
        &self,
        pool: &PgPool,
        statement: Cow<'static, str>,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        let connection = self.acquire(pool).await?;
        // What the pool's own `begin_with` does with the connection it acquires.
        Transaction::begin(connection, Some(statement)).await
    }

    /// Whether the pool keeps a connection back from a call: yes at once, unless a call
    /// gave its connection back part-way moments ago; then only a connection that answers a
    /// ping within [`PING_TIMEOUT`]. For the pool's release hook.
    ///
    /// The pool pings every connection it takes back, without a limit. A call abandoned while
    /// its statement waited on a server that went silent (a caller's timeout, an elector's
    /// deadline) leaves a connection whose ping never returns, and its place in the pool stays
    /// taken until the operating system gives up on the socket, many minutes later; a few
    /// such calls and no call gets a connection. Answered with an error, the pool drops the
    /// connection without a word to the server.
    pub(crate) async fn keep_released(
        &self,
        connection: &mut PgConnection,
    ) -> Result<bool, sqlx::Error> {
        let part_way = *lock(&self.given_back_part_way_at);
        if part_way.is_none_or(|at| at.elapsed() >= DISTRUST_FOR) {
            return Ok(true);
        }
        match timeout(PING_TIMEOUT, connection.ping()).await {
            Ok(answered) => answered.map(|()| true),
            Err(_elapsed) => {
                tracing::info!(after = ?PING_TIMEOUT,
                    "a connection given back part-way through a call did not answer a ping; \
                     dropping it and replacing every connection made before it");
                self.condemn_connections_made_until_now();
                Err(sqlx::Error::PoolTimedOut)
            }
        }
    }

    /// Whether a connection opened `age` ago was opened before the last failure that
    /// condemns connections, and so must be replaced.
    fn condemned(&self, age: Duration) -> bool {
        let condemned_before = *lock(&self.condemned_before);
        condemned_before.is_some_and(|at| age > at.elapsed())
    }

    /// Condemns every connection made until now.
    fn condemn_connections_made_until_now(&self) {
        *lock(&self.condemned_before) = Some(Instant::now());
    }

    /// Whether a pooled connection idle for `idle_for` must be pinged before a call uses it.
    fn needs_ping(&self, idle_for: Duration) -> bool {
        idle_for >= ALIVE_WITHOUT_PING || self.distrusted()
    }

    /// Records `error` if it says the connection broke.
    pub(crate) fn observe(&self, error: &sqlx::Error) {
        if broke_the_connection(error) {
            *lock(&self.broken_at) = Some(Instant::now());
        } else if sqlstate(error).as_deref() == Some(READ_ONLY_TRANSACTION) {
            self.condemn_connections_made_until_now();
        }
    }

    /// Runs `read`, and once more if its connection turned out broken. The second attempt
    /// takes a connection pinged first (see [`ConnectionHealth::needs_ping`]).
    pub(crate) async fn read<T, Read>(&self, mut read: impl FnMut() -> Read) -> StorageResult<T>
    where
        Read: Future<Output = StorageResult<T>>,
    {
        match read().await {
            Err(error) if is_broken_connection(&error) => {
                tracing::debug!(%error, "read again on another connection");
                read().await
            }
            outcome => outcome,
        }
    }

    fn distrusted(&self) -> bool {
        let broken_at = *lock(&self.broken_at);
        broken_at.is_some_and(|at| at.elapsed() < DISTRUST_FOR)
    }
}

/// Held while a call uses a connection. Dropped before [`CallInProgress::finished`] (the call
/// was cancelled, or failed), it tells the health that a connection went back to the pool
/// part-way through a call, whose state nobody knows: connections released in the next
/// [`DISTRUST_FOR`] are kept only once they answer a ping in time (see
/// [`ConnectionHealth::keep_released`]).
#[derive(Debug)]
pub(crate) struct CallInProgress {
    health: Arc<ConnectionHealth>,
    finished: bool,
}

impl CallInProgress {
    pub(crate) fn new(health: &Arc<ConnectionHealth>) -> Self {
        CallInProgress {
            health: Arc::clone(health),
            finished: false,
        }
    }

    /// The call's statements are done with: the connection goes back as it should.
    pub(crate) fn finished(mut self) {
        self.finished = true;
    }
}

impl Drop for CallInProgress {
    fn drop(&mut self) {
        if !self.finished {
            *lock(&self.health.given_back_part_way_at) = Some(Instant::now());
        }
    }
}

fn lock(instant: &Mutex<Option<Instant>>) -> std::sync::MutexGuard<'_, Option<Instant>> {
    instant
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The SQLSTATE of a server's `error`, if it is one.
fn sqlstate(error: &sqlx::Error) -> Option<std::borrow::Cow<'_, str>> {
    match error {
        sqlx::Error::Database(server) => server.code(),
        _ => None,
    }
}

/// Whether the driver's `error` means the connection broke: an I/O failure on its socket, a
/// connection exception, or the server ending the session.
fn broke_the_connection(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Io(_))
        || sqlstate(error).is_some_and(|code| ends_the_session(&code))
}

/// Whether the storage error `error` came from a broken connection.
fn is_broken_connection(error: &EventStorageError) -> bool {
    let EventStorageError::Backend { source, .. } = error else {
        return false;
    };
    if let Some(driver) = source.downcast_ref::<sqlx::Error>() {
        return broke_the_connection(driver);
    }
    source
        .downcast_ref::<PgDatabaseError>()
        .is_some_and(|server| ends_the_session(server.code()))
}

/// Whether the SQLSTATE `code` says the session is over.
fn ends_the_session(code: &str) -> bool {
    SESSION_ENDED.contains(&code) || code.starts_with(CONNECTION_EXCEPTION_CLASS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_error() -> sqlx::Error {
        sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "expected to read 5 bytes, got 0 bytes at EOF",
        ))
    }

    #[test]
    fn connections_back_from_a_recent_call_go_unpinged_until_one_breaks() {
        let health = ConnectionHealth::new();
        assert!(!health.needs_ping(Duration::from_millis(10)));
        assert!(health.needs_ping(ALIVE_WITHOUT_PING));
        health.observe(&sqlx::Error::RowNotFound);
        assert!(
            !health.needs_ping(Duration::from_millis(10)),
            "not a broken connection"
        );
        health.observe(&io_error());
        assert!(health.needs_ping(Duration::from_millis(10)));
    }

    #[test]
    fn only_failures_of_the_connection_count_as_broken() {
        let broken = EventStorageError::backend("PostgreSQL failed to read a bookmark", io_error());
        assert!(is_broken_connection(&broken));
        let other = EventStorageError::backend(
            "PostgreSQL failed to read a bookmark",
            sqlx::Error::RowNotFound,
        );
        assert!(!is_broken_connection(&other));
        assert!(!is_broken_connection(&EventStorageError::Closed));
    }

    #[test]
    fn a_read_only_refusal_condemns_the_connections_made_before_it() {
        let health = ConnectionHealth::new();
        assert!(!health.condemned(Duration::from_secs(3600)));
        let read_only = sqlx::Error::Database(Box::new(ReadOnly));
        health.observe(&read_only);
        assert!(health.condemned(Duration::from_secs(1)));
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !health.condemned(Duration::from_millis(10)),
            "a connection made after the refusal is kept"
        );
        assert!(
            !health.needs_ping(Duration::from_millis(10)),
            "a read-only session is not a broken connection"
        );
    }

    /// A server error with SQLSTATE 25006, as a standby answers a write.
    #[derive(Debug)]
    struct ReadOnly;

    impl std::fmt::Display for ReadOnly {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("cannot execute UPDATE in a read-only transaction")
        }
    }

    impl std::error::Error for ReadOnly {}

    impl sqlx::error::DatabaseError for ReadOnly {
        fn message(&self) -> &str {
            "cannot execute UPDATE in a read-only transaction"
        }
        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(READ_ONLY_TRANSACTION.into())
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    #[tokio::test]
    async fn a_read_is_repeated_once_after_a_broken_connection_and_never_otherwise() {
        let health = ConnectionHealth::new();
        let attempts = std::cell::Cell::new(0);
        let failing_with = |error: fn() -> EventStorageError| {
            attempts.set(0);
            let attempts = &attempts;
            health.read(move || {
                attempts.set(attempts.get() + 1);
                let error = error();
                async move { Err::<(), _>(error) }
            })
        };
        assert!(
            failing_with(|| EventStorageError::backend("PostgreSQL failed", io_error()))
                .await
                .is_err()
        );
        assert_eq!(attempts.get(), 2, "one more attempt, not more");
        assert!(failing_with(|| EventStorageError::Closed).await.is_err());
        assert_eq!(
            attempts.get(),
            1,
            "a closed storage is not a broken connection"
        );

        attempts.set(0);
        let outcome = health
            .read(|| {
                attempts.set(attempts.get() + 1);
                let first = attempts.get() == 1;
                async move {
                    if first {
                        Err(EventStorageError::backend("PostgreSQL failed", io_error()))
                    } else {
                        Ok("read")
                    }
                }
            })
            .await;
        assert_eq!(outcome.unwrap(), "read");
        assert_eq!(attempts.get(), 2);
    }
}
