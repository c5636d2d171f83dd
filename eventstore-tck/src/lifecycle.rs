//! Scenarios: lifecycle.
//!
//! A storage's name, what several handles of one storage share, and `close`: idempotent,
//! closing every handle, after which every call but `name` is `Closed`.

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eventstore_api::EventStorageExt;
use eventstore_api::{
    AppendCriteria, Capability, Direction, EventFilter, EventId, EventStorage, EventStorageError,
    EventStreamId, Fence, FencingToken, LeaseScope, Limit, StorageResult, Tags,
};
use futures_util::StreamExt;
use tokio::sync::Barrier;

use crate::events::{append, labelled, orders, read_everything, tags};
use crate::support::Answer as _;
use crate::support::{assert_closed, request};
use crate::StorageFactory;

/// What every scenario of this module needs, unless it declares its own.
pub(crate) const NEEDS: &[eventstore_api::Capability] = &[];

/// Asserts that `result` is `Closed`, or `Unsupported` for a capability the backend lacks.
fn assert_closed_or_unsupported<T: Debug>(result: StorageResult<T>, call: &str) {
    match result {
        Err(EventStorageError::Closed | EventStorageError::Unsupported { .. }) => {}
        other => panic!(
            "{call} on a closed storage without its capability must return Closed or Unsupported, \
             got {other:?}"
        ),
    }
}

/// Asserts that a stream of a closed storage yields `Closed` once and ends.
fn assert_closed_once<T: Debug>(items: Vec<StorageResult<T>>, call: &str) {
    let count = items.len();
    let mut items = items.into_iter();
    match items.next() {
        Some(first) => assert_closed(first, call),
        None => panic!("{call} on a closed storage must yield Err(Closed), yielded nothing"),
    }
    assert_eq!(
        count, 1,
        "{call} on a closed storage must end after Err(Closed)"
    );
}

/// The arguments the calls of [`assert_every_call_is_closed`] are made with.
struct Arguments {
    stream: EventStreamId,
    event_type: &'static str,
    reader: &'static str,
    lease_name: &'static str,
    owner: &'static str,
}

impl Arguments {
    /// Arguments every call would accept on an open storage.
    fn valid() -> Self {
        Arguments {
            stream: orders(),
            event_type: "A",
            reader: "reader",
            lease_name: "l",
            owner: "o",
        }
    }

    /// Arguments every call would refuse as `InvalidInput` on an open storage: a blank stream
    /// context, event type, reader, lease name and owner.
    fn invalid() -> Self {
        Arguments {
            stream: EventStreamId::new(" ", "default"),
            event_type: " ",
            reader: " ",
            lease_name: " ",
            owner: " ",
        }
    }
}

