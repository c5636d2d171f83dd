//! A small, complete in-memory storage for this crate's own unit tests.
//!
//! The backends live in crates that depend on this one, so the facade, projector and elector
//! are tested here against this stand-in, and against every real backend by the TCK.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::{
    validate, AppendCriteria, Bookmark, Capability, Direction, EventFilter, EventId,
    EventReference, EventStorage, EventStorageError, EventStreamId, EventToStore, Fence, Lease,
    LeaseRequest, LeaseResponse, LeaseStatus, Limit, StorageResult, StoredEvent, Tags,
};

#[derive(Debug, Default)]
struct State {
    events: Vec<StoredEvent>,
    bookmarks: BTreeMap<String, Bookmark>,
    leases: BTreeMap<String, Lease>,
    /// (lease, owner) -> (priority, heartbeat, ttl)
    contenders: BTreeMap<(String, String), (i64, DateTime<Utc>, Duration)>,
}

/// Events, bookmarks, leases and fenced writes in memory, following the contract.
#[derive(Debug, Default)]
pub(crate) struct TestStorage {
    state: Mutex<State>,
    without_leases: AtomicBool,
    hang_lease_requests: AtomicBool,
}

fn live(heartbeat: DateTime<Utc>, ttl: Duration, now: DateTime<Utc>) -> bool {
    now <= heartbeat + chrono::Duration::from_std(ttl).unwrap()
}

impl TestStorage {
    pub(crate) fn new() -> Self {
        TestStorage::default()
    }

    /// A storage that claims no lease capability.
    pub(crate) fn without_leases() -> Self {
        let storage = TestStorage::default();
        storage.without_leases.store(true, Ordering::SeqCst);
        storage
    }

    /// While set, lease requests never answer, as on a storage that hangs.
    pub(crate) fn hang_lease_requests(&self, hang: bool) {
        self.hang_lease_requests.store(hang, Ordering::SeqCst);
    }

    fn check_fence(state: &State, fence: &Fence) -> StorageResult<()> {
        fence.check(state.leases.get(&fence.lease_name), Utc::now())
    }

    fn append_locked(
        state: &mut State,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        validate::validate_append_stream(stream)?;
        if let Some(conflict) = state
            .events
            .iter()
            .find(|e| &e.stream == stream && criteria.is_violated_by(e))
        {
            return Err(EventStorageError::OptimisticLock {
                stream: stream.to_string(),
                expected_last: criteria.condition.and_then(|c| c.expected_last),
                conflicting: conflict.reference,
            });
        }
        let mut stored = Vec::new();
        for event in events {
            let position = state.events.len() as u64 + 1;
            let record = StoredEvent {
                stream: stream.clone(),
                event_type: event.event_type,
                reference: EventReference::at(EventId::new(), position),
                payload: event.payload,
                tags: event.tags,
                timestamp: Utc::now(),
                idempotency_key: event.idempotency_key,
            };
            state.events.push(record.clone());
            stored.push(record);
        }
        Ok(stored)
    }

    fn bookmark_locked(
        state: &mut State,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        let Some(event) = state.events.iter().find(|e| e.reference.id == reference.id) else {
            return Err(EventStorageError::UnknownEvent { id: reference.id });
        };
        let reference = event.reference;
        state.bookmarks.insert(
            reader.to_owned(),
            Bookmark {
                reader: reader.to_owned(),
                reference,
                tags,
                updated_at: Utc::now(),
            },
        );
        Ok(())
    }

