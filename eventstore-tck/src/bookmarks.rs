//! Scenarios: bookmarks.
//!
//! Placing, replacing, reading, listing and removing readers' bookmarks; bookmarks of
//! unknown events refused with the old bookmark kept; references given back in the storage's
//! own coordinates; reader names refused alike everywhere.

use eventstore_api::validate::MAX_NAME_BYTES;
use eventstore_api::{
    Bookmark, EventId, EventReference, EventStorage, EventStorageError, StoredEvent, Tags,
};

use crate::events::{append, labelled, orders, tags};
use crate::support::{assert_invalid_input, eventually, expect_err, ClockWindow};
use crate::StorageFactory;

/// What every scenario of this module needs, unless it declares its own.
pub(crate) const NEEDS: &[eventstore_api::Capability] = &[];

/// Appends `count` events to `orders` and returns them.
async fn append_events<S: EventStorage + ?Sized>(storage: &S, count: usize) -> Vec<StoredEvent> {
    let batch = (0..count)
        .map(|n| labelled("Processed", &format!("e{n}")))
        .collect();
    append(storage, &orders(), batch).await
}

/// Places `reader`'s bookmark; panics naming the reader when that fails.
async fn place<S: EventStorage + ?Sized>(
    storage: &S,
    reader: &str,
    reference: &EventReference,
    tags: Tags,
) {
    storage
        .bookmark(reader, reference, tags)
        .await
        .unwrap_or_else(|err| panic!("bookmark of {reader:?} at {reference} failed: {err}"));
}

/// Where `reader`'s bookmark stands.
async fn position_of<S: EventStorage + ?Sized>(
    storage: &S,
    reader: &str,
) -> Option<EventReference> {
    storage
        .get_bookmark(reader)
        .await
        .unwrap_or_else(|err| panic!("get_bookmark of {reader:?} failed: {err}"))
}

/// Every bookmark of the storage.
async fn listed<S: EventStorage + ?Sized>(storage: &S) -> Vec<Bookmark> {
    storage
        .get_bookmarks()
        .await
        .unwrap_or_else(|err| panic!("get_bookmarks failed: {err}"))
}

/// A fresh storage holding two events, with `projector`'s bookmark at the first (tagged
/// `run:1`); returns it with its events and its bookmarks as listed then.
async fn storage_with_a_bookmark<F: StorageFactory>(
    factory: &F,
) -> (F::Storage, Vec<StoredEvent>, Vec<Bookmark>) {
    let storage = factory.create().await;
    let events = append_events(&storage, 2).await;
    place(
        &storage,
        "projector",
        &events[0].reference,
        tags(&[("run", "1")]),
    )
    .await;
    let before = listed(&storage).await;
    (storage, events, before)
}

/// Asserts that the storage lists exactly the bookmarks `before`.
async fn assert_bookmarks_unchanged<S: EventStorage + ?Sized>(
    storage: &S,
    before: &[Bookmark],
    context: &str,
) {
    assert_eq!(listed(storage).await, before, "{context}");
}

/// A bookmark is read back where it was placed, and a reader without one has none.
pub async fn bookmark_is_read_back_where_it_was_placed<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let events = append_events(&storage, 3).await;
    assert_eq!(
        position_of(&storage, "projector").await,
        None,
        "bookmark rule: a reader that never placed a bookmark has none"
    );
    assert!(
        listed(&storage).await.is_empty(),
        "bookmark rule: get_bookmarks lists nothing before any bookmark is placed"
    );

    place(&storage, "projector", &events[1].reference, Tags::none()).await;
    assert_eq!(
        position_of(&storage, "projector").await,
        Some(events[1].reference),
        "bookmark rule: get_bookmark answers the reference the bookmark was placed at"
    );
    assert_eq!(
        position_of(&storage, "another").await,
        None,
        "a reader without a bookmark has none"
    );
}

/// Placing a bookmark again replaces it, forwards or backwards, with its new tags.
pub async fn bookmark_is_replaced_by_the_next_one<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let events = append_events(&storage, 3).await;
    place(
        &storage,
        "projector",
        &events[0].reference,
        tags(&[("run", "1")]),
    )
    .await;
    place(
        &storage,
        "projector",
        &events[2].reference,
        tags(&[("run", "2")]),
    )
    .await;
    assert_eq!(
        position_of(&storage, "projector").await,
        Some(events[2].reference),
        "bookmark rule: a second bookmark of one reader replaces the first"
    );
    place(
        &storage,
        "projector",
        &events[1].reference,
        tags(&[("rewound", "yes")]),
    )
    .await;
    assert_eq!(
        position_of(&storage, "projector").await,
        Some(events[1].reference),
        "a bookmark may move backwards (a reader rewinds)"
    );
    let bookmarks = listed(&storage).await;
    assert_eq!(
        bookmarks.len(),
        1,
        "a reader has one bookmark: {bookmarks:?}"
    );
    assert_eq!(
        bookmarks[0].reference, events[1].reference,
        "bookmark rule: get_bookmarks lists the bookmark at the reference it was placed at"
    );
    assert_eq!(
        bookmarks[0].tags,
        tags(&[("rewound", "yes")]),
        "the tags are replaced along with the position"
    );
}

