//! The storage handle and its `EventStorage` implementation.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use eventstore_api::admission::Operation;
use eventstore_api::event_stream::{whole, Events, ReadStream};
use eventstore_api::telemetry::FENCED_REFUSALS;
use eventstore_api::{
    AppendCriteria, Bookmark, Capability, Delivery, Direction, EventFilter, EventId,
    EventReference, EventStorage, EventStorageError, EventStreamId, EventToStore, Fence, Lease,
    LeaseContender, LeaseOutcome, LeaseRequest, LeaseResponse, LeaseSelection, Limit, Payloads,
    ReadEvent, ReadRequest, ReleaseOutcome, StorageResult, StoredEvent, Subscribed, Subscription,
    Tags,
};
use futures_util::TryStreamExt;
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;

use crate::connections::settings::Settings;
use crate::events::bookmarks;
use crate::schema::prefix::TablePrefix;
use crate::shared::Shared;
use crate::{events, leases};

/// Events, bookmarks and leases in PostgreSQL, in tables whose names start with a prefix.
///
/// Cheap to clone: clones share one pool and one open/closed state, so closing any clone
/// closes the storage for all of them. The storage's clock is PostgreSQL's `now()`.
///
/// Events are ordered by `(tx, position)`, `tx` being the writing transaction's `xid8`;
/// reads return only events below the oldest running transaction, so a reader that moves
/// its bookmark forward never skips an event that commits later with a lower position.
/// Leases live in two tables of their own and never touch the events.
///
/// Lease changes ([`Capability::LeaseChanges`]) and, when the builder turns them on, append
/// hints ([`Capability::AppendHints`]) come from `pg_notify` at commit (in the lease functions
/// and in each append's insert), through one `LISTEN` connection per storage, shared by its
/// clones and opened by the first subscription of either kind. A hint may come before the
/// visibility barrier lets readers see the append: it only wakes a reader.
#[derive(Clone)]
pub struct PostgresEventStorage {
    shared: Arc<Shared>,
}

impl fmt::Debug for PostgresEventStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresEventStorage")
            .field("prefix", &self.shared.prefix.as_str())
            .field("owns_pool", &self.shared.owns_pool())
            .field("settings", &self.shared.settings)
            .field("closed", &self.shared.admission.is_closed())
            .finish()
    }
}

impl PostgresEventStorage {
    pub(crate) fn new(
        pool: PgPool,
        owns_pool: bool,
        prefix: TablePrefix,
        settings: Settings,
        listen_options: PgConnectOptions,
    ) -> Self {
        PostgresEventStorage {
            shared: Arc::new(Shared::new(
                pool,
                owns_pool,
                prefix,
                settings,
                listen_options,
            )),
        }
    }

    /// The prefix every table, index and function name of this storage starts with.
    pub fn prefix(&self) -> &str {
        self.shared.prefix.as_str()
    }

    /// The pool the storage runs on (its own, or the caller's). The storage's own pool starts
    /// every connection with `READ COMMITTED` and the configured lock timeout as session
    /// defaults, and relies on them: use its connections without changing either.
    pub fn pool(&self) -> &PgPool {
        &self.shared.pool
    }

    /// The call that serves a batch's plain renewals and refreshes before the rest goes to
    /// `request_leases`. Its arguments are the requests' names, owners, priorities and ttls
    /// as arrays and a lock timeout; it returns each served request's place (`lease_index`,
    /// from 1), the lease's token and holder, and whether it was a standby
    /// (`lease_standby`). For tests that run it beside the functions in one transaction.
    #[doc(hidden)]
    pub fn plain_batch_statement(&self) -> &str {
        &self.shared.plain_batch
    }

