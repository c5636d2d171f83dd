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

use std::ops::{Deref, DerefMut};

use eventstore_api::StorageResult;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::isolation::BEGIN_READ_COMMITTED;
use crate::settings::Settings;

/// A connection for one call's statements: a pooled connection as it is when statements are
/// prepared, else a `READ COMMITTED` transaction that [`CallConnection::end`] commits.
#[derive(Debug)]
pub(crate) enum CallConnection {
    /// Statements prepared under names the connection caches.
    Pooled(PoolConnection<Postgres>),
    /// Unnamed statements, kept on one server connection by the transaction.
    Transaction(Transaction<'static, Postgres>),
}

impl CallConnection {
    /// A connection on `pool` for `operation`, as `settings` say statements are sent.
    pub(crate) async fn open(
        pool: &PgPool,
        settings: &Settings,
        operation: &str,
    ) -> StorageResult<CallConnection> {
        let failing = |e| settings.failing(operation).map(e);
        if settings.prepared_statements {
            settings
                .health
                .acquire(pool)
                .await
                .map(CallConnection::Pooled)
                .map_err(failing)
        } else {
            settings
                .health
                .begin(pool, BEGIN_READ_COMMITTED)
                .await
                .map(CallConnection::Transaction)
                .map_err(failing)
        }
    }

    /// Ends the call after its statements succeeded: commits its transaction, if any.
    pub(crate) async fn end(self, settings: &Settings, operation: &str) -> StorageResult<()> {
        match self {
            CallConnection::Pooled(_) => Ok(()),
            CallConnection::Transaction(transaction) => transaction
                .commit()
                .await
                .map_err(|e| settings.failing(operation).map(e)),
        }
    }
}

impl Deref for CallConnection {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            CallConnection::Pooled(connection) => connection,
            CallConnection::Transaction(transaction) => transaction,
        }
    }
}

impl DerefMut for CallConnection {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            CallConnection::Pooled(connection) => connection,
            CallConnection::Transaction(transaction) => transaction,
        }
    }
}
