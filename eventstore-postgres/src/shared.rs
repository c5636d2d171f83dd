//! What every handle of one storage shares: the pool, the prefix, the settings, the
//! notification listener and whether the storage is closed, with the way its own transactions
//! begin and end.

use eventstore_api::admission::Admission;
use eventstore_api::StorageResult;
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;

use crate::connections::settings::Settings;
use crate::connections::statements::{CallConnection, CallTransaction};
use crate::events::own_appends::OwnAppends;
use crate::leases::plain_batch;
use crate::leases::renewals::ExpectedRenewals;
use crate::notifications::listener::Listener;
use crate::notifications::{append_notification, lease_notification};
use crate::schema::prefix::TablePrefix;

/// What every handle of one storage shares.
pub(crate) struct Shared {
    pub(crate) pool: PgPool,
    owns_pool: bool,
    pub(crate) prefix: TablePrefix,
    pub(crate) settings: Settings,
    pub(crate) admission: Admission,
    /// Lease changes and append hints, pushed by the server.
    pub(crate) listener: Listener,
    /// Which leases a request renews in one statement.
    pub(crate) renewals: ExpectedRenewals,
    /// The call that serves a batch's plain requests (see `plain_batch`).
    pub(crate) plain_batch: String,
    /// The appends under way, so that an append can tell the barrier passed it.
    pub(crate) own_appends: OwnAppends,
}

impl Shared {
    /// An open storage's state; `owns_pool` says whether closing the storage closes `pool`,
    /// and `listen_options` are how the notification listener connects, once needed.
    pub(crate) fn new(
        pool: PgPool,
        owns_pool: bool,
        prefix: TablePrefix,
        settings: Settings,
        listen_options: PgConnectOptions,
    ) -> Self {
        let listener = Listener::new(
            listen_options,
            prefix.name(lease_notification::CHANNEL_SUFFIX),
            prefix.name(append_notification::CHANNEL_SUFFIX),
            // Its own: the listeners of other storages on this prefix never hear its probes.
            format!(
                "{}{:016x}",
                prefix.name("probe_"),
                uuid::Uuid::new_v4().as_u64_pair().0
            ),
            settings.listener_heartbeat,
        );
        let renewals = ExpectedRenewals::new(&prefix.name("leases"), settings.session_defaults);
        let plain_batch = plain_batch::statement(&prefix.name("request_plain_leases"));
        Shared {
            pool,
            owns_pool,
            prefix,
            settings,
            admission: Admission::new(),
            listener,
            renewals,
            plain_batch,
            own_appends: OwnAppends::default(),
        }
    }

    /// Whether the pool is the storage's own rather than the caller's.
    pub(crate) fn owns_pool(&self) -> bool {
        self.owns_pool
    }

    /// Marks the storage closed, stops the notification listener, ending every
    /// subscription, and closes the pool if it is the storage's own; a caller's pool stays
    /// open for the caller. Every close takes every step (each may run again), so that a
    /// close given up part-way (a caller's timeout around it) leaves the rest to the next.
    pub(crate) async fn close(&self) {
        self.admission.close();
        self.listener.close().await;
        if self.owns_pool {
            self.pool.close().await;
        }
    }

    /// A connection for the statements of `operation`, which [`CallConnection::end`] ends (see
    /// `statements`).
    pub(crate) async fn connection_for(&self, operation: &str) -> StorageResult<CallConnection> {
        CallConnection::open(&self.pool, &self.settings, operation).await
    }

    /// Ends `connection`'s call after its statements succeeded.
    pub(crate) async fn end(
        &self,
        operation: &str,
        connection: CallConnection,
    ) -> StorageResult<()> {
        connection.end(&self.settings, operation).await
    }

    /// Starts a `READ COMMITTED` transaction for `operation`, whatever the connection's
    /// default: every check after a lock wait must see what committed during the wait.
    pub(crate) async fn begin(&self, operation: &str) -> StorageResult<CallTransaction> {
        CallTransaction::begin(&self.pool, &self.settings)
            .await
            .map_err(|e| self.settings.failing(operation).map(e))
    }

    /// Commits `transaction` when `outcome` is a success, else rolls it back before
    /// returning, so that no transaction stays open on a pooled connection.
    pub(crate) async fn finish<T>(
        &self,
        operation: &str,
        transaction: CallTransaction,
        outcome: StorageResult<T>,
    ) -> StorageResult<T> {
        match outcome {
            Ok(value) => {
                transaction
                    .finish(true)
                    .await
                    .map_err(|e| self.settings.failing(operation).map(e))?;
                Ok(value)
            }
            Err(error) => {
                let _ = transaction.finish(false).await;
                Err(error)
            }
        }
    }
}