/// Asserts that every method of `storage` but `name`, called with `arguments`, returns
/// `Closed` (the methods of a capability the backend lacks may return `Unsupported` instead).
async fn assert_every_call_is_closed<S: EventStorage + ?Sized>(storage: &S, arguments: &Arguments) {
    let Arguments {
        stream,
        event_type,
        reader,
        lease_name,
        owner,
    } = arguments;
    let reference = eventstore_api::EventReference::at(EventId::new(), 1);
    assert_closed(
        storage
            .append(
                AppendCriteria::none(),
                stream,
                vec![labelled(event_type, "a")],
            )
            .await,
        "append",
    );
    assert_closed(
        storage
            .append(AppendCriteria::none(), stream, Vec::new())
            .await,
        "append of an empty batch",
    );
    assert_closed(
        storage
            .query(
                &EventFilter::match_all(),
                stream,
                None,
                Limit::none(),
                Direction::Forward,
            )
            .await,
        "query",
    );
    assert_closed(
        storage
            .query_raw(
                &EventFilter::match_all(),
                stream,
                None,
                Limit::none(),
                Direction::Forward,
            )
            .await,
        "query_raw",
    );
    let streamed: Vec<_> = storage
        .query_stream(
            &EventFilter::match_all(),
            stream,
            None,
            Limit::none(),
            Direction::Forward,
        )
        .collect()
        .await;
    assert_closed_once(streamed, "query_stream");
    let streamed: Vec<_> = storage
        .query_raw_stream(
            &EventFilter::match_all(),
            stream,
            None,
            Limit::none(),
            Direction::Forward,
        )
        .collect()
        .await;
    assert_closed_once(streamed, "query_raw_stream");
    assert_closed(
        storage.get_event_by_id(EventId::new()).await,
        "get_event_by_id",
    );
    assert_closed(storage.head(stream).await, "head");
    assert_closed(
        storage.bookmark(reader, &reference, Tags::none()).await,
        "bookmark",
    );
    assert_closed(storage.get_bookmark(reader).await, "get_bookmark");
    assert_closed(storage.remove_bookmark(reader).await, "remove_bookmark");
    assert_closed(storage.get_bookmarks().await, "get_bookmarks");

    let lease_calls = [
        (
            "request_lease",
            storage
                .request_lease(request(lease_name, owner))
                .await
                .map(drop),
        ),
        (
            "request_leases",
            storage
                .request_leases(vec![request("l", "o"), request(lease_name, owner)])
                .await
                .map(drop),
        ),
        (
            "request_leases of none",
            storage.request_leases(Vec::new()).await.map(drop),
        ),
        (
            "release_lease",
            storage.release_lease(lease_name, owner).await,
        ),
        (
            "release_leases of none",
            storage.release_leases(&[], owner).await.map(drop),
        ),
        (
            "release_leases",
            storage
                .release_leases(&["l".to_owned(), (*lease_name).to_owned()], owner)
                .await
                .map(drop),
        ),
        ("get_leases", storage.get_leases().await.map(drop)),
        ("storage_time", storage.storage_time().await.map(drop)),
    ];
    for (call, result) in lease_calls {
        if storage.supports(Capability::Lease) {
            assert_closed(result, call);
        } else {
            assert_closed_or_unsupported(result, call);
        }
    }

    let outcome_calls = [
        (
            "request_leases_with_outcome",
            storage
                .request_leases_with_outcome(vec![request(lease_name, owner)])
                .await
                .map(drop),
        ),
        (
            "request_leases_with_outcome of none",
            storage
                .request_leases_with_outcome(Vec::new())
                .await
                .map(drop),
        ),
        (
            "release_lease_with_outcome",
            storage
                .release_lease_with_outcome(lease_name, owner)
                .await
                .map(drop),
        ),
    ];
    for (call, result) in outcome_calls {
        if storage.supports(Capability::LeaseOutcomes) {
            assert_closed(result, call);
        } else {
            assert_closed_or_unsupported(result, call);
        }
    }

    let subscribed = storage
        .subscribe_lease_changes(LeaseScope::lease(*lease_name))
        .await
        .map(drop);
    if storage.supports(Capability::LeaseChanges) {
        assert_closed(subscribed, "subscribe_lease_changes");
    } else {
        assert_closed_or_unsupported(subscribed, "subscribe_lease_changes");
    }
    let subscribed = storage.subscribe_appends(stream).await.map(drop);
    if storage.supports(Capability::AppendHints) {
        assert_closed(subscribed, "subscribe_appends");
    } else {
        assert_closed_or_unsupported(subscribed, "subscribe_appends");
    }

    let fence = Fence::new(*lease_name, FencingToken(1));
    let fenced_calls = [
        (
            "append_fenced",
            storage
                .append_fenced(
                    &fence,
                    AppendCriteria::none(),
                    stream,
                    vec![labelled(event_type, "a")],
                )
                .await
                .map(drop),
        ),
        (
            "bookmark_fenced",
            storage
                .bookmark_fenced(&fence, reader, &reference, Tags::none())
                .await,
        ),
    ];
    for (call, result) in fenced_calls {
        if storage.supports(Capability::FencedWrites) {
            assert_closed(result, call);
        } else {
            assert_closed_or_unsupported(result, call);
        }
    }
}

/// A storage has a non-blank name, and keeps it after `close`.
pub async fn name_is_not_blank_and_survives_close<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let name = storage.name().to_owned();
    assert!(
        !name.trim().is_empty(),
        "a storage must have a non-blank name, got {name:?}"
    );
    storage
        .close()
        .await
        .unwrap_or_else(|err| panic!("close failed: {err}"));
    assert_eq!(storage.name(), name, "name still answers after close");
}

