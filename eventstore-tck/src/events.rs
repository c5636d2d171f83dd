//! Scenarios: events.
//!
//! Appends and what they store, the order of references, DCB conditional appends and their
//! atomicity under contention, idempotency keys, every filter shape, stream wildcards,
//! `after`, `limit`, `direction`, `until`, `get_event_by_id`, `head`, and the input every
//! backend refuses alike.
//!
//! Needs no capability.

use eventstore_api::EventStorageExt;
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
        .unwrap_or_else(|err| panic!("unconditional append to {stream} failed: {err}"));
    assert_eq!(
        stored.len(),
        count,
        "an append of {count} new events to {stream} must return each of them"
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
            panic!("query of {stream} with {filter:?} after {after:?}, {limit:?}, {direction:?} failed: {err}")
        })
}

/// `storage.get_event_by_id(id)`, panicking with the id when it fails.
async fn event_by_id<S: EventStorage + ?Sized>(storage: &S, id: EventId) -> Option<StoredEvent> {
    storage
        .get_event_by_id(id)
        .await
        .unwrap_or_else(|err| panic!("get_event_by_id({id}) failed: {err}"))
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

// ---------------------------------------------------------------------------------------
// Round trip and order.
// ---------------------------------------------------------------------------------------

/// Every field of an appended event comes back as written: type, payload, tags, stream and
/// idempotency key, from `append`, `query` and `get_event_by_id` alike; in one batch, events
/// without tags keep none, first, between and last.
pub async fn appended_events_round_trip_every_field<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let drafted = EventToStore::new("OrderDrafted", json!({ "order": "o-1" }));
    let placed = EventToStore::new(
        "OrderPlaced",
        json!({
            "order": "o-1",
            "lines": [{ "sku": "s-1", "quantity": 2 }, { "sku": "s-2", "quantity": 1 }],
            "total": 12.5,
            "gift": false,
            "note": null,
            "discount": -3
        }),
    )
    .with_tags(tags(&[("order", "o-1"), ("customer", "c-7")]))
    .with_idempotency_key("place-o-1");
    let paid = EventToStore::new("OrderPaid", json!(12.5)).with_tags(tags(&[("order", "o-1")]));
    let noted = EventToStore::new("OrderNoted", json!("leave at the door"));
    let sent = vec![drafted, placed, noted.clone(), paid, noted];

    let stored = append(&storage, &orders(), sent.clone()).await;

    for (sent, stored) in sent.iter().zip(&stored) {
        assert_eq!(
            stored.stream,
            orders(),
            "round trip rule: the stream of {sent:?} is stored as given"
        );
        assert_eq!(
            stored.event_type, sent.event_type,
            "round trip rule: the type of {sent:?} is stored as sent"
        );
        assert_eq!(
            stored.payload, sent.payload,
            "round trip rule: the payload of {sent:?} is stored as sent"
        );
        assert_eq!(
            stored.tags, sent.tags,
            "round trip rule: the tags of {sent:?} are stored as sent"
        );
        assert_eq!(
            stored.idempotency_key, sent.idempotency_key,
            "round trip rule: the idempotency key of {sent:?} is stored as sent"
        );
        let by_id = event_by_id(&storage, stored.reference.id).await;
        assert_eq!(
            by_id.as_ref(),
            Some(stored),
            "get_event_by_id must return the event as append returned it"
        );
    }
    assert_eq!(
        read(&storage, &EventFilter::match_all(), &orders()).await,
        stored,
        "a query must return the events exactly as append returned them"
    );
}

/// Numbers in a payload come back exactly as appended: a float whose shortest digits a
/// parser might round one unit off, the extremes of the floats, and integers at the limits of
/// 64 bits. A payload that comes back changed also turns an exact retry of its event into an
/// idempotency conflict; the retry here must be answered as a retry.
pub async fn payload_numbers_round_trip_exactly<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    #[allow(clippy::excessive_precision)]
    let floats = [
        909_998.631_187_471_7,
        0.1,
        -123_456_789.123_456_79,
        1e-300,
        2.225_073_858_507_201_4e-308,
        5e-324,
        1.797_693_134_862_315_7e308,
    ];
    let payload = json!({
        "floats": floats,
        "integers": [i64::MIN, -1, 0, i64::MAX],
        "unsigned": u64::MAX,
    });
    let keyed = || EventToStore::new("Paid", payload.clone()).with_idempotency_key("pay-1");
    let stored = append(&storage, &orders(), vec![keyed()]).await;
    assert_eq!(
        stored[0].payload, payload,
        "round trip rule: the numbers of a payload are stored exactly"
    );
    let by_id = event_by_id(&storage, stored[0].reference.id).await;
    assert_eq!(
        by_id.map(|event| event.payload),
        Some(payload.clone()),
        "get_event_by_id must return the payload's numbers exactly"
    );
    let queried = read(&storage, &EventFilter::match_all(), &orders()).await;
    assert_eq!(
        queried.first().map(|event| &event.payload),
        Some(&payload),
        "a query must return the payload's numbers exactly"
    );
    let retried = storage
        .append(AppendCriteria::none(), &orders(), vec![keyed()])
        .await
        .unwrap_or_else(|err| panic!("an exact retry of the event must be a retry: {err}"));
    assert_eq!(
        retried.first().map(|event| event.reference),
        Some(stored[0].reference),
        "an exact retry is answered with the stored event"
    );
}

/// A payload whose arrays and objects nest as deep as the input rule allows
/// (`validate::MAX_PAYLOAD_DEPTH`) is stored and read back, from `query`, `get_event_by_id`
/// and an exact retry alike; one level deeper is refused before anything is stored, as a
/// backend that keeps payloads as JSON text could not read it back.
pub async fn a_payload_nested_to_the_limit_reads_back_and_a_deeper_one_is_refused<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    let nested = |depth: usize| {
        (0..depth).fold(json!("core"), |inside, level| match level % 2 {
            0 => json!([inside]),
            _ => json!({ "in": inside }),
        })
    };
    let deepest = nested(MAX_PAYLOAD_DEPTH);
    let keyed = || EventToStore::new("Deep", deepest.clone()).with_idempotency_key("deep-1");
    let stored = append(&storage, &orders(), vec![keyed()]).await;
    let by_id = event_by_id(&storage, stored[0].reference.id).await;
    assert_eq!(
        by_id.map(|event| event.payload),
        Some(deepest.clone()),
        "round trip rule: a payload nested to the limit reads back"
    );
    let queried = read(&storage, &EventFilter::match_all(), &orders()).await;
    assert_eq!(queried.len(), 1, "the deep event is read by a query");
    let retried = storage
        .append(AppendCriteria::none(), &orders(), vec![keyed()])
        .await
        .unwrap_or_else(|err| panic!("an exact retry of the deep event must be a retry: {err}"));
    assert_eq!(retried[0].reference, stored[0].reference);

    let deeper = EventToStore::new("Deep", nested(MAX_PAYLOAD_DEPTH + 1));
    assert_invalid_input(
        storage
            .append(AppendCriteria::none(), &orders(), vec![deeper])
            .await,
        "an append of a payload nested one level deeper than the limit",
        "validate_payload",
    );
    assert_eq!(
        read(&storage, &EventFilter::match_all(), &orders())
            .await
            .len(),
        1,
        "the refused append stored nothing"
    );
}

/// A batch larger than the input rule allows (`validate::MAX_BATCH_BYTES`) is refused as
/// invalid input before its criteria are judged (here they would conflict), and stores
/// nothing: every backend refuses the same batch the same way, whatever it could take.
pub async fn a_batch_above_the_size_limit_is_refused_before_its_criteria_are_judged<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    append(&storage, &orders(), vec![labelled("OrderPlaced", "first")]).await;
    let mebibyte = "x".repeat(1 << 20);
    let events = (0..=MAX_BATCH_BYTES >> 20)
        .map(|n| EventToStore::new("Large", json!({ "n": n, "text": mebibyte })))
        .collect();
    let anything_stored = AppendCriteria::of(EventFilter::match_all(), None);
    assert_invalid_input(
        storage.append(anything_stored, &orders(), events).await,
        "an append of a batch above MAX_BATCH_BYTES whose criteria would conflict",
        "validate_events",
    );
    assert_eq!(
        read(&storage, &EventFilter::match_all(), &orders())
            .await
            .len(),
        1,
        "the refused batch stored nothing"
    );
}

/// A filter of as many items as the input rule allows (`validate::MAX_FILTER_ITEMS`: one per
/// entity of a decision over many, say) is answered, by a query and as an append's
/// criteria; one item more is refused before the store is asked.
pub async fn a_filter_of_the_most_items_allowed_is_answered_and_one_more_refused<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    let account =
        |n: usize| EventFilter::for_events(["Deposited"], tags(&[("account", &n.to_string())]));
    let largest = (1..MAX_FILTER_ITEMS).fold(account(0), |filter, n| filter.or(account(n)));
    let deposited = append(
        &storage,
        &orders(),
        vec![EventToStore::new("Deposited", json!(1)).with_tags(tags(&[("account", "7")]))],
    )
    .await;
    let found = read(&storage, &largest, &orders()).await;
    assert_eq!(
        found
            .iter()
            .map(|event| event.reference)
            .collect::<Vec<_>>(),
        [deposited[0].reference],
        "a filter of {MAX_FILTER_ITEMS} items is answered"
    );
    let conflict = storage
        .append(
            AppendCriteria::of(largest.clone(), None),
            &orders(),
            vec![labelled("A", "refused")],
        )
        .await;
    assert!(
        matches!(conflict, Err(EventStorageError::OptimisticLock { .. })),
        "criteria of {MAX_FILTER_ITEMS} items are checked: {conflict:?}"
    );
    let too_many = largest.or(account(MAX_FILTER_ITEMS));
    assert_invalid_input(
        storage
            .query(
                &too_many,
                &orders(),
                None,
                Limit::none(),
                Direction::Forward,
            )
            .await,
        "a query whose filter has one item more than allowed",
        "validate_filter",
    );
}

/// Timestamps are assigned by the storage, in UTC, from its own clock: every event of a
/// batch is stamped between "now" before and "now" after the append.
pub async fn stored_timestamps_lie_within_the_storage_clock_window<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let window = ClockWindow::open(&storage).await;
    let stored = append(
        &storage,
        &orders(),
        vec![labelled("A", "a"), labelled("B", "b"), labelled("C", "c")],
    )
    .await;
    let read_back = read_everything(&storage).await;
    for event in stored.iter().chain(&read_back) {
        window
            .assert_contains(
                &storage,
                &format!("timestamp of event {}", event.reference),
                event.timestamp,
            )
            .await;
    }
}

