//! The typed facade over PostgreSQL, which hands out payloads as their stored JSON text
//! (`Capability::RawPayloads`): typed streams decode from that text, with no
//! `serde_json::Value` in between, and read what they wrote.

use std::sync::Arc;

use eventstore::store::{DomainEvent, EventStoreError, NamedEvent};
use eventstore::{
    AppendCriteria, Capability, EventFilter, EventStorage, EventStore, EventStreamId, EventToStore,
    Limit, Tags,
};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::common;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Shipped {
    order: String,
    parcels: Vec<u32>,
    note: Option<String>,
}

impl NamedEvent for Shipped {
    const EVENT_TYPE: &'static str = "Shipped";
    fn tags(&self) -> Tags {
        Tags::from_pairs([("order", self.order.as_str())])
    }
}

/// An enum of two event types that decodes through `from_payload` only: the default
/// `from_json` parses the text for it.
#[derive(Debug, Clone, PartialEq)]
enum Account {
    Opened { owner: String },
    Closed,
}

impl DomainEvent for Account {
    fn event_types() -> &'static [&'static str] {
        &["AccountOpened", "AccountClosed"]
    }
    fn event_type(&self) -> &'static str {
        match self {
            Account::Opened { .. } => "AccountOpened",
            Account::Closed => "AccountClosed",
        }
    }
    fn to_payload(&self) -> serde_json::Result<Value> {
        Ok(match self {
            Account::Opened { owner } => json!({ "owner": owner }),
            Account::Closed => json!({}),
        })
    }
    fn from_payload(event_type: &str, payload: Value) -> serde_json::Result<Self> {
        match event_type {
            "AccountOpened" => Ok(Account::Opened {
                owner: serde_json::from_value(payload["owner"].clone())?,
            }),
            _ => Ok(Account::Closed),
        }
    }
}

#[tokio::test]
async fn typed_streams_read_back_what_they_wrote_from_the_payloads_text() {
    if common::try_pool().await.is_none() {
        return;
    }
    let storage = common::storage_on(&common::unique_prefix()).await;
    assert!(storage.supports(Capability::RawPayloads));
    let store = EventStore::new(Arc::new(storage.clone()));

    let shipments = store.stream::<Shipped>(EventStreamId::for_context("shipping"));
    // Five pages: 1,000 events, then 2,000 each.
    let written: Vec<Shipped> = (0..7_500)
        .map(|n| Shipped {
            order: format!("o-{}", n % 5),
            parcels: vec![n, n + 1],
            note: (n % 2 == 0).then(|| format!("ü \"{n}\"")),
        })
        .collect();
    for chunk in written.chunks(1_000) {
        shipments
            .append(AppendCriteria::none(), chunk.to_vec())
            .await
            .unwrap();
    }
    let read = shipments.read_all().await.unwrap();
    let events: Vec<Shipped> = read.iter().map(|envelope| envelope.event.clone()).collect();
    assert_eq!(
        events, written,
        "every page, in order, decoded from its text"
    );
    let order_3 = shipments
        .query(
            &EventFilter::for_tags(Tags::from_pairs([("order", "o-3")])),
            None,
            Limit::to(3),
        )
        .await
        .unwrap();
    assert_eq!(order_3.len(), 3);
    assert!(order_3.iter().all(|envelope| envelope.event.order == "o-3"
        && envelope.tags == Tags::from_pairs([("order", "o-3")])));

    let accounts = store.stream::<Account>(EventStreamId::for_context("accounts"));
    let history = vec![
        Account::Opened {
            owner: "ada".into(),
        },
        Account::Closed,
    ];
    accounts
        .append(AppendCriteria::none(), history.clone())
        .await
        .unwrap();
    let read: Vec<Account> = accounts
        .read_all()
        .await
        .unwrap()
        .into_iter()
        .map(|envelope| envelope.event)
        .collect();
    assert_eq!(read, history, "an enum decodes through from_payload");
    storage.close().await.unwrap();
}

#[tokio::test]
async fn a_stored_payload_of_the_wrong_shape_is_a_decode_error_naming_the_event() {
    if common::try_pool().await.is_none() {
        return;
    }
    let storage = common::storage_on(&common::unique_prefix()).await;
    let stream = EventStreamId::for_context("shipping");
    let stored = storage
        .append(
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new("Shipped", json!({ "order": 7 }))],
        )
        .await
        .unwrap();
    let store = EventStore::new(Arc::new(storage.clone()));
    let error = store
        .stream::<Shipped>(stream)
        .read_all()
        .await
        .unwrap_err();
    let EventStoreError::Decode {
        reference,
        event_type,
        ..
    } = &error
    else {
        panic!("expected a decode error, got {error:?}");
    };
    assert_eq!(*reference, stored[0].reference);
    assert_eq!(event_type, "Shipped");
    let message = error.report();
    assert!(
        message.contains("Shipped") && message.contains("invalid type"),
        "{message}"
    );
    storage.close().await.unwrap();
}

/// An event that decodes only from its payload's text: from a `serde_json::Value` it fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Reading {
    n: u32,
}

impl DomainEvent for Reading {
    fn event_types() -> &'static [&'static str] {
        &["Reading"]
    }
    fn event_type(&self) -> &'static str {
        "Reading"
    }
    fn to_payload(&self) -> serde_json::Result<Value> {
        serde_json::to_value(self)
    }
    fn from_payload(_event_type: &str, _payload: Value) -> serde_json::Result<Self> {
        Err(serde::de::Error::custom(
            "decoded from a value, not from its text",
        ))
    }
    fn from_json(
        _event_type: &str,
        payload: &serde_json::value::RawValue,
    ) -> serde_json::Result<Self> {
        serde_json::from_str(payload.get())
    }
}

#[tokio::test]
async fn a_typed_replay_decodes_every_page_from_the_payloads_text() {
    if common::try_pool().await.is_none() {
        return;
    }
    let storage = common::storage_on(&common::unique_prefix()).await;
    let store = EventStore::new(Arc::new(storage.clone()));
    let readings = store.stream::<Reading>(EventStreamId::for_context("meters"));
    // Three pages of a streamed read.
    let written: Vec<Reading> = (0..2_500).map(|n| Reading { n }).collect();
    readings
        .append(AppendCriteria::none(), written.clone())
        .await
        .unwrap();
    let replayed: Vec<Reading> = readings
        .replay(None)
        .map(|envelope| envelope.expect("decoded from its text").event)
        .collect()
        .await;
    assert_eq!(replayed, written);
    let after = readings.read_all().await.unwrap()[999].reference;
    let rest: Vec<u32> = readings
        .query_stream(&EventFilter::match_all(), Some(&after), Limit::to(1_200))
        .map(|envelope| envelope.expect("decoded from its text").event.n)
        .collect()
        .await;
    assert_eq!(rest, (1_000..2_200).collect::<Vec<_>>());
    storage.close().await.unwrap();
}