/// How soon after `close` every subscription of the storage must have ended.
const SUBSCRIPTIONS_END_WITHIN: Duration = Duration::from_secs(2);

/// The rule of `close` and subscriptions.
const CLOSE_ENDS_SUBSCRIPTIONS: &str = "close ends every subscription the storage handed out \
    (lease changes and append hints, through any of its handles): each yields what it holds, \
    then None, at once";

/// `close` ends every subscription the storage handed out, to lease changes (with
/// `Capability::LeaseChanges`) and to append hints (with `Capability::AppendHints`), of this
/// handle and of its clones, within two seconds: a reader waiting on a closed storage would
/// otherwise wait forever. Without either capability there is nothing to end.
pub async fn close_ends_every_subscription_promptly<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let clone = storage.clone();
    let mut lease_changes = Vec::new();
    if storage.supports(Capability::LeaseChanges) {
        for (which, handle) in [("the closing handle", &storage), ("a clone", &clone)] {
            for scope in [LeaseScope::lease("orders"), LeaseScope::All] {
                let what = format!("subscribe_lease_changes({scope:?}) through {which}");
                let subscription = handle.subscribe_lease_changes(scope).await.or_rule(
                    &what,
                    "subscribe_lease_changes answers on a storage with Capability::LeaseChanges",
                );
                lease_changes.push((what, subscription));
            }
        }
    }
    let mut append_hints = Vec::new();
    if storage.supports(Capability::AppendHints) {
        for (which, handle) in [("the closing handle", &storage), ("a clone", &clone)] {
            for stream in [orders(), EventStreamId::any()] {
                let what = format!("subscribe_appends({stream}) through {which}");
                let subscription = handle.subscribe_appends(&stream).await.or_rule(
                    &what,
                    "subscribe_appends of a valid stream answers on a storage with \
                     Capability::AppendHints",
                );
                append_hints.push((what, subscription));
            }
        }
    }
    storage
        .close()
        .await
        .or_rule("close", "close succeeds, and again once closed");
    let mut waiting_on = String::from("none");
    let ended = async {
        for (what, subscription) in &mut lease_changes {
            waiting_on.clone_from(what);
            while subscription.next().await.is_some() {}
        }
        for (what, subscription) in &mut append_hints {
            waiting_on.clone_from(what);
            while subscription.next().await.is_some() {}
        }
    };
    let in_time = tokio::time::timeout(SUBSCRIPTIONS_END_WITHIN, ended).await;
    assert!(
        in_time.is_ok(),
        "{CLOSE_ENDS_SUBSCRIPTIONS}; yet {SUBSCRIPTIONS_END_WITHIN:?} after close the \
         subscription {waiting_on} had not ended"
    );
}

/// `close` is idempotent: closing again, through the same or another handle, is `Ok`.
pub async fn close_is_idempotent<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let other = factory.another_handle(&storage).await;
    for (attempt, handle) in [("first", &storage), ("second", &storage), ("third", &other)] {
        handle
            .close()
            .await
            .unwrap_or_else(|err| panic!("the {attempt} close failed: {err}"));
    }
}

/// After `close`, every method but `name` returns `Closed`, including the lease methods
/// when the backend offers leases (they may return `Unsupported` when it does not) and the
/// fenced writes when it offers those.
pub async fn every_call_but_name_is_closed_after_close<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    // Calls that would succeed on an open storage: an event to read and a bookmark to find.
    let stored = append(&storage, &orders(), vec![labelled("A", "before close")]).await;
    storage
        .bookmark("reader", &stored[0].reference, Tags::none())
        .await
        .unwrap_or_else(|err| panic!("bookmark failed: {err}"));
    if storage.supports(Capability::Lease) {
        storage
            .request_lease(request("l", "o"))
            .await
            .unwrap_or_else(|err| panic!("request_lease failed: {err}"));
    }

    storage
        .close()
        .await
        .unwrap_or_else(|err| panic!("close failed: {err}"));
    assert_every_call_is_closed(&storage, &Arguments::valid()).await;
    assert_closed(
        storage.get_event_by_id(stored[0].reference.id).await,
        "get_event_by_id of a stored event",
    );
    storage
        .close()
        .await
        .unwrap_or_else(|err| panic!("a second close failed: {err}"));
    assert_every_call_is_closed(&storage, &Arguments::valid()).await;
}

