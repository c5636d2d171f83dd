//! Reading events as a stream: a page or two in memory at a time, however many events match.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;

use futures_util::TryStreamExt;

use crate::{
    Delivery, Direction, EventReference, EventStorage, EventStorageError, Limit, RawStoredEvent,
    ReadEvent, ReadRequest, StorageResult, StoredEvent,
};

/// Events of type `E` read as a stream, in the order of the read's direction. An error ends
/// the stream; dropping it part-way holds nothing open.
pub type Events<'a, E> = Pin<Box<dyn Stream<Item = StorageResult<E>> + Send + 'a>>;

/// The events of a [`read`](EventStorage::read), each in the form the read asked for.
pub type ReadStream<'a> = Events<'a, ReadEvent>;

/// The events of a decoded streamed read
/// ([`EventStorageExt::query_stream`](crate::EventStorageExt::query_stream)).
pub type EventStream<'a> = Events<'a, StoredEvent>;

/// The events of a raw streamed read
/// ([`EventStorageExt::query_raw_stream`](crate::EventStorageExt::query_raw_stream)), each
/// payload as JSON text.
pub type RawEventStream<'a> = Events<'a, RawStoredEvent>;

/// How many events a streamed read asks for at a time by default.
pub const STREAM_PAGE: u64 = 1_000;

/// The default [`EventStorage::read`], for a backend to fall back on for the forms it does
/// not read natively:
/// - whole: [`EventStorage::query`], each payload written out as text where the request asks
///   for text;
/// - streamed: page after page of the storage's own whole [`read`](EventStorage::read) of
///   the same form, each asking for at most [`STREAM_PAGE`] events after the last one of the
///   page before (reading backward, before it), each read while the caller takes the page
///   before (see [`read_ahead`]), so that at most two pages are held at a time. A backend
///   that reads whole raw pages natively thus streams them natively too.
///
/// Invalid input is the stream's first and only item.
pub fn default_read<'a, S: EventStorage + ?Sized>(
    storage: &'a S,
    request: ReadRequest,
) -> ReadStream<'a> {
    match request.delivery {
        Delivery::Whole => whole(async move {
            let events = storage
                .query(
                    &request.filter,
                    &request.stream,
                    request.after.as_ref(),
                    request.limit,
                    request.direction,
                )
                .await?;
            events
                .into_iter()
                .map(|event| ReadEvent::of(event, request.payloads))
                .collect()
        }),
        Delivery::Streamed => paged(storage, Cursor::new(request)),
    }
}

/// The events `read` gives, handed out once all have arrived: how a backend answers a whole
/// [`read`](EventStorage::read) from one call that returns a list.
pub fn whole<'a, E, Fut>(read: Fut) -> Events<'a, E>
where
    E: Send + 'a,
    Fut: Future<Output = StorageResult<Vec<E>>> + Send + 'a,
{
    let mut read = Some(read);
    read_ahead((), move |()| {
        let read = read.take();
        async move {
            match read {
                Some(read) => Ok((read.await?, None)),
                None => Ok((Vec::new(), None)),
            }
        }
    })
}

/// Every event of `stream`, or its first error.
///
/// # Errors
/// The first error the stream hands out.
pub async fn collect<E>(stream: Events<'_, E>) -> StorageResult<Vec<E>> {
    stream.try_collect().await
}

/// The events from where `cursor` stands, page after page (see [`read_ahead`]).
fn paged<'a, S: EventStorage + ?Sized>(storage: &'a S, cursor: Cursor) -> ReadStream<'a> {
    let read_page = move |mut cursor: Cursor| async move {
        let page = collect(storage.read(cursor.next_request())).await?;
        let page = cursor.take_page(page)?;
        Ok((page, (!cursor.done).then_some(cursor)))
    };
    read_ahead(cursor, read_page)
}

/// The events of pages read one after the other, each page read while the caller takes the
/// events of the page before: for backends that stream natively in pages.
///
/// `read_page` reads the page `cursor` points at and returns its events with the cursor of
/// the page after it, `None` after the last page. It is called for the first page when the
/// stream is made, and for each next page when the caller starts on the page before. Only one
/// page is read at a time, and at most two are held: the one being handed out and the next.
/// An error is the stream's last item; dropping the stream drops the read in flight.
///
/// The next page's read moves whenever the stream is polled, that is, while the caller takes
/// the events before it. For the read to go on while the caller works without polling (a
/// projection committing a batch), `read_page` should spawn its work, as the PostgreSQL
/// backend does. And since a caller may use the storage between two events, a read that
/// waits to be polled must not hold what the caller's own calls need, such as the last
/// connection of a pool.
///
/// # Examples
/// A backend whose pages are numbered: the cursor is the page's number.
/// ```
/// # use eventstore_api::event_stream::{read_ahead, EventStream};
/// # use eventstore_api::{StorageResult, StoredEvent};
/// /// Page `number` of a backend that has three.
/// async fn page(number: u32) -> StorageResult<(Vec<StoredEvent>, Option<u32>)> {
///     let events = Vec::new(); // read the page's events here
///     Ok((events, (number < 2).then_some(number + 1)))
/// }
///
/// let events: EventStream<'static> = read_ahead(0, page);
/// ```
pub fn read_ahead<'a, E, C, F, Fut>(first: C, mut read_page: F) -> Events<'a, E>
where
    E: Send + 'a,
    C: Send + 'a,
    F: FnMut(C) -> Fut + Send + 'a,
    Fut: Future<Output = StorageResult<(Vec<E>, Option<C>)>> + Send + 'a,
{
    let reading = Some(Box::pin(read_page(first)));
    Box::pin(ReadAhead {
        page: Vec::new().into_iter(),
        reading,
        read: None,
        read_page,
    })
}