/// Removing a bookmark removes it from reads and the listing; removing it again, or a
/// bookmark that never existed, is fine.
pub async fn removing_a_bookmark_is_idempotent<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let events = append_events(&storage, 1).await;
    place(&storage, "projector", &events[0].reference, Tags::none()).await;
    place(&storage, "auditor", &events[0].reference, Tags::none()).await;

    for attempt in ["first", "second"] {
        storage
            .remove_bookmark("projector")
            .await
            .unwrap_or_else(|err| panic!("{attempt} removal failed: {err}"));
        assert_eq!(
            position_of(&storage, "projector").await,
            None,
            "bookmark rule: after remove_bookmark (any number of times) the reader has none"
        );
    }
    storage
        .remove_bookmark("never-placed")
        .await
        .unwrap_or_else(|err| panic!("removing a bookmark that never existed failed: {err}"));

    let readers: Vec<_> = listed(&storage)
        .await
        .into_iter()
        .map(|bookmark| bookmark.reader)
        .collect();
    assert_eq!(readers, ["auditor"], "other readers' bookmarks stay");

    place(&storage, "projector", &events[0].reference, Tags::none()).await;
    assert_eq!(
        position_of(&storage, "projector").await,
        Some(events[0].reference),
        "a removed bookmark can be placed again"
    );
}

/// `get_bookmarks` lists every reader, ordered by name, with its reference, tags and an
/// `updated_at` taken from the storage's clock.
pub async fn bookmarks_are_listed_by_reader_with_tags_and_update_time<F: StorageFactory>(
    factory: &F,
) {
    let storage = factory.create().await;
    let events = append_events(&storage, 3).await;
    let window = ClockWindow::open(&storage).await;
    place(
        &storage,
        "charlie",
        &events[2].reference,
        tags(&[("shard", "2")]),
    )
    .await;
    place(
        &storage,
        "alpha",
        &events[0].reference,
        tags(&[("shard", "0"), ("version", "7")]),
    )
    .await;
    place(&storage, "bravo", &events[1].reference, Tags::none()).await;

    let bookmarks = listed(&storage).await;
    let summary: Vec<_> = bookmarks
        .iter()
        .map(|bookmark| {
            (
                bookmark.reader.as_str(),
                bookmark.reference,
                bookmark.tags.clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "alpha",
                events[0].reference,
                tags(&[("shard", "0"), ("version", "7")])
            ),
            ("bravo", events[1].reference, Tags::none()),
            ("charlie", events[2].reference, tags(&[("shard", "2")])),
        ], "bookmark rule: get_bookmarks lists every reader ordered by reader name (alpha, bravo, charlie, not in the order placed), each with its reference and tags");
    for bookmark in &bookmarks {
        window
            .assert_contains(
                &storage,
                &format!("updated_at of {}'s bookmark", bookmark.reader),
                bookmark.updated_at,
            )
            .await;
    }
}

/// Replacing a bookmark moves its `updated_at` forward on the storage's clock.
pub async fn replacing_a_bookmark_moves_its_update_time_forward<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let events = append_events(&storage, 2).await;
    place(&storage, "projector", &events[0].reference, Tags::none()).await;
    let placed = listed(&storage).await.remove(0);

    // Let the storage's clock pass the first update, so that "later" is observable.
    eventually(
        "the storage's clock to pass the first bookmark's updated_at",
        || async { ClockWindow::now(&storage).await > placed.updated_at },
    )
    .await;
    let window = ClockWindow::open(&storage).await;
    place(&storage, "projector", &events[1].reference, Tags::none()).await;
    let replaced = listed(&storage).await.remove(0);
    assert!(
        replaced.updated_at > placed.updated_at,
        "updated_at must move forward on replace: {} then {}",
        placed.updated_at,
        replaced.updated_at
    );
    window
        .assert_contains(
            &storage,
            "updated_at of the replaced bookmark",
            replaced.updated_at,
        )
        .await;
}

