//! The in-memory index of the log: for each position, where its event lies on disk and what
//! queries select it by (stream, type, tags, id, idempotency key), never its payload.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

use eventstore_api::{
    AppendCondition, Direction, EventFilter, EventId, EventReference, EventStreamId, Limit,
};
use uuid::Uuid;

use crate::log::names::{stream_name, tag_name, Names};

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
    /// Where the event's sorted tag numbers start in [`EventIndex::tag_arena`].
    tags_start: u32,
    /// How many tags the event has.
    tags_len: u32,
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
    /// Positions of each type's events, by type number.
    type_positions: Vec<Vec<u64>>,
    tags: Names,
    /// Every event's sorted tag numbers, one after the other: one allocation for all events
    /// instead of one per event.
    tag_arena: Vec<u32>,
    /// Positions of each tag's events, by tag number.
    tag_positions: Vec<Vec<u64>>,
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
        for &tag in &tags {
            posting_list(&mut self.tag_positions, tag).push(position);
        }
        // Fails only past 2^32 tags (48 GiB of index); a durable event cannot be refused here.
        #[allow(clippy::expect_used)]
        let tags_start =
            u32::try_from(self.tag_arena.len()).expect("fewer than 2^32 tags in one log");
        self.tag_arena.extend_from_slice(&tags);
        let event_type = self.types.intern(event.event_type);
        posting_list(&mut self.type_positions, event_type).push(position);
        self.entries.push(Entry {
            id: event.id.0,
            stream,
            event_type,
            tags_start,
            tags_len: tags.len() as u32,
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

    /// Where the event of `stream` stored with idempotency key `key` lies, if there is one.
    pub(crate) fn locate_key(
        &self,
        stream: &EventStreamId,
        key: &str,
    ) -> Option<(Arc<File>, Location)> {
        let stream = self.stream_number(stream)?;
        let position = *self.stream_keys[stream as usize].get(key)?;
        Some(self.locate(position))
    }

    /// The first event of `stream` that breaks `condition`, if any.
    pub(crate) fn first_violation(
        &self,
        stream: &EventStreamId,
        condition: &AppendCondition,
    ) -> Option<EventReference> {
        let stream = self.stream_number(stream)?;
        let filter = self.compile(&condition.filter);
        let positions = self.narrowest(
            Cow::Borrowed(&self.stream_positions[stream as usize]),
            &filter,
        );
        let lowest = condition.expected_last.map_or(0, lowest_position);
        let start = positions.partition_point(|&position| position < lowest);
        // The positions may come from a posting list, which spans every stream.
        positions[start..]
            .iter()
            .filter(|&&position| self.entry(position).stream == stream)
            .map(|&position| self.reference_at(position))
            .find(|reference| {
                condition
                    .expected_last
                    .is_none_or(|last| reference.order_key() > last.order_key())
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
        let listed = match &scope {
            Scope::One(stream) => Some(self.narrowest(
                Cow::Borrowed(&self.stream_positions[*stream as usize]),
                &filter,
            )),
            _ => self.filter_positions(&filter),
        };
        let candidates: Box<dyn DoubleEndedIterator<Item = u64> + '_> = match &listed {
            Some(positions) => {
                let start = positions.partition_point(|&position| position < lowest);
                let end = positions.partition_point(|&position| position <= highest);
                Box::new(positions[start..end].iter().copied())
            }
            None => Box::new(lowest..=highest),
        };
        let candidates: Box<dyn Iterator<Item = u64> + '_> = match direction {
            Direction::Forward => candidates,
            Direction::Backward => Box::new(candidates.rev()),
        };
        candidates
            .filter(|&position| self.covers(&scope, position))
            .map(|position| (position, self.reference_at(position)))
            .filter(|(_, reference)| {
                after.is_none_or(|after| reference.order_key() > after.order_key())
            })
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
            Scope::Some(covered) => covered
                .iter()
                .zip(&self.stream_positions)
                .filter(|(covered, _)| **covered)
                .filter_map(|(_, positions)| positions.last().copied())
                .max(),
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

    /// `positions`, or the filter's own candidate positions when those are fewer.
    fn narrowest<'a>(
        &'a self,
        positions: Cow<'a, [u64]>,
        filter: &CompiledFilter,
    ) -> Cow<'a, [u64]> {
        match self.filter_positions(filter) {
            Some(candidates) if candidates.len() < positions.len() => candidates,
            _ => positions,
        }
    }

    /// The positions that can match `filter`, ascending, from the tag and type posting lists;
    /// `None` when an item restricts neither (so every event is a candidate).
    fn filter_positions(&self, filter: &CompiledFilter) -> Option<Cow<'_, [u64]>> {
        let mut lists: Vec<&[u64]> = Vec::new();
        for item in &filter.items {
            let shortest_tag = item
                .tags
                .iter()
                .map(|&tag| self.tag_positions[tag as usize].as_slice())
                .min_by_key(|positions| positions.len());
            match (shortest_tag, &item.types) {
                (Some(positions), Some(types))
                    if types.len() == 1
                        && self.type_positions[types[0] as usize].len() < positions.len() =>
                {
                    lists.push(&self.type_positions[types[0] as usize]);
                }
                (Some(positions), _) => lists.push(positions),
                (None, Some(types)) => lists.extend(
                    types
                        .iter()
                        .map(|&event_type| self.type_positions[event_type as usize].as_slice()),
                ),
                (None, None) => return None,
            }
        }
        Some(match lists.as_slice() {
            [] => Cow::Borrowed(&[]),
            [only] => Cow::Borrowed(*only),
            many => {
                let mut merged: Vec<u64> = many.concat();
                merged.sort_unstable();
                merged.dedup();
                Cow::Owned(merged)
            }
        })
    }

    fn matches(&self, filter: &CompiledFilter, reference: &EventReference) -> bool {
        if filter
            .until
            .is_some_and(|until| reference.order_key() > until.order_key())
        {
            return false;
        }
        let entry = self.entry(reference.position);
        let start = entry.tags_start as usize;
        let tags = &self.tag_arena[start..start + entry.tags_len as usize];
        filter.items.iter().any(|item| {
            item.types
                .as_ref()
                .is_none_or(|types| types.binary_search(&entry.event_type).is_ok())
                && item.tags.iter().all(|tag| tags.binary_search(tag).is_ok())
        })
    }
}

