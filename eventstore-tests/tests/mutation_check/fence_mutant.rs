//! A backend with leases and fenced writes (the memory backend, whose methods it forwards)
//! that makes one deliberate mistake of [`Mutation::leasing`] (in its fenced writes, or in
//! the clock it reads) when given one, and none otherwise.
//!
//! Its own fenced writes, when mutated, are written as a newcomer would write them on top of
//! a storage's public methods: read the lease, judge the fence, then write.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use eventstore::admission::Operation;
use eventstore::decorator::Decorator;
use eventstore::in_process::StorageClock;
use eventstore::{
    AppendCriteria, Bookmark, Capability, EventReference, EventStorage, EventStorageError,
    EventStreamId, EventToStore, Fence, LeaseOutcome, LeaseRequest, StorageResult, StoredEvent,
    Subscribed, Subscription, Tags,
};
use eventstore_memory::MemoryEventStorage;

use super::mutations::Mutation;

/// An event storage with leases and fenced writes; clones are handles of the same storage.
#[derive(Debug, Clone)]
pub(crate) struct FenceMutant {
    inner: MemoryEventStorage,
    mutation: Option<Mutation>,
    /// Under [`Mutation::BookmarkTimeFromTheWallClock`], the wall clock's time of each
    /// reader's last bookmark, which `get_bookmarks` reports as its `updated_at`.
    wall_times: Arc<Mutex<HashMap<String, DateTime<Utc>>>>,
}

impl FenceMutant {
    /// A new, empty storage making `mutation` (none unless it is one of leases).
    pub(crate) fn new(mutation: Option<Mutation>) -> Self {
        FenceMutant {
            inner: MemoryEventStorage::new(),
            mutation: mutation.filter(|mutation| mutation.leasing()),
            wall_times: Arc::default(),
        }
    }

    /// The storage's clock, which the kit's factory steps.
    pub(crate) fn clock(&self) -> &StorageClock {
        self.inner.clock()
    }

    /// Notes the wall clock's time of a bookmark of `reader` just placed, under
    /// [`Mutation::BookmarkTimeFromTheWallClock`].
    fn note_wall_time(&self, reader: &str) {
        if self.is(Mutation::BookmarkTimeFromTheWallClock) {
            self.wall_times
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(reader.to_owned(), Utc::now());
        }
    }

    fn is(&self, mutation: Mutation) -> bool {
        self.mutation == Some(mutation)
    }

    /// Whether this storage judges fences itself, making its mutation.
    fn judges_fences(&self) -> bool {
        self.is(Mutation::FenceJudgedByTokenAlone)
            || self.is(Mutation::FenceCheckedThenUnlockedBeforeTheWrite)
    }

    /// Admits `operation` (`Closed` first, then the input rules), then judges `fence` as the
    /// mutation does.
    async fn judge(&self, operation: Operation<'_>, fence: &Fence) -> StorageResult<()> {
        let now = self.inner.storage_time().await?;
        operation.validate()?;
        let leases = self.inner.get_leases().await?;
        let lease = leases
            .iter()
            .find(|lease| lease.lease_name == fence.lease_name);
        let verdict = if self.is(Mutation::FenceJudgedByTokenAlone) {
            // The token alone: a lease that expired or was released still passes.
            match lease {
                Some(lease) if lease.fencing_token == fence.token => Ok(()),
                _ => Err(EventStorageError::fenced(
                    fence.lease_name.clone(),
                    fence.token,
                    lease.map(|lease| lease.fencing_token),
                    lease.is_some_and(|lease| !lease.is_expired_at(now)),
                )),
            }
        } else {
            fence.check(lease, now)
        };
        // The lease table's lock is let go here; an async backend awaits before it writes.
        tokio::task::yield_now().await;
        verdict
    }
}

#[async_trait]
impl Decorator for FenceMutant {
    type Inner = MemoryEventStorage;

    fn inner(&self) -> &MemoryEventStorage {
        &self.inner
    }

    fn name(&self) -> &str {
        "fence-mutant"
    }

    fn supports(&self, capability: Capability) -> bool {
        matches!(capability, Capability::Lease | Capability::FencedWrites)
    }

    // The capabilities it does not declare are refused, as the trait's defaults refuse them.
    async fn request_leases_with_outcome(
        &self,
        _requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        Err(EventStorageError::unsupported(
            "request_leases_with_outcome",
            Decorator::name(self),
        ))
    }

    async fn subscribe(&self, subscription: Subscription) -> StorageResult<Subscribed> {
        Err(EventStorageError::unsupported(
            subscription.operation(),
            Decorator::name(self),
        ))
    }

    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        self.inner.bookmark(reader, reference, tags).await?;
        self.note_wall_time(reader);
        Ok(())
    }

    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        let mut bookmarks = self.inner.get_bookmarks().await?;
        let wall_times = self
            .wall_times
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for bookmark in &mut bookmarks {
            if let Some(wall_time) = wall_times.get(&bookmark.reader) {
                bookmark.updated_at = *wall_time;
            }
        }
        Ok(bookmarks)
    }

    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        let now = self.inner.storage_time().await?;
        if self.is(Mutation::StorageTimeFromTheWallClock) {
            return Ok(Utc::now());
        }
        Ok(now)
    }

    async fn append_fenced(
        &self,
        fence: &Fence,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        if !self.judges_fences() {
            return self
                .inner
                .append_fenced(fence, criteria, stream, events)
                .await;
        }
        let operation = Operation::AppendFenced {
            fence,
            criteria: &criteria,
            stream,
            events: &events,
        };
        self.judge(operation, fence).await?;
        self.inner.append(criteria, stream, events).await
    }

    async fn bookmark_fenced(
        &self,
        fence: &Fence,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        if !self.judges_fences() {
            self.inner
                .bookmark_fenced(fence, reader, reference, tags)
                .await?;
            self.note_wall_time(reader);
            return Ok(());
        }
        let operation = Operation::BookmarkFenced {
            fence,
            reader,
            tags: &tags,
        };
        self.judge(operation, fence).await?;
        self.inner.bookmark(reader, reference, tags).await
    }
}
