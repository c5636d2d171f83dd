//! How statements reach the server: prepared under a name and cached per connection, or
//! unnamed, each call in a transaction of its own.
//!
//! A pooler in transaction mode (PgBouncer's `pool_mode = transaction`) hands the server
//! connection to another client between transactions. Named statements then meet a session
//! that never prepared them, or one where another client's statement holds the name. An
//! unnamed statement is parsed and then bound in two round trips (the driver asks for its
//! description in between), and between them the pooler may hand the connection over too, so
//! that the bind would run whatever statement the next client left unnamed there. Inside a
//! transaction the pooler keeps the connection, so without prepared statements every call
//! that is not already in a transaction of its own runs in one.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::pin;

use eventstore_api::StorageResult;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use super::connection_health::CallInProgress;
use super::settings::Settings;

/// A connection for one call's statements: a pooled connection as it is when statements are
/// prepared, else a `READ COMMITTED` transaction that [`CallConnection::end`] commits.
#[derive(Debug)]
pub(crate) enum CallConnection {
    /// Statements prepared under names the connection caches.
    Pooled {
        /// Says, if the call ends without [`CallConnection::end`], that the connection went
        /// back part-way. Declared first, so dropped first: before the connection goes back
        /// to the pool, whose release hook reads it.
        call: CallInProgress,
        connection: PoolConnection<Postgres>,
    },
    /// Unnamed statements, kept on one server connection by the transaction.
    Transaction(CallTransaction),
}

impl CallConnection {
    /// A connection on `pool` for `operation`, as `settings` say statements are sent.
    pub(crate) async fn open(
        pool: &PgPool,
        settings: &Settings,
        operation: &str,
    ) -> StorageResult<CallConnection> {
        let opened = if settings.prepared_statements {
            taken_for_a_call(settings, settings.health.acquire(pool))
                .await
                .map(|(call, connection)| CallConnection::Pooled { call, connection })
        } else {
            CallTransaction::begin(pool, settings)
                .await
                .map(CallConnection::Transaction)
        };
        opened.map_err(|e| settings.failing(operation).map(e))
    }

    /// Ends the call after its statements succeeded: commits its transaction, if any.
    pub(crate) async fn end(self, settings: &Settings, operation: &str) -> StorageResult<()> {
        match self {
            CallConnection::Pooled { call, connection } => {
                call.finished();
                drop(connection);
                Ok(())
            }
            CallConnection::Transaction(transaction) => transaction
                .finish(true)
                .await
                .map_err(|e| settings.failing(operation).map(e)),
        }
    }
}

impl Deref for CallConnection {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            CallConnection::Pooled { connection, .. } => connection,
            CallConnection::Transaction(transaction) => transaction,
        }
    }
}

impl DerefMut for CallConnection {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            CallConnection::Pooled { connection, .. } => connection,
            CallConnection::Transaction(transaction) => transaction,
        }
    }
}

/// A call's own `READ COMMITTED` transaction, which [`CallTransaction::finish`] ends.
#[derive(Debug)]
pub(crate) struct CallTransaction {
    /// Says, if the call ends without [`CallTransaction::finish`], that the connection went
    /// back part-way. Declared first, so dropped first, as in a [`CallConnection`].
    call: CallInProgress,
    transaction: Transaction<'static, Postgres>,
}

impl CallTransaction {
    /// A transaction begun on a connection of `pool`, as `settings` take connections.
    pub(crate) async fn begin(pool: &PgPool, settings: &Settings) -> Result<Self, sqlx::Error> {
        let beginning = settings.health.begin(pool, settings.begin_statement());
        let (call, transaction) = taken_for_a_call(settings, beginning).await?;
        Ok(CallTransaction { call, transaction })
    }

    /// Commits when `commit`, else rolls back; either way the call is done with the
    /// connection.
    ///
    /// Should the caller give up while the server does not answer, the marker must say so
    /// before the connection goes back to the pool, whose release hook reads it. Locals are
    /// dropped in the reverse order of their declaration, so the ending is pinned first and
    /// the marker moved in after it.
    pub(crate) async fn finish(self, commit: bool) -> Result<(), sqlx::Error> {
        let CallTransaction { call, transaction } = self;
        let mut ending = pin!(async move {
            if commit {
                transaction.commit().await
            } else {
                // A broken connection cannot roll back; the driver discards it instead.
                let _ = transaction.rollback().await;
                Ok(())
            }
        });
        let call = call;
        let ended = ending.as_mut().await;
        call.finished();
        ended
    }
}

impl Deref for CallTransaction {
    type Target = Transaction<'static, Postgres>;

    fn deref(&self) -> &Self::Target {
        &self.transaction
    }
}

impl DerefMut for CallTransaction {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.transaction
    }
}

/// What `taking` takes for a call (a connection, or a transaction begun on one), with the
/// call's marker.
///
/// The marker is declared after `taking` is pinned, so that a call given up while it waits
/// drops the marker first, and the marker says the call ended part-way before the
/// connection goes back to the pool (locals are dropped in the reverse order of their
/// declaration; see [`CallTransaction::finish`]).
async fn taken_for_a_call<T>(
    settings: &Settings,
    taking: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<(CallInProgress, T), sqlx::Error> {
    let mut taking = pin!(taking);
    let call = CallInProgress::new(&settings.health);
    let taken = taking.as_mut().await?;
    Ok((call, taken))
}