    /// Checks `fence` inside the caller's own transaction on this storage's database, and
    /// holds the lease's lock in shared mode until that transaction ends: no takeover can
    /// commit between this check and the caller's writes. A projector that writes its read
    /// model into tables of its own is fenced that way like the storage's own writes:
    ///
    /// ```no_run
    /// # use eventstore_api::Fence;
    /// # async fn project(storage: &eventstore_postgres::PostgresEventStorage, fence: &Fence)
    /// #     -> Result<(), Box<dyn std::error::Error>> {
    /// let mut transaction = storage.pool().begin().await?;
    /// storage.check_fence(&mut transaction, fence).await?; // Fenced: another instance leads
    /// sqlx::query("UPDATE order_totals SET total = total + 1")
    ///     .execute(&mut *transaction)
    ///     .await?;
    /// transaction.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// A refused fence rolls nothing back by itself: drop the transaction. The transaction must
    /// run at `READ COMMITTED` (PostgreSQL's default), so that the check sees what committed
    /// while the lock was awaited. The lock is awaited for the storage's lock timeout; the
    /// transaction goes on with its own. Code outside Rust calls `<prefix>check_fence(lease_name,
    /// token)` in its transaction, which raises SQLSTATE `EF001` when fenced.
    ///
    /// # Errors
    /// `Fenced` when the lease is unknown, not live on the database's clock, or holds another
    /// token; `InvalidInput` for an invalid fence, or a connection outside a transaction block,
    /// in one an earlier error aborted, or at another isolation level (nothing is checked then); `Timeout` when the lock is not
    /// granted within the lock timeout; `Closed`; `Backend`.
    pub async fn check_fence(
        &self,
        transaction: &mut sqlx::PgConnection,
        fence: &Fence,
    ) -> StorageResult<()> {
        let shared = self.admit(Operation::Read)?;
        eventstore_api::validate::validate_fence(fence)?;
        let operation = "check a fence in the caller's transaction";
        let failing = shared.settings.failing(operation);
        // A shared lock taken outside a transaction block would end with its statement. Sent
        // as simple queries: behind a pooler in transaction mode, a connection outside a block
        // may have an extended query's parse and its execution run on two server connections,
        // which would hide why the savepoint failed.
        let in_block = sqlx::raw_sql("SAVEPOINT eventstore_check_fence")
            .execute(&mut *transaction)
            .await;
        if let Err(error) = in_block {
            return Err(not_in_a_usable_block(error).unwrap_or_else(|e| failing.map(e)));
        }
        sqlx::raw_sql("RELEASE SAVEPOINT eventstore_check_fence")
            .execute(&mut *transaction)
            .await
            .map_err(|e| failing.map(e))?;
        // The caller's own lock timeout, which the transaction keeps once the lock is granted.
        let (isolation, lock_timeout): (String, String) = sqlx::query_as(
            "SELECT current_setting('transaction_isolation'), current_setting('lock_timeout')",
        )
        .persistent(shared.settings.prepared_statements)
        .fetch_one(&mut *transaction)
        .await
        .map_err(|e| failing.map(e))?;
        if isolation != "read committed" {
            return Err(EventStorageError::invalid(
                "check_fence transaction isolation",
                isolation,
                "must be READ COMMITTED, so that the check sees what committed while the lease \
                 lock was awaited",
            ));
        }
        crate::leases::fencing::hold(shared, transaction, fence, operation, &lock_timeout).await
    }

    /// How PostgreSQL runs a statement of a [`query`](EventStorage::query) with these
    /// arguments, of the largest page a read asks for (the size most inclined to a sort):
    /// the output of `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`, for checking that a read
    /// walks an index in the order it returns rather than sorting. The statement runs (that
    /// is what `ANALYZE` measures) and its rows are thrown away.
    ///
    /// # Errors
    /// `InvalidInput` (invalid stream), `Closed`, `Backend`.
    pub async fn explain_query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<serde_json::Value> {
        let shared = self.admit(Operation::Query { filter, stream })?;
        events::explain_query(shared, filter, stream, after, limit, direction).await
    }

    /// The shared state, once `operation` is admitted (open, valid input).
    fn admit(&self, operation: Operation<'_>) -> StorageResult<&Shared> {
        self.shared.admission.admit(operation)?;
        Ok(&self.shared)
    }

    /// The events `query` reads, each decoded as an `E`; a read whose connection broke is
    /// run once more.
    async fn read_events<E: events::ReadEvent>(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<E>> {
        let shared = self.admit(Operation::Query { filter, stream })?;
        let read = || events::query(shared, filter, stream, after, limit, direction);
        shared.settings.health.read(read).await
    }

    /// The events `query_stream` streams, each decoded as an `E`: keyset pages of at most
    /// 1,000 events, each read while the caller takes the one before, on a connection taken
    /// for that page only, so that a stream dropped part-way holds nothing.
    fn stream_pages<E: events::ReadEvent>(&self, request: &ReadRequest) -> Events<'static, E> {
        let (filter, stream) = (&request.filter, &request.stream);
        if let Err(error) = self.admit(Operation::Query { filter, stream }) {
            return Box::pin(futures_util::stream::once(async move { Err(error) }));
        }
        let pages = events::Pages::new(
            filter,
            stream,
            request.after.as_ref(),
            request.limit,
            request.direction,
        );
        events::query_stream(Arc::clone(&self.shared), pages)
    }

