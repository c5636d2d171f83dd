//! A minimal [`EventStorage`]: events in a `Vec` behind a mutex, bookmarks in a map, and no
//! leases, so every lease method keeps the trait's default body and answers `Unsupported`.
//!
//! The rules every backend shares come from `eventstore-api`: [`Admission`] answers closed
//! storages and invalid input, [`idempotency::judge`] decides retries, and the filters decide
//! which events a query or an append condition is about.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use eventstore_api::admission::{Admission, Operation};
use eventstore_api::idempotency::{self, Idempotency};
use eventstore_api::in_process::StorageClock;
use eventstore_api::{
    AppendCriteria, Bookmark, Capability, Direction, EventFilter, EventId, EventReference,
    EventStorage, EventStorageError, EventStreamId, EventToStore, Limit, StorageResult,
    StoredEvent, Tags,
};

/// An event storage in memory; clones are handles of the same storage.
#[derive(Debug, Clone, Default)]
pub struct VecStorage {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    admission: Admission,
    clock: StorageClock,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// In append order: the event at index `i` has position `i + 1`.
    events: Vec<StoredEvent>,
    bookmarks: BTreeMap<String, Bookmark>,
}

impl State {
    fn event(&self, id: EventId) -> Option<&StoredEvent> {
        self.events.iter().find(|event| event.reference.id == id)
    }
}

impl VecStorage {
    /// A new, empty storage.
    pub fn new() -> Self {
        VecStorage::default()
    }

    /// The state, once `operation` is admitted (the storage open, the input valid).
    fn admit(&self, operation: Operation<'_>) -> StorageResult<MutexGuard<'_, State>> {
        self.shared.admission.admit(operation)?;
        // Every update is complete before anything can panic, so a poisoned state is whole.
        Ok(self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
    }
}

#[async_trait]
impl EventStorage for VecStorage {
    fn name(&self) -> &str {
        "vec"
    }

    fn supports(&self, _capability: Capability) -> bool {
        false
    }

    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        let mut state = self.admit(Operation::Append {
criteria: &criteria,
            stream,
            events: &events,
        })?;

        let keys: Vec<&str> = idempotency::keys(&events).collect();
        let under_keys: Vec<StoredEvent> = state
            .events
            .iter()
            .filter(|event| &event.stream == stream)
            .filter(|event| {
                event
                    .idempotency_key
                    .as_deref()
                    .is_some_and(|key| keys.contains(&key))
            })
            .cloned()
            .collect();
        if let Idempotency::Retry(stored) = idempotency::judge(stream, &events, &under_keys)? {
            return Ok(stored);
        }

        let conflicting = state
            .events
            .iter()
            .find(|event| &event.stream == stream && criteria.is_violated_by(event));
        if let (Some(event), Some(condition)) = (conflicting, &criteria.condition) {
            return Err(EventStorageError::optimistic_lock(
                stream.to_string(),
                condition.expected_last,
                event.reference,
            ));
        }

        let now = self.shared.clock.now();
        let next_position = state.events.len() as u64 + 1;
        let stored: Vec<StoredEvent> = events
            .into_iter()
            .zip(next_position..)
            .map(|(event, position)| StoredEvent {
                stream: stream.clone(),
                event_type: event.event_type,
                reference: EventReference::at(EventId::new(), position),
                payload: event.payload,
                tags: event.tags,
                timestamp: now,
                idempotency_key: event.idempotency_key,
            })
            .collect();
        state.events.extend(stored.iter().cloned());
        Ok(stored)
    }

    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        let state = self.admit(Operation::Query { filter, stream })?;
        let matching = state.events.iter().filter(|event| {
            stream.covers(&event.stream)
                && after.is_none_or(|after| event.reference.order_key() > after.order_key())
                && filter.matches(event)
        });
        let events = match direction {
            Direction::Forward => matching.take(limit.as_usize()).cloned().collect(),
            Direction::Backward => matching.rev().take(limit.as_usize()).cloned().collect(),
        };
        Ok(events)
    }

    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        Ok(self.admit(Operation::Read)?.event(id).cloned())
    }

    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        let state = self.admit(Operation::Head { stream })?;
        let last = state
            .events
            .iter()
            .rev()
            .find(|event| stream.covers(&event.stream));
        Ok(last.map(|event| event.reference))
    }

    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        let mut state = self.admit(Operation::Bookmark {
            reader,
            tags: &tags,
        })?;
        // Reported in this storage's coordinates, whatever position the caller passed.
        let stored = state
            .event(reference.id)
            .ok_or(EventStorageError::unknown_event(reference.id))?
            .reference;
        let bookmark = Bookmark {
            reader: reader.to_owned(),
            reference: stored,
            tags,
            updated_at: self.shared.clock.now(),
        };
        state.bookmarks.insert(reader.to_owned(), bookmark);
        Ok(())
    }

    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        let state = self.admit(Operation::Reader { reader })?;
        Ok(state
            .bookmarks
            .get(reader)
            .map(|bookmark| bookmark.reference))
    }

    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        self.admit(Operation::Reader { reader })?
            .bookmarks
            .remove(reader);
        Ok(())
    }

    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        let state = self.admit(Operation::Read)?;
        Ok(state.bookmarks.values().cloned().collect())
    }

    async fn close(&self) -> StorageResult<()> {
        self.shared.admission.close();
        Ok(())
    }
}