/// Handles replacing one reader's bookmark at once never move its `updated_at` back: each
/// reading of the bookmark shows an update time at or after the one read before.
pub async fn racing_replacements_never_move_a_bookmarks_update_time_back<F: StorageFactory>(
    factory: &F,
) {
    const WRITERS: usize = 4;
    const REPLACEMENTS: usize = 500;
    let storage = factory.create().await;
    let events = append_events(&storage, WRITERS).await;
    let mut writers = Vec::new();
    for event in &events {
        let (handle, reference) = (factory.another_handle(&storage).await, event.reference);
        writers.push(tokio::spawn(async move {
            for _ in 0..REPLACEMENTS {
                place(&handle, "racer", &reference, Tags::none()).await;
            }
        }));
    }
    let mut latest = None;
    while !writers.iter().all(tokio::task::JoinHandle::is_finished) {
        let listed = listed(&storage).await;
        if let Some(bookmark) = listed.first() {
            if let Some(latest) = latest {
                assert!(
                    bookmark.updated_at >= latest,
                    "the bookmark's updated_at moved back from {latest} to {}",
                    bookmark.updated_at
                );
            }
            latest = Some(bookmark.updated_at);
        }
        tokio::task::yield_now().await;
    }
    for writer in writers {
        writer.await.expect("a writer panicked");
    }
}

/// A bookmark at an event the storage does not hold is `UnknownEvent` naming its id, and the
/// reader's previous bookmark stays as it was.
pub async fn bookmark_of_an_unknown_event_is_refused_and_the_old_one_stays<F: StorageFactory>(
    factory: &F,
) {
    let (storage, events, before) = storage_with_a_bookmark(factory).await;

    let unknown = EventReference {
        id: EventId::new(),
        ..events[1].reference
    };
    for reader in ["projector", "newcomer"] {
        let err = expect_err(
            storage
                .bookmark(reader, &unknown, tags(&[("run", "2")]))
                .await,
            &format!("a bookmark of {reader} at an unknown event"),
            "Err(UnknownEvent), the answer of a bookmark at an event the storage does not hold",
        );
        match err {
            EventStorageError::UnknownEvent { id, .. } => assert_eq!(
                id, unknown.id,
                "bookmark rule: UnknownEvent names the id of the reference the bookmark was \
                 refused for (left: the id named, right: the id given)"
            ),
            other => panic!(
                "a bookmark of {reader} at an unknown event: expected Err(UnknownEvent), the \
                 answer of a bookmark at an event the storage does not hold, got Err({other})"
            ),
        }
    }
    assert_bookmarks_unchanged(
        &storage,
        &before,
        "a refused bookmark changes nothing, not even updated_at or tags",
    )
    .await;
    assert_eq!(
        position_of(&storage, "newcomer").await,
        None,
        "bookmark rule: a refused bookmark creates none for a reader that had none"
    );
}

/// The reference a bookmark is read back with is the storage's own for the event: a
/// reference with the right id but a wrong position and tx is stored as the event's real one.
pub async fn bookmark_is_read_back_in_the_storages_own_coordinates<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let events = append_events(&storage, 3).await;
    let real = events[1].reference;
    let skewed = EventReference {
        id: real.id,
        position: real.position + 1_000_000,
        tx: real.tx + 7_000_000,
    };
    place(&storage, "projector", &skewed, Tags::none()).await;
    assert_eq!(
        position_of(&storage, "projector").await,
        Some(real),
        "get_bookmark must give the event's own reference"
    );
    assert_eq!(
        listed(&storage).await[0].reference,
        real,
        "get_bookmarks must give the event's own reference"
    );
}

/// Bookmarks placed and removed through one handle are seen through another.
pub async fn bookmarks_are_shared_between_handles<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let other = factory.another_handle(&storage).await;
    let events = append_events(&storage, 2).await;

    place(
        &storage,
        "projector",
        &events[0].reference,
        tags(&[("by", "first")]),
    )
    .await;
    assert_eq!(
        position_of(&other, "projector").await,
        Some(events[0].reference),
        "bookmark rule: a bookmark placed through one handle is read through another"
    );
    place(
        &other,
        "projector",
        &events[1].reference,
        tags(&[("by", "second")]),
    )
    .await;
    let seen = listed(&storage).await;
    assert_eq!(
        seen.len(),
        1,
        "bookmark rule: one reader has one bookmark, whichever handle placed it"
    );
    assert_eq!(
        seen[0].reference, events[1].reference,
        "bookmark rule: the last bookmark placed, through any handle, is the one that stands"
    );
    assert_eq!(
        seen[0].tags,
        tags(&[("by", "second")]),
        "bookmark rule: the tags of the last bookmark placed are the ones listed"
    );

    other
        .remove_bookmark("projector")
        .await
        .unwrap_or_else(|err| panic!("remove_bookmark failed: {err}"));
    assert_eq!(
        position_of(&storage, "projector").await,
        None,
        "bookmark rule: a bookmark removed through one handle is gone through every handle"
    );
}

