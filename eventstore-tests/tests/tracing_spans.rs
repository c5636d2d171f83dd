//! Every backend opens a span per storage operation, named after the method, with what the
//! operation is about as fields and never a payload.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventstore::{
    AppendCriteria, Direction, EventFilter, EventStorage, EventStreamId, EventToStore,
    LeaseRequest, Limit, Tags,
};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// One span as opened: its name and fields.
#[derive(Debug, Clone)]
struct OpenedSpan {
    name: &'static str,
    fields: BTreeMap<String, String>,
}

/// A subscriber that keeps every span opened while it is the default.
#[derive(Default)]
struct SpanCapture {
    next_id: AtomicU64,
    spans: Mutex<Vec<OpenedSpan>>,
}

struct FieldText<'a>(&'a mut BTreeMap<String, String>);

impl Visit for FieldText<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for SpanCapture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attributes: &Attributes<'_>) -> Id {
        let mut fields = BTreeMap::new();
        attributes.record(&mut FieldText(&mut fields));
        self.spans.lock().unwrap().push(OpenedSpan {
            name: attributes.metadata().name(),
            fields,
        });
        Id::from_u64(self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Runs the SPI's operations once on `storage`, every span captured.
async fn spans_of_every_operation(storage: &dyn EventStorage) -> Vec<OpenedSpan> {
    let capture = Arc::new(SpanCapture::default());
    let _default = tracing::subscriber::set_default(Arc::clone(&capture));
    let stream = EventStreamId::new("orders", "eu");
    let stored = storage
        .append(
            AppendCriteria::none(),
            &stream,
            vec![EventToStore::new(
                "OrderPlaced",
                json!({ "secret": "payload-text" }),
            )],
        )
        .await
        .unwrap();
    storage
        .query(
            &EventFilter::match_all(),
            &stream,
            None,
            Limit::none(),
            Direction::Forward,
        )
        .await
        .unwrap();
    storage.head(&stream).await.unwrap();
    storage
        .get_event_by_id(stored[0].reference.id)
        .await
        .unwrap();
    storage
        .bookmark("invoicing", &stored[0].reference, Tags::none())
        .await
        .unwrap();
    storage.get_bookmark("invoicing").await.unwrap();
    storage.get_bookmarks().await.unwrap();
    storage.remove_bookmark("invoicing").await.unwrap();
    storage
        .request_lease(LeaseRequest::new(
            "span-lease",
            "pod-a",
            0,
            Duration::from_secs(10),
        ))
        .await
        .unwrap();
    storage.get_leases().await.unwrap();
    storage.storage_time().await.unwrap();
    storage.release_lease("span-lease", "pod-a").await.unwrap();
    let spans = capture.spans.lock().unwrap().clone();
    spans
}

fn assert_spans(backend: &str, spans: &[OpenedSpan]) {
    let find = |name: &str| {
        spans
            .iter()
            .find(|span| {
                span.name == name && span.fields.get("backend").map(String::as_str) == Some(backend)
            })
            .unwrap_or_else(|| panic!("{backend}: no span {name} in {spans:?}"))
    };
    for name in ["append", "query", "head"] {
        assert_eq!(find(name).fields["stream"], "orders/eu", "{backend} {name}");
    }
    assert!(find("get_event_by_id").fields.contains_key("id"));
    for name in ["bookmark", "get_bookmark", "remove_bookmark"] {
        assert_eq!(find(name).fields["reader"], "invoicing", "{backend} {name}");
    }
    find("get_bookmarks");
    let request = spans
        .iter()
        .find(|span| {
            (span.name == "request_lease" || span.name == "request_leases")
                && span.fields.get("backend").map(String::as_str) == Some(backend)
        })
        .unwrap_or_else(|| panic!("{backend}: no lease request span in {spans:?}"));
    assert_eq!(request.fields["lease"], "span-lease");
    assert_eq!(find("release_lease").fields["lease"], "span-lease");
    find("get_leases");
    find("storage_time");
    for span in spans {
        for value in span.fields.values() {
            assert!(!value.contains("payload-text"), "a payload in {span:?}");
        }
    }
}

#[tokio::test]
async fn the_memory_backend_opens_a_span_per_operation() {
    let storage = eventstore_memory::MemoryEventStorage::new();
    let spans = spans_of_every_operation(&storage).await;
    assert_spans("memory", &spans);
}

#[tokio::test]
async fn the_file_backend_opens_a_span_per_operation() {
    let dir = tempfile::tempdir().unwrap();
    let storage = eventstore_file::FileEventStorage::open(dir.path())
        .await
        .unwrap();
    let spans = spans_of_every_operation(&storage).await;
    assert_spans("file", &spans);
    storage.close().await.unwrap();
}

#[tokio::test]
async fn the_postgres_backend_opens_a_span_per_operation() {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let prefix = format!("s{:016x}_", rand::random::<u64>());
    let opened = eventstore_postgres::PostgresEventStorage::builder()
        .url(&url)
        .prefix(&prefix)
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .build()
        .await;
    let storage = match opened {
        Ok(storage) => storage,
        Err(error) if std::env::var("CI").is_ok_and(|ci| ci == "true" || ci == "1") => {
            panic!("PostgreSQL at {url} is required (CI=true) but unreachable: {error}")
        }
        Err(error) => {
            eprintln!("SKIPPED: PostgreSQL at {url} is unreachable ({error}); set DATABASE_URL");
            return;
        }
    };
    let spans = spans_of_every_operation(&storage).await;
    assert_spans("postgres", &spans);
    storage.close().await.unwrap();
}