    fn leases_supported(&self, operation: &str) -> StorageResult<()> {
        if self.without_leases.load(Ordering::SeqCst) {
            Err(EventStorageError::unsupported(operation, "test"))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl EventStorage for TestStorage {
    fn name(&self) -> &str {
        "test"
    }

    fn supports(&self, capability: Capability) -> bool {
        !self.without_leases.load(Ordering::SeqCst)
            && matches!(capability, Capability::Lease | Capability::FencedWrites)
    }

    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        Self::append_locked(&mut self.state.lock().unwrap(), criteria, stream, events)
    }

    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        let state = self.state.lock().unwrap();
        let matching = state.events.iter().filter(|e| {
            stream.covers(&e.stream)
                && filter.matches(e)
                && after.is_none_or(|after| e.reference > *after)
        });
        let found: Vec<StoredEvent> = match direction {
            Direction::Forward => matching.take(limit.as_usize()).cloned().collect(),
            Direction::Backward => matching.rev().take(limit.as_usize()).cloned().collect(),
        };
        Ok(found)
    }

    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        let state = self.state.lock().unwrap();
        Ok(state.events.iter().find(|e| e.reference.id == id).cloned())
    }

    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        let state = self.state.lock().unwrap();
        Ok(state
            .events
            .iter()
            .rev()
            .find(|e| stream.covers(&e.stream))
            .map(|e| e.reference))
    }

    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        Self::bookmark_locked(&mut self.state.lock().unwrap(), reader, reference, tags)
    }

    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        let state = self.state.lock().unwrap();
        Ok(state.bookmarks.get(reader).map(|b| b.reference))
    }

    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        self.state.lock().unwrap().bookmarks.remove(reader);
        Ok(())
    }

    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        Ok(self
            .state
            .lock()
            .unwrap()
            .bookmarks
            .values()
            .cloned()
            .collect())
    }

    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        self.leases_supported("request_lease")?;
        if self.hang_lease_requests.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        validate::validate_lease_request(&request)?;
        let now = Utc::now();
        let mut state = self.state.lock().unwrap();
        let name = request.lease_name.clone();
        state.contenders.insert(
            (name.clone(), request.owner.clone()),
            (request.priority, now, request.ttl),
        );
        let current = state.leases.get(&name).cloned();
        let holds_live = current
            .as_ref()
            .is_some_and(|l| !l.is_expired_at(now) && l.owner == request.owner);
        let anyone_live = current.as_ref().is_some_and(|l| !l.is_expired_at(now));
        if holds_live || !anyone_live {
            let lease = match current {
                Some(lease) if holds_live => Lease {
                    heartbeat_at: now,
                    ttl: request.ttl,
                    priority: request.priority,
                    ..lease
                },
                previous => Lease {
                    lease_name: name.clone(),
                    owner: request.owner.clone(),
                    priority: request.priority,
                    fencing_token: previous
                        .map_or(crate::FencingToken(1), |l| l.fencing_token.next()),
                    acquired_at: now,
                    heartbeat_at: now,
                    ttl: request.ttl,
                },
            };
            let token = lease.fencing_token;
            state.leases.insert(name.clone(), lease);
            let outranked = state.contenders.iter().any(|((l, o), (p, hb, ttl))| {
                *l == name && *o != request.owner && *p > request.priority && live(*hb, *ttl, now)
            });
            Ok(LeaseResponse {
                status: if outranked {
                    LeaseStatus::LeaderStepDownRequested
                } else {
                    LeaseStatus::Leader
                },
                fencing_token: token,
                current_owner: request.owner,
            })
        } else {
            let holder = current.expect("a live lease");
            Ok(LeaseResponse {
                status: LeaseStatus::Standby,
                fencing_token: holder.fencing_token,
                current_owner: holder.owner,
            })
        }
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        self.leases_supported("release_lease")?;
        validate::validate_release(lease_name, owner)?;
        let mut state = self.state.lock().unwrap();
        state
            .contenders
            .remove(&(lease_name.to_owned(), owner.to_owned()));
        if let Some(lease) = state.leases.get_mut(lease_name) {
            if lease.owner == owner {
                lease.heartbeat_at = Utc::now()
                    - chrono::Duration::from_std(lease.ttl).unwrap()
                    - chrono::Duration::seconds(1);
            }
        }
        Ok(())
    }

    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        self.leases_supported("get_leases")?;
        Ok(self
            .state
            .lock()
            .unwrap()
            .leases
            .values()
            .cloned()
            .collect())
    }

    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        self.leases_supported("storage_time")?;
        Ok(Utc::now())
    }

    async fn append_fenced(
        &self,
        fence: &Fence,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.leases_supported("append_fenced")?;
        let mut state = self.state.lock().unwrap();
        Self::check_fence(&state, fence)?;
        Self::append_locked(&mut state, criteria, stream, events)
    }

    async fn bookmark_fenced(
        &self,
        fence: &Fence,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        self.leases_supported("bookmark_fenced")?;
        let mut state = self.state.lock().unwrap();
        Self::check_fence(&state, fence)?;
        Self::bookmark_locked(&mut state, reader, reference, tags)
    }

    async fn close(&self) -> StorageResult<()> {
        Ok(())
    }
}