/// Readers' bookmarks are independent: placing or removing one leaves the others alone.
pub async fn bookmarks_of_different_readers_are_independent<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let events = append_events(&storage, 3).await;
    place(&storage, "fast", &events[2].reference, Tags::none()).await;
    place(&storage, "slow", &events[0].reference, Tags::none()).await;
    place(&storage, "fast", &events[1].reference, Tags::none()).await;
    assert_eq!(
        position_of(&storage, "slow").await,
        Some(events[0].reference),
        "bookmark rule: bookmarks of different readers are independent: moving one moves no other"
    );
    storage
        .remove_bookmark("fast")
        .await
        .unwrap_or_else(|err| panic!("remove_bookmark failed: {err}"));
    assert_eq!(
        position_of(&storage, "slow").await,
        Some(events[0].reference),
        "bookmark rule: removing one reader's bookmark leaves the others"
    );
    assert_eq!(
        position_of(&storage, "fast").await,
        None,
        "bookmark rule: a removed bookmark is gone"
    );
}

/// Reader names in any script, and of exactly the longest allowed length, are accepted.
pub async fn unicode_and_longest_reader_names_are_accepted<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let events = append_events(&storage, 1).await;
    let longest = "é".repeat(MAX_NAME_BYTES / 2);
    let readers = ["投影-🚀", "קורא", longest.as_str()];
    for reader in readers {
        place(
            &storage,
            reader,
            &events[0].reference,
            tags(&[("名前", "値")]),
        )
        .await;
        assert_eq!(
            position_of(&storage, reader).await,
            Some(events[0].reference),
            "bookmark of {reader:?}"
        );
    }
    assert_eq!(
        listed(&storage).await.len(),
        readers.len(),
        "bookmark rule: every accepted reader name gets a bookmark of its own"
    );
}

/// Blank, NUL-holding and over-long reader names are `InvalidInput` for `bookmark`,
/// `get_bookmark` and `remove_bookmark`, and change nothing.
pub async fn invalid_reader_names_are_refused<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let events = append_events(&storage, 1).await;
    place(&storage, "projector", &events[0].reference, Tags::none()).await;
    let before = listed(&storage).await;

    let too_long = "r".repeat(MAX_NAME_BYTES + 1);
    for reader in [
        "",
        "   ",
        "\t\n",
        "pro\0jector",
        "projector\0",
        too_long.as_str(),
    ] {
        let shown = format!("{reader:?}");
        assert_invalid_input(
            storage
                .bookmark(reader, &events[0].reference, Tags::none())
                .await,
            &format!("bookmark of reader {shown}"),
            "validate_reader",
        );
        assert_invalid_input(
            storage.get_bookmark(reader).await,
            &format!("get_bookmark of reader {shown}"),
            "validate_reader",
        );
        assert_invalid_input(
            storage.remove_bookmark(reader).await,
            &format!("remove_bookmark of reader {shown}"),
            "validate_reader",
        );
    }
    assert_bookmarks_unchanged(&storage, &before, "refused calls change nothing").await;
}

/// A bookmark with invalid tags is `InvalidInput`, and the reader's bookmark stays.
pub async fn bookmark_with_invalid_tags_is_refused_and_the_old_one_stays<F: StorageFactory>(
    factory: &F,
) {
    let (storage, events, before) = storage_with_a_bookmark(factory).await;

    let too_long = "v".repeat(MAX_NAME_BYTES + 1);
    let invalid = [
        ("a tag key with ':'", tags(&[("a:b", "c")])),
        ("an empty tag key", tags(&[("", "c")])),
        ("a NUL in a tag value", tags(&[("run", "2\0")])),
        (
            "a tag value over 512 bytes",
            tags(&[("run", too_long.as_str())]),
        ),
    ];
    for (what, bad_tags) in invalid {
        assert_invalid_input(
            storage
                .bookmark("projector", &events[1].reference, bad_tags)
                .await,
            &format!("a bookmark with {what}"),
            "validate_tags",
        );
    }
    assert_bookmarks_unchanged(&storage, &before, "refused bookmarks change nothing").await;
}
