//! Scenarios: events.
//!
//! Appends and what they store, the order of references, DCB conditional appends and their
//! atomicity under contention, idempotency keys, every filter shape, stream wildcards,
//! `after`, `limit`, `direction`, `until`, `get_event_by_id`, `head`, and the input every
//! backend refuses alike.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::Arc;

use eventstore_api::validate::{
    MAX_BATCH_BYTES, MAX_FILTER_ITEMS, MAX_NAME_BYTES, MAX_PAYLOAD_DEPTH,
};
use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventId, EventReference, EventStorage,
    EventStorageError, EventStreamId, EventToStore, Limit, RawStoredEvent, StorageResult,
    StoredEvent, Tags,
};
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::Barrier;

use crate::support::{assert_invalid_input, expect_err, ClockWindow};
use crate::StorageFactory;

/// What every scenario of this module needs, unless it declares its own.
pub(crate) const NEEDS: &[eventstore_api::Capability] = &[];

// The scenarios, by topic; each is at this module's root too.
pub(crate) mod conditions;
pub(crate) mod content;
pub(crate) mod filters;
pub(crate) mod idempotency;
pub(crate) mod lookups;
pub(crate) mod reads;
pub(crate) mod round_trip;

pub use self::conditions::*;
pub use self::content::*;
pub use self::filters::*;
pub use self::idempotency::*;
pub use self::lookups::*;
pub use self::reads::*;
pub use self::round_trip::*;

// ---------------------------------------------------------------------------------------
// What the scenarios of this module (and of `bookmarks` and `lifecycle`) share.
// ---------------------------------------------------------------------------------------

/// The stream most scenarios write to: `orders/default`.
pub(crate) fn orders() -> EventStreamId {
    EventStreamId::for_context("orders")
}

/// A second purpose of the `orders` context: `orders/eu`.
fn orders_eu() -> EventStreamId {
    EventStreamId::new("orders", "eu")
}

/// Another context: `billing/default`.
fn billing() -> EventStreamId {
    EventStreamId::for_context("billing")
}

/// An event of `event_type` whose payload carries `label`, so that results can be compared
/// by label.
pub(crate) fn labelled(event_type: &str, label: &str) -> EventToStore {
    EventToStore::new(event_type, json!({ "label": label }))
}

/// Tags from `(key, value)` pairs.
pub(crate) fn tags(pairs: &[(&str, &str)]) -> Tags {
    Tags::from_pairs(pairs.iter().copied())
}

/// The labels of `events`, in order.
fn labels(events: &[StoredEvent]) -> Vec<String> {
    events
        .iter()
        .map(|event| {
            event.payload["label"]
                .as_str()
                .unwrap_or("<unlabelled>")
                .to_owned()
        })
        .collect()
}

/// The references of `events`, in order.
fn references(events: &[StoredEvent]) -> Vec<EventReference> {
    events.iter().map(|event| event.reference).collect()
}

/// Appends `events` unconditionally; panics naming the stream when that fails.
pub(crate) async fn append<S: EventStorage + ?Sized>(
    storage: &S,
    stream: &EventStreamId,
    events: Vec<EventToStore>,
) -> Vec<StoredEvent> {
    let count = events.len();
    let stored = storage
        .append(AppendCriteria::none(), stream, events)
        .await
        .unwrap_or_else(|err| {
            panic!("an unconditional append of valid events succeeds: the append to {stream} failed: {err}")
        });
    assert_eq!(
        stored.len(),
        count,
        "an append answers one stored event per event sent, in order: an append of {count} new \
         events to {stream} answered {stored:?}"
    );
    stored
}

/// Every event of the streams `stream` covers that `filter` matches, oldest first.
async fn read<S: EventStorage + ?Sized>(
    storage: &S,
    filter: &EventFilter,
    stream: &EventStreamId,
) -> Vec<StoredEvent> {
    query(
        storage,
        filter,
        stream,
        None,
        Limit::none(),
        Direction::Forward,
    )
    .await
}

/// Every event of the storage, oldest first.
pub(crate) async fn read_everything<S: EventStorage + ?Sized>(storage: &S) -> Vec<StoredEvent> {
    read(storage, &EventFilter::match_all(), &EventStreamId::any()).await
}

/// `storage.query(..)`, panicking with the arguments when it fails.
async fn query<S: EventStorage + ?Sized>(
    storage: &S,
    filter: &EventFilter,
    stream: &EventStreamId,
    after: Option<&EventReference>,
    limit: Limit,
    direction: Direction,
) -> Vec<StoredEvent> {
    storage
        .query(filter, stream, after, limit, direction)
        .await
        .unwrap_or_else(|err| {
            panic!("a query of valid input answers on an open storage: query of {stream} with {filter:?} after {after:?}, {limit:?}, {direction:?} failed: {err}")
        })
}

/// `storage.get_event_by_id(id)`, panicking with the id when it fails.
async fn event_by_id<S: EventStorage + ?Sized>(storage: &S, id: EventId) -> Option<StoredEvent> {
    storage
        .get_event_by_id(id)
        .await
        .unwrap_or_else(|err| {
            panic!("get_event_by_id answers on an open storage, whatever the id: get_event_by_id({id}) failed: {err}")
        })
}

/// Asserts that `result` is `OptimisticLock` naming the stream appended to, the expected last
/// event of the criteria (`expected_last`) and `conflicting` as the conflict.
fn assert_optimistic_lock<T: Debug>(
    result: StorageResult<T>,
    expected_last: Option<EventReference>,
    conflicting: EventReference,
    what: &str,
) {
    let err = expect_err(
        result,
        what,
        "Err(OptimisticLock), the answer of an append whose criteria match an event after \
         their expected last",
    );
    match err {
        EventStorageError::OptimisticLock {
            stream,
            expected_last: reported_expected_last,
            conflicting: reported,
            ..
        } => {
            assert_eq!(
                reported, conflicting,
                "{what}: OptimisticLock must name the first matching event after the expected \
                 last as the conflict"
            );
            assert_eq!(
                reported_expected_last, expected_last,
                "{what}: OptimisticLock must name the expected last event of the criteria, as \
                 the caller gave it"
            );
            assert_eq!(
                stream,
                orders().to_string(),
                "{what}: OptimisticLock must name the stream appended to, as EventStreamId \
                 displays it"
            );
        }
        other => panic!(
            "{what}: expected Err(OptimisticLock), the answer of an append whose criteria \
             match an event after their expected last, got Err({other})"
        ),
    }
}
