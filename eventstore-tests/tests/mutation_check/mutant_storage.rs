//! A small backend (events in a `Vec` behind a mutex, bookmarks in a map, no leases) that
//! makes one deliberate [`Mutation`] when given one, and none otherwise.
//!
//! Without a mutation it is the backend of the kit's guide: [`Admission`] answers closed
//! storages and invalid input, [`idempotency::judge`] decides retries, and the filters decide
//! which events a query or an append condition is about.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use eventstore::admission::{Admission, Operation};
use eventstore::event_stream::{self, ReadStream};
use eventstore::idempotency::{self, Idempotency};
use eventstore::in_process::StorageClock;
use eventstore::{
    AppendCriteria, Bookmark, Capability, Direction, EventFilter, EventId, EventReference,
    EventStorage, EventStorageError, EventStreamId, EventToStore, FilterItem, Lease, Limit,
    Payloads, ReadRequest, StorageResult, StoredEvent, Tags,
};

use super::mutations::Mutation;

/// An event storage in memory; clones are handles of the same storage.
#[derive(Debug)]
pub(crate) struct MutantStorage {
    shared: Arc<Shared>,
    /// Whose `close` this handle obeys: the storage's, or under
    /// [`Mutation::CloseClosesOneHandle`] its own.
    admission: Arc<Admission>,
    mutation: Option<Mutation>,
}

#[derive(Debug, Default)]
struct Shared {
    admission: Arc<Admission>,
    clock: StorageClock,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// In append order.
    events: Vec<StoredEvent>,
    bookmarks: BTreeMap<String, Bookmark>,
}

impl State {
    fn event(&self, id: EventId) -> Option<&StoredEvent> {
        self.events.iter().find(|event| event.reference.id == id)
    }

    /// The position the next event gets.
    fn next_position(&self, mutation: Option<Mutation>) -> u64 {
        let count = self.events.len() as u64;
        match mutation {
            Some(Mutation::PositionsFromZero) => count,
            Some(Mutation::PositionsWithGaps) => 2 * count + 1,
            _ => count + 1,
        }
    }

    /// The step from one position to the next.
    fn position_step(mutation: Option<Mutation>) -> u64 {
        if mutation == Some(Mutation::PositionsWithGaps) {
            2
        } else {
            1
        }
    }
}

impl Clone for MutantStorage {
    fn clone(&self) -> Self {
        let admission = if self.is(Mutation::CloseClosesOneHandle) {
            Arc::new(Admission::new())
        } else {
            Arc::clone(&self.admission)
        };
        MutantStorage {
            shared: Arc::clone(&self.shared),
            admission,
            mutation: self.mutation,
        }
    }
}

impl MutantStorage {
    /// A new, empty storage making `mutation`.
    pub(crate) fn new(mutation: Option<Mutation>) -> Self {
        let shared = Arc::new(Shared::default());
        MutantStorage {
            admission: Arc::clone(&shared.admission),
            shared,
            mutation,
        }
    }

    /// Whether this storage makes `mutation`.
    fn is(&self, mutation: Mutation) -> bool {
        self.mutation == Some(mutation)
    }