/// A batch is one write at one instant: every event of it carries the same timestamp, the
/// one `append` returns and a query reads back.
pub async fn events_of_one_batch_share_one_timestamp<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let stored = append(
        &storage,
        &orders(),
        (0..50)
            .map(|n| labelled("Counted", &format!("e{n}")))
            .collect(),
    )
    .await;
    let read_back = read_everything(&storage).await;
    let first = stored[0].timestamp;
    for event in stored.iter().chain(&read_back) {
        assert_eq!(
            event.timestamp, first,
            "timestamp rule: every event of one batch carries the batch's one timestamp (event {} \
             differs from the batch's first)",
            event.reference
        );
    }
}

/// Every stored event gets its own id, across batches and handles.
pub async fn event_ids_are_unique<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let other = factory.another_handle(&storage).await;
    let batch = |prefix: &str| {
        (0..20)
            .map(|n| labelled("Counted", &format!("{prefix}-{n}")))
            .collect::<Vec<_>>()
    };
    let mut stored = append(&storage, &orders(), batch("first")).await;
    stored.extend(append(&other, &orders(), batch("second")).await);
    stored.extend(append(&storage, &billing(), batch("third")).await);

    let mut seen = HashSet::new();
    for event in &stored {
        assert!(
            !event.reference.id.0.is_nil(),
            "event {} has the nil id",
            event.reference
        );
        assert!(
            seen.insert(event.reference.id),
            "id {} was given to two events",
            event.reference.id
        );
    }
    assert_eq!(
        seen.len(),
        60,
        "event rule: every stored event gets an id of its own"
    );
}

/// References strictly increase in append order, within a batch, across batches and across
/// streams, and queries return events in that order.
pub async fn references_strictly_increase_in_append_order_across_streams<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    let streams = [orders(), orders_eu(), billing()];
    let mut appended = Vec::new();
    for round in 0..4 {
        for (index, stream) in streams.iter().enumerate() {
            let batch = (0..=index)
                .map(|n| labelled("Step", &format!("{round}-{index}-{n}")))
                .collect();
            appended.extend(append(&storage, stream, batch).await);
        }
    }
    for pair in appended.windows(2) {
        assert!(
            pair[0].reference < pair[1].reference,
            "reference {} was appended before {} but does not order before it",
            pair[0].reference,
            pair[1].reference
        );
    }
    assert_eq!(
        references(&read_everything(&storage).await),
        references(&appended),
        "a query across streams must return every event in append order"
    );
    for stream in &streams {
        let expected: Vec<_> = appended
            .iter()
            .filter(|event| &event.stream == stream)
            .map(|event| event.reference)
            .collect();
        assert_eq!(
            references(&read(&storage, &EventFilter::match_all(), stream).await),
            expected,
            "a query of {stream} must return its events in append order"
        );
    }
}

// ---------------------------------------------------------------------------------------
// DCB conditional appends.
// ---------------------------------------------------------------------------------------

/// A decision guarded by a DCB consistency boundary: the `Enrolled` events of course `c-1`,
/// of which the deciding client has seen one.
struct Enrolment {
    course: Tags,
    seen: EventReference,
}

impl Enrolment {
    /// Appends the `Enrolled` event of the course that the decision has seen.
    async fn seen<S: EventStorage + ?Sized>(storage: &S) -> Enrolment {
        let course = tags(&[("course", "c-1")]);
        let seen = append(
            storage,
            &orders(),
            vec![labelled("Enrolled", "seen").with_tags(course.clone())],
        )
        .await;
        Enrolment {
            course,
            seen: seen[0].reference,
        }
    }

    /// An `Enrolled` event of the course, labelled `label`.
    fn enrolled(&self, label: &str) -> EventToStore {
        labelled("Enrolled", label).with_tags(self.course.clone())
    }

    /// Appends an `Enrolled` event labelled `label` on condition that no `Enrolled` event of
    /// the course follows the one seen.
    async fn decide<S: EventStorage + ?Sized>(
        &self,
        storage: &S,
        label: &str,
    ) -> StorageResult<Vec<StoredEvent>> {
        let criteria = AppendCriteria::of(
            EventFilter::for_events(["Enrolled"], self.course.clone()),
            Some(self.seen),
        );
        storage
            .append(criteria, &orders(), vec![self.enrolled(label)])
            .await
    }
}

/// A reference bounds by its place in the order alone, `(tx, position)`: one with an event's
/// place and another id (kept without its id, or built by hand) is read after, read until and
/// appended after as the event's own reference is.
pub async fn a_bound_with_an_events_place_and_another_id_bounds_as_the_event_does<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    let stored = append(
        &storage,
        &orders(),
        vec![
            labelled("Placed", "first"),
            labelled("Paid", "second"),
            labelled("Shipped", "third"),
        ],
    )
    .await;
    let place = stored[1].reference;
    for id in [uuid::Uuid::nil(), uuid::Uuid::max()] {
        let bound = EventReference {
            id: EventId(id),
            ..place
        };
        let after = query(
            &storage,
            &EventFilter::match_all(),
            &orders(),
            Some(&bound),
            Limit::none(),
            Direction::Forward,
        )
        .await;
        assert_eq!(
            labels(&after),
            ["third"],
            "a read after {bound} (the second event's place, id {id}) starts after that event"
        );
        let until = read(&storage, &EventFilter::match_all().until(bound), &orders()).await;
        assert_eq!(
            labels(&until),
            ["first", "second"],
            "a read until {bound} (the second event's place, id {id}) ends with that event"
        );
    }
    for id in [uuid::Uuid::nil(), uuid::Uuid::max()] {
        let bound = EventReference {
            id: EventId(id),
            ..place
        };
        let decided = storage
            .append(
                AppendCriteria::of(EventFilter::for_types(["Paid"]), Some(bound)),
                &orders(),
                vec![labelled("Noted", "decided")],
            )
            .await;
        assert!(
            decided.is_ok(),
            "no Paid event lies after {bound} (the Paid event's place, id {id}): {decided:?}"
        );
    }
}

/// A conditional append fails with `OptimisticLock` when an event matching its filter lies
/// after the expected last one, and names that event.
pub async fn conditional_append_fails_when_a_matching_event_follows_the_expected_last<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    let enrolment = Enrolment::seen(&storage).await;
    let unseen = append(
        &storage,
        &orders(),
        vec![
            labelled("Unrelated", "noise"),
            enrolment.enrolled("unseen"),
            enrolment.enrolled("unseen-too"),
        ],
    )
    .await;

    let result = enrolment.decide(&storage, "late").await;
    assert_optimistic_lock(
        result,
        Some(enrolment.seen),
        unseen[1].reference,
        "an append whose criteria match an event after the expected last",
    );
    assert_eq!(
        read_everything(&storage).await.len(),
        4,
        "a refused append stores nothing"
    );
}

/// With no expected last event, a conditional append fails when any event matches its
/// filter at all.
pub async fn conditional_append_without_expected_last_fails_when_any_matching_event_exists<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    let existing = append(
        &storage,
        &orders(),
        vec![
            labelled("Other", "other"),
            labelled("Registered", "existing").with_tags(tags(&[("user", "ada")])),
        ],
    )
    .await;
    let criteria = AppendCriteria::of(EventFilter::for_tags(tags(&[("user", "ada")])), None);
    let result = storage
        .append(
            criteria,
            &orders(),
            vec![labelled("Registered", "again").with_tags(tags(&[("user", "ada")]))],
        )
        .await;
    assert_optimistic_lock(
        result,
        None,
        existing[1].reference,
        "an append expecting no matching event where one exists",
    );
    assert_eq!(
        read_everything(&storage).await.len(),
        2,
        "append rule: a refused append stores nothing"
    );
}

/// Events after the expected last one that do not match the filter (other types, other tags)
/// do not make a conditional append fail.
pub async fn conditional_append_succeeds_when_only_non_matching_events_follow_the_expected_last<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    let enrolment = Enrolment::seen(&storage).await;
    append(
        &storage,
        &orders(),
        vec![
            labelled("Dropped", "other type").with_tags(enrolment.course.clone()),
            labelled("Enrolled", "other tag").with_tags(tags(&[("course", "c-2")])),
            labelled("Enrolled", "no tag"),
        ],
    )
    .await;

    let stored = enrolment
        .decide(&storage, "accepted")
        .await
        .unwrap_or_else(|err| panic!("no matching event follows the expected last: {err}"));
    assert_eq!(
        labels(&stored),
        ["accepted"],
        "append rule: a conditional append that holds stores its batch"
    );
    assert_eq!(
        read_everything(&storage).await.len(),
        5,
        "append rule: a conditional append that holds stores exactly its batch"
    );
}

/// A conditional append whose expected last event is the last matching one succeeds, also
/// when it is the very last event of the stream.
pub async fn conditional_append_succeeds_when_nothing_follows_the_expected_last<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    let filter = EventFilter::for_types(["Deposited", "Withdrawn"]);
    let first = append(&storage, &orders(), vec![labelled("Deposited", "first")]).await;
    let criteria = AppendCriteria::of(filter.clone(), Some(first[0].reference));
    let second = storage
        .append(criteria, &orders(), vec![labelled("Withdrawn", "second")])
        .await
        .unwrap_or_else(|err| panic!("nothing follows the expected last: {err}"));

    // The boundary moves with each successful append.
    let criteria = AppendCriteria::of(filter, Some(second[0].reference));
    let third = storage
        .append(criteria, &orders(), vec![labelled("Deposited", "third")])
        .await
        .unwrap_or_else(|err| panic!("nothing follows the new expected last: {err}"));
    assert_eq!(
        labels(&third),
        ["third"],
        "append rule: an append expecting the last matching event stores its batch"
    );
    assert_eq!(
        labels(&read_everything(&storage).await),
        ["first", "second", "third"]
    );
}

/// With no expected last event, a conditional append succeeds when no event matches, on an
/// empty storage and among non-matching events.
pub async fn conditional_append_without_expected_last_succeeds_when_nothing_matches<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    let filter = EventFilter::for_events(["Registered"], tags(&[("user", "ada")]));
    storage
        .append(
            AppendCriteria::of(filter.clone(), None),
            &orders(),
            vec![labelled("Registered", "bob").with_tags(tags(&[("user", "bob")]))],
        )
        .await
        .unwrap_or_else(|err| panic!("no event at all: {err}"));
    storage
        .append(
            AppendCriteria::of(filter, None),
            &orders(),
            vec![labelled("Registered", "ada").with_tags(tags(&[("user", "ada")]))],
        )
        .await
        .unwrap_or_else(|err| panic!("only non-matching events: {err}"));
    assert_eq!(labels(&read_everything(&storage).await), ["bob", "ada"], "append rule: criteria without expected last hold while no event matches, so the append stores its batch");
}