    /// The events of a whole read of `request`, each decoded as an `E`.
    async fn read_whole<E: events::ReadEvent>(
        &self,
        request: &ReadRequest,
    ) -> StorageResult<Vec<E>> {
        self.read_events(
            &request.filter,
            &request.stream,
            request.after.as_ref(),
            request.limit,
            request.direction,
        )
        .await
    }
}

#[async_trait]
impl EventStorage for PostgresEventStorage {
    fn name(&self) -> &str {
        "postgres"
    }

    fn supports(&self, capability: Capability) -> bool {
        let settings = &self.shared.settings;
        match capability {
            Capability::Lease | Capability::FencedWrites | Capability::LeaseOutcomes => true,
            Capability::LeaseChanges => settings.push,
            Capability::AppendHints => settings.append_hints && settings.push,
            Capability::RawPayloads => true,
            _ => false,
        }
    }

    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        events::append(
            self.admit(Operation::Append {
                criteria: &criteria,
                stream,
                events: &events,
            })?,
            None,
            criteria,
            stream,
            events,
        )
        .await
    }

    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.read_events(filter, stream, after, limit, direction)
            .await
    }

    /// Every form natively: raw payloads as the JSON text the server sent, and streams as
    /// keyset pages of at most 1,000 events, each read while the caller takes the one before,
    /// on a connection taken for that page only, so that a stream dropped part-way holds
    /// nothing.
    fn read<'a>(&'a self, request: ReadRequest) -> ReadStream<'a> {
        match (request.payloads, request.delivery) {
            (Payloads::Raw, Delivery::Whole) => {
                whole(async move { Ok(wrap(self.read_whole(&request).await?, ReadEvent::Raw)) })
            }
            (Payloads::Raw, _) => Box::pin(self.stream_pages(&request).map_ok(ReadEvent::Raw)),
            (_, Delivery::Whole) => {
                whole(async move { Ok(wrap(self.read_whole(&request).await?, ReadEvent::Decoded)) })
            }
            _ => Box::pin(self.stream_pages(&request).map_ok(ReadEvent::Decoded)),
        }
    }

    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        let shared = self.admit(Operation::Read)?;
        let read = || events::get_by_id(shared, id);
        shared.settings.health.read(read).await
    }

    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        let shared = self.admit(Operation::Head { stream })?;
        let read = || events::head(shared, stream);
        shared.settings.health.read(read).await
    }

    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        bookmarks::place(
            self.admit(Operation::Bookmark {
                reader,
                tags: &tags,
            })?,
            None,
            reader,
            reference,
            tags,
        )
        .await
    }

    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        let shared = self.admit(Operation::Reader { reader })?;
        let read = || bookmarks::get(shared, reader);
        shared.settings.health.read(read).await
    }

    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        bookmarks::remove(self.admit(Operation::Reader { reader })?, reader).await
    }

    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        let shared = self.admit(Operation::Read)?;
        let read = || bookmarks::all(shared);
        shared.settings.health.read(read).await
    }

    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        let shared = self.admit(Operation::RequestLease { request: &request })?;
        let mut outcomes = leases::request(shared, std::slice::from_ref(&request)).await?;
        let outcome = outcomes.pop().ok_or_else(|| {
            EventStorageError::backend(
                "request_lease got no answer from PostgreSQL",
                "the lease function returned no row",
            )
        })?;
        Ok(outcome.response)
    }

    async fn request_leases(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseResponse>> {
        let outcomes = self.request_leases_with_outcome(requests).await?;
        Ok(outcomes
            .into_iter()
            .map(|outcome| outcome.response)
            .collect())
    }

    async fn request_leases_with_outcome(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        let shared = self.admit(Operation::RequestLeases {
            requests: &requests,
        })?;
        leases::request(shared, &requests).await
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        leases::release(
            self.admit(Operation::ReleaseLease { lease_name, owner })?,
            lease_name,
            owner,
        )
        .await
        .map(drop)
    }

    /// One lease is released by the function that says whether the caller held it; several
    /// in one set-based call, whose count tells each outcome only when it is all or none.
    async fn release_leases(
        &self,
        lease_names: &[String],
        owner: &str,
    ) -> StorageResult<Vec<ReleaseOutcome>> {
        let shared = self.admit(Operation::ReleaseLeases { lease_names, owner })?;
        match lease_names {
            [lease_name] => Ok(vec![leases::release(shared, lease_name, owner).await?]),
            _ => leases::release_all(shared, lease_names, owner).await,
        }
    }

    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        let shared = self.admit(Operation::Read)?;
        let read = || leases::all(shared);
        shared.settings.health.read(read).await
    }

    async fn list_leases(&self, selection: LeaseSelection) -> StorageResult<Vec<Lease>> {
        let shared = self.admit(Operation::Leases {
            selection: &selection,
        })?;
        let read = || leases::listed(shared, &selection);
        shared.settings.health.read(read).await
    }

    async fn list_contenders(
        &self,
        selection: LeaseSelection,
    ) -> StorageResult<Vec<LeaseContender>> {
        let shared = self.admit(Operation::Leases {
            selection: &selection,
        })?;
        let read = || leases::contenders_in(shared, &selection);
        shared.settings.health.read(read).await
    }

    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        let shared = self.admit(Operation::Read)?;
        let read = || leases::storage_time(shared);
        shared.settings.health.read(read).await
    }

    async fn subscribe(&self, subscription: Subscription) -> StorageResult<Subscribed> {
        match subscription {
            Subscription::LeaseChanges(scope) if self.shared.settings.push => {
                let shared = self.admit(Operation::Read)?;
                Ok(Subscribed::LeaseChanges(
                    shared.listener.subscribe_lease_changes(&scope).await,
                ))
            }
            Subscription::Appends(stream) if self.supports(Capability::AppendHints) => {
                let shared = self.admit(Operation::SubscribeAppends { stream: &stream })?;
                Ok(Subscribed::Appends(
                    shared.listener.subscribe_appends(&stream).await,
                ))
            }
            // No connection can LISTEN (see PostgresEventStorageBuilder::listen_url), or
            // append hints are off: as a storage without the capability answers, open or
            // closed.
            other => Err(EventStorageError::unsupported(
                other.operation(),
                self.name(),
            )),
        }
    }

    async fn append_fenced(
        &self,
        fence: &Fence,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        counting_refusal(
            events::append(
                self.admit(Operation::AppendFenced {
                    criteria: &criteria,
                    fence,
                    stream,
                    events: &events,
                })?,
                Some(fence),
                criteria,
                stream,
                events,
            )
            .await,
        )
    }

    async fn bookmark_fenced(
        &self,
        fence: &Fence,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        counting_refusal(
            bookmarks::place(
                self.admit(Operation::BookmarkFenced {
                    fence,
                    reader,
                    tags: &tags,
                })?,
                Some(fence),
                reader,
                reference,
                tags,
            )
            .await,
        )
    }

    async fn close(&self) -> StorageResult<()> {
        self.shared.close().await;
        Ok(())
    }
}

