//! The in-memory index of the log: for each position, where its event lies on disk and what
//! queries select it by (stream, type, tags, id, idempotency key), never its payload.

use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

use eventstore_api::{
    AppendCondition, Direction, EventFilter, EventId, EventReference, EventStreamId, Limit,
};
use uuid::Uuid;

use crate::names::{stream_name, tag_name, Names};

/// Where one event's bytes lie: segment number, offset in it, and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    pub(crate) segment: u32,
    pub(crate) length: u32,
    pub(crate) offset: u64,
}

#[derive(Debug)]
struct Entry {
    id: Uuid,
    stream: u32,
    event_type: u32,
    /// Sorted tag numbers.
    tags: Box<[u32]>,
    location: Location,
}

/// What the index needs to know of an event to place it.
#[derive(Debug)]
pub(crate) struct IndexedEvent<'a> {
    pub(crate) id: EventId,
    pub(crate) context: &'a str,
    pub(crate) purpose: &'a str,
    pub(crate) event_type: &'a str,
    pub(crate) tags: Vec<(&'a str, &'a str)>,
    pub(crate) idempotency_key: Option<&'a str>,
    pub(crate) location: Location,
}

/// The index; position `p` is `entries[p - 1]`.
#[derive(Debug, Default)]
pub(crate) struct EventIndex {
    entries: Vec<Entry>,
    by_id: HashMap<Uuid, u64>,
    stream_names: Names,
    streams: Vec<EventStreamId>,
    stream_positions: Vec<Vec<u64>>,
    stream_keys: Vec<HashMap<Box<str>, u64>>,
    types: Names,
    tags: Names,
    segments: Vec<Arc<File>>,
    scratch: String,
}

/// A filter translated into numbers; items that can match nothing are gone.
#[derive(Debug)]
struct CompiledFilter {
    items: Vec<CompiledItem>,
    until: Option<EventReference>,
}

#[derive(Debug)]
struct CompiledItem {
    /// Sorted type numbers; `None` accepts every type.
    types: Option<Vec<u32>>,
    tags: Vec<u32>,
}

/// Which streams a read covers.
enum Scope {
    Nothing,
    One(u32),
    Some(Vec<bool>),
    All,
}

impl EventIndex {
    /// The position the next event gets.
    pub(crate) fn next_position(&self) -> u64 {
        self.entries.len() as u64 + 1
    }

    /// How many events there are.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Makes segment number `segments().len()` readable.
    pub(crate) fn add_segment(&mut self, file: Arc<File>) {
        self.segments.push(file);
    }

    /// Places `event` at [`EventIndex::next_position`].
    pub(crate) fn insert(&mut self, event: &IndexedEvent<'_>) {
        let position = self.next_position();
        stream_name(&mut self.scratch, event.context, event.purpose);
        let stream = match self.stream_names.get(&self.scratch) {
            Some(stream) => stream,
            None => {
                let stream = self.stream_names.intern(&self.scratch);
                self.streams
                    .push(EventStreamId::new(event.context, event.purpose));
                self.stream_positions.push(Vec::new());
                self.stream_keys.push(HashMap::new());
                stream
            }
        };
        let mut tags: Vec<u32> = event
            .tags
            .iter()
            .map(|&(key, value)| {
                tag_name(&mut self.scratch, key, value);
                self.tags.intern(&self.scratch)
            })
            .collect();
        tags.sort_unstable();
        tags.dedup();
        self.entries.push(Entry {
            id: event.id.0,
            stream,
            event_type: self.types.intern(event.event_type),
            tags: tags.into_boxed_slice(),
            location: event.location,
        });
        self.by_id.insert(event.id.0, position);
        self.stream_positions[stream as usize].push(position);
        if let Some(key) = event.idempotency_key {
            self.stream_keys[stream as usize].insert(key.into(), position);
        }
    }

    /// The storage's reference of the event with `id`.
    pub(crate) fn reference_of(&self, id: EventId) -> Option<EventReference> {
        self.by_id
            .get(&id.0)
            .map(|&position| EventReference::at(id, position))
    }

    /// Where the event with `id` lies.
    pub(crate) fn locate_id(&self, id: EventId) -> Option<(Arc<File>, Location)> {
        let position = *self.by_id.get(&id.0)?;
        Some(self.locate(position))
    }

    /// Whether `stream` holds an event with idempotency key `key`.
    pub(crate) fn has_key(&self, stream: &EventStreamId, key: &str) -> bool {
        self.stream_number(stream)
            .is_some_and(|stream| self.stream_keys[stream as usize].contains_key(key))
    }

    /// The first event of `stream` that breaks `condition`, if any.
    pub(crate) fn first_violation(
        &self,
        stream: &EventStreamId,
        condition: &AppendCondition,
    ) -> Option<EventReference> {
        let stream = self.stream_number(stream)?;
        let filter = self.compile(&condition.filter);
        let positions = &self.stream_positions[stream as usize];
        let lowest = condition.expected_last.map_or(0, lowest_position);
        let start = positions.partition_point(|&position| position < lowest);
        positions[start..]
            .iter()
            .map(|&position| self.reference_at(position))
            .find(|reference| {
                condition.expected_last.is_none_or(|last| *reference > last)
                    && self.matches(&filter, reference)
            })
    }

