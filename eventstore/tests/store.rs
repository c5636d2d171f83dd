//! The typed facade on the in-process backends, the in-memory one (payloads decoded from
//! values) and the file one (payloads decoded from their stored text): stored names and tags,
//! decoding, and decisions appended only while their facts are unchanged.

use std::sync::Arc;

use eventstore::store::{EventStore, EventStoreError, NamedEvent, TypedStream};
use eventstore::{
    AppendCriteria, Capability, Direction, EventFilter, EventStorage, EventStorageError,
    EventStreamId, EventToStore, Limit, Tags,
};
use eventstore_file::FileEventStorage;
use eventstore_memory::MemoryEventStorage;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tempfile::TempDir;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Deposited {
    account: String,
    amount: u64,
}

impl NamedEvent for Deposited {
    const EVENT_TYPE: &'static str = "Deposited";
    fn tags(&self) -> Tags {
        Tags::from_pairs([("account", self.account.as_str())])
    }
}

fn deposit(account: &str, amount: u64) -> Deposited {
    Deposited {
        account: account.into(),
        amount,
    }
}

/// A store and its stream `bank` on a backend of the facade's tests, and the directory it
/// keeps its files in, if any.
type Backend = (Option<TempDir>, EventStore, TypedStream<Deposited>);

/// The store on each backend: memory, whose payloads are values, and a fresh file store, whose
/// payloads are read as their stored text ([`Capability::RawPayloads`]).
async fn stores() -> Vec<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let file = FileEventStorage::open(dir.path()).await.unwrap();
    assert!(file.supports(Capability::RawPayloads));
    let memory: Arc<dyn EventStorage> = Arc::new(MemoryEventStorage::new());
    [(None, memory), (Some(dir), Arc::new(file))]
        .into_iter()
        .map(|(dir, storage)| {
            let store = EventStore::new(storage);
            let stream = store.stream(EventStreamId::for_context("bank"));
            (dir, store, stream)
        })
        .collect()
}

#[tokio::test]
async fn events_are_stored_under_their_explicit_name_with_their_tags() {
    for (_dir, store, stream) in stores().await {
        stream
            .append(AppendCriteria::none(), [deposit("a", 5)])
            .await
            .unwrap();
        let raw = store
            .storage()
            .query(
                &EventFilter::match_all(),
                stream.id(),
                None,
                Limit::none(),
                Direction::Forward,
            )
            .await
            .unwrap();
        assert_eq!(raw[0].event_type.as_str(), "Deposited");
        assert_eq!(raw[0].tags, Tags::from_pairs([("account", "a")]));
        assert_eq!(
            stream.read_all().await.unwrap()[0].event,
            deposit("a", 5),
            "decoded back"
        );
    }
}

#[tokio::test]
async fn a_typed_stream_skips_events_of_other_types() {
    for (_dir, store, stream) in stores().await {
        store
            .storage()
            .append(
                AppendCriteria::none(),
                stream.id(),
                vec![EventToStore::new("Audited", serde_json::json!({"by": "x"}))],
            )
            .await
            .unwrap();
        stream
            .append(AppendCriteria::none(), [deposit("a", 1)])
            .await
            .unwrap();
        let all = stream.read_all().await.unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].event, deposit("a", 1));
    }
}

#[tokio::test]
async fn a_limited_query_counts_only_events_of_the_stream_types() {
    for (_dir, store, stream) in stores().await {
        let audits = (0..3)
            .map(|n| EventToStore::new("Audited", serde_json::json!({ "n": n })))
            .collect();
        store
            .storage()
            .append(AppendCriteria::none(), stream.id(), audits)
            .await
            .unwrap();
        stream
            .append(AppendCriteria::none(), [deposit("a", 1), deposit("b", 2)])
            .await
            .unwrap();
        // Any type in the caller's filter, but only the stream's own count against the limit.
        let page = stream
            .query(&EventFilter::match_all(), None, Limit::to(2))
            .await
            .unwrap();
        let events: Vec<Deposited> = page.into_iter().map(|e| e.event).collect();
        assert_eq!(events, [deposit("a", 1), deposit("b", 2)]);
        let tagged = stream
            .query(
                &EventFilter::for_tags(Tags::from_pairs([("account", "b")])),
                None,
                Limit::to(1),
            )
            .await
            .unwrap();
        assert_eq!(tagged.len(), 1);
        assert_eq!(tagged[0].event, deposit("b", 2));
        let others_only = stream
            .query(&EventFilter::for_types(["Audited"]), None, Limit::to(5))
            .await
            .unwrap();
        assert!(
            others_only.is_empty(),
            "no event of another type is decoded"
        );
    }
}

