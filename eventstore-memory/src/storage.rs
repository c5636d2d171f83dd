//! `MemoryEventStorage`: the handle and its `EventStorage` implementation.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use eventstore_api::admission::{Admission, Operation};
use eventstore_api::append_hints::AppendHintHub;
use eventstore_api::{
    AppendCriteria, AppendHint, Bookmark, Capability, Direction, EventFilter, EventId,
    EventReference, EventStorage, EventStorageError, EventStreamId, EventToStore, Fence, Lease,
    LeaseContender, LeaseOutcome, LeaseRequest, LeaseResponse, LeaseSelection, Limit,
    ReleaseOutcome, StorageResult, StoredEvent, Subscribed, Subscription, Tags,
};

use crate::event_log::{Appended, EventLog};
use eventstore_api::in_process::{LeaseTable, StorageClock};
use eventstore_api::telemetry::{APPEND_SECONDS, FENCED_REFUSALS};

/// An event storage held entirely in memory, leases included.
///
/// `clone()` gives another handle onto the same storage: handles contend for its leases for
/// real, from any task or thread, and `close` on one closes all.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), eventstore_api::EventStorageError> {
/// use std::time::Duration;
/// use eventstore_api::{EventStorage, LeaseRequest, LeaseStatus};
/// use eventstore_memory::MemoryEventStorage;
///
/// let storage = MemoryEventStorage::new();
/// let other = storage.clone();
/// let ttl = Duration::from_secs(30);
/// let first = storage.request_lease(LeaseRequest::new("dispatcher", "pod-a", 0, ttl)).await?;
/// let second = other.request_lease(LeaseRequest::new("dispatcher", "pod-b", 0, ttl)).await?;
/// assert_eq!(first.status, LeaseStatus::Leader);
/// assert_eq!((second.status, second.current_owner.as_str()), (LeaseStatus::Standby, "pod-a"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryEventStorage {
    shared: Arc<Shared>,
}

/// The storage all handles share. Locks are taken in the order leases, log, bookmarks.
#[derive(Debug, Default)]
struct Shared {
    admission: Admission,
    clock: StorageClock,
    leases: Mutex<LeaseTable>,
    log: RwLock<EventLog>,
    bookmarks: Mutex<BTreeMap<String, Bookmark>>,
    appends: AppendHintHub,
}

impl MemoryEventStorage {
    /// A new, empty storage.
    pub fn new() -> Self {
        MemoryEventStorage::default()
    }

    /// A new, empty storage on `clock`: [`StorageClock::on_tokio_time`] for tests and
    /// simulations that run on tokio's paused time, where a ttl then passes when the test
    /// advances the clock and not before.
    pub fn with_clock(clock: StorageClock) -> Self {
        MemoryEventStorage {
            shared: Arc::new(Shared {
                clock,
                ..Shared::default()
            }),
        }
    }

    /// The storage's clock: lease expiry, `storage_time` and the times the storage stamps
    /// (events, bookmarks) are all read from it. A test may step it forward
    /// ([`StorageClock::advance`]) to check what the storage judges by it.
    pub fn clock(&self) -> &StorageClock {
        &self.shared.clock
    }

    /// The shared storage, once `operation` is admitted (open, valid input).
    fn admit(&self, operation: Operation<'_>) -> StorageResult<&Shared> {
        self.shared.admission.admit(operation)?;
        Ok(&self.shared)
    }
}

/// Locks a mutex; a panic elsewhere while holding it leaves consistent data (every update is
/// applied in full before anything can panic), so poisoning is ignored.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn read_log(&self) -> std::sync::RwLockReadGuard<'_, EventLog> {
        self.log
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_log(&self) -> std::sync::RwLockWriteGuard<'_, EventLog> {
        self.log
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn append(
        &self,
        criteria: &AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        let started = std::time::Instant::now();
        let mut log = self.write_log();
        // Read under the lock, so that timestamps follow positions, as the file backend's do.
        let now = self.clock.now();
        let stored = log.append(criteria, stream, events, now);
        drop(log);
        metrics::histogram!(APPEND_SECONDS, "backend" => "memory")
            .record(started.elapsed().as_secs_f64());
        match stored? {
            Appended::Written(stored) => {
                if let Some(last) = stored.last() {
                    self.appends.publish(AppendHint {
                        stream: stream.clone(),
                        last: last.reference,
                    });
                }
                Ok(stored)
            }
            // Nothing was written, so there is nothing for subscribers to read.
            Appended::Retried(stored) => Ok(stored),
        }
    }

    fn bookmark(&self, reader: &str, reference: &EventReference, tags: Tags) -> StorageResult<()> {
        let log = self.read_log();
        let stored = log
            .get(reference.id)
            .ok_or(EventStorageError::unknown_event(reference.id))?;
        let mut bookmarks = lock(&self.bookmarks);
        // Read under the lock: handles replacing one bookmark at once place it in the order
        // of their times, so that its update time only moves forward.
        let bookmark = Bookmark {
            reader: reader.to_owned(),
            reference: stored.reference,
            tags,
            updated_at: self.clock.now(),
        };
        bookmarks.insert(reader.to_owned(), bookmark);
        Ok(())
    }
}

#[async_trait]
impl EventStorage for MemoryEventStorage {
    fn name(&self) -> &str {
        "memory"
    }