    /// The state, once `operation` is admitted (the storage open, the input valid).
    fn admit(&self, operation: Operation<'_>) -> StorageResult<MutexGuard<'_, State>> {
        if self.is(Mutation::ClosedCheckedAfterInput) {
            operation.validate()?;
        }
        if self.is(Mutation::InputNotValidated) {
            self.admission.admit(Operation::Read)?;
        } else if self.is(Mutation::InvalidInputNamesNothing) {
            self.admission
                .admit(operation)
                .map_err(|error| match error {
                    EventStorageError::InvalidInput { value, .. } => {
                        EventStorageError::invalid("", value, "")
                    }
                    other => other,
                })?;
        } else {
            self.admission.admit(operation)?;
        }
        Ok(self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether a read of `stream` covers `event`'s stream.
    fn covers(&self, stream: &EventStreamId, event: &StoredEvent, exact: Mutation) -> bool {
        if self.is(exact) {
            *stream == event.stream
        } else {
            stream.covers(&event.stream)
        }
    }
}

#[async_trait]
impl EventStorage for MutantStorage {
    fn name(&self) -> &str {
        "mutant"
    }

    fn supports(&self, capability: Capability) -> bool {
        match capability {
            Capability::FencedWrites => self.is(Mutation::FencedWritesWithoutLease),
            Capability::Lease => self.is(Mutation::LeaseWithDefaultMethods),
            _ => false,
        }
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
        if events.is_empty() && self.is(Mutation::EmptyBatchSkipsCriteria) {
            return Ok(Vec::new());
        }

        let judged = if self.is(Mutation::CriteriaIgnoreUntil) {
            let mut judged = criteria.clone();
            if let Some(condition) = &mut judged.condition {
                condition.filter.until = None;
            }
            judged
        } else {
            criteria.clone()
        };
        let violating = |event: &&StoredEvent| {
            (self.is(Mutation::CriteriaLookAtEveryStream) || &event.stream == stream)
                && judged.is_violated_by(event)
        };
        let conflicting = if self.is(Mutation::ConflictNamesTheLastMatch) {
            state.events.iter().rev().find(violating)
        } else {
            state.events.iter().find(violating)
        };
        let conflict = match (conflicting, &criteria.condition) {
            (Some(event), Some(condition)) if !self.is(Mutation::CriteriaIgnored) => {
                Some(EventStorageError::optimistic_lock(
                    if self.is(Mutation::StreamInDebugForm) {
                        format!("{stream:?}")
                    } else {
                        stream.to_string()
                    },
                    if self.is(Mutation::OptimisticLockWithoutExpectedLast) {
                        None
                    } else {
                        condition.expected_last
                    },
                    event.reference,
                ))
            }
            _ => None,
        };
        let conflict = match conflict {
            Some(conflict) if self.is(Mutation::RetryCheckedAgainstCriteria) => {
                return Err(conflict);
            }
            conflict => conflict,
        };

        if !self.is(Mutation::IdempotencyIgnored) {
            let keys: Vec<&str> = idempotency::keys(&events).collect();
            let under_keys: Vec<StoredEvent> = state
                .events
                .iter()
                .filter(|event| {
                    self.is(Mutation::IdempotencyKeysAcrossStreams) || &event.stream == stream
                })
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
        }
        if let Some(conflict) = conflict {
            return Err(conflict);
        }

        let batch_time = self.shared.clock.now();
        let first = state.next_position(self.mutation);
        let step = State::position_step(self.mutation);
        let stored: Vec<StoredEvent> = events
            .into_iter()
            .enumerate()
            .map(|(index, event)| StoredEvent {
                stream: stream.clone(),
                event_type: event.event_type,
                reference: EventReference::at(EventId::new(), first + index as u64 * step),
                payload: event.payload,
                tags: event.tags,
                timestamp: if self.is(Mutation::TimestampPerEvent) {
                    self.shared.clock.now()
                } else {
                    batch_time
                },
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
        let beyond = |event: &StoredEvent| match after {
            None => true,
            Some(_) if self.is(Mutation::QueryIgnoresAfter) => true,
            Some(after) if self.is(Mutation::AfterInclusive) => {
                event.reference.order_key() >= after.order_key()
            }
            Some(after)
                if direction == Direction::Backward
                    && self.is(Mutation::BackwardAfterInReadingOrder) =>
            {
                event.reference.order_key() < after.order_key()
            }
            Some(after) if self.is(Mutation::AfterBreaksTiesById) => event.reference > *after,
            Some(after) => event.reference.order_key() > after.order_key(),
        };
        // `stream = $1 AND after AND a OR b`: the items after the first beside the bounds.
        let (bounded, beside) = if self.is(Mutation::OrItemsBesideTheStream) {
            let (first, rest) = filter.items.split_at(filter.items.len().min(1));
            let part = |items: &[FilterItem]| EventFilter {
                items: items.to_vec(),
                until: filter.until,
            };
            (part(first), part(rest))
        } else {
            (filter.clone(), EventFilter::match_none())
        };
        let matching = state.events.iter().filter(|event| {
            (self.covers(stream, event, Mutation::QueryIgnoresWildcards)
                && beyond(event)
                && bounded.matches(event))
                || beside.matches(event)
        });
        let limit = if self.is(Mutation::LimitIgnored) {
            usize::MAX
        } else {
            limit.as_usize()
        };
        let events = match direction {
            Direction::Forward => matching.take(limit).cloned().collect(),
            Direction::Backward
                if self.is(Mutation::BackwardLimitFromTheOldest)
                    || (after.is_some()
                        && self.is(Mutation::BackwardAfterLimitFromTheReference)) =>
            {
                let mut oldest: Vec<StoredEvent> = matching.take(limit).cloned().collect();
                oldest.reverse();
                oldest
            }
            Direction::Backward => matching.rev().take(limit).cloned().collect(),
        };
        Ok(events)
    }

    fn read<'a>(&'a self, request: ReadRequest) -> ReadStream<'a> {
        if request.payloads == Payloads::Raw
            && self.is(Mutation::RawQueryAfterClose)
            && self.admission.admit(Operation::Read).is_err()
        {
            // Closed: read on regardless, as a raw read that forgot the check would.
            let open = MutantStorage {
                admission: Arc::new(Admission::new()),
                ..self.clone()
            };
            return event_stream::whole(async move {
                event_stream::collect(event_stream::default_read(&open, request)).await
            });
        }
        event_stream::default_read(self, request)
    }

    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        let state = self.admit(Operation::Read)?;
        if self.is(Mutation::EventByIdIgnoresTheId) {
            return Ok(state.events.first().cloned());
        }
        Ok(state.event(id).cloned())
    }

    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        let state = self.admit(Operation::Head { stream })?;
        let covered =
            |event: &&StoredEvent| self.covers(stream, event, Mutation::HeadIgnoresWildcards);
        let last = if self.is(Mutation::HeadIsTheFirstEvent) {
            state.events.iter().find(covered)
        } else {
            state.events.iter().rev().find(covered)
        };
        Ok(last.map(|event| event.reference))
    }

    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        if self.is(Mutation::BookmarkEventBeforeReader) {
            let known = self.admit(Operation::Read)?.event(reference.id).is_some();
            if !known {
                return Err(EventStorageError::unknown_event(reference.id));
            }
        }
        let mut state = self.admit(Operation::Bookmark {
            reader,
            tags: &tags,
        })?;
        let stored = match state.event(reference.id) {
            Some(event) if !self.is(Mutation::BookmarkInTheCallersCoordinates) => event.reference,
            Some(_) => *reference,
            None if self.is(Mutation::BookmarkOfAnUnknownEventAccepted) => *reference,
            None => return Err(EventStorageError::unknown_event(reference.id)),
        };
        let updated_at = match state.bookmarks.get(reader) {
            Some(previous) if self.is(Mutation::BookmarkUpdateTimeNotMoved) => previous.updated_at,
            _ => self.shared.clock.now(),
        };
        let tags = match state.bookmarks.get(reader) {
            Some(previous) if self.is(Mutation::BookmarkTagsKept) => previous.tags.clone(),
            _ => tags,
        };
        let bookmark = Bookmark {
            reader: reader.to_owned(),
            reference: stored,
            tags,
            updated_at,
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
        let removed = self
            .admit(Operation::Reader { reader })?
            .bookmarks
            .remove(reader);
        if removed.is_none() && self.is(Mutation::RemovingNoBookmarkFails) {
            return Err(EventStorageError::invalid(
                "reader",
                reader,
                "has no bookmark to remove",
            ));
        }
        Ok(())
    }

    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        let state = self.admit(Operation::Read)?;
        let mut bookmarks: Vec<Bookmark> = state.bookmarks.values().cloned().collect();
        if self.is(Mutation::BookmarksNotOrderedByReader) {
            bookmarks.sort_by_key(|bookmark| std::cmp::Reverse(bookmark.updated_at));
        }
        Ok(bookmarks)
    }

    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        if self.is(Mutation::LeaseMethodWithoutLease) {
            drop(self.admit(Operation::Read)?);
            return Ok(Vec::new());
        }
        Err(EventStorageError::unsupported("get_leases", self.name()))
    }

    async fn close(&self) -> StorageResult<()> {
        if self.is(Mutation::SecondCloseFails) {
            self.admission.admit(Operation::Read)?;
        }
        self.admission.close();
        Ok(())
    }
}