    /// Where the events a query returns lie, in the order it returns them.
    pub(crate) fn select(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> Vec<(Arc<File>, Location)> {
        let filter = self.compile(filter);
        let scope = self.scope(stream);
        if filter.items.is_empty() || matches!(scope, Scope::Nothing) || limit.0 == Some(0) {
            return Vec::new();
        }
        let lowest = after.map_or(1, |after| lowest_position(*after).max(1));
        let highest = filter
            .until
            .map_or(u64::MAX, |until| until.tx.max(until.position))
            .min(self.entries.len() as u64);
        if lowest > highest {
            return Vec::new();
        }
        let candidates: Box<dyn DoubleEndedIterator<Item = u64> + '_> = match &scope {
            Scope::One(stream) => {
                let positions = &self.stream_positions[*stream as usize];
                let start = positions.partition_point(|&position| position < lowest);
                let end = positions.partition_point(|&position| position <= highest);
                Box::new(positions[start..end].iter().copied())
            }
            _ => Box::new(lowest..=highest),
        };
        let candidates: Box<dyn Iterator<Item = u64> + '_> = match direction {
            Direction::Forward => candidates,
            Direction::Backward => Box::new(candidates.rev()),
        };
        candidates
            .filter(|&position| self.covers(&scope, position))
            .map(|position| (position, self.reference_at(position)))
            .filter(|(_, reference)| after.is_none_or(|after| reference > after))
            .filter(|(_, reference)| self.matches(&filter, reference))
            .take(limit.as_usize())
            .map(|(position, _)| self.locate(position))
            .collect()
    }

    /// The reference of the last event of the streams `stream` covers.
    pub(crate) fn head(&self, stream: &EventStreamId) -> Option<EventReference> {
        let position = match self.scope(stream) {
            Scope::Nothing => None,
            Scope::All => (!self.entries.is_empty()).then_some(self.entries.len() as u64),
            Scope::One(stream) => self.stream_positions[stream as usize].last().copied(),
            scope @ Scope::Some(_) => (1..=self.entries.len() as u64)
                .rev()
                .find(|&position| self.covers(&scope, position)),
        }?;
        Some(self.reference_at(position))
    }

    fn entry(&self, position: u64) -> &Entry {
        &self.entries[(position - 1) as usize]
    }

    fn reference_at(&self, position: u64) -> EventReference {
        EventReference::at(EventId(self.entry(position).id), position)
    }

    fn locate(&self, position: u64) -> (Arc<File>, Location) {
        let location = self.entry(position).location;
        (
            Arc::clone(&self.segments[location.segment as usize]),
            location,
        )
    }

    fn stream_number(&self, stream: &EventStreamId) -> Option<u32> {
        let (Some(context), Some(purpose)) = (&stream.context, &stream.purpose) else {
            return None;
        };
        let mut name = String::with_capacity(context.len() + purpose.len() + 1);
        stream_name(&mut name, context, purpose);
        self.stream_names.get(&name)
    }

    fn scope(&self, stream: &EventStreamId) -> Scope {
        if stream.context.is_none() && stream.purpose.is_none() {
            return Scope::All;
        }
        if stream.is_concrete() {
            return self
                .stream_number(stream)
                .map_or(Scope::Nothing, Scope::One);
        }
        let covered: Vec<bool> = self
            .streams
            .iter()
            .map(|candidate| stream.covers(candidate))
            .collect();
        if covered.iter().any(|&covered| covered) {
            Scope::Some(covered)
        } else {
            Scope::Nothing
        }
    }

    fn covers(&self, scope: &Scope, position: u64) -> bool {
        match scope {
            Scope::Nothing => false,
            Scope::All => true,
            Scope::One(stream) => self.entry(position).stream == *stream,
            Scope::Some(covered) => covered[self.entry(position).stream as usize],
        }
    }

    fn compile(&self, filter: &EventFilter) -> CompiledFilter {
        let mut name = String::new();
        let items = filter
            .items
            .iter()
            .filter_map(|item| {
                let types = match &item.types {
                    None => None,
                    Some(types) => {
                        let mut known: Vec<u32> = types
                            .iter()
                            .filter_map(|event_type| self.types.get(event_type.as_str()))
                            .collect();
                        if known.is_empty() {
                            return None;
                        }
                        known.sort_unstable();
                        Some(known)
                    }
                };
                let tags = item
                    .tags
                    .iter()
                    .map(|tag| {
                        tag_name(&mut name, &tag.key, &tag.value);
                        self.tags.get(&name)
                    })
                    .collect::<Option<Vec<u32>>>()?;
                Some(CompiledItem { types, tags })
            })
            .collect();
        CompiledFilter {
            items,
            until: filter.until,
        }
    }

    fn matches(&self, filter: &CompiledFilter, reference: &EventReference) -> bool {
        if filter.until.is_some_and(|until| *reference > until) {
            return false;
        }
        let entry = self.entry(reference.position);
        filter.items.iter().any(|item| {
            item.types
                .as_ref()
                .is_none_or(|types| types.binary_search(&entry.event_type).is_ok())
                && item
                    .tags
                    .iter()
                    .all(|tag| entry.tags.binary_search(tag).is_ok())
        })
    }
}

/// The lowest position that can lie after (or at) `reference` in the reference order.
fn lowest_position(reference: EventReference) -> u64 {
    reference.tx.min(reference.position)
}