/// The refusal of a caller's connection that a savepoint showed unfit for a fence check:
/// outside a transaction block, or in one an earlier error aborted. Any other failure (a lost
/// connection) is the storage's, and comes back as it is.
fn not_in_a_usable_block(error: sqlx::Error) -> Result<EventStorageError, sqlx::Error> {
    let state = error
        .as_database_error()
        .and_then(|database| database.code())
        .map(|code| code.into_owned());
    let (value, problem) = match state.as_deref() {
        // no_active_sql_transaction
        Some("25P01") => (
            "outside a transaction block",
            "must be inside the caller's transaction (begin one first), or the lease lock \
             would end with the check",
        ),
        // in_failed_sql_transaction
        Some("25P02") => (
            "in a transaction an earlier error aborted",
            "must be in a transaction that can still run statements (roll this one back and \
             begin another)",
        ),
        _ => return Err(error),
    };
    Ok(EventStorageError::invalid(
        "check_fence connection",
        value,
        problem,
    ))
}

/// `result`, counted under the name every backend counts a refused fence by when it is one.
fn counting_refusal<T>(result: StorageResult<T>) -> StorageResult<T> {
    if let Err(EventStorageError::Fenced { lease_name, .. }) = &result {
        metrics::counter!(FENCED_REFUSALS, "lease" => lease_name.clone()).increment(1);
    }
    result
}

/// `events` in the form of a read's answer.
fn wrap<E>(events: Vec<E>, form: fn(E) -> ReadEvent) -> Vec<ReadEvent> {
    events.into_iter().map(form).collect()
}
