//! Scenarios of events: streams, bounds, limits and directions of reads.

use super::*;
use crate::support::Answer as _;
use eventstore_api::EventStorageExt;

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
            let first = streamed.next().await.unwrap_or_else(|| {
                panic!("a stream of a refused read yields one item, the error saying why, before it ends: it ended at once")
            });
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
pub(super) async fn append_numbered<S: EventStorage + ?Sized>(
    storage: &S,
    count: usize,
) -> Vec<StoredEvent> {
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
    let first = invalid.next().await.unwrap_or_else(|| {
                panic!("a stream of a refused read yields one item, the error saying why, before it ends: it ended at once")
            });
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
        let first = stream.next().await.unwrap_or_else(|| {
            panic!("a stream of a read with matching events yields them: it ended before the first")
        });
        first.unwrap_or_else(|err| panic!("query_stream, round {round}: {err}"));
        drop(stream);
        let mut raw = storage.query_raw_stream(
            &EventFilter::match_all(),
            &orders(),
            None,
            Limit::none(),
            Direction::Backward,
        );
        let first = raw.next().await.unwrap_or_else(|| {
            panic!("a stream of a read with matching events yields them: it ended before the first")
        });
        first.unwrap_or_else(|err| panic!("query_raw_stream, round {round}: {err}"));
    }
    let head = storage
        .head(&orders())
        .await
        .or_rule("head", "head of a valid stream answers on an open storage");
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
    let first = invalid.next().await.unwrap_or_else(|| {
                panic!("a stream of a refused read yields one item, the error saying why, before it ends: it ended at once")
            });
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
