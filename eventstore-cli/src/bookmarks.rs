//! `eventstore bookmarks`: where each reader is.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::cli::StoreArgs;
use crate::failure::Failure;
use crate::output::{print_json, print_text, table};
use crate::store::{OpenStore, StoreDescription, Target};
use crate::time_text::{ago, instant};

/// The JSON document of `eventstore bookmarks --json`.
#[derive(Debug, Serialize)]
struct BookmarksDocument {
    /// Now on the storage's clock.
    storage_time: DateTime<Utc>,
    #[serde(flatten)]
    store: StoreDescription,
    /// Every bookmark, by reader.
    bookmarks: Vec<BookmarkView>,
}

/// One bookmark in the JSON document.
#[derive(Debug, Serialize)]
struct BookmarkView {
    reader: String,
    /// The bookmarked event's id, position and commit order.
    event_id: String,
    position: u64,
    tx: u64,
    /// The bookmark's tags, `key:value`.
    tags: Vec<String>,
    updated_at: DateTime<Utc>,
}

/// Runs `eventstore bookmarks`.
///
/// # Errors
/// The store cannot be opened or read.
pub(crate) async fn run(args: &StoreArgs, json: bool) -> Result<(), Failure> {
    let target = Target::from_args(args)?;
    let store = OpenStore::open(&target).await?;
    let outcome = read(&store).await;
    store.close().await;
    let document = outcome?;
    if json {
        print_json(&document)
    } else {
        print_text(&render(&document))
    }
}

async fn read(store: &OpenStore) -> Result<BookmarksDocument, Failure> {
    let mut bookmarks = store
        .storage()
        .get_bookmarks()
        .await
        .map_err(|error| Failure::storage("cannot read the bookmarks", &error))?;
    let now = store.storage_time().await?;
    bookmarks.sort_by(|a, b| a.reader.cmp(&b.reader));
    Ok(BookmarksDocument {
        storage_time: now,
        store: store.description(),
        bookmarks: bookmarks
            .into_iter()
            .map(|bookmark| BookmarkView {
                reader: bookmark.reader,
                event_id: bookmark.reference.id.0.to_string(),
                position: bookmark.reference.position,
                tx: bookmark.reference.tx,
                tags: bookmark.tags.iter().map(ToString::to_string).collect(),
                updated_at: bookmark.updated_at,
            })
            .collect(),
    })
}

fn render(document: &BookmarksDocument) -> String {
    let now = document.storage_time;
    let mut text = format!(
        "{} bookmarks in {}; storage time {}\n",
        document.bookmarks.len(),
        document.store,
        instant(now)
    );
    if document.bookmarks.is_empty() {
        return text;
    }
    let rows: Vec<Vec<String>> = document
        .bookmarks
        .iter()
        .map(|bookmark| {
            vec![
                bookmark.reader.clone(),
                bookmark.position.to_string(),
                bookmark.tx.to_string(),
                ago(bookmark.updated_at, now),
                bookmark.event_id.clone(),
                bookmark.tags.join(","),
            ]
        })
        .collect();
    text.push_str(&table(
        &["READER", "POSITION", "TX", "UPDATED", "EVENT", "TAGS"],
        &rows,
    ));
    text
}