/// A closed storage answers `Closed` before it judges the input: every call made with input
/// an open storage refuses as `InvalidInput` returns `Closed` once the storage is closed
/// (the order every backend answers in, `eventstore_api::admission`).
pub async fn closed_storage_answers_closed_before_judging_input<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let refused = storage
        .append(
            AppendCriteria::none(),
            &Arguments::invalid().stream,
            vec![labelled("A", "a")],
        )
        .await;
    assert!(
        matches!(refused, Err(EventStorageError::InvalidInput { .. })),
        "an open storage refuses a blank stream context as InvalidInput, got {refused:?}"
    );
    storage
        .close()
        .await
        .unwrap_or_else(|err| panic!("close failed: {err}"));
    assert_every_call_is_closed(&storage, &Arguments::invalid()).await;
}

/// Closing one handle closes the storage for every clone of it.
pub async fn closing_one_handle_closes_every_handle<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let other = storage.clone();
    append(&other, &orders(), vec![labelled("A", "before close")]).await;

    storage
        .close()
        .await
        .unwrap_or_else(|err| panic!("close failed: {err}"));
    assert_every_call_is_closed(&other, &Arguments::valid()).await;
    other
        .close()
        .await
        .unwrap_or_else(|err| panic!("closing the other handle too failed: {err}"));
}

/// Events and bookmarks written through one handle are kept for every other handle of the
/// storage, including a handle opened after the writes.
pub async fn writes_are_kept_across_handles<F: StorageFactory>(factory: &F) {
    let storage = factory.create().await;
    let second = factory.another_handle(&storage).await;
    let mut written = append(&storage, &orders(), vec![labelled("A", "first")]).await;
    written.extend(append(&second, &orders(), vec![labelled("B", "second")]).await);
    storage
        .bookmark("reader", &written[1].reference, tags(&[("by", "first")]))
        .await
        .unwrap_or_else(|err| panic!("bookmark failed: {err}"));

    let third = factory.another_handle(&second).await;
    for (name, handle) in [("first", &storage), ("second", &second), ("third", &third)] {
        assert_eq!(
            read_everything(handle).await,
            written,
            "the {name} handle must read every event written"
        );
        assert_eq!(
            handle.get_bookmark("reader").await.or_rule(
                "get_bookmark",
                "get_bookmark of a valid reader answers on an open storage"
            ),
            Some(written[1].reference),
            "the {name} handle must read the bookmark"
        );
    }
}

/// Calls racing `close` either complete or return `Closed`: none fails otherwise or hangs,
/// and once `close` has returned every call is `Closed`.
pub async fn calls_racing_close_complete_or_report_closed<F: StorageFactory>(factory: &F) {
    const WRITERS: usize = 6;
    let storage = Arc::new(factory.create().await);
    let other = Arc::new(<F::Storage as Clone>::clone(&storage));
    let barrier = Arc::new(Barrier::new(WRITERS + 1));
    let close_returned = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::with_capacity(WRITERS);
    for writer in 0..WRITERS {
        let handle = Arc::clone(if writer % 2 == 0 { &storage } else { &other });
        let barrier = Arc::clone(&barrier);
        let close_returned = Arc::clone(&close_returned);
        writers.push(tokio::spawn(async move {
            barrier.wait().await;
            for n in 0..1_000 {
                let event = labelled("Raced", &format!("{writer}-{n}"));
                let started_after_close = close_returned.load(Ordering::SeqCst);
                match handle
                    .append(AppendCriteria::none(), &orders(), vec![event])
                    .await
                {
                    Ok(_) => {
                        assert!(
                            !started_after_close,
                            "an append started after close returned must not succeed"
                        );
                    }
                    Err(EventStorageError::Closed) => return,
                    Err(other) => panic!("an append racing close failed with {other}"),
                }
            }
        }));
    }
    barrier.wait().await;
    tokio::task::yield_now().await;
    storage
        .close()
        .await
        .unwrap_or_else(|err| panic!("close during appends failed: {err}"));
    close_returned.store(true, Ordering::SeqCst);
    for writer in writers {
        writer.await.expect("a writer racing close panicked");
    }
    assert_every_call_is_closed(&*other, &Arguments::valid()).await;
}
