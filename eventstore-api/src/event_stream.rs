//! Reading events as a stream: one page in memory at a time, however many events match.

use std::pin::Pin;

use futures_core::Stream;
use futures_util::{stream, StreamExt, TryStreamExt};

use crate::{
    Direction, EventFilter, EventReference, EventStorage, EventStorageError, EventStreamId, Limit,
    StorageResult, StoredEvent,
};

/// The events of a [`query_stream`](EventStorage::query_stream), in the order of its
/// direction. An error ends the stream; dropping it part-way holds nothing open.
pub type EventStream<'a> = Pin<Box<dyn Stream<Item = StorageResult<StoredEvent>> + Send + 'a>>;

/// How many events [`paged_query_stream`] asks `query` for at a time.
pub const STREAM_PAGE: u64 = 1_000;

/// The default [`EventStorage::query_stream`]: `query` page after page, each asking for at
/// most [`STREAM_PAGE`] events after the last one of the page before (reading backward,
/// before it), so that at most one page is held at a time. Invalid input is the stream's
/// first and only item.
pub fn paged_query_stream<'a, S: EventStorage + ?Sized>(
    storage: &'a S,
    filter: &EventFilter,
    stream: &EventStreamId,
    after: Option<&EventReference>,
    limit: Limit,
    direction: Direction,
) -> EventStream<'a> {
    let cursor = Cursor {
        filter: filter.clone(),
        stream: stream.clone(),
        after: after.copied(),
        before: None,
        remaining: limit.0,
        direction,
        done: false,
    };
    stream::try_unfold(cursor, move |mut cursor| async move {
        if cursor.done {
            return Ok(None);
        }
        let page = cursor.next_page(storage).await?;
        Ok(Some((page, cursor)))
    })
    .map_ok(|page| stream::iter(page.into_iter().map(Ok)))
    .try_flatten()
    .boxed()
}

/// Where a paged read stands.
struct Cursor {
    filter: EventFilter,
    stream: EventStreamId,
    /// The caller's lower bound, then (reading forward) the last event returned.
    after: Option<EventReference>,
    /// Reading backward: the last event returned, which the next page must precede.
    before: Option<EventReference>,
    remaining: Option<u64>,
    direction: Direction,
    done: bool,
}

impl Cursor {
    /// The next page, and whether the read is over after it.
    async fn next_page<S: EventStorage + ?Sized>(
        &mut self,
        storage: &S,
    ) -> StorageResult<Vec<StoredEvent>> {
        let rows = self.remaining.map_or(STREAM_PAGE, |n| n.min(STREAM_PAGE));
        // Reading backward, the page is bounded by `until`, which is inclusive: it may
        // return the event it ends at once more, which is asked for on top and dropped.
        let mut filter = self.filter.clone();
        let again = u64::from(self.before.is_some());
        if let Some(before) = self.before {
            filter.until = Some(before);
        }
        let mut page = storage
            .query(
                &filter,
                &self.stream,
                self.after.as_ref(),
                Limit::to(rows + again),
                self.direction,
            )
            .await?;
        let exhausted = (page.len() as u64) < rows + again;
        // Reading forward, a page that does not move past the cursor would be read again
        // and again: a backend whose `query` ignores `after` gets an error, not a loop.
        if let (Direction::Forward, Some(after), Some(first)) =
            (self.direction, self.after, page.first())
        {
            if first.reference <= after {
                return Err(EventStorageError::backend(
                    "query_stream cannot page: query returned an event that is not after \
                     the cursor",
                    format!(
                        "cursor {after:?}, first event returned {:?}",
                        first.reference
                    ),
                ));
            }
        }
        if let Some(before) = self.before {
            page.retain(|event| event.reference < before);
        }
        page.truncate(usize::try_from(rows).unwrap_or(usize::MAX));
        self.remaining = self.remaining.map(|n| n - page.len() as u64);
        self.done = exhausted || self.remaining == Some(0) || page.is_empty();
        if let Some(last) = page.last() {
            match self.direction {
                Direction::Forward => self.after = Some(last.reference),
                Direction::Backward => self.before = Some(last.reference),
            }
        }
        Ok(page)
    }
}
