//! Scenarios of events: lookups and heads.

use super::*;
use crate::support::Answer as _;

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
        assert_eq!(
            storage
                .head(stream)
                .await
                .or_rule("head", "head of a valid stream answers on an open storage"),
            None,
            "{stream}"
        );
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
            storage
                .head(stream)
                .await
                .or_rule("head", "head of a valid stream answers on an open storage"),
            None,
            "head rule: the head of {stream} stays None after an empty and a refused append"
        );
    }
    let stored = append(&storage, &orders(), vec![labelled("A", "a")]).await;
    for stream in &streams {
        assert_eq!(
            storage
                .head(stream)
                .await
                .or_rule("head", "head of a valid stream answers on an open storage"),
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
            storage
                .head(&stream)
                .await
                .or_rule("head", "head of a valid stream answers on an open storage"),
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