#[tokio::test]
async fn a_typed_query_refuses_an_invalid_type_in_its_filter() {
    for (_dir, _store, stream) in stores().await {
        let error = stream
            .query(&EventFilter::for_types(["  "]), None, Limit::to(1))
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                EventStoreError::Storage(EventStorageError::InvalidInput { .. })
            ),
            "{error:?}"
        );
    }
}

/// Appends, untyped, a `Deposited` event whose payload is not a `Deposited`.
async fn append_wrong_shape(
    store: &EventStore,
    stream: &TypedStream<Deposited>,
) -> Vec<eventstore::StoredEvent> {
    let wrong = EventToStore::new("Deposited", serde_json::json!({"wrong": 1}));
    store
        .storage()
        .append(AppendCriteria::none(), stream.id(), vec![wrong])
        .await
        .unwrap()
}

#[tokio::test]
async fn a_payload_of_the_wrong_shape_is_a_decode_error_naming_the_event() {
    for (_dir, store, stream) in stores().await {
        let stored = append_wrong_shape(&store, &stream).await;
        let error = stream.read_all().await.unwrap_err();
        assert!(
            matches!(&error, EventStoreError::Decode { reference, .. } if *reference == stored[0].reference),
            "{error}"
        );
        assert!(error.to_string().contains("Deposited"), "{error}");
        eventstore_tck::support::assert_chain_repeats_no_text(&error, "a decode error");
    }
}

/// A decision over a filter bounded before the head reads the facts up to that bound, as a
/// query of the filter does, not every event up to the head.
#[tokio::test]
async fn a_decision_keeps_the_bound_of_its_filter() {
    for (_dir, _, stream) in stores().await {
        let first = stream
            .append(AppendCriteria::none(), [deposit("a", 1)])
            .await
            .unwrap();
        stream
            .append(AppendCriteria::none(), [deposit("a", 2)])
            .await
            .unwrap();
        let filter = EventFilter::for_types(["Deposited"]).until(first[0].reference);
        let queried = stream.query(&filter, None, Limit::none()).await.unwrap();
        let decision = stream.read_for_decision(filter).await.unwrap();
        let amounts = |events: &[_]| -> Vec<u64> {
            events
                .iter()
                .map(|e: &eventstore::store::Envelope<Deposited>| e.event.amount)
                .collect()
        };
        assert_eq!(amounts(&queried), [1]);
        assert_eq!(
            amounts(&decision.events),
            [1],
            "the decision's facts end at the bound"
        );
    }
}

#[tokio::test]
async fn a_decision_is_appended_only_while_its_facts_are_unchanged() {
    for (_dir, _, stream) in stores().await {
        let account_a =
            EventFilter::for_events(["Deposited"], Tags::from_pairs([("account", "a")]));
        stream
            .append(AppendCriteria::none(), [deposit("a", 1)])
            .await
            .unwrap();

        let decision = stream.read_for_decision(account_a.clone()).await.unwrap();
        assert_eq!(decision.events.len(), 1);
        // another account's deposit does not touch the decision's facts
        stream
            .append(AppendCriteria::none(), [deposit("b", 7)])
            .await
            .unwrap();
        stream
            .append_decided(&decision, [deposit("a", 2)])
            .await
            .unwrap();

        // the same decision again is stale now: account a changed
        let error = stream
            .append_decided(&decision, [deposit("a", 3)])
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                EventStoreError::Storage(EventStorageError::OptimisticLock { .. })
            ),
            "{error}"
        );
        let amounts: Vec<u64> = stream
            .read_all()
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.event.amount)
            .collect();
        assert_eq!(amounts, [1, 7, 2]);
    }
}

#[tokio::test]
async fn a_decision_on_an_empty_stream_refuses_when_a_matching_event_appeared() {
    for (_dir, _, stream) in stores().await {
        let filter = EventFilter::for_types(["Deposited"]);
        let decision = stream.read_for_decision(filter).await.unwrap();
        assert_eq!(decision.head, None);
        stream
            .append(AppendCriteria::none(), [deposit("a", 1)])
            .await
            .unwrap();
        assert!(stream
            .append_decided(&decision, [deposit("a", 2)])
            .await
            .is_err());
    }
}

/// More events than one page of a stream (1,000), so that replays cross pages.
const REPLAYED: u64 = 2_500;