/// Conflicts are judged in the stream appended to only: matching events in other streams,
/// including another purpose of the same context, never make an append fail.
pub async fn conditional_append_judges_conflicts_in_the_appended_stream_only<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    let filter = EventFilter::for_types(["Reserved"]);
    let seen = append(&storage, &orders(), vec![labelled("Reserved", "seen")]).await;
    append(&storage, &orders_eu(), vec![labelled("Reserved", "eu")]).await;
    append(&storage, &billing(), vec![labelled("Reserved", "billing")]).await;

    storage
        .append(
            AppendCriteria::of(filter.clone(), Some(seen[0].reference)),
            &orders(),
            vec![labelled("Reserved", "orders")],
        )
        .await
        .unwrap_or_else(|err| panic!("matching events lie only in other streams: {err}"));
    storage
        .append(
            AppendCriteria::of(filter, None),
            &EventStreamId::for_context("audit"),
            vec![labelled("Reserved", "audit")],
        )
        .await
        .unwrap_or_else(|err| panic!("the appended stream holds no event: {err}"));
    assert_eq!(
        read_everything(&storage).await.len(),
        5,
        "append rule: criteria look only at the stream appended to, so the append stores its batch"
    );
}

/// A batch is all or nothing: when its criteria fail, none of its events is stored, not
/// even its idempotency keys (the same batch goes through unconditionally afterwards).
pub async fn conflicting_batch_stores_none_of_its_events<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let existing = append(&storage, &orders(), vec![labelled("Opened", "existing")]).await;
    let batch: Vec<_> = (0..3)
        .map(|n| labelled("Item", &format!("item-{n}")).with_idempotency_key(format!("item-{n}")))
        .collect();

    let result = storage
        .append(
            AppendCriteria::of(EventFilter::for_types(["Opened"]), None),
            &orders(),
            batch.clone(),
        )
        .await;
    assert_optimistic_lock(
        result,
        None,
        existing[0].reference,
        "a batch whose criteria fail",
    );
    assert_eq!(
        labels(&read_everything(&storage).await),
        ["existing"],
        "no event of a refused batch may be stored"
    );
    assert_eq!(
        storage.head(&orders()).await.expect("head"),
        Some(existing[0].reference),
        "a refused batch must not move the head"
    );
    let stored = append(&storage, &orders(), batch).await;
    assert_eq!(
        labels(&stored),
        ["item-0", "item-1", "item-2"],
        "the keys of a refused batch must not have been recorded"
    );
}

/// `match_all` criteria guard the whole stream (any event after the expected last one
/// conflicts); `match_none` criteria never conflict.
pub async fn match_all_criteria_guard_the_stream_and_match_none_criteria_never_conflict<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    let first = append(&storage, &orders(), vec![labelled("A", "first")]).await;
    let head = first[0].reference;
    let second = storage
        .append(
            AppendCriteria::of(EventFilter::match_all(), Some(head)),
            &orders(),
            vec![labelled("B", "second")],
        )
        .await
        .unwrap_or_else(|err| panic!("the stream has not moved since the head: {err}"));

    let result = storage
        .append(
            AppendCriteria::of(EventFilter::match_all(), Some(head)),
            &orders(),
            vec![labelled("C", "stale")],
        )
        .await;
    assert_optimistic_lock(
        result,
        Some(head),
        second[0].reference,
        "match_all criteria behind the head",
    );
    let result = storage
        .append(
            AppendCriteria::of(EventFilter::match_all(), None),
            &orders(),
            vec![labelled("C", "stale")],
        )
        .await;
    assert_optimistic_lock(
        result,
        None,
        first[0].reference,
        "match_all criteria on a non-empty stream expecting nothing",
    );

    for expected_last in [None, Some(head)] {
        storage
            .append(
                AppendCriteria::of(EventFilter::match_none(), expected_last),
                &orders(),
                vec![labelled("D", "unguarded")],
            )
            .await
            .unwrap_or_else(|err| panic!("match_none criteria must never conflict: {err}"));
    }
    assert_eq!(
        labels(&read_everything(&storage).await),
        ["first", "second", "unguarded", "unguarded"],
        "append rule: match_none criteria never conflict; refused appends store nothing"
    );
}

/// Conditional appends racing for one boundary, from several tasks on two handles: in each
/// round exactly one wins and every other fails with `OptimisticLock`.
pub async fn concurrent_conditional_appends_to_one_boundary_elect_exactly_one<F: StorageFactory>(
    factory: &F,
) {
    const CONTENDERS: usize = 8;
    const ROUNDS: usize = 20;
    let first = Arc::new(factory.create().await);
    let second = Arc::new(factory.another_handle(&first).await);
    let handles = [first, second];
    let seat = tags(&[("seat", "12A")]);
    let filter = EventFilter::for_events(["SeatReserved"], seat.clone());

    // The first round expects no reservation at all; each later one the previous winner's.
    let mut expected_last = None;
    for round in 0..ROUNDS {
        let barrier = Arc::new(Barrier::new(CONTENDERS));
        let mut racers = Vec::with_capacity(CONTENDERS);
        for contender in 0..CONTENDERS {
            let storage = Arc::clone(&handles[contender % handles.len()]);
            let barrier = Arc::clone(&barrier);
            let criteria = AppendCriteria::of(filter.clone(), expected_last);
            let event = labelled(
                "SeatReserved",
                &format!("round {round} contender {contender}"),
            )
            .with_tags(seat.clone());
            racers.push(tokio::spawn(async move {
                barrier.wait().await;
                storage.append(criteria, &orders(), vec![event]).await
            }));
        }
        let mut winners = Vec::new();
        for racer in racers {
            match racer.await.expect("a racing append panicked") {
                Ok(stored) => winners.push(stored),
                Err(err) => assert!(
                    matches!(err, EventStorageError::OptimisticLock { .. }),
                    "round {round}: a losing append must fail with OptimisticLock, got {err}"
                ),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one of {CONTENDERS} racing appends must win, got {winners:?}"
        );
        assert_eq!(
            winners[0].len(),
            1,
            "append rule: the winning append stores its whole batch of one event"
        );
        expected_last = Some(winners[0][0].reference);
    }
    let stored = read(&*handles[1], &filter, &orders()).await;
    assert_eq!(
        stored.len(),
        ROUNDS,
        "one reservation per round must be stored, got {:?}",
        labels(&stored)
    );
}

/// Events appended through one handle are read through another, and a conditional append
/// through the other handle sees them as conflicts.
pub async fn events_written_through_one_handle_are_read_and_guarded_through_another<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    let other = factory.another_handle(&storage).await;
    let stored = append(
        &storage,
        &orders(),
        vec![labelled("Opened", "from the first")],
    )
    .await;

    assert_eq!(
        read_everything(&other).await,
        stored,
        "handle rule: events appended through one handle are read through another"
    );
    assert_eq!(
        event_by_id(&other, stored[0].reference.id).await,
        Some(stored[0].clone()),
        "handle rule: get_event_by_id through another handle finds the event"
    );
    assert_eq!(
        other.head(&orders()).await.expect("head"),
        Some(stored[0].reference),
        "handle rule: head through another handle sees the append"
    );
    let result = other
        .append(
            AppendCriteria::of(EventFilter::for_types(["Opened"]), None),
            &orders(),
            vec![labelled("Opened", "from the second")],
        )
        .await;
    assert_optimistic_lock(
        result,
        None,
        stored[0].reference,
        "a conditional append through another handle",
    );
}

// ---------------------------------------------------------------------------------------
// Idempotency keys.
// ---------------------------------------------------------------------------------------

/// Appending again a batch whose events are all stored under their idempotency keys is a
/// retry: it stores nothing and answers the events stored the first time, through any handle.
pub async fn retry_of_a_stored_batch_answers_the_stored_events_and_stores_nothing<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    let other = factory.another_handle(&storage).await;
    let batch = vec![
        labelled("Charged", "charge").with_idempotency_key("payment-1/charge"),
        labelled("Receipted", "receipt").with_idempotency_key("payment-1/receipt"),
    ];
    let first = append(&storage, &orders(), batch.clone()).await;

    for (handle, name) in [(&storage, "the same handle"), (&other, "another handle")] {
        let retried = handle
            .append(AppendCriteria::none(), &orders(), batch.clone())
            .await
            .unwrap_or_else(|err| panic!("a retry through {name} must succeed: {err}"));
        assert_eq!(
            retried, first,
            "a retry through {name} must answer the events stored the first time"
        );
    }
    // A retry of part of the batch, in another order, is a retry too: all its events are
    // stored under their keys, and the answer follows the order of the retried batch.
    let partial = storage
        .append(
            AppendCriteria::none(),
            &orders(),
            vec![batch[1].clone(), batch[0].clone()],
        )
        .await
        .unwrap_or_else(|err| panic!("a retry of a stored batch in another order: {err}"));
    assert_eq!(
        partial,
        vec![first[1].clone(), first[0].clone()],
        "a retry answers the stored events in the order of the retried batch"
    );

    assert_eq!(
        read_everything(&storage).await,
        first,
        "retries must store nothing"
    );
}

/// A retry is not checked against its criteria (the first attempt was): it answers the stored
/// events even when the criteria would now fail.
pub async fn retry_of_a_stored_batch_is_not_checked_against_its_criteria<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    let criteria = AppendCriteria::of(EventFilter::for_types(["Registered"]), None);
    let batch = vec![labelled("Registered", "ada").with_idempotency_key("register-ada")];
    let first = storage
        .append(criteria.clone(), &orders(), batch.clone())
        .await
        .unwrap_or_else(|err| panic!("the first attempt on an empty stream: {err}"));
    append(&storage, &orders(), vec![labelled("Registered", "bob")]).await;

    let retried = storage
        .append(criteria, &orders(), batch)
        .await
        .unwrap_or_else(|err| panic!("a retry must not be checked against its criteria: {err}"));
    assert_eq!(retried, first, "a retry answers the stored event");
    assert_eq!(
        labels(&read_everything(&storage).await),
        ["ada", "bob"],
        "idempotency rule: a retry stores nothing"
    );
}

/// A stored idempotency key given again with a different event (another payload, type or
/// tags) is not a retry: it is an `IdempotencyConflict` naming the key, and stores nothing.
pub async fn stored_idempotency_key_with_a_different_event_is_a_conflict<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    let charge = labelled("Charged", "charge").with_idempotency_key("charge");
    let first = append(&storage, &orders(), vec![charge.clone()]).await;

    let changed = [
        (
            "another payload",
            labelled("Charged", "twice").with_idempotency_key("charge"),
        ),
        (
            "another type",
            labelled("Refunded", "charge").with_idempotency_key("charge"),
        ),
        (
            "other tags",
            charge.clone().with_tags(tags(&[("payment", "1")])),
        ),
    ];
    for (what, event) in changed {
        let result = storage
            .append(AppendCriteria::none(), &orders(), vec![event])
            .await;
        match expect_err(
            result,
            &format!("a stored key with {what}"),
            "Err(IdempotencyConflict)",
        ) {
            EventStorageError::IdempotencyConflict { changed, .. } => assert_eq!(
                changed,
                ["charge"],
                "a stored key with {what}: the conflict names the changed key"
            ),
            other => panic!(
                "a stored key with {what}: expected Err(IdempotencyConflict), got Err({other})"
            ),
        }
    }
    assert_eq!(read_everything(&storage).await, first, "nothing is stored");
}

