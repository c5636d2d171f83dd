//! `eventstore events`: the last events of a stream.

use chrono::{DateTime, Utc};
use eventstore::{Direction, EventFilter, EventStreamId, Limit, StoredEvent};
use serde::Serialize;

use crate::cli::StoreArgs;
use crate::failure::Failure;
use crate::output::{print_json, print_text, printable, shorten, table};
use crate::store::{OpenStore, StoreDescription, Target};
use crate::stream_name;
use crate::time_text::{ago, instant};

/// The JSON document of `eventstore events --json`.
#[derive(Debug, Serialize)]
struct EventsDocument {
    /// Now on the storage's clock.
    storage_time: DateTime<Utc>,
    #[serde(flatten)]
    store: StoreDescription,
    /// The stream asked for, as `--stream` takes it: `context/purpose`, `*` for any (see
    /// `stream_name`).
    stream: String,
    /// Whether the stream asked for covers more than one stream, so that each event names
    /// its own.
    #[serde(skip)]
    wildcard: bool,
    /// At most this many events were asked for.
    limit: u64,
    /// The stream's last `limit` events, oldest first.
    events: Vec<EventView>,
}

/// One event in the JSON document.
#[derive(Debug, Serialize)]
struct EventView {
    position: u64,
    tx: u64,
    id: String,
    /// `context/purpose`, as `--stream` takes it.
    stream: String,
    event_type: String,
    /// `key:value`.
    tags: Vec<String>,
    idempotency_key: Option<String>,
    /// When the storage stored it, on its clock.
    timestamp: DateTime<Utc>,
    payload: serde_json::Value,
}

impl From<StoredEvent> for EventView {
    fn from(event: StoredEvent) -> EventView {
        EventView {
            position: event.reference.position,
            tx: event.reference.tx,
            id: event.reference.id.0.to_string(),
            stream: stream_name::name(&event.stream),
            event_type: event.event_type.0,
            tags: event.tags.iter().map(ToString::to_string).collect(),
            idempotency_key: event.idempotency_key,
            timestamp: event.timestamp,
            payload: event.payload,
        }
    }
}

/// Runs `eventstore events`.
///
/// # Errors
/// The store cannot be opened or read; usage for a stream the storage refuses.
pub(crate) async fn run(
    args: &StoreArgs,
    stream: &EventStreamId,
    limit: u64,
    json: bool,
) -> Result<(), Failure> {
    let target = Target::from_args(args)?;
    let store = OpenStore::open(&target).await?;
    let outcome = read(&store, stream, limit).await;
    store.close().await;
    let document = outcome?;
    if json {
        print_json(&document)
    } else {
        print_text(&render(&document))
    }
}

async fn read(
    store: &OpenStore,
    stream: &EventStreamId,
    limit: u64,
) -> Result<EventsDocument, Failure> {
    let mut events = store
        .storage()
        .query(
            &EventFilter::match_all(),
            stream,
            None,
            Limit::to(limit),
            Direction::Backward,
        )
        .await
        .map_err(|error| {
            let stream = stream_name::name(stream);
            Failure::storage(&format!("cannot read stream {stream}"), &error)
        })?;
    events.reverse();
    let now = store.storage_time().await?;
    Ok(EventsDocument {
        storage_time: now,
        store: store.description(),
        stream: stream_name::name(stream),
        wildcard: !stream.is_concrete(),
        limit,
        events: events.into_iter().map(EventView::from).collect(),
    })
}

fn render(document: &EventsDocument) -> String {
    let now = document.storage_time;
    let mut text = format!(
        "{} events of {} (the last {} at most) in {}; storage time {}\n",
        document.events.len(),
        printable(&document.stream),
        document.limit,
        document.store,
        instant(now)
    );
    if document.events.is_empty() {
        return text;
    }
    let wildcard = document.wildcard;
    let rows: Vec<Vec<String>> = document
        .events
        .iter()
        .map(|event| {
            let mut row = vec![event.position.to_string()];
            if wildcard {
                row.push(event.stream.clone());
            }
            row.extend([
                event.event_type.clone(),
                ago(event.timestamp, now),
                event.tags.join(","),
                shorten(&event.payload.to_string(), 60),
            ]);
            row
        })
        .collect();
    let mut header = vec!["POSITION"];
    if wildcard {
        header.push("STREAM");
    }
    header.extend(["TYPE", "STORED", "TAGS", "PAYLOAD"]);
    text.push_str(&table(&header, &rows));
    text
}