/// Appends `REPLAYED` deposits numbered by amount from 0, each hundredth followed by an
/// event of another type, which typed reads skip.
async fn append_history(store: &EventStore, stream: &TypedStream<Deposited>) {
    for first in (0..REPLAYED).step_by(100) {
        stream
            .append(
                AppendCriteria::none(),
                (first..first + 100)
                    .map(|amount| deposit(if amount % 2 == 0 { "a" } else { "b" }, amount)),
            )
            .await
            .unwrap();
        store
            .storage()
            .append(
                AppendCriteria::none(),
                stream.id(),
                vec![EventToStore::new("Audited", serde_json::json!({"by": "x"}))],
            )
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_replay_streams_what_a_query_returns_across_pages() {
    for (_dir, store, stream) in stores().await {
        append_history(&store, &stream).await;
        let all = stream.read_all().await.unwrap();
        assert_eq!(all.len() as u64, REPLAYED);
        let replayed: Vec<_> = stream.replay(None).map(Result::unwrap).collect().await;
        assert_eq!(
            replayed, all,
            "every deposit once, in order, none of another type"
        );

        let bookmark = all[1_234].reference;
        let rest: Vec<_> = stream
            .replay(Some(&bookmark))
            .map(Result::unwrap)
            .collect()
            .await;
        assert_eq!(rest, all[1_235..], "strictly after the bookmark");

        let account_a =
            EventFilter::for_events(["Deposited"], Tags::from_pairs([("account", "a")]));
        for (after, limit) in [
            (None, Limit::to(3)),
            (Some(&bookmark), Limit::to(1_100)),
            (None, Limit::none()),
        ] {
            let streamed: Vec<_> = stream
                .query_stream(&account_a, after, limit)
                .map(Result::unwrap)
                .collect()
                .await;
            let queried = stream.query(&account_a, after, limit).await.unwrap();
            assert!(!queried.is_empty());
            assert_eq!(
                streamed, queried,
                "query_stream after {after:?}, limit {limit:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_payload_of_the_wrong_shape_ends_a_replay_with_a_decode_error() {
    for (_dir, store, stream) in stores().await {
        stream
            .append(AppendCriteria::none(), [deposit("a", 1)])
            .await
            .unwrap();
        let wrong = append_wrong_shape(&store, &stream).await;
        stream
            .append(AppendCriteria::none(), [deposit("a", 2)])
            .await
            .unwrap();
        let items: Vec<_> = stream.replay(None).collect().await;
        assert_eq!(
            items.len(),
            2,
            "the first deposit, then the error, then nothing"
        );
        assert_eq!(items[0].as_ref().unwrap().event, deposit("a", 1));
        assert!(
            matches!(&items[1], Err(EventStoreError::Decode { reference, .. }) if *reference == wrong[0].reference),
            "{:?}",
            items[1]
        );
    }
}

#[tokio::test]
async fn a_replay_of_an_invalid_stream_is_one_invalid_input_error() {
    let storage: Arc<dyn EventStorage> = Arc::new(MemoryEventStorage::new());
    let stream = EventStore::new(storage).stream::<Deposited>(EventStreamId::new("", "x"));
    let items: Vec<_> = stream.replay(None).collect().await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(
        matches!(
            &items[0],
            Err(EventStoreError::Storage(
                EventStorageError::InvalidInput { .. }
            ))
        ),
        "{:?}",
        items[0]
    );
}

/// A typed read of a closed storage is `Closed`, also with a filter the storage would refuse:
/// a closed storage answers `Closed` before it judges the input, and so does the facade.
#[tokio::test]
async fn a_typed_read_of_a_closed_storage_is_closed_whatever_its_filter() {
    for (_dir, store, stream) in stores().await {
        store.storage().close().await.unwrap();
        let invalid = EventFilter::for_types([" "]);
        let read = stream.query(&invalid, None, Limit::none()).await;
        assert!(
            matches!(
                read,
                Err(EventStoreError::Storage(EventStorageError::Closed))
            ),
            "query: {read:?}"
        );
        let streamed: Vec<_> = stream
            .query_stream(&invalid, None, Limit::none())
            .collect()
            .await;
        assert!(
            matches!(
                streamed.as_slice(),
                [Err(EventStoreError::Storage(EventStorageError::Closed))]
            ),
            "query_stream: {streamed:?}"
        );
    }
}

/// An open storage still refuses the filter as invalid input, naming it.
#[tokio::test]
async fn a_typed_read_with_an_invalid_filter_is_invalid_input() {
    for (_dir, _store, stream) in stores().await {
        let read = stream
            .query(&EventFilter::for_types([" "]), None, Limit::none())
            .await;
        assert!(
            matches!(&read, Err(EventStoreError::Storage(EventStorageError::InvalidInput { field, .. })) if field.contains("event type")),
            "{read:?}"
        );
    }
}
