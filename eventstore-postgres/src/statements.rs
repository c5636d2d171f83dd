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
use std::pin::pin;

use eventstore_api::StorageResult;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::connection_health::CallInProgress;
use crate::isolation::BEGIN_READ_COMMITTED;
use crate::settings::Settings;

/// A connection for one call's statements: a pooled connection as it is when statements are
/// prepared, else a `READ COMMITTED` transaction that [`CallConnection::end`] commits.
#[derive(Debug)]
pub(crate) struct CallConnection {
    /// Says, if the call ends without [`CallConnection::end`], that the connection went back
    /// part-way. Declared first, so dropped first: before the connection goes back to the
    /// pool, whose release hook reads it.
    call: CallInProgress,
    held: Held,
}

#[derive(Debug)]
enum Held {
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
        let mut taking = pin!(async {
            if settings.prepared_statements {
                settings.health.acquire(pool).await.map(Held::Pooled)
            } else {
                let begun = settings.health.begin(pool, BEGIN_READ_COMMITTED).await;
                begun.map(Held::Transaction)
            }
        });
        // Declared after the taking, so dropped before it: a call abandoned while its
        // transaction begins has given a connection back part-way too (see
        // `end_transaction`).
        let call = CallInProgress::new(&settings.health);
        let held = taking
            .as_mut()
            .await
            .map_err(|e| settings.failing(operation).map(e))?;
        Ok(CallConnection { call, held })
    }

    /// Ends the call after its statements succeeded: commits its transaction, if any.
    pub(crate) async fn end(self, settings: &Settings, operation: &str) -> StorageResult<()> {
        let CallConnection { call, held } = self;
        match held {
            Held::Pooled(connection) => {
                call.finished();
                drop(connection);
                Ok(())
            }
            Held::Transaction(transaction) => end_transaction(transaction, call, true)
                .await
                .map_err(|e| settings.failing(operation).map(e)),
        }
    }
}

impl Deref for CallConnection {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match &self.held {
            Held::Pooled(connection) => connection,
            Held::Transaction(transaction) => transaction,
        }
    }
}

impl DerefMut for CallConnection {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match &mut self.held {
            Held::Pooled(connection) => connection,
            Held::Transaction(transaction) => transaction,
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
        let mut beginning = pin!(settings.health.begin(pool, BEGIN_READ_COMMITTED));
        // Declared after the beginning, so dropped before it, as in `CallConnection::open`.
        let call = CallInProgress::new(&settings.health);
        let transaction = beginning.as_mut().await?;
        Ok(CallTransaction { call, transaction })
    }

    /// Commits when `commit`, else rolls back; either way the call is done with the
    /// connection.
    pub(crate) async fn finish(self, commit: bool) -> Result<(), sqlx::Error> {
        let CallTransaction { call, transaction } = self;
        end_transaction(transaction, call, commit).await
    }
}

/// Commits `transaction` when `commit`, else rolls it back, then says `call` finished.
///
/// Should the caller give up while the server does not answer, `call` must say so before the
/// transaction's connection goes back to the pool, whose release hook reads it. Locals are
/// dropped in the reverse order of their declaration, so the ending is pinned here first and
/// `call` declared after it.
async fn end_transaction(
    transaction: Transaction<'static, Postgres>,
    call: CallInProgress,
    commit: bool,
) -> Result<(), sqlx::Error> {
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
