//! Scenarios of events: round trip and order.

use super::*;
use crate::support;

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
    assert_eq!(
        queried.len(),
        1,
        "round trip rule: the deep event is read by a query: {queried:?}"
    );
    let retried = storage
        .append(AppendCriteria::none(), &orders(), vec![keyed()])
        .await
        .unwrap_or_else(|err| {
            panic!("idempotency rule: an exact retry of the deep event must be a retry: {err}")
        });
    let retried = support::only(
        retried,
        "the retry of the deep event",
        "idempotency rule: a retry answers the stored events, one per event sent",
    );
    assert_eq!(
        retried.reference, stored[0].reference,
        "idempotency rule: a retry answers the stored event, not a new one"
    );

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
