//! Scenarios of events: DCB conditional appends.

use super::*;
use crate::support::{self, Answer as _};

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
    let second = support::only(
        second,
        "a conditional append of one event",
        "an append answers one stored event per event sent",
    );

    // The boundary moves with each successful append.
    let criteria = AppendCriteria::of(filter, Some(second.reference));
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
        storage
            .head(&orders())
            .await
            .or_rule("head", "head of a valid stream answers on an open storage"),
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
    let second = support::only(
        second,
        "a conditional append of one event",
        "an append answers one stored event per event sent",
    );

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
        second.reference,
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
        other
            .head(&orders())
            .await
            .or_rule("head", "head of a valid stream answers on an open storage"),
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
