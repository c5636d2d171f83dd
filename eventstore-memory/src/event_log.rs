//! The events of a memory storage, with the indexes that keep reads and checks cheap.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use eventstore_api::idempotency::{self, Idempotency};
use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventId, EventReference, EventStorageError,
    EventStreamId, EventToStore, Limit, StoredEvent,
};

/// All events in append order; the event at index `i` has position `i + 1`.
#[derive(Debug, Default)]
pub(crate) struct EventLog {
    events: Vec<Arc<StoredEvent>>,
    by_id: HashMap<EventId, usize>,
    /// Indexes of each stream's events, ascending.
    by_stream: HashMap<EventStreamId, Vec<usize>>,
    /// Each stream's idempotency keys and the index of the event stored with each.
    keys: HashMap<EventStreamId, HashMap<String, usize>>,
}

/// What an append did.
pub(crate) enum Appended {
    /// The events were written; they are returned as stored.
    Written(Vec<StoredEvent>),
    /// Idempotency answered a retry with the events stored before; nothing was written.
    Retried(Vec<StoredEvent>),
}

impl EventLog {
    /// Appends a validated batch to a concrete stream if `criteria` hold, all or nothing.
    pub(crate) fn append(
        &mut self,
        criteria: &AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
        now: DateTime<Utc>,
    ) -> Result<Appended, EventStorageError> {
        if let Idempotency::Retry(stored) = self.judge_keys(stream, &events)? {
            return Ok(Appended::Retried(stored));
        }
        self.check(criteria, stream)?;

        let mut stored = Vec::with_capacity(events.len());
        for event in events {
            let index = self.events.len();
            let position = to_u64(index) + 1;
            let event = Arc::new(StoredEvent {
                stream: stream.clone(),
                event_type: event.event_type,
                reference: EventReference::at(EventId::new(), position),
                payload: event.payload,
                tags: event.tags,
                timestamp: now,
                idempotency_key: event.idempotency_key,
            });
            self.by_id.insert(event.reference.id, index);
            self.by_stream
                .entry(stream.clone())
                .or_default()
                .push(index);
            if let Some(key) = &event.idempotency_key {
                self.keys
                    .entry(stream.clone())
                    .or_default()
                    .insert(key.clone(), index);
            }
            stored.push(StoredEvent::clone(&event));
            self.events.push(event);
        }
        Ok(Appended::Written(stored))
    }

    /// Judges the batch's idempotency keys against the events `stream` stores under them.
    fn judge_keys(
        &self,
        stream: &EventStreamId,
        events: &[EventToStore],
    ) -> Result<Idempotency, EventStorageError> {
        let stored: Vec<StoredEvent> = self.keys.get(stream).map_or_else(Vec::new, |known| {
            idempotency::keys(events)
                .filter_map(|key| known.get(key))
                .map(|&index| StoredEvent::clone(&self.events[index]))
                .collect()
        });
        idempotency::judge(stream, events, &stored)
    }

    /// Fails when an event of `stream` after the expected last one matches the criteria.
    fn check(
        &self,
        criteria: &AppendCriteria,
        stream: &EventStreamId,
    ) -> Result<(), EventStorageError> {
        let Some(condition) = &criteria.condition else {
            return Ok(());
        };
        let indexes = self.by_stream.get(stream).map_or(&[][..], Vec::as_slice);
        let start = condition.expected_last.map_or(0, |last| {
            indexes.partition_point(|&i| self.events[i].reference.order_key() <= last.order_key())
        });
        let conflicting = indexes[start..]
            .iter()
            .map(|&i| &self.events[i])
            .find(|event| criteria.is_violated_by(event));
        match conflicting {
            None => Ok(()),
            Some(event) => Err(EventStorageError::optimistic_lock(
                stream.to_string(),
                condition.expected_last,
                event.reference,
            )),
        }
    }

    /// The matching events of the streams `stream` covers, strictly after `after`.
    pub(crate) fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> Vec<StoredEvent> {
        let candidates: Box<dyn DoubleEndedIterator<Item = &Arc<StoredEvent>> + '_> = if stream
            .is_concrete()
        {
            let indexes = self.by_stream.get(stream).map_or(&[][..], Vec::as_slice);
            let start = after.map_or(0, |after| {
                indexes
                    .partition_point(|&i| self.events[i].reference.order_key() <= after.order_key())
            });
            Box::new(indexes[start..].iter().map(|&i| &self.events[i]))
        } else {
            let start = after.map_or(0, |after| {
                self.events
                    .partition_point(|e| e.reference.order_key() <= after.order_key())
            });
            Box::new(
                self.events[start..]
                    .iter()
                    .filter(|e| stream.covers(&e.stream)),
            )
        };
        let matching = |event: &&Arc<StoredEvent>| filter.matches(event);
        let take = limit.as_usize();
        match direction {
            Direction::Forward => candidates
                // Positions ascend, so nothing after the `until` bound can match.
                .take_while(|event| {
                    filter
                        .until
                        .is_none_or(|until| event.reference.order_key() <= until.order_key())
                })
                .filter(matching)
                .take(take)
                .map(|event| StoredEvent::clone(event))
                .collect(),
            Direction::Backward => candidates
                .rev()
                .filter(matching)
                .take(take)
                .map(|event| StoredEvent::clone(event))
                .collect(),
        }
    }

    /// The event with `id`.
    pub(crate) fn get(&self, id: EventId) -> Option<&StoredEvent> {
        self.by_id.get(&id).map(|&i| &*self.events[i])
    }

    /// The reference of the last event in the streams `stream` covers.
    pub(crate) fn head(&self, stream: &EventStreamId) -> Option<EventReference> {
        if stream.is_concrete() {
            let last = *self.by_stream.get(stream)?.last()?;
            return Some(self.events[last].reference);
        }
        self.events
            .iter()
            .rev()
            .find(|event| stream.covers(&event.stream))
            .map(|event| event.reference)
    }
}

/// `index` as a `u64`, lossless: the assertion keeps `usize` at most 64 bits wide.
fn to_u64(index: usize) -> u64 {
    const _: () = assert!(usize::BITS <= u64::BITS);
    index as u64
}