/// A batch mixing idempotency keys the stream holds with new keys (or keyless events) is an
/// `IdempotencyConflict` naming both sides, and stores nothing.
pub async fn batch_mixing_stored_and_new_idempotency_keys_is_a_conflict<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    let first = append(
        &storage,
        &orders(),
        vec![labelled("Charged", "charge").with_idempotency_key("charge")],
    )
    .await;

    let result = storage
        .append(
            AppendCriteria::none(),
            &orders(),
            vec![
                labelled("Charged", "charge").with_idempotency_key("charge"),
                labelled("Refunded", "refund").with_idempotency_key("refund"),
            ],
        )
        .await;
    match expect_err(
        result,
        "a batch mixing a stored key with a new key",
        "Err(IdempotencyConflict)",
    ) {
        EventStorageError::IdempotencyConflict {
            stream,
            stored,
            new,
            ..
        } => {
            assert_eq!(
                stored,
                ["charge"],
                "idempotency rule: IdempotencyConflict names the stored keys"
            );
            assert_eq!(
                new,
                ["refund"],
                "idempotency rule: IdempotencyConflict names the new keys"
            );
            assert_eq!(
                stream,
                orders().to_string(),
                "idempotency rule: IdempotencyConflict names the stream appended to, as \
                 EventStreamId displays it"
            );
        }
        other => panic!("expected Err(IdempotencyConflict), got Err({other})"),
    }

    let result = storage
        .append(
            AppendCriteria::none(),
            &orders(),
            vec![
                labelled("Charged", "charge").with_idempotency_key("charge"),
                labelled("Noted", "keyless"),
            ],
        )
        .await;
    let err = expect_err(
        result,
        "a batch mixing a stored key with a keyless event",
        "Err(IdempotencyConflict)",
    );
    assert!(
        matches!(err, EventStorageError::IdempotencyConflict { .. }),
        "idempotency rule: a stored key mixed with a keyless event is a conflict: expected \
         Err(IdempotencyConflict), got Err({err})"
    );

    assert_eq!(read_everything(&storage).await, first, "nothing is stored");
    let refund = append(
        &storage,
        &orders(),
        vec![labelled("Refunded", "refund").with_idempotency_key("refund")],
    )
    .await;
    assert_eq!(
        labels(&refund),
        ["refund"],
        "the new key of a refused batch must not have been recorded"
    );
}

/// An idempotency key twice in one batch is `InvalidInput`, and nothing is stored.
pub async fn idempotency_key_twice_in_one_batch_is_invalid_input<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let result = storage
        .append(
            AppendCriteria::none(),
            &orders(),
            vec![
                labelled("A", "first").with_idempotency_key("twice"),
                labelled("B", "between"),
                labelled("A", "second").with_idempotency_key("twice"),
            ],
        )
        .await;
    assert_invalid_input(
        result,
        "a batch holding one idempotency key twice",
        "validate_events",
    );
    assert!(
        read_everything(&storage).await.is_empty(),
        "input rule validate::validate_events: a refused batch stores nothing"
    );
}

/// Idempotency keys are unique per stream: one key is stored in each of two streams,
/// including two purposes of one context, and a retry in one leaves the other alone.
pub async fn same_idempotency_key_in_two_streams_is_stored_in_both<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let event = || labelled("Imported", "import").with_idempotency_key("import-2024-01");
    let mut stored_in = Vec::new();
    for stream in [orders(), orders_eu(), billing()] {
        let stored = append(&storage, &stream, vec![event()]).await;
        assert_eq!(
            stored[0].idempotency_key.as_deref(),
            Some("import-2024-01"),
            "idempotency rule: the stored event keeps its idempotency key"
        );
        stored_in.push(stored);
    }
    let retried = storage
        .append(AppendCriteria::none(), &orders_eu(), vec![event()])
        .await
        .unwrap_or_else(|err| panic!("a retry in one stream: {err}"));
    assert_eq!(
        retried, stored_in[1],
        "a retry answers the event stored in its own stream"
    );
    assert_eq!(
        read_everything(&storage).await.len(),
        3,
        "idempotency rule: keys are unique per stream, so each stream stores the event once"
    );
}

/// One keyed batch appended by several tasks at once, on two handles, is stored once: every
/// append answers the same stored events, and the log holds them once.
pub async fn concurrent_retries_of_one_batch_store_it_once<F: StorageFactory>(factory: &F) {
    const RETRIES: usize = 8;
    let first = Arc::new(factory.create().await);
    let second = Arc::new(factory.another_handle(&first).await);
    let handles = [first, second];
    let batch = vec![
        labelled("Charged", "charge").with_idempotency_key("payment-9/charge"),
        labelled("Receipted", "receipt").with_idempotency_key("payment-9/receipt"),
    ];
    let barrier = Arc::new(Barrier::new(RETRIES));
    let mut racers = Vec::with_capacity(RETRIES);
    for retry in 0..RETRIES {
        let storage = Arc::clone(&handles[retry % handles.len()]);
        let barrier = Arc::clone(&barrier);
        let batch = batch.clone();
        racers.push(tokio::spawn(async move {
            barrier.wait().await;
            storage
                .append(AppendCriteria::none(), &orders(), batch)
                .await
        }));
    }
    let mut answers = Vec::with_capacity(RETRIES);
    for racer in racers {
        answers.push(
            racer
                .await
                .expect("a racing append panicked")
                .unwrap_or_else(|err| panic!("a concurrent retry must succeed: {err}")),
        );
    }
    let stored = read_everything(&*handles[0]).await;
    assert_eq!(
        labels(&stored),
        ["charge", "receipt"],
        "the batch is stored once"
    );
    for answer in answers {
        assert_eq!(
            answer, stored,
            "every racing append answers the events stored once"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Filters.
// ---------------------------------------------------------------------------------------

/// Appends the events the filter scenarios select from, labelled by what they are.
async fn append_order_history<S: EventStorage + ?Sized>(storage: &S) -> Vec<StoredEvent> {
    append(
        storage,
        &orders(),
        vec![
            labelled("OrderPlaced", "placed-1")
                .with_tags(tags(&[("customer", "c1"), ("region", "eu")])),
            labelled("OrderPlaced", "placed-2")
                .with_tags(tags(&[("customer", "c2"), ("region", "us")])),
            labelled("OrderShipped", "shipped-1")
                .with_tags(tags(&[("customer", "c1"), ("region", "eu")])),
            labelled("OrderCancelled", "cancelled-2").with_tags(tags(&[("customer", "c2")])),
            labelled("Note", "note"),
        ],
    )
    .await
}

/// Asserts that `filter` selects the events labelled `expected`, in order, from the stream
/// and through the `any()` wildcard alike.
async fn assert_selects<S: EventStorage + ?Sized>(
    storage: &S,
    filter: &EventFilter,
    expected: &[&str],
) {
    for stream in [orders(), EventStreamId::any()] {
        assert_eq!(
            labels(&read(storage, filter, &stream).await),
            expected,
            "filter rule: {filter:?} on {stream} selects the events it matches (items OR-ed; inside \
             an item one of the types AND all the tags), in storage order"
        );
    }
}

/// `match_all` selects every event, `match_none` none.
pub async fn match_all_and_match_none_select_everything_and_nothing<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    append_order_history(&storage).await;
    assert_selects(
        &storage,
        &EventFilter::match_all(),
        &["placed-1", "placed-2", "shipped-1", "cancelled-2", "note"],
    )
    .await;
    assert_selects(&storage, &EventFilter::match_none(), &[]).await;
    assert_selects(
        &storage,
        &EventFilter::for_tags(Tags::none()),
        &["placed-1", "placed-2", "shipped-1", "cancelled-2", "note"],
    )
    .await;
}

/// A type filter selects events of any of its types; an empty list of types selects none.
pub async fn type_filter_selects_events_of_any_listed_type<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    append_order_history(&storage).await;
    assert_selects(
        &storage,
        &EventFilter::for_types(["OrderPlaced"]),
        &["placed-1", "placed-2"],
    )
    .await;
    assert_selects(
        &storage,
        &EventFilter::for_types(["OrderCancelled", "OrderPlaced"]),
        &["placed-1", "placed-2", "cancelled-2"],
    )
    .await;
    assert_selects(&storage, &EventFilter::for_types(["OrderRefunded"]), &[]).await;
    assert_selects(&storage, &EventFilter::for_types(Vec::<&str>::new()), &[]).await;
}

/// A tag filter selects events carrying every one of its tags (tags are AND-ed), whatever
/// other tags they carry.
pub async fn tag_filter_requires_every_listed_tag<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    append_order_history(&storage).await;
    assert_selects(
        &storage,
        &EventFilter::for_tags(tags(&[("customer", "c1")])),
        &["placed-1", "shipped-1"],
    )
    .await;
    assert_selects(
        &storage,
        &EventFilter::for_tags(tags(&[("customer", "c2"), ("region", "us")])),
        &["placed-2"],
    )
    .await;
    assert_selects(
        &storage,
        &EventFilter::for_tags(tags(&[("customer", "c1"), ("region", "us")])),
        &[],
    )
    .await;
    assert_selects(
        &storage,
        &EventFilter::for_tags(tags(&[("customer", "c3")])),
        &[],
    )
    .await;
}

/// Tag values may contain `:` (only the first one separates key and value), and a filter
/// tells `key:a:b` from `key:a`.
pub async fn tag_values_may_contain_colons<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let stored = append(
        &storage,
        &orders(),
        vec![
            labelled("Linked", "colons").with_tags(tags(&[("url", "https://example.org:8080/a")])),
            labelled("Linked", "prefix").with_tags(tags(&[("url", "https")])),
        ],
    )
    .await;
    assert_eq!(
        stored[0].tags,
        tags(&[("url", "https://example.org:8080/a")]),
        "tag rule: a tag value keeps every colon after the first (key:value splits at the first)"
    );
    assert_selects(
        &storage,
        &EventFilter::for_tags(tags(&[("url", "https://example.org:8080/a")])),
        &["colons"],
    )
    .await;
    assert_selects(
        &storage,
        &EventFilter::for_tags(tags(&[("url", "https")])),
        &["prefix"],
    )
    .await;
}

/// An event filter item requires a listed type and every tag together.
pub async fn event_filter_requires_both_a_listed_type_and_every_tag<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    append_order_history(&storage).await;
    assert_selects(
        &storage,
        &EventFilter::for_events(["OrderPlaced"], tags(&[("customer", "c1")])),
        &["placed-1"],
    )
    .await;
    assert_selects(
        &storage,
        &EventFilter::for_events(["OrderPlaced", "OrderShipped"], tags(&[("region", "eu")])),
        &["placed-1", "shipped-1"],
    )
    .await;
    assert_selects(
        &storage,
        &EventFilter::for_events(["OrderCancelled"], tags(&[("customer", "c1")])),
        &[],
    )
    .await;
}

