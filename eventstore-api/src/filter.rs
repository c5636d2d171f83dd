//! DCB queries: which events a read or an append condition is about.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::{EventReference, EventType, StoredEvent, Tags};

/// One alternative of an [`EventFilter`]: an event matches when its type is one of `types`
/// (any type when `types` is `None`) and it carries every tag of `tags`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FilterItem {
    /// The accepted types; `None` accepts every type, an empty set none.
    pub types: Option<BTreeSet<EventType>>,
    /// Tags the event must all carry.
    pub tags: Tags,
}

impl FilterItem {
    /// Whether `event` satisfies this item.
    pub fn matches(&self, event: &StoredEvent) -> bool {
        self.types
            .as_ref()
            .is_none_or(|types| types.contains(&event.event_type))
            && event.tags.contains_all(&self.tags)
    }
}

/// A DCB query: the OR of its items, optionally bounded above by `until`.
///
/// # Examples
/// ```
/// use eventstore_api::{EventFilter, Tags};
/// // every OrderPlaced or OrderCancelled of customer c-1, or anything tagged region:eu
/// let filter = EventFilter::for_events(["OrderPlaced", "OrderCancelled"], Tags::from_pairs([("customer", "c-1")]))
///     .or(EventFilter::for_tags(Tags::from_pairs([("region", "eu")])));
/// assert_eq!(filter.items.len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventFilter {
    /// The alternatives; an event matches when any one matches. No items match nothing.
    pub items: Vec<FilterItem>,
    /// Inclusive upper bound: events after it never match.
    pub until: Option<EventReference>,
}

impl EventFilter {
    /// Matches every event.
    pub fn match_all() -> Self {
        EventFilter::of_item(None, Tags::none())
    }

    /// Matches no event.
    pub fn match_none() -> Self {
        EventFilter {
            items: Vec::new(),
            until: None,
        }
    }

    /// Matches events of any of `types`.
    pub fn for_types<T: Into<EventType>>(types: impl IntoIterator<Item = T>) -> Self {
        EventFilter::of_item(
            Some(types.into_iter().map(Into::into).collect()),
            Tags::none(),
        )
    }

    /// Matches events that carry every tag of `tags`.
    pub fn for_tags(tags: Tags) -> Self {
        EventFilter::of_item(None, tags)
    }

    /// Matches events of any of `types` that carry every tag of `tags`.
    pub fn for_events<T: Into<EventType>>(types: impl IntoIterator<Item = T>, tags: Tags) -> Self {
        EventFilter::of_item(Some(types.into_iter().map(Into::into).collect()), tags)
    }

    /// Matches what either filter matches, up to one bound: a bound ([`EventFilter::until`])
    /// belongs to the whole filter, not to its items, so the result keeps the earlier bound
    /// of the two, and a bound on either side bounds the other side's items too. To bound
    /// one side only, read it with a filter of its own.
    pub fn or(mut self, other: EventFilter) -> Self {
        self.items.extend(other.items);
        self.until = match (self.until, other.until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self
    }

    /// This filter, matching only events at or before `reference`.
    pub fn until(mut self, reference: EventReference) -> Self {
        self.until = Some(reference);
        self
    }

    /// Whether `event` matches.
    pub fn matches(&self, event: &StoredEvent) -> bool {
        self.until
            .is_none_or(|until| event.reference.order_key() <= until.order_key())
            && self.items.iter().any(|item| item.matches(event))
    }

    /// Whether this filter matches every event (ignoring `until`).
    pub fn is_match_all(&self) -> bool {
        self.items
            .iter()
            .any(|item| item.types.is_none() && item.tags.is_empty())
    }

    fn of_item(types: Option<BTreeSet<EventType>>, tags: Tags) -> Self {
        EventFilter {
            items: vec![FilterItem { types, tags }],
            until: None,
        }
    }
}

/// The condition of a conditional append.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AppendCondition {
    /// Which events of the stream the decision depended on.
    pub filter: EventFilter,
    /// The last of them the caller saw; `None` when it saw none.
    pub expected_last: Option<EventReference>,
}

/// When an append may go ahead (DCB: "nothing I decided on has changed").
///
/// The append fails with [`crate::EventStorageError::OptimisticLock`] when an event of the
/// stream matching the filter lies after `expected_last` (or exists at all when that is
/// `None`). The check and the write are one atomic step.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct AppendCriteria {
    /// The condition, or `None` to append unconditionally.
    pub condition: Option<AppendCondition>,
}

impl AppendCriteria {
    /// Append unconditionally.
    pub fn none() -> Self {
        AppendCriteria { condition: None }
    }

    /// Append only when no event matching `filter` lies after `expected_last`.
    pub fn of(filter: EventFilter, expected_last: Option<EventReference>) -> Self {
        AppendCriteria {
            condition: Some(AppendCondition {
                filter,
                expected_last,
            }),
        }
    }

    /// Whether `event`, already stored in the stream appended to, breaks the condition.
    pub fn is_violated_by(&self, event: &StoredEvent) -> bool {
        self.condition.as_ref().is_some_and(|condition| {
            condition
                .expected_last
                .is_none_or(|last| event.reference.order_key() > last.order_key())
                && condition.filter.matches(event)
        })
    }
}

/// How many events a query returns at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Limit(pub Option<u64>);

impl Limit {
    /// No limit.
    pub fn none() -> Self {
        Limit(None)
    }

    /// At most `n` events.
    pub fn to(n: u64) -> Self {
        Limit(Some(n))
    }

    /// The limit as a count, `usize::MAX` when unlimited.
    pub fn as_usize(self) -> usize {
        self.0
            .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX))
    }
}

/// The order a query returns events in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Direction {
    /// Oldest first.
    #[default]
    Forward,
    /// Newest first.
    Backward,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventId, EventStreamId};
    use chrono::Utc;

    fn event(position: u64, event_type: &str, tags: Tags) -> StoredEvent {
        StoredEvent {
            stream: EventStreamId::for_context("c"),
            event_type: event_type.into(),
            reference: EventReference::at(EventId::new(), position),
            payload: serde_json::Value::Null,
            tags,
            timestamp: Utc::now(),
            idempotency_key: None,
        }
    }

    #[test]
    fn items_are_or_ed_and_tags_inside_an_item_are_and_ed() {
        let a = event(1, "A", Tags::from_pairs([("x", "1"), ("y", "2")]));
        let b = event(2, "B", Tags::from_pairs([("x", "1")]));
        let f = EventFilter::for_events(["A"], Tags::from_pairs([("x", "1"), ("y", "2")]));
        assert!(f.matches(&a) && !f.matches(&b));
        let f = f.or(EventFilter::for_types(["B"]));
        assert!(f.matches(&a) && f.matches(&b));
        assert!(!EventFilter::match_none().matches(&a));
        assert!(EventFilter::match_all().matches(&b));
        assert!(!EventFilter::match_all().until(a.reference).matches(&b));
    }

    #[test]
    fn criteria_are_violated_only_by_matching_events_after_the_expected_last() {
        let a = event(1, "A", Tags::none());
        let b = event(2, "A", Tags::none());
        let criteria = AppendCriteria::of(EventFilter::for_types(["A"]), Some(a.reference));
        assert!(!criteria.is_violated_by(&a));
        assert!(criteria.is_violated_by(&b));
        assert!(AppendCriteria::of(EventFilter::for_types(["A"]), None).is_violated_by(&a));
        assert!(!AppendCriteria::of(EventFilter::for_types(["B"]), None).is_violated_by(&a));
        assert!(!AppendCriteria::none().is_violated_by(&a));
    }
}
