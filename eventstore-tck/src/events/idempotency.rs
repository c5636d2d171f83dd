//! Scenarios of events: idempotency keys.

use super::*;

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
