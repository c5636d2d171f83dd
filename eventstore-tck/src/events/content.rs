//! Scenarios of events: content and input rules.

use super::*;

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
        .unwrap_or_else(|| {
            panic!("round trip rule: get_event_by_id finds a stored event: the large event is not found")
        });
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