/// `or` selects the events any of its items selects, each once, in storage order.
pub async fn or_filter_selects_events_matching_any_item_once<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    append_order_history(&storage).await;
    assert_selects(
        &storage,
        &EventFilter::for_types(["Note"]).or(EventFilter::for_tags(tags(&[("customer", "c2")]))),
        &["placed-2", "cancelled-2", "note"],
    )
    .await;
    assert_selects(
        &storage,
        &EventFilter::for_tags(tags(&[("customer", "c1")]))
            .or(EventFilter::for_types(["OrderPlaced"])),
        &["placed-1", "placed-2", "shipped-1"],
    )
    .await;
    assert_selects(
        &storage,
        &EventFilter::for_events(["OrderShipped"], tags(&[("customer", "c1")]))
            .or(EventFilter::for_events(
                ["OrderCancelled"],
                tags(&[("customer", "c2")]),
            ))
            .or(EventFilter::match_none()),
        &["shipped-1", "cancelled-2"],
    )
    .await;
}

/// An `or` of items keeps to the streams read, to `after` and `until`, and in criteria to the
/// stream appended to: each item is one alternative inside those bounds, never one beside them
/// (`stream = $1 AND a OR b` in SQL would read every stream's `b`).
pub async fn or_filters_keep_to_the_stream_and_the_bounds_read<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let history = append_order_history(&storage).await;
    append(
        &storage,
        &billing(),
        vec![
            labelled("Note", "billing-note"),
            labelled("OrderPlaced", "billing-placed").with_tags(tags(&[("customer", "c2")])),
        ],
    )
    .await;
    let either =
        EventFilter::for_types(["Note"]).or(EventFilter::for_tags(tags(&[("customer", "c2")])));
    let read = |filter: EventFilter, after: Option<EventReference>, limit, direction| {
        let storage = &storage;
        async move {
            labels(
                &query(
                    storage,
                    &filter,
                    &orders(),
                    after.as_ref(),
                    limit,
                    direction,
                )
                .await,
            )
        }
    };
    assert_eq!(
        read(either.clone(), None, Limit::none(), Direction::Forward).await,
        ["placed-2", "cancelled-2", "note"],
        "filter rule: an or of items reads the stream read only"
    );
    assert_eq!(
        read(
            either.clone(),
            Some(history[1].reference),
            Limit::none(),
            Direction::Forward
        )
        .await,
        ["cancelled-2", "note"],
        "filter rule: an or of items reads only what lies after `after`"
    );
    assert_eq!(
        read(
            either.clone().until(history[3].reference),
            None,
            Limit::none(),
            Direction::Forward
        )
        .await,
        ["placed-2", "cancelled-2"],
        "filter rule: an or of items reads only up to `until`"
    );
    assert_eq!(
        read(either, None, Limit::to(2), Direction::Backward).await,
        ["note", "cancelled-2"],
        "filter rule: an or of items, backward with a limit, counts from the stream's newest"
    );
}

/// An `or` of items in append criteria conflicts with matches in the stream appended to
/// only, never with another stream's, whichever item they match.
pub async fn or_criteria_judge_the_appended_stream_only<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let account = tags(&[("account", "a1")]);
    let criteria = || {
        AppendCriteria::of(
            EventFilter::for_types(["Invoiced"]).or(EventFilter::for_tags(account.clone())),
            None,
        )
    };
    // Matches of both items, in another stream only.
    append(
        &storage,
        &billing(),
        vec![
            labelled("Invoiced", "billing-invoice"),
            labelled("Paid", "billing-paid").with_tags(account.clone()),
        ],
    )
    .await;
    storage
        .append(criteria(), &orders(), vec![labelled("Placed", "placed")])
        .await
        .unwrap_or_else(|err| {
            panic!("criteria rule: an or of items matched only in another stream must not conflict, got {err}")
        });
    let tagged = append(
        &storage,
        &orders(),
        vec![labelled("Paid", "paid").with_tags(account.clone())],
    )
    .await;
    assert_optimistic_lock(
        storage
            .append(criteria(), &orders(), vec![labelled("Placed", "again")])
            .await,
        None,
        tagged[0].reference,
        "criteria rule: the or's second item matches in the stream appended to",
    );
}

/// Input is judged before what the storage holds: a blank event type is `InvalidInput` even
/// where the criteria would conflict, and a blank reader even for an unknown event.
pub async fn invalid_input_is_refused_before_the_store_is_consulted<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    let stored = append(&storage, &orders(), vec![labelled("Placed", "p")]).await;
    assert_invalid_input(
        storage
            .append(
                AppendCriteria::of(EventFilter::match_all(), None),
                &orders(),
                vec![labelled("", "blank type")],
            )
            .await,
        "an append of an event with a blank type whose criteria conflict",
        "validate_events",
    );
    let unknown = EventReference::at(EventId::new(), stored[0].reference.position + 1_000);
    assert_invalid_input(
        storage.bookmark(" ", &unknown, Tags::none()).await,
        "a bookmark of a blank reader at an unknown event",
        "validate_reader",
    );
    assert_eq!(
        labels(&read_everything(&storage).await),
        ["p"],
        "nothing refused was stored"
    );
}

/// `until` bounds append criteria as it bounds reads: a match after the bound is no conflict.
pub async fn criteria_with_until_ignore_matches_after_their_bound<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let first = append(&storage, &orders(), vec![labelled("Placed", "a1")]).await;
    append(&storage, &orders(), vec![labelled("Placed", "a2")]).await;
    let bounded = EventFilter::for_types(["Placed"]).until(first[0].reference);
    storage
        .append(
            AppendCriteria::of(bounded.clone(), Some(first[0].reference)),
            &orders(),
            vec![labelled("Shipped", "s")],
        )
        .await
        .unwrap_or_else(|err| {
            panic!("criteria rule: a match after the filter's until is no conflict, got {err}")
        });
    assert_optimistic_lock(
        storage
            .append(
                AppendCriteria::of(bounded, None),
                &orders(),
                vec![labelled("Shipped", "t")],
            )
            .await,
        None,
        first[0].reference,
        "criteria rule: without an expected last event, the match up to until conflicts",
    );
}

/// `until` is an inclusive upper bound, combined with the filter's items, `after`, `limit`
/// and direction.
pub async fn until_is_an_inclusive_upper_bound<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let history = append_order_history(&storage).await;
    let shipped = history[2].reference;
    assert_selects(
        &storage,
        &EventFilter::match_all().until(shipped),
        &["placed-1", "placed-2", "shipped-1"],
    )
    .await;
    assert_selects(
        &storage,
        &EventFilter::match_all().until(history[0].reference),
        &["placed-1"],
    )
    .await;
    assert_selects(
        &storage,
        &EventFilter::for_types(["OrderPlaced", "OrderCancelled"]).until(shipped),
        &["placed-1", "placed-2"],
    )
    .await;
    let bounded = EventFilter::match_all().until(shipped);
    assert_eq!(
        labels(
            &query(
                &storage,
                &bounded,
                &orders(),
                Some(&history[0].reference),
                Limit::none(),
                Direction::Forward
            )
            .await
        ),
        ["placed-2", "shipped-1"],
        "filter rule: until is an inclusive upper bound, also combined with after"
    );
    assert_eq!(
        labels(
            &query(
                &storage,
                &bounded,
                &orders(),
                None,
                Limit::to(2),
                Direction::Backward
            )
            .await
        ),
        ["shipped-1", "placed-2"],
        "filter rule: a backward read with until starts at the bound, and its limit counts from \
         there"
    );

    // A bound from another stream bounds by the storage's order all the same.
    let later = append(&storage, &billing(), vec![labelled("Invoiced", "invoice")]).await;
    append(&storage, &orders(), vec![labelled("Note", "after invoice")]).await;
    assert_eq!(
        labels(
            &read(
                &storage,
                &EventFilter::match_all().until(later[0].reference),
                &orders()
            )
            .await
        ),
        ["placed-1", "placed-2", "shipped-1", "cancelled-2", "note"],
        "filter rule: until bounds the storage order, so a reference of another stream bounds a \
         read of this one"
    );
}

// ---------------------------------------------------------------------------------------
// Streams.
// ---------------------------------------------------------------------------------------

/// `any()` reads every stream, `any_purpose()` every purpose of a context, a concrete id
/// its stream alone; a purpose without context reads that purpose in every context.
pub async fn stream_wildcards_select_the_streams_they_cover<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    append(&storage, &orders(), vec![labelled("A", "orders")]).await;
    append(&storage, &orders_eu(), vec![labelled("A", "orders-eu")]).await;
    append(&storage, &billing(), vec![labelled("A", "billing")]).await;
    append(
        &storage,
        &EventStreamId::new("billing", "eu"),
        vec![labelled("A", "billing-eu")],
    )
    .await;

    let all = EventFilter::match_all();
    let cases = [
        (
            EventStreamId::any(),
            vec!["orders", "orders-eu", "billing", "billing-eu"],
        ),
        (orders().any_purpose(), vec!["orders", "orders-eu"]),
        (orders(), vec!["orders"]),
        (orders_eu(), vec!["orders-eu"]),
        (billing().any_purpose(), vec!["billing", "billing-eu"]),
        (
            EventStreamId {
                context: None,
                purpose: Some("eu".to_owned()),
            },
            vec!["orders-eu", "billing-eu"],
        ),
        (EventStreamId::new("orders", "us"), vec![]),
        (EventStreamId::for_context("ghost").any_purpose(), vec![]),
    ];
    for (stream, expected) in cases {
        let events = read(&storage, &all, &stream).await;
        assert_eq!(labels(&events), expected, "query of {stream}");
        for event in &events {
            assert!(
                event.stream.is_concrete() && stream.covers(&event.stream),
                "{stream} returned an event of {}",
                event.stream
            );
        }
    }
}

/// Appending to a wildcard stream is `InvalidInput`, and nothing is stored.
pub async fn appending_to_a_wildcard_stream_is_invalid_input<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let wildcards = [
        EventStreamId::any(),
        orders().any_purpose(),
        EventStreamId {
            context: None,
            purpose: Some("default".to_owned()),
        },
    ];
    for stream in wildcards {
        let result = storage
            .append(AppendCriteria::none(), &stream, vec![labelled("A", "a")])
            .await;
        assert_invalid_input(
            result,
            &format!("an append to the wildcard {stream}"),
            "validate_append_stream",
        );
        let result = storage
            .append(AppendCriteria::none(), &stream, Vec::new())
            .await;
        assert_invalid_input(
            result,
            &format!("an empty append to the wildcard {stream}"),
            "validate_append_stream",
        );
    }
    assert!(
        read_everything(&storage).await.is_empty(),
        "input rule validate::validate_append_stream: a refused append stores nothing"
    );
}

