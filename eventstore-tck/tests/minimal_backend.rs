//! The backend of the guide: events in a `Vec` behind a mutex, bookmarks in a map, no leases,
//! and the whole kit run against it. The crate documentation shows this file as it is.

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
use eventstore_tck::StorageFactory;

/// An event storage in memory; clones are handles of the same storage.
#[derive(Debug, Clone, Default)]
pub struct VecStorage {
    shared: Arc<Shared>,
}

/// What every handle of one storage shares.
#[derive(Debug, Default)]
struct Shared {
    /// Open or closed, for every handle: `close` on one closes them all.
    admission: Admission,
    /// "Now" on this storage's clock, never going backwards.
    clock: StorageClock,
    state: Mutex<State>,
}

/// The events and bookmarks.
#[derive(Debug, Default)]
struct State {
    /// In append order: the event at index `i` has position `i + 1` (where positions start
    /// is the backend's choice; they only have to grow).
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

    /// The state, once `operation` is admitted: `Closed` when the storage is closed, whatever
    /// the input; then `InvalidInput` by the input rule of `eventstore_api::validate` for
    /// the call. Every method starts here, so the order and the rules are the API's.
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

    /// No capability: every lease method keeps the trait's default body (`Unsupported`).
    fn supports(&self, _capability: Capability) -> bool {
        false
    }

    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        // validate::validate_append: a concrete stream, valid events, no key twice.
        let mut state = self.admit(Operation::Append {
            criteria: &criteria,
            stream,
            events: &events,
        })?;

        // A retry first: it answers the stored events and is not checked against the
        // criteria. An empty batch has no keys, so it is never a retry.
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

        // The criteria look at the stream appended to, and only at it.
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

        // One instant for the whole batch.
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
        // validate::validate_stream: wildcards allowed.
        let state = self.admit(Operation::Query { filter, stream })?;
        // `after` bounds the storage's order, whatever the direction: a backward read after
        // e1 of e0..e4 is e4, e3, e2.
        let matching = state.events.iter().filter(|event| {
            stream.covers(&event.stream)
                && after.is_none_or(|after| event.reference.order_key() > after.order_key())
                && filter.matches(event)
        });
        // The limit counts from the first event in the reading direction.
        let events = match direction {
            Direction::Forward => matching.take(limit.as_usize()).cloned().collect(),
            Direction::Backward => matching.rev().take(limit.as_usize()).cloned().collect(),
        };
        Ok(events)
    }

    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        // No input rule: any id may be asked for.
        Ok(self.admit(Operation::Read)?.event(id).cloned())
    }

    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        // validate::validate_stream: wildcards allowed.
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
        // validate::validate_reader and validate::validate_bookmark_tags.
        let mut state = self.admit(Operation::Bookmark {
            reader,
            tags: &tags,
        })?;
        // The storage's own coordinates: the reference this storage gave the event with that
        // id, whatever position or tx the caller passed with it.
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
        // validate::validate_reader.
        let state = self.admit(Operation::Reader { reader })?;
        Ok(state
            .bookmarks
            .get(reader)
            .map(|bookmark| bookmark.reference))
    }

    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        // validate::validate_reader; removing no bookmark is fine.
        self.admit(Operation::Reader { reader })?
            .bookmarks
            .remove(reader);
        Ok(())
    }

    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        // Ordered by reader: the map's order.
        let state = self.admit(Operation::Read)?;
        Ok(state.bookmarks.values().cloned().collect())
    }

    async fn close(&self) -> StorageResult<()> {
        // Idempotent, and for every clone of this handle.
        self.shared.admission.close();
        Ok(())
    }
}

/// Fresh storages for the kit.
struct Fresh;

#[async_trait]
impl StorageFactory for Fresh {
    type Storage = VecStorage;

    async fn create(&self) -> VecStorage {
        VecStorage::new()
    }

    /// A clone shares the storage: the only second handle a storage in memory has.
    async fn another_handle(&self, storage: &VecStorage) -> VecStorage {
        storage.clone()
    }
}

// No capability declared: the scenarios that need one are reported as ignored, naming it.
eventstore_tck::tck_tests!(Fresh, capabilities = []);
