//! Scenarios of events: filters.

use super::*;

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