/// The state of a [`read_ahead`] stream.
struct ReadAhead<E, F, Fut: Future> {
    /// The events of the page being handed out that are left.
    page: std::vec::IntoIter<E>,
    /// The read of the next page, until it finishes; `None` after the last page.
    reading: Option<Pin<Box<Fut>>>,
    /// The next page's read, finished, until the page before is handed out.
    read: Option<Fut::Output>,
    read_page: F,
}

// No field is pinned in place: the read in flight is pinned in its box.
impl<E, F, Fut: Future> Unpin for ReadAhead<E, F, Fut> {}

impl<E, C, F, Fut> Stream for ReadAhead<E, F, Fut>
where
    F: FnMut(C) -> Fut,
    Fut: Future<Output = StorageResult<(Vec<E>, Option<C>)>>,
{
    type Item = StorageResult<E>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(reading) = &mut this.reading {
                if let Poll::Ready(read) = reading.as_mut().poll(cx) {
                    this.reading = None;
                    this.read = Some(read);
                }
            }
            if let Some(event) = this.page.next() {
                return Poll::Ready(Some(Ok(event)));
            }
            match this.read.take() {
                Some(Ok((page, next))) => {
                    this.page = page.into_iter();
                    this.reading = next.map(|cursor| Box::pin((this.read_page)(cursor)));
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None if this.reading.is_some() => return Poll::Pending,
                None => return Poll::Ready(None),
            }
        }
    }
}

/// Where a paged read stands.
struct Cursor {
    /// The read as asked for; its `after` is the caller's lower bound, then (reading forward)
    /// the last event returned.
    request: ReadRequest,
    /// Reading backward: the last event returned, which the next page must precede.
    before: Option<EventReference>,
    remaining: Option<u64>,
    done: bool,
}

impl Cursor {
    /// The start of `request`.
    fn new(request: ReadRequest) -> Self {
        Cursor {
            remaining: request.limit.0,
            request,
            before: None,
            done: false,
        }
    }

    /// The events a page is asked for beyond [`STREAM_PAGE`]'s share of what remains: one,
    /// reading backward, for the event the page before ended at (see [`Cursor::next_request`]).
    fn asked_again(&self) -> u64 {
        u64::from(self.before.is_some())
    }

    /// The events the next page holds at most.
    fn page_rows(&self) -> u64 {
        self.remaining.map_or(STREAM_PAGE, |n| n.min(STREAM_PAGE))
    }

    /// The whole read of the next page, after the cursor's `after` in its direction. Reading
    /// backward, the page is bounded by `until`, which is inclusive: it may return the event
    /// it ends at once more, which is asked for on top and dropped.
    fn next_request(&self) -> ReadRequest {
        let mut request = self.request.clone();
        if let Some(before) = self.before {
            request.filter.until = Some(before);
        }
        request.limit = Limit::to(self.page_rows() + self.asked_again());
        request.delivery = Delivery::Whole;
        request
    }