/// Stream ids with a blank, NUL-holding or over-long part are `InvalidInput` for `append`,
/// `query` and `head` alike.
pub async fn invalid_streams_are_refused_by_append_query_and_head<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let long = "s".repeat(MAX_NAME_BYTES + 1);
    let invalid = [
        EventStreamId::new("", "default"),
        EventStreamId::new("  ", "default"),
        EventStreamId::new("orders", ""),
        EventStreamId::new("ord\0ers", "default"),
        EventStreamId::new("orders", "de\0fault"),
        EventStreamId::new(long.clone(), "default"),
        EventStreamId::new("orders", long),
    ];
    for stream in invalid {
        let shown = format!("{stream:?}");
        let result = storage
            .append(AppendCriteria::none(), &stream, vec![labelled("A", "a")])
            .await;
        assert_invalid_input(
            result,
            &format!("an append to {shown}"),
            "validate_append_stream",
        );
        let result = storage
            .query(
                &EventFilter::match_all(),
                &stream,
                None,
                Limit::none(),
                Direction::Forward,
            )
            .await;
        assert_invalid_input(result, &format!("a query of {shown}"), "validate_stream");
        assert_invalid_input(
            storage.head(&stream).await,
            &format!("the head of {shown}"),
            "validate_stream",
        );
    }
    assert!(
        read_everything(&storage).await.is_empty(),
        "input rule validate::validate_stream: a refused call stores nothing"
    );
}

/// Filters with an invalid event type or tag are `InvalidInput` for `query`, `query_raw`,
/// `query_stream` and an append's condition alike, and the refused append stores nothing. A
/// filter's tag key may not hold `:` any more than a stored one: written `key:value`, the key
/// `a:b` with the value `c` would read as the key `a` with the value `b:c`.
pub async fn invalid_filters_are_refused_by_queries_and_append_conditions<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    append(
        &storage,
        &orders(),
        vec![labelled("Linked", "colon").with_tags(tags(&[("a", "b:c")]))],
    )
    .await;
    let long = "t".repeat(MAX_NAME_BYTES + 1);
    let invalid = [
        EventFilter::for_tags(tags(&[("a:b", "c")])),
        EventFilter::for_tags(tags(&[("", "c")])),
        EventFilter::for_tags(tags(&[("a", "b\0c")])),
        EventFilter::for_types(["Li\0nked"]),
        EventFilter::for_types([" "]),
        EventFilter::for_types([long.as_str()]),
        EventFilter::match_all().or(EventFilter::for_tags(tags(&[("a:b", "c")]))),
    ];
    for filter in invalid {
        let shown = format!("{filter:?}");
        let shown = &shown[..shown.len().min(120)];
        for direction in [Direction::Forward, Direction::Backward] {
            let everywhere = EventStreamId::any();
            let result = storage
                .query(&filter, &everywhere, None, Limit::none(), direction)
                .await;
            assert_invalid_input(result, &format!("a query by {shown}"), "validate_filter");
            let result = storage
                .query_raw(&filter, &everywhere, None, Limit::none(), direction)
                .await;
            assert_invalid_input(result, &format!("query_raw by {shown}"), "validate_filter");
            let mut streamed =
                storage.query_stream(&filter, &everywhere, None, Limit::none(), direction);
            let first = streamed.next().await.expect("an item saying why");
            assert_invalid_input(
                first,
                &format!("query_stream by {shown}"),
                "validate_filter",
            );
            assert!(
                streamed.next().await.is_none(),
                "invalid input ends the stream"
            );
        }
        let result = storage
            .append(
                AppendCriteria::of(filter.clone(), None),
                &orders(),
                vec![labelled("Linked", "refused")],
            )
            .await;
        assert_invalid_input(
            result,
            &format!("an append on the condition {shown}"),
            "validate_criteria",
        );
    }
    assert_eq!(
        read_everything(&storage).await.len(),
        1,
        "input rule validate::validate_criteria: a refused append stores nothing"
    );
}

// ---------------------------------------------------------------------------------------
// after, limit, direction.
// ---------------------------------------------------------------------------------------

/// Appends `count` events labelled `e0`, `e1`, … to `orders`, one batch.
async fn append_numbered<S: EventStorage + ?Sized>(storage: &S, count: usize) -> Vec<StoredEvent> {
    let batch = (0..count)
        .map(|n| labelled(if n % 2 == 0 { "Even" } else { "Odd" }, &format!("e{n}")))
        .collect();
    append(storage, &orders(), batch).await
}

/// `after` selects events strictly after the reference, in either direction, also when the
/// reference is of another stream or of the last event.
pub async fn after_selects_events_strictly_after_the_reference<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let events = append_numbered(&storage, 5).await;
    let all = EventFilter::match_all();
    let read_after = |after: EventReference, direction| {
        let storage = &storage;
        let all = &all;
        async move {
            labels(
                &query(
                    storage,
                    all,
                    &orders(),
                    Some(&after),
                    Limit::none(),
                    direction,
                )
                .await,
            )
        }
    };
    assert_eq!(
        read_after(events[1].reference, Direction::Forward).await,
        ["e2", "e3", "e4"],
        "query rule: a forward read with `after` returns the events after it in storage order"
    );
    assert_eq!(
        read_after(events[1].reference, Direction::Backward).await,
        ["e4", "e3", "e2"], "query rule: a backward read with `after` returns the events after it in storage order (a bound on the reference, not on the reading direction), newest first: after e1 backward is e4, e3, e2");
    assert!(
        read_after(events[4].reference, Direction::Forward)
            .await
            .is_empty(),
        "query rule: nothing lies after the last event"
    );
    assert_eq!(
        labels(
            &query(
                &storage,
                &EventFilter::for_types(["Even"]),
                &orders(),
                Some(&events[0].reference),
                Limit::none(),
                Direction::Forward
            )
            .await
        ),
        ["e2", "e4"],
        "query rule: after and a filter together select the matching events after the reference"
    );

    let invoice = append(&storage, &billing(), vec![labelled("Invoiced", "invoice")]).await;
    append(&storage, &orders(), vec![labelled("Odd", "e5")]).await;
    assert_eq!(
        read_after(invoice[0].reference, Direction::Forward).await,
        ["e5"],
        "query rule: after bounds the storage order, so a reference of another stream bounds a \
         read of this one"
    );
}

/// A backward read with `after` and a limit counts its limit from the newest event after the
/// reference, not from the reference: it pages back from the head.
pub async fn a_backward_read_after_an_event_counts_its_limit_from_the_newest<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    let events = append_numbered(&storage, 5).await;
    let read = |filter: EventFilter, limit| {
        let (storage, after) = (&storage, events[1].reference);
        async move {
            labels(
                &query(
                    storage,
                    &filter,
                    &orders(),
                    Some(&after),
                    limit,
                    Direction::Backward,
                )
                .await,
            )
        }
    };
    assert_eq!(
        read(EventFilter::match_all(), Limit::to(2)).await,
        ["e4", "e3"],
        "query rule: after e1, backward, at most 2: the two newest after e1, not the two next to it"
    );
    assert_eq!(
        read(EventFilter::for_types(["Even"]), Limit::to(1)).await,
        ["e4"],
        "query rule: after e1, backward, the newest matching event first"
    );
    assert_eq!(
        read(EventFilter::match_all(), Limit::to(10)).await,
        ["e4", "e3", "e2"],
        "query rule: a limit beyond what lies after the reference returns all of it"
    );
}

/// `limit` caps the number of matching events returned, counted from the oldest going
/// forward; a limit larger than the result changes nothing and a limit of 0 returns none.
pub async fn limit_caps_the_number_of_matching_events<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let events = append_numbered(&storage, 6).await;
    let limited = |filter: EventFilter, after: Option<EventReference>, limit| {
        let storage = &storage;
        async move {
            labels(
                &query(
                    storage,
                    &filter,
                    &orders(),
                    after.as_ref(),
                    limit,
                    Direction::Forward,
                )
                .await,
            )
        }
    };
    assert_eq!(
        limited(EventFilter::match_all(), None, Limit::to(2)).await,
        ["e0", "e1"],
        "query rule: a limit counts from the first event in the reading direction"
    );
    assert_eq!(
        limited(EventFilter::match_all(), None, Limit::to(100)).await,
        ["e0", "e1", "e2", "e3", "e4", "e5"],
        "query rule: a limit above the number of matching events returns them all"
    );
    assert!(
        limited(EventFilter::match_all(), None, Limit::to(0))
            .await
            .is_empty(),
        "query rule: a limit of 0 returns no event"
    );
    assert_eq!(
        limited(EventFilter::for_types(["Odd"]), None, Limit::to(2)).await,
        ["e1", "e3"],
        "the limit counts matching events only"
    );
    assert_eq!(
        limited(
            EventFilter::match_all(),
            Some(events[2].reference),
            Limit::to(2)
        )
        .await,
        ["e3", "e4"],
        "the limit counts from the first event after `after`"
    );
}

/// `Direction::Backward` returns events newest first, and a limit keeps the newest.
pub async fn backward_queries_return_newest_first_and_limit_from_the_newest<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    append_numbered(&storage, 5).await;
    append(&storage, &billing(), vec![labelled("Even", "billing")]).await;
    let backward = |filter: EventFilter, stream: EventStreamId, limit| {
        let storage = &storage;
        async move { labels(&query(storage, &filter, &stream, None, limit, Direction::Backward).await) }
    };
    assert_eq!(
        backward(EventFilter::match_all(), orders(), Limit::none()).await,
        ["e4", "e3", "e2", "e1", "e0"],
        "query rule: a backward read returns the newest event first"
    );
    assert_eq!(
        backward(EventFilter::match_all(), orders(), Limit::to(2)).await,
        ["e4", "e3"],
        "query rule: a backward limit counts from the newest event"
    );
    assert_eq!(
        backward(EventFilter::for_types(["Odd"]), orders(), Limit::to(1)).await,
        ["e3"],
        "query rule: a backward limit counts matching events only, from the newest"
    );
    assert_eq!(
        backward(EventFilter::match_all(), EventStreamId::any(), Limit::to(2)).await,
        ["billing", "e4"], "query rule: a backward read of several streams returns the newest event of any stream first");
}

/// One way of calling `query`: what it is called, then its arguments.
type QueryShape = (
    &'static str,
    EventFilter,
    EventStreamId,
    Option<EventReference>,
    Limit,
    Direction,
);