    fn supports(&self, capability: Capability) -> bool {
        matches!(
            capability,
            Capability::Lease
                | Capability::FencedWrites
                | Capability::LeaseChanges
                | Capability::LeaseOutcomes
                | Capability::AppendHints
        )
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", stream = %stream, events = events.len()))]
    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        let shared = self.admit(Operation::Append {
            criteria: &criteria,
            stream,
            events: &events,
        })?;
        shared.append(&criteria, stream, events)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", stream = %stream, limit = ?limit.0, ?direction))]
    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        let shared = self.admit(Operation::Query { filter, stream })?;
        Ok(shared
            .read_log()
            .query(filter, stream, after, limit, direction))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", id = %id.0))]
    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        Ok(self.admit(Operation::Read)?.read_log().get(id).cloned())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", stream = %stream))]
    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        let shared = self.admit(Operation::Head { stream })?;
        Ok(shared.read_log().head(stream))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", reader = reader, position = reference.position))]
    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        let shared = self.admit(Operation::Bookmark {
            reader,
            tags: &tags,
        })?;
        shared.bookmark(reader, reference, tags)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", reader = reader))]
    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        let shared = self.admit(Operation::Reader { reader })?;
        Ok(lock(&shared.bookmarks)
            .get(reader)
            .map(|bookmark| bookmark.reference))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", reader = reader))]
    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        let shared = self.admit(Operation::Reader { reader })?;
        lock(&shared.bookmarks).remove(reader);
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory"))]
    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        Ok(lock(&self.admit(Operation::Read)?.bookmarks)
            .values()
            .cloned()
            .collect())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", lease = %request.lease_name, owner = %request.owner))]
    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        let shared = self.admit(Operation::RequestLease { request: &request })?;
        let mut leases = lock(&shared.leases);
        Ok(leases.request(&request, shared.clock.now()))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", lease = %eventstore_api::telemetry::LeaseNames(&requests), requests = requests.len()))]
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

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", lease = %eventstore_api::telemetry::LeaseNames(&requests), requests = requests.len()))]
    async fn request_leases_with_outcome(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        let shared = self.admit(Operation::RequestLeases {
            requests: &requests,
        })?;
        let mut leases = lock(&shared.leases);
        let now = shared.clock.now();
        Ok(requests
            .iter()
            .map(|request| leases.request_with_outcome(request, now))
            .collect())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", lease = lease_name, owner = owner))]
    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        let shared = self.admit(Operation::ReleaseLease { lease_name, owner })?;
        let mut leases = lock(&shared.leases);
        leases.release(lease_name, owner, shared.clock.now());
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", lease = lease_names.first().map(String::as_str), owner = owner, leases = lease_names.len()))]
    async fn release_leases(
        &self,
        lease_names: &[String],
        owner: &str,
    ) -> StorageResult<Vec<ReleaseOutcome>> {
        let shared = self.admit(Operation::ReleaseLeases { lease_names, owner })?;
        let mut leases = lock(&shared.leases);
        let now = shared.clock.now();
        Ok(lease_names
            .iter()
            .map(|lease_name| leases.release(lease_name, owner, now))
            .collect())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory"))]
    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        Ok(lock(&self.admit(Operation::Read)?.leases).leases())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", selection = ?selection))]
    async fn list_leases(&self, selection: LeaseSelection) -> StorageResult<Vec<Lease>> {
        let state = self.admit(Operation::Leases {
            selection: &selection,
        })?;
        Ok(lock(&state.leases).leases_in(&selection))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", selection = ?selection))]
    async fn list_contenders(
        &self,
        selection: LeaseSelection,
    ) -> StorageResult<Vec<LeaseContender>> {
        let state = self.admit(Operation::Leases {
            selection: &selection,
        })?;
        Ok(lock(&state.leases).contenders_in(&selection))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory"))]
    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        Ok(self.admit(Operation::Read)?.clock.now())
    }

    async fn subscribe(&self, subscription: Subscription) -> StorageResult<Subscribed> {
        match subscription {
            Subscription::Appends(stream) => {
                let shared = self.admit(Operation::SubscribeAppends { stream: &stream })?;
                Ok(Subscribed::Appends(shared.appends.subscribe(&stream)))
            }
            Subscription::LeaseChanges(scope) => {
                let shared = self.admit(Operation::Read)?;
                let changes = lock(&shared.leases).changes();
                Ok(Subscribed::LeaseChanges(changes.subscribe(&scope)))
            }
            other => Err(EventStorageError::unsupported(
                other.operation(),
                self.name(),
            )),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", stream = %stream, events = events.len(), lease = %fence.lease_name, token = fence.token.0))]
    async fn append_fenced(
        &self,
        fence: &Fence,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        let shared = self.admit(Operation::AppendFenced {
            criteria: &criteria,
            fence,
            stream,
            events: &events,
        })?;
        // Holding the lease table across the write keeps the lease from changing hands between
        // the check and the append.
        let leases = lock(&shared.leases);
        counting_refusal(leases.check_fence(fence, shared.clock.now()))?;
        shared.append(&criteria, stream, events)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "memory", reader = reader, position = reference.position, lease = %fence.lease_name, token = fence.token.0))]
    async fn bookmark_fenced(
        &self,
        fence: &Fence,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        let shared = self.admit(Operation::BookmarkFenced {
            fence,
            reader,
            tags: &tags,
        })?;
        let leases = lock(&shared.leases);
        counting_refusal(leases.check_fence(fence, shared.clock.now()))?;
        shared.bookmark(reader, reference, tags)
    }

    async fn close(&self) -> StorageResult<()> {
        if self.shared.admission.close() {
            lock(&self.shared.leases).changes().close();
            self.shared.appends.close();
        }
        Ok(())
    }
}

/// `result`, counted under the name every backend counts a refused fence by when it is one.
fn counting_refusal<T>(result: StorageResult<T>) -> StorageResult<T> {
    if let Err(EventStorageError::Fenced { lease_name, .. }) = &result {
        metrics::counter!(FENCED_REFUSALS, "lease" => lease_name.clone()).increment(1);
    }
    result
}