    /// The events of the page read as [`Cursor::next_request`] said, and the cursor moved past
    /// them; the read is over when the page came back short.
    fn take_page(&mut self, mut page: Vec<ReadEvent>) -> StorageResult<Vec<ReadEvent>> {
        let (rows, again) = (self.page_rows(), self.asked_again());
        let exhausted = (page.len() as u64) < rows + again;
        // Reading forward, a page that does not move past the cursor would be read again
        // and again: a backend whose `query` ignores `after` gets an error, not a loop.
        if let (Direction::Forward, Some(after), Some(first)) =
            (self.request.direction, self.request.after, page.first())
        {
            if first.reference() <= after {
                return Err(EventStorageError::backend(
                    "a streamed read cannot page: a page returned an event that is not after \
                     the cursor",
                    format!(
                        "cursor {after:?}, first event returned {:?}",
                        first.reference()
                    ),
                ));
            }
        }
        if let Some(before) = self.before {
            page.retain(|event| event.reference() < before);
        }
        page.truncate(usize::try_from(rows).unwrap_or(usize::MAX));
        self.remaining = self.remaining.map(|n| n - page.len() as u64);
        self.done = exhausted || self.remaining == Some(0) || page.is_empty();
        if let Some(last) = page.last() {
            match self.request.direction {
                Direction::Forward => self.request.after = Some(last.reference()),
                Direction::Backward => self.before = Some(last.reference()),
            }
        }
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use chrono::Utc;
    use futures_util::StreamExt;

    use super::*;
    use crate::{EventId, EventStreamId};

    const PAGES: u64 = 3;
    const PAGE_EVENTS: u64 = 4;

    fn event(position: u64) -> StoredEvent {
        StoredEvent {
            stream: EventStreamId::for_context("c"),
            event_type: "E".into(),
            reference: EventReference::at(EventId::new(), position),
            payload: serde_json::Value::Null,
            tags: crate::Tags::default(),
            timestamp: Utc::now(),
            idempotency_key: None,
        }
    }

    /// A stream of `PAGES` pages whose reads finish at once, and the pages asked for.
    fn pages() -> (EventStream<'static>, Arc<Mutex<Vec<u64>>>) {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&asked);
        let stream = read_ahead(0, move |page: u64| {
            log.lock().unwrap().push(page);
            async move {
                let events = (0..PAGE_EVENTS).map(|n| event(page * PAGE_EVENTS + n));
                Ok((events.collect(), (page + 1 < PAGES).then_some(page + 1)))
            }
        });
        (stream, asked)
    }

    #[tokio::test]
    async fn the_next_page_is_read_while_the_one_before_is_handed_out() {
        let (mut stream, asked) = pages();
        assert!(
            asked.lock().unwrap().len() == 1,
            "only the first page, once"
        );
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first.reference.position, 0);
        assert_eq!(
            *asked.lock().unwrap(),
            vec![0, 1],
            "the second page was asked for with three events of the first still to hand out"
        );
        let rest: Vec<u64> = stream
            .map(|event| event.unwrap().reference.position)
            .collect()
            .await;
        assert_eq!(rest, (1..PAGES * PAGE_EVENTS).collect::<Vec<_>>());
        assert_eq!(*asked.lock().unwrap(), vec![0, 1, 2], "each page once");
    }

    #[tokio::test]
    async fn a_page_is_asked_for_only_once_the_one_before_has_arrived() {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let (log, (release_first, first_arrives)) =
            (Arc::clone(&asked), tokio::sync::oneshot::channel::<()>());
        let mut first_arrives = Some(first_arrives);
        let mut stream = read_ahead(0_u64, move |page: u64| {
            log.lock().unwrap().push(page);
            let arrives = first_arrives.take();
            async move {
                if let Some(arrives) = arrives {
                    arrives.await.unwrap();
                }
                Ok((vec![event(page)], (page == 0).then_some(1)))
            }
        });
        assert!(
            futures_util::FutureExt::now_or_never(stream.next()).is_none(),
            "nothing to hand out before the first page arrives"
        );
        assert_eq!(*asked.lock().unwrap(), vec![0], "one read at a time");
        release_first.send(()).unwrap();
        let positions: Vec<u64> = stream
            .map(|event| event.unwrap().reference.position)
            .collect()
            .await;
        assert_eq!(positions, vec![0, 1]);
        assert_eq!(*asked.lock().unwrap(), vec![0, 1]);
    }

    #[tokio::test]
    async fn an_error_is_the_last_item_after_the_events_before_it() {
        let stream = read_ahead(0_u64, |page: u64| async move {
            match page {
                0 => Ok((vec![event(0), event(1)], Some(1))),
                _ => Err(EventStorageError::backend(
                    "stream events",
                    "the page failed",
                )),
            }
        });
        let items: Vec<StorageResult<StoredEvent>> = stream.collect().await;
        assert_eq!(items.len(), 3, "two events, then the error, then nothing");
        assert!(items[..2].iter().all(Result::is_ok));
        assert!(matches!(items[2], Err(EventStorageError::Backend { .. })));
    }

    #[tokio::test]
    async fn dropping_the_stream_drops_the_read_in_flight() {
        let in_flight = Arc::new(());
        let held = Arc::clone(&in_flight);
        let mut stream = read_ahead(0_u64, move |page: u64| {
            let held = (page > 0).then(|| Arc::clone(&held));
            async move {
                if held.is_some() {
                    std::future::pending::<()>().await;
                }
                Ok((vec![event(0), event(1)], Some(page + 1)))
            }
        });
        stream.next().await.unwrap().unwrap();
        assert_eq!(
            Arc::strong_count(&in_flight),
            3,
            "the second page's read is in flight"
        );
        drop(stream);
        assert_eq!(
            Arc::strong_count(&in_flight),
            1,
            "and dropped with the stream"
        );
    }
}