/// Fills `storage` with 2,500 events in `orders` (more than two default pages) and five in
/// `billing`, and returns the reads to compare across them: both directions, with `after`,
/// `limit`, `until` and filters.
async fn paged_reads<S: EventStorage + ?Sized>(storage: &S) -> Vec<QueryShape> {
    for batch in 0..5 {
        let events = (0..500)
            .map(|n| {
                let n = batch * 500 + n;
                let kind = if n % 3 == 0 { "Odd" } else { "Even" };
                labelled(kind, &format!("e{n}"))
                    .with_tags(tags(&[("order", &format!("o-{}", n % 7))]))
            })
            .collect();
        append(storage, &orders(), events).await;
        append(
            storage,
            &billing(),
            vec![labelled("Even", &format!("b{batch}"))],
        )
        .await;
    }
    let all = query(
        storage,
        &EventFilter::match_all(),
        &orders(),
        None,
        Limit::none(),
        Direction::Forward,
    )
    .await;
    let middle = Some(all[1_234].reference);
    let order_3 = EventFilter::for_tags(tags(&[("order", "o-3")]));
    vec![
        (
            "forward",
            EventFilter::match_all(),
            orders(),
            None,
            Limit::none(),
            Direction::Forward,
        ),
        (
            "backward",
            EventFilter::match_all(),
            orders(),
            None,
            Limit::none(),
            Direction::Backward,
        ),
        (
            "every stream",
            EventFilter::match_all(),
            EventStreamId::any(),
            None,
            Limit::none(),
            Direction::Forward,
        ),
        (
            "after",
            EventFilter::match_all(),
            orders(),
            middle,
            Limit::none(),
            Direction::Forward,
        ),
        (
            "backward after",
            EventFilter::match_all(),
            orders(),
            middle,
            Limit::none(),
            Direction::Backward,
        ),
        (
            "limit",
            EventFilter::match_all(),
            orders(),
            None,
            Limit::to(1_500),
            Direction::Forward,
        ),
        (
            "backward limit",
            EventFilter::match_all(),
            orders(),
            None,
            Limit::to(1_001),
            Direction::Backward,
        ),
        (
            "limit 0",
            EventFilter::match_all(),
            orders(),
            None,
            Limit::to(0),
            Direction::Forward,
        ),
        (
            "type",
            EventFilter::for_types(["Even"]),
            orders(),
            None,
            Limit::none(),
            Direction::Forward,
        ),
        (
            "tag backward",
            order_3.clone(),
            orders(),
            None,
            Limit::none(),
            Direction::Backward,
        ),
        (
            "until",
            EventFilter::match_all().until(all[2_100].reference),
            orders(),
            None,
            Limit::none(),
            Direction::Backward,
        ),
        (
            "match none",
            EventFilter::match_none(),
            orders(),
            None,
            Limit::none(),
            Direction::Forward,
        ),
    ]
}

/// `query_stream` yields exactly what `query` returns for the same arguments, across more
/// than one page (the default pages hold 1,000 events), in both directions, with `after`,
/// `limit`, `until` and filters; invalid input is its first and only item.
pub async fn query_stream_yields_what_query_returns<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let shapes = paged_reads(&storage).await;
    for (shape, filter, stream, after, limit, direction) in shapes {
        let expected = query(&storage, &filter, &stream, after.as_ref(), limit, direction).await;
        let streamed: Vec<StoredEvent> = storage
            .query_stream(&filter, &stream, after.as_ref(), limit, direction)
            .map(|event| event.unwrap_or_else(|err| panic!("query_stream ({shape}) failed: {err}")))
            .collect()
            .await;
        assert_eq!(
            references(&streamed),
            references(&expected),
            "query_stream rule ({shape}): the stream yields exactly what query returns"
        );
    }
    let mut invalid = storage.query_stream(
        &EventFilter::match_all(),
        &EventStreamId::new("", "default"),
        None,
        Limit::none(),
        Direction::Forward,
    );
    let first = invalid.next().await.expect("an item saying why");
    assert_invalid_input(first, "query_stream of an empty context", "validate_stream");
    assert!(
        invalid.next().await.is_none(),
        "invalid input ends the stream"
    );
}

/// A stream dropped after its first event, again and again, holds nothing back: appends
/// (conditional ones too) and reads go on, as the trait promises (no transaction left open,
/// no connection held).
pub async fn streams_dropped_part_way_hold_nothing_back<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let events = (0..1_500)
        .map(|n| labelled("Numbered", &format!("n{n}")))
        .collect();
    append(&storage, &orders(), events).await;
    for round in 0..40 {
        let mut stream = storage.query_stream(
            &EventFilter::match_all(),
            &orders(),
            None,
            Limit::none(),
            Direction::Forward,
        );
        let first = stream.next().await.expect("the first event");
        first.unwrap_or_else(|err| panic!("query_stream, round {round}: {err}"));
        drop(stream);
        let mut raw = storage.query_raw_stream(
            &EventFilter::match_all(),
            &orders(),
            None,
            Limit::none(),
            Direction::Backward,
        );
        let first = raw.next().await.expect("the first event");
        first.unwrap_or_else(|err| panic!("query_raw_stream, round {round}: {err}"));
    }
    let head = storage.head(&orders()).await.expect("head");
    crate::support::within(
        crate::support::DEADLINE,
        "a conditional append after 80 dropped streams",
        async {
            storage
                .append(
                    AppendCriteria::of(EventFilter::match_all(), head),
                    &orders(),
                    vec![labelled("Numbered", "last")],
                )
                .await
                .expect("stream rule: a conditional append after dropped streams succeeds")
        },
    )
    .await;
    let read = crate::support::within(
        crate::support::DEADLINE,
        "a read after 80 dropped streams",
        async { read(&storage, &EventFilter::match_all(), &orders()).await },
    )
    .await;
    assert_eq!(
        read.len(),
        1_501,
        "every event is read after the dropped streams"
    );
}

/// `query_raw` returns exactly the events `query` returns for the same arguments, each
/// payload as JSON text that parses to `query`'s value, whether the backend reads payloads
/// as text ([`Capability::RawPayloads`](eventstore_api::Capability::RawPayloads)) or writes `query`'s values out; invalid input is
/// refused alike.
pub async fn query_raw_returns_what_query_returns_with_payloads_as_text<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    append(
        &storage,
        &orders(),
        vec![EventToStore::new(
            "Nested",
            json!({ "text": "ü \"quoted\"", "list": [1, 2.5, null, true], "big": u64::MAX, "empty": {} }),
        )
        .with_tags(tags(&[("order", "o-nested")]))
        .with_idempotency_key("nested-1")],
    )
    .await;
    for (shape, filter, stream, after, limit, direction) in paged_reads(&storage).await {
        let expected = query(&storage, &filter, &stream, after.as_ref(), limit, direction).await;
        let raw = storage
            .query_raw(&filter, &stream, after.as_ref(), limit, direction)
            .await
            .unwrap_or_else(|err| panic!("query_raw ({shape}) failed: {err}"));
        let parsed: Vec<StoredEvent> = raw
            .into_iter()
            .map(|event| {
                let text = event.payload.to_string();
                event.parse().unwrap_or_else(|err| {
                    panic!("query_raw ({shape}): payload {text} is not JSON: {err}")
                })
            })
            .collect();
        assert!(
            parsed == expected,
            "query_raw rule ({shape}): the events query returns, payloads as their text"
        );
    }
    let invalid = storage
        .query_raw(
            &EventFilter::match_all(),
            &EventStreamId::new("", "default"),
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await;
    assert_invalid_input(invalid, "query_raw of an empty context", "validate_stream");
}

/// `query_raw_stream` yields exactly what `query_raw` returns for the same arguments, across
/// more than one page, in both directions, with `after`, `limit`, `until` and filters;
/// invalid input is its first and only item.
pub async fn query_raw_stream_yields_what_query_raw_returns<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let shapes = paged_reads(&storage).await;
    for (shape, filter, stream, after, limit, direction) in shapes {
        let expected = storage
            .query_raw(&filter, &stream, after.as_ref(), limit, direction)
            .await
            .unwrap_or_else(|err| panic!("query_raw ({shape}) failed: {err}"));
        let streamed: Vec<RawStoredEvent> = storage
            .query_raw_stream(&filter, &stream, after.as_ref(), limit, direction)
            .map(|event| {
                event.unwrap_or_else(|err| panic!("query_raw_stream ({shape}) failed: {err}"))
            })
            .collect()
            .await;
        assert!(
            streamed == expected,
            "query_raw_stream rule ({shape}): the stream yields exactly what query_raw returns \
             ({} events streamed, {} returned)",
            streamed.len(),
            expected.len()
        );
    }
    let mut invalid = storage.query_raw_stream(
        &EventFilter::match_all(),
        &EventStreamId::new("", "default"),
        None,
        Limit::none(),
        Direction::Forward,
    );
    let first = invalid.next().await.expect("an item saying why");
    assert_invalid_input(
        first,
        "query_raw_stream of an empty context",
        "validate_stream",
    );
    assert!(
        invalid.next().await.is_none(),
        "invalid input ends the stream"
    );
}

// ---------------------------------------------------------------------------------------
// Lookups and heads.
// ---------------------------------------------------------------------------------------

/// `get_event_by_id` returns the stored event for its id, whichever stream it is in, and
/// `None` for an id the storage does not hold.
pub async fn get_event_by_id_finds_stored_events_and_nothing_else<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    assert_eq!(
        event_by_id(&storage, EventId::new()).await,
        None,
        "get_event_by_id rule: an empty storage holds no event"
    );
    let mut stored = append_numbered(&storage, 3).await;
    stored.extend(append(&storage, &billing(), vec![labelled("Invoiced", "invoice")]).await);
    for event in &stored {
        assert_eq!(
            event_by_id(&storage, event.reference.id).await,
            Some(event.clone()),
            "get_event_by_id rule: a stored event is found by its id, exactly as stored"
        );
    }
    assert_eq!(
        event_by_id(&storage, EventId::new()).await,
        None,
        "get_event_by_id rule: an id the storage does not hold finds nothing"
    );
}

/// `head` is `None` while nothing is stored, and stays so after empty and refused appends.
pub async fn head_is_none_until_an_event_is_stored<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let streams = [EventStreamId::any(), orders(), orders().any_purpose()];
    for stream in &streams {
        assert_eq!(storage.head(stream).await.expect("head"), None, "{stream}");
    }
    append(&storage, &orders(), Vec::new()).await;
    let refused = storage
        .append(
            AppendCriteria::none(),
            &orders(),
            vec![labelled("", "blank type")],
        )
        .await;
    // A refused append to look at the head after: the rule itself is proved, by name, by
    // events::invalid_events_are_refused_and_nothing_of_the_batch_is_stored.
    assert_invalid_input(
        refused,
        "setup: an append of an event with a blank type, to be refused (the rule is \
         events::invalid_events_are_refused_and_nothing_of_the_batch_is_stored's)",
        "validate_events",
    );
    for stream in &streams {
        assert_eq!(
            storage.head(stream).await.expect("head"),
            None,
            "head rule: the head of {stream} stays None after an empty and a refused append"
        );
    }
    let stored = append(&storage, &orders(), vec![labelled("A", "a")]).await;
    for stream in &streams {
        assert_eq!(
            storage.head(stream).await.expect("head"),
            Some(stored[0].reference),
            "head rule: the head of {stream} is the one event stored in the streams it covers"
        );
    }
}

