//! The storage handle, its shared state, and the `EventStorage` implementation.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use eventstore_api::{
    AppendCriteria, Bookmark, Capability, Direction, EventFilter, EventId, EventReference,
    EventStorage, EventStorageError, EventStreamId, EventToStore, Fence, Lease, LeaseRequest,
    LeaseResponse, Limit, StorageResult, StoredEvent, Tags,
};
use sqlx::{PgPool, Postgres, Transaction};

use crate::builder::PostgresEventStorageBuilder;
use crate::errors::Failing;
use crate::prefix::TablePrefix;
use crate::{bookmarks, events, leases};

/// How the storage starts every transaction of its own. Under `REPEATABLE READ` a
/// transaction keeps the snapshot of its first statement, taken before its lock was granted.
pub(crate) const BEGIN_READ_COMMITTED: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// Settings every operation consults.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The longest any statement waits for a lock.
    pub(crate) lock_timeout: Duration,
    /// How long an append waits for its events to pass the visibility barrier.
    pub(crate) visibility_wait: Duration,
    /// How long a call waits for a pooled connection.
    pub(crate) acquire_timeout: Duration,
}

impl Settings {
    /// How to map a driver error of `operation`.
    pub(crate) fn failing<'a>(&self, operation: &'a str) -> Failing<'a> {
        Failing {
            operation,
            lock_timeout: self.lock_timeout,
            acquire_timeout: self.acquire_timeout,
        }
    }

    /// The lock timeout as a PostgreSQL setting value, e.g. `10000ms`.
    pub(crate) fn lock_timeout_setting(&self) -> String {
        format!("{}ms", self.lock_timeout.as_millis().max(1))
    }
}

/// What every handle of one storage shares.
pub(crate) struct Shared {
    pub(crate) pool: PgPool,
    owns_pool: bool,
    pub(crate) prefix: TablePrefix,
    pub(crate) settings: Settings,
    closed: AtomicBool,
}

impl Shared {
    /// Starts a `READ COMMITTED` transaction for `operation`, whatever the connection's
    /// default: every check after a lock wait must see what committed during the wait.
    pub(crate) async fn begin(
        &self,
        operation: &str,
    ) -> StorageResult<Transaction<'static, Postgres>> {
        self.pool
            .begin_with(BEGIN_READ_COMMITTED)
            .await
            .map_err(|e| self.settings.failing(operation).map(e))
    }

    /// Commits `transaction` when `outcome` is a success, else rolls it back before
    /// returning, so that no transaction stays open on a pooled connection.
    pub(crate) async fn finish<T>(
        &self,
        operation: &str,
        transaction: Transaction<'static, Postgres>,
        outcome: StorageResult<T>,
    ) -> StorageResult<T> {
        match outcome {
            Ok(value) => {
                transaction
                    .commit()
                    .await
                    .map_err(|e| self.settings.failing(operation).map(e))?;
                Ok(value)
            }
            Err(error) => {
                // A broken connection cannot roll back; the driver discards it instead.
                let _ = transaction.rollback().await;
                Err(error)
            }
        }
    }
}

/// Events, bookmarks and leases in PostgreSQL, in tables whose names start with a prefix.
///
/// Cheap to clone: clones share one pool and one open/closed state, so closing any clone
/// closes the storage for all of them. The storage's clock is PostgreSQL's `now()`.
///
/// Events are ordered by `(tx, position)`, `tx` being the writing transaction's `xid8`;
/// reads return only events below the oldest running transaction, so a reader that moves
/// its bookmark forward never skips an event that commits later with a lower position.
/// Leases live in two tables of their own and never touch the events.
#[derive(Clone)]
pub struct PostgresEventStorage {
    shared: Arc<Shared>,
}

impl fmt::Debug for PostgresEventStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresEventStorage")
            .field("prefix", &self.shared.prefix.as_str())
            .field("owns_pool", &self.shared.owns_pool)
            .field("settings", &self.shared.settings)
            .field("closed", &self.shared.closed.load(Ordering::Acquire))
            .finish()
    }
}

impl PostgresEventStorage {
    /// A builder; give it a `url` or a `pool`, then `build`.
    pub fn builder() -> PostgresEventStorageBuilder {
        PostgresEventStorageBuilder::default()
    }

    pub(crate) fn new(
        pool: PgPool,
        owns_pool: bool,
        prefix: TablePrefix,
        settings: Settings,
    ) -> Self {
        PostgresEventStorage {
            shared: Arc::new(Shared {
                pool,
                owns_pool,
                prefix,
                settings,
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// The prefix every table, index and function name of this storage starts with.
    pub fn prefix(&self) -> &str {
        self.shared.prefix.as_str()
    }

    /// The pool the storage runs on (its own, or the caller's).
    pub fn pool(&self) -> &PgPool {
        &self.shared.pool
    }

    /// The shared state, or `Closed`.
    fn open(&self) -> StorageResult<&Shared> {
        if self.shared.closed.load(Ordering::Acquire) {
            Err(EventStorageError::Closed)
        } else {
            Ok(&self.shared)
        }
    }
}

#[async_trait]
impl EventStorage for PostgresEventStorage {
    fn name(&self) -> &str {
        "postgres"
    }

    fn supports(&self, capability: Capability) -> bool {
        matches!(capability, Capability::Lease | Capability::FencedWrites)
    }

    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        events::append(self.open()?, None, criteria, stream, events).await
    }

    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        events::query(self.open()?, filter, stream, after, limit, direction).await
    }

    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        events::get_by_id(self.open()?, id).await
    }

    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        events::head(self.open()?, stream).await
    }

    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        bookmarks::place(self.open()?, None, reader, reference, tags).await
    }

    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        bookmarks::get(self.open()?, reader).await
    }

    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        bookmarks::remove(self.open()?, reader).await
    }

    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        bookmarks::all(self.open()?).await
    }

    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        let shared = self.open()?;
        eventstore_api::validate::validate_lease_request(&request)?;
        let mut responses = leases::request(shared, std::slice::from_ref(&request)).await?;
        responses.pop().ok_or_else(|| {
            EventStorageError::backend(
                "request_lease got no answer from PostgreSQL",
                "the lease function returned no row",
            )
        })
    }

    async fn request_leases(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseResponse>> {
        let shared = self.open()?;
        eventstore_api::validate::validate_lease_requests(&requests)?;
        leases::request(shared, &requests).await
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        leases::release(self.open()?, lease_name, owner).await
    }

    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        leases::all(self.open()?).await
    }

    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        leases::storage_time(self.open()?).await
    }

    async fn append_fenced(
        &self,
        fence: &Fence,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        events::append(self.open()?, Some(fence), criteria, stream, events).await
    }

    async fn bookmark_fenced(
        &self,
        fence: &Fence,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        bookmarks::place(self.open()?, Some(fence), reader, reference, tags).await
    }

    async fn close(&self) -> StorageResult<()> {
        let already = self.shared.closed.swap(true, Ordering::AcqRel);
        if !already && self.shared.owns_pool {
            self.shared.pool.close().await;
        }
        Ok(())
    }
}
