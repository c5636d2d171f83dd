//! The typed facade on the in-memory backend: stored names and tags, decoding, and decisions
//! appended only while their facts are unchanged.

use std::sync::Arc;

use eventstore_api::store::{EventStore, EventStoreError, NamedEvent, TypedStream};
use eventstore_api::{
    AppendCriteria, Direction, EventFilter, EventStorageError, EventStreamId, EventToStore, Limit,
    Tags,
};
use eventstore_memory::MemoryEventStorage;
use serde::{Deserialize, Serialize};

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

fn store() -> (EventStore, TypedStream<Deposited>) {
    let store = EventStore::new(Arc::new(MemoryEventStorage::new()));
    let stream = store.stream(EventStreamId::for_context("bank"));
    (store, stream)
}

#[tokio::test]
async fn events_are_stored_under_their_explicit_name_with_their_tags() {
    let (store, stream) = store();
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

#[tokio::test]
async fn a_typed_stream_skips_events_of_other_types() {
    let (store, stream) = store();
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

#[tokio::test]
async fn a_payload_of_the_wrong_shape_is_a_decode_error_naming_the_event() {
    let (store, stream) = store();
    let stored = store
        .storage()
        .append(
            AppendCriteria::none(),
            stream.id(),
            vec![EventToStore::new(
                "Deposited",
                serde_json::json!({"wrong": 1}),
            )],
        )
        .await
        .unwrap();
    let error = stream.read_all().await.unwrap_err();
    assert!(
        matches!(&error, EventStoreError::Decode { reference, .. } if *reference == stored[0].reference),
        "{error}"
    );
    assert!(error.to_string().contains("Deposited"), "{error}");
}

#[tokio::test]
async fn a_decision_is_appended_only_while_its_facts_are_unchanged() {
    let (_, stream) = store();
    let account_a = EventFilter::for_events(["Deposited"], Tags::from_pairs([("account", "a")]));
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

#[tokio::test]
async fn a_decision_on_an_empty_stream_refuses_when_a_matching_event_appeared() {
    let (_, stream) = store();
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