/// The posting list of `number`, created when new.
fn posting_list(lists: &mut Vec<Vec<u64>>, number: u32) -> &mut Vec<u64> {
    let number = number as usize;
    if number == lists.len() {
        lists.push(Vec::new());
    }
    &mut lists[number]
}

/// The lowest position that can lie after (or at) `reference` in the reference order.
fn lowest_position(reference: EventReference) -> u64 {
    reference.tx.min(reference.position)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use eventstore_api::{AppendCriteria, StoredEvent, Tags};

    /// Events over three streams, three types and overlapping tags, indexed and as stored.
    fn sample() -> (EventIndex, Vec<StoredEvent>) {
        let mut index = EventIndex::default();
        index.add_segment(Arc::new(tempfile::tempfile().unwrap()));
        let mut stored = Vec::new();
        for position in 1..=240u64 {
            let stream = EventStreamId::new(
                ["a", "b"][position as usize % 2],
                ["x", "y", "z"][position as usize % 3],
            );
            let event_type = ["T0", "T1", "T2"][position as usize % 3 / 2 + position as usize % 2];
            let tags = Tags::from_pairs(
                [
                    ("m2", position % 2),
                    ("m5", position % 5),
                    ("m7", position % 7),
                ]
                .into_iter()
                .filter(|(_, value)| *value < 3)
                .map(|(key, value)| (key, value.to_string())),
            );
            let event = StoredEvent {
                stream: stream.clone(),
                event_type: event_type.into(),
                reference: EventReference::at(EventId::new(), position),
                payload: serde_json::Value::Null,
                tags,
                timestamp: Utc::now(),
                idempotency_key: None,
            };
            index.insert(&IndexedEvent {
                id: event.reference.id,
                context: stream.context.as_deref().unwrap(),
                purpose: stream.purpose.as_deref().unwrap(),
                event_type,
                tags: event
                    .tags
                    .iter()
                    .map(|t| (t.key.as_str(), t.value.as_str()))
                    .collect(),
                idempotency_key: None,
                location: Location {
                    segment: 0,
                    length: 1,
                    offset: position,
                },
            });
            stored.push(event);
        }
        (index, stored)
    }

    fn filters(stored: &[StoredEvent]) -> Vec<EventFilter> {
        let tags = |pairs: &[(&str, &str)]| Tags::from_pairs(pairs.iter().copied());
        vec![
            EventFilter::match_all(),
            EventFilter::match_none(),
            EventFilter::for_types(["T1"]),
            EventFilter::for_types(["T0", "T2", "Unknown"]),
            EventFilter::for_tags(tags(&[("m5", "1")])),
            EventFilter::for_tags(tags(&[("m5", "1"), ("m7", "2")])),
            EventFilter::for_tags(tags(&[("m5", "9")])),
            EventFilter::for_events(["T1"], tags(&[("m2", "0")])),
            EventFilter::for_events(["T1", "T2"], tags(&[("m7", "0")]))
                .or(EventFilter::for_tags(tags(&[("m5", "2")]))),
            EventFilter::for_tags(tags(&[("m2", "1")])).until(stored[99].reference),
            EventFilter::for_types(["T0"]).or(EventFilter::match_all()),
        ]
    }

    #[test]
    fn select_agrees_with_the_filter_semantics_on_every_path() {
        let (index, stored) = sample();
        let streams = [
            EventStreamId::any(),
            EventStreamId::new("a", "x"),
            EventStreamId::for_context("b").any_purpose(),
            EventStreamId {
                context: None,
                purpose: Some("y".into()),
            },
            EventStreamId::new("nope", "x"),
        ];
        let afters = [None, Some(stored[0].reference), Some(stored[150].reference)];
        for stream in &streams {
            let expected = stored
                .iter()
                .rev()
                .find(|event| stream.covers(&event.stream))
                .map(|event| event.reference);
            assert_eq!(index.head(stream), expected, "head of {stream}");
        }
        for filter in filters(&stored) {
            for stream in &streams {
                for after in afters {
                    for (direction, limit) in [
                        (Direction::Forward, Limit::none()),
                        (Direction::Forward, Limit::to(7)),
                        (Direction::Backward, Limit::none()),
                        (Direction::Backward, Limit::to(7)),
                    ] {
                        let mut expected: Vec<u64> = stored
                            .iter()
                            .filter(|event| stream.covers(&event.stream) && filter.matches(event))
                            .filter(|event| {
                                after.is_none_or(|after| {
                                    event.reference.order_key() > after.order_key()
                                })
                            })
                            .map(|event| event.reference.position)
                            .collect();
                        if direction == Direction::Backward {
                            expected.reverse();
                        }
                        expected.truncate(limit.as_usize());
                        let found: Vec<u64> = index
                            .select(&filter, stream, after.as_ref(), limit, direction)
                            .iter()
                            .map(|(_, location)| location.offset)
                            .collect();
                        assert_eq!(
                            found, expected,
                            "{filter:?} on {stream} after {after:?} {direction:?} {limit:?}"
                        );
                    }
                }
            }
            let append_stream = EventStreamId::new("b", "z");
            for expected_last in [
                None,
                Some(stored[10].reference),
                Some(stored[200].reference),
            ] {
                let criteria = AppendCriteria::of(filter.clone(), expected_last);
                let expected = stored
                    .iter()
                    .find(|event| event.stream == append_stream && criteria.is_violated_by(event))
                    .map(|event| event.reference);
                let condition = criteria.condition.as_ref().unwrap();
                assert_eq!(
                    index.first_violation(&append_stream, condition),
                    expected,
                    "{filter:?}"
                );
            }
        }
    }
}