/// `head` is the reference of the last event in the streams it covers: per stream, per
/// context, across the storage, and `None` for streams without events.
pub async fn head_is_the_last_reference_of_the_streams_covered<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let first = append(
        &storage,
        &orders(),
        vec![labelled("A", "o1"), labelled("A", "o2")],
    )
    .await;
    let eu = append(&storage, &orders_eu(), vec![labelled("A", "eu")]).await;
    let bill = append(&storage, &billing(), vec![labelled("A", "billing")]).await;
    let last = append(&storage, &orders(), vec![labelled("A", "o3")]).await;
    let cases = [
        (orders(), Some(last[0].reference)),
        (orders_eu(), Some(eu[0].reference)),
        (billing(), Some(bill[0].reference)),
        (EventStreamId::any(), Some(last[0].reference)),
        (orders().any_purpose(), Some(last[0].reference)),
        (billing().any_purpose(), Some(bill[0].reference)),
        (
            EventStreamId {
                context: None,
                purpose: Some("eu".to_owned()),
            },
            Some(eu[0].reference),
        ),
        (EventStreamId::for_context("ghost"), None),
    ];
    for (stream, expected) in cases {
        assert_eq!(
            storage.head(&stream).await.expect("head"),
            expected,
            "head rule: the head of {stream} is the last reference of the streams it covers"
        );
    }
    assert!(
        first[1].reference < last[0].reference,
        "reference rule: a later append has a greater reference"
    );
    let newest = query(
        &storage,
        &EventFilter::match_all(),
        &EventStreamId::any(),
        None,
        Limit::to(1),
        Direction::Backward,
    )
    .await;
    assert_eq!(
        references(&newest),
        [last[0].reference],
        "head rule: the head is the reference of the newest event a backward read returns"
    );
}

// ---------------------------------------------------------------------------------------
// Content and input rules.
// ---------------------------------------------------------------------------------------

/// Types, tags, idempotency keys and payloads in any script (emoji, CJK, RTL, combining
/// marks, escapes) come back byte for byte and are matched by filters.
pub async fn unicode_types_tags_and_payloads_round_trip<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let event_type = "注文が確定しました🎉";
    let unicode_tags = tags(&[
        ("客户", "张伟"),
        ("לקוח", "שלום עולם"),
        ("مدينة", "القاهرة"),
        ("emoji", "🚀✨👩‍👩‍👧"),
        ("accent", "e\u{301}"),
    ]);
    let payload = json!({
        "greeting": "Привет, мир",
        "rtl": "مرحبا بالعالم",
        "hebrew": "עברית",
        "cjk": "漢字かなカナ한글",
        "emoji": "🦀🔥👨‍👩‍👧‍👦",
        "combining": "e\u{301}",
        "escapes": "quote \" backslash \\ newline \n tab \t",
        "edges": "\u{1}\u{7f}\u{ffff}\u{10ffff}",
        "键": ["值", "🔑"]
    });
    let sent = EventToStore::new(event_type, payload.clone())
        .with_tags(unicode_tags.clone())
        .with_idempotency_key("ключ-🔑");
    let stream = EventStreamId::new("注文", "🌍");
    let stored = append(&storage, &stream, vec![sent]).await;

    let event = &stored[0];
    assert_eq!(
        event.event_type.as_str(),
        event_type,
        "round trip rule: the event type is stored as sent"
    );
    assert_eq!(
        event.payload, payload,
        "round trip rule: the payload is stored as sent"
    );
    assert_eq!(
        event.tags, unicode_tags,
        "round trip rule: the tags are stored as sent"
    );
    assert_eq!(
        event.idempotency_key.as_deref(),
        Some("ключ-🔑"),
        "round trip rule: the idempotency key is stored as sent"
    );
    assert_eq!(event.stream, stream, "round trip rule: the stream is stored as given (its context and purpose, not a formatted form)");

    let filter = EventFilter::for_events(
        [event_type],
        tags(&[("לקוח", "שלום עולם"), ("emoji", "🚀✨👩‍👩‍👧")]),
    );
    assert_eq!(
        read(&storage, &filter, &stream).await,
        stored,
        "round trip rule: a filter of the Unicode type and tags finds the event in its stream"
    );
    assert_eq!(
        read(&storage, &filter, &EventStreamId::any()).await,
        stored,
        "round trip rule: a filter of the Unicode type and tags finds the event in every stream"
    );
    assert!(
        read(
            &storage,
            &EventFilter::for_tags(tags(&[("accent", "\u{e9}")])),
            &stream
        )
        .await
        .is_empty(),
        "tags are compared as written, without Unicode normalisation"
    );
    assert_eq!(
        event_by_id(&storage, event.reference.id).await,
        Some(event.clone()),
        "round trip rule: get_event_by_id answers the event as stored"
    );
}

/// A payload of a mebibyte of text, ten thousand numbers and deep nesting round trips.
pub async fn large_payload_round_trips<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let text = "0123456789abcdef".repeat(64 * 1024);
    let numbers: Vec<u64> = (0..10_000).collect();
    let mut nested = json!("leaf");
    for depth in 0..32 {
        nested = json!({ "depth": depth, "child": nested });
    }
    let payload = json!({ "text": text, "numbers": numbers, "nested": nested });
    let stored = append(
        &storage,
        &orders(),
        vec![EventToStore::new("Snapshot", payload.clone())],
    )
    .await;
    assert!(
        stored[0].payload == payload,
        "append returned another payload"
    );
    let read_back = read_everything(&storage).await;
    assert_eq!(
        read_back.len(),
        1,
        "round trip rule: one large event is stored once"
    );
    assert!(
        read_back[0].payload == payload,
        "query returned another payload"
    );
    let by_id = event_by_id(&storage, stored[0].reference.id)
        .await
        .expect("the large event is stored");
    assert!(
        by_id.payload == payload,
        "get_event_by_id returned another payload"
    );
}

/// Every invalid event (blank or NUL-holding or over-long type, NUL in the payload, invalid
/// idempotency key, invalid tag) is `InvalidInput`, and none of its batch is stored.
pub async fn invalid_events_are_refused_and_nothing_of_the_batch_is_stored<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    let long = "x".repeat(MAX_NAME_BYTES + 1);
    let ok = || labelled("Valid", "valid");
    let with_tag = |key: &str, value: &str| ok().with_tags(tags(&[(key, value)]));
    let cases = [
        ("an empty type", labelled("", "x")),
        ("a blank type", labelled(" \t\n", "x")),
        ("a NUL in the type", labelled("Order\0Placed", "x")),
        ("a type over 512 bytes", labelled(&long, "x")),
        (
            "a NUL in a payload string",
            EventToStore::new("A", json!({ "note": "a\0b" })),
        ),
        (
            "a NUL in a payload key",
            EventToStore::new("A", json!({ "a\0b": 1 })),
        ),
        (
            "a NUL deep in the payload",
            EventToStore::new("A", json!({ "items": [{ "x": ["ok", "\0"] }] })),
        ),
        ("a NUL as the payload", EventToStore::new("A", json!("\0"))),
        ("an empty idempotency key", ok().with_idempotency_key("")),
        ("a blank idempotency key", ok().with_idempotency_key("   ")),
        (
            "a NUL in the idempotency key",
            ok().with_idempotency_key("key\0"),
        ),
        (
            "an idempotency key over 512 bytes",
            ok().with_idempotency_key(long.clone()),
        ),
        ("a tag key with ':'", with_tag("a:b", "c")),
        ("an empty tag key", with_tag("", "v")),
        ("a NUL in a tag key", with_tag("k\0", "v")),
        ("a NUL in a tag value", with_tag("k", "v\0")),
        ("a tag key over 512 bytes", with_tag(&long, "v")),
        ("a tag value over 512 bytes", with_tag("k", &long)),
    ];
    for (what, invalid) in cases {
        let result = storage
            .append(AppendCriteria::none(), &orders(), vec![ok(), invalid])
            .await;
        assert_invalid_input(
            result,
            &format!("a batch holding an event with {what}"),
            "validate_events",
        );
    }
    assert!(
        read_everything(&storage).await.is_empty(),
        "no event of a refused batch may be stored"
    );
}

/// Names of exactly the longest allowed length (512 bytes, also in multi-byte characters)
/// are accepted for types, tag keys and values, idempotency keys and stream parts.
pub async fn names_at_the_length_limit_are_accepted<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let ascii = "x".repeat(MAX_NAME_BYTES);
    let multibyte = "é".repeat(MAX_NAME_BYTES / 2);
    let tag_key = "k".repeat(MAX_NAME_BYTES);
    assert_eq!(
        multibyte.len(),
        MAX_NAME_BYTES,
        "the test's own multibyte name is MAX_NAME_BYTES long"
    );
    let stream = EventStreamId::new(ascii.clone(), multibyte.clone());
    let sent = EventToStore::new(ascii.clone(), json!({}))
        .with_tags(tags(&[(tag_key.as_str(), multibyte.as_str())]))
        .with_idempotency_key(multibyte.clone());
    let stored = append(&storage, &stream, vec![sent.clone()]).await;
    assert_eq!(
        stored[0].event_type, sent.event_type,
        "input rule validate::validate_name: an event type of MAX_NAME_BYTES is stored as sent"
    );
    assert_eq!(
        stored[0].tags, sent.tags,
        "input rule validate::validate_tags: a tag at the length limits is stored as sent"
    );
    assert_eq!(stored[0].idempotency_key, sent.idempotency_key, "input rule validate::validate_name: an idempotency key of MAX_NAME_BYTES is stored as sent");
    assert_eq!(stored[0].stream, stream, "input rule validate::validate_append_stream: a stream of MAX_NAME_BYTES parts is stored as given");
    assert_eq!(
        read(&storage, &EventFilter::for_types([ascii]), &stream).await,
        stored,
        "round trip rule: an event type of MAX_NAME_BYTES is found by a type filter"
    );
}

/// An empty batch stores nothing and returns an empty list, but its criteria are still
/// checked.
pub async fn empty_batch_stores_nothing_but_its_criteria_are_checked<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    let stored = storage
        .append(AppendCriteria::none(), &orders(), Vec::new())
        .await
        .unwrap_or_else(|err| panic!("an empty batch: {err}"));
    assert!(stored.is_empty(), "got {stored:?}");
    assert!(
        read_everything(&storage).await.is_empty(),
        "append rule: an empty batch stores nothing"
    );

    let existing = append(&storage, &orders(), vec![labelled("A", "existing")]).await;
    let result = storage
        .append(
            AppendCriteria::of(EventFilter::for_types(["A"]), None),
            &orders(),
            Vec::new(),
        )
        .await;
    assert_optimistic_lock(
        result,
        None,
        existing[0].reference,
        "an empty batch whose criteria fail",
    );
    let stored = storage
        .append(
            AppendCriteria::of(EventFilter::for_types(["A"]), Some(existing[0].reference)),
            &orders(),
            Vec::new(),
        )
        .await
        .unwrap_or_else(|err| panic!("an empty batch whose criteria hold: {err}"));
    assert!(stored.is_empty(), "got {stored:?}");
    assert_eq!(
        read_everything(&storage).await,
        existing,
        "append rule: an empty batch stores nothing, also when its criteria hold"
    );
}
