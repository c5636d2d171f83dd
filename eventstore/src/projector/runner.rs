//! The projector itself: reads a batch, hands it to the projection, bookmarks it, while the
//! next batch is read.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;

use futures_util::future::{select, Either};
use futures_util::FutureExt;

use crate::{
    Direction, EventFilter, EventReference, EventStorage, EventStorageError, EventStreamId, Fence,
    Limit, StoredEvent, Tags,
};

use super::{BookmarkReading, Projection, ProjectorBuilder, ProjectorError, DEFAULT_BATCH_SIZE};

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProjectorRun {
    /// Events the storage returned in the batches the run took up.
    pub events_read: u64,
    /// Events the projection handled in batches that completed.
    pub events_handled: u64,
    /// Queries whose batch the run took up; a batch read ahead and dropped when the run
    /// stopped or failed first is not counted.
    pub queries: u64,
    /// Batches that completed (projected, committed and bookmarked).
    pub batches: u64,
    /// The last event of the last completed batch.
    pub last_reference: Option<EventReference>,
}

impl ProjectorRun {
    /// Adds `other`'s counts to these; the later last reference wins.
    pub fn add(&mut self, other: &ProjectorRun) {
        self.events_read += other.events_read;
        self.events_handled += other.events_handled;
        self.queries += other.queries;
        self.batches += other.batches;
        self.last_reference = other.last_reference.or(self.last_reference);
    }
}

/// Runs a [`Projection`] over a stream in batches and bookmarks its progress.
///
/// # Examples
/// ```
/// # use std::sync::Arc;
/// # use eventstore::*;
/// # use eventstore::projector::*;
/// struct Count(u64);
///
/// #[async_trait::async_trait]
/// impl Projection for Count {
///     async fn handle(&mut self, _event: &StoredEvent) -> Result<(), ProjectionError> {
///         self.0 += 1;
///         Ok(())
///     }
/// }
///
/// # async fn count(storage: Arc<dyn EventStorage>) -> Result<(), ProjectorError> {
/// let mut projector = Projector::builder(storage, Count(0))
///     .stream(EventStreamId::for_context("orders"))
///     .bookmark("order-counter")
///     .build()?;
/// let run = projector.run().await?; // from the bookmark up to the stream's end
/// println!("handled {} events in {} queries", run.events_handled, run.queries);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Projector<P> {
    pub(super) storage: Arc<dyn EventStorage>,
    pub(super) projection: P,
    pub(super) stream: EventStreamId,
    pub(super) reader: Option<String>,
    pub(super) bookmark_tags: Tags,
    pub(super) batch_size: u64,
    pub(super) bookmark_reading: BookmarkReading,
    pub(super) fence: Option<Fence>,
    pub(super) cursor: Option<EventReference>,
    /// Whether the next run reads the bookmark whatever `bookmark_reading` says: set before
    /// the first run (unless reading is on request) and at the start of each tenure.
    pub(super) bookmark_due: bool,
    /// Whether a batch was begun (`before_batch`) and not yet ended (`after_batch` returned,
    /// or the batch was cancelled): a run dropped inside it leaves it to the next run to
    /// cancel.
    pub(super) batch_open: bool,
}

impl<P: Projection> Projector<P> {
    /// A builder for a projector feeding `projection` from `storage`.
    pub fn builder(storage: Arc<dyn EventStorage>, projection: P) -> ProjectorBuilder<P> {
        ProjectorBuilder {
            storage,
            projection,
            stream: EventStreamId::any(),
            reader: None,
            bookmark_tags: Tags::none(),
            batch_size: DEFAULT_BATCH_SIZE,
            bookmark_reading: BookmarkReading::default(),
            fence: None,
        }
    }

    /// The projection.
    pub fn projection(&self) -> &P {
        &self.projection
    }

    /// The projection, mutably.
    pub fn projection_mut(&mut self) -> &mut P {
        &mut self.projection
    }

    /// The projection, consuming the projector.
    pub fn into_projection(self) -> P {
        self.projection
    }

    /// The reader name bookmarks are placed under, if any.
    pub fn reader(&self) -> Option<&str> {
        self.reader.as_deref()
    }

    /// The last event handled in a completed batch; the next run starts after it.
    pub fn position(&self) -> Option<EventReference> {
        self.cursor
    }

    /// The newest event of the projector's stream that readers can see now, of any type; `None`
    /// when there is none, or the storage cannot say.
    pub(crate) async fn visible_head(&self) -> Option<EventReference> {
        self.storage.head(&self.stream).await.ok().flatten()
    }

    /// Moves the cursor: the next batch starts after `position` (`None`: from the start).
    ///
    /// A run that reads the bookmark first moves the cursor again, to the bookmark: every run
    /// of a projector with a reader under [`BookmarkReading::BeforeEachRun`] (the default),
    /// the first under [`BookmarkReading::Once`], and an elected projector's first of each
    /// tenure. To seek between runs, read the bookmark [`BookmarkReading::OnRequest`].
    pub fn seek(&mut self, position: Option<EventReference>) {
        self.cursor = position;
    }

    /// Makes the next run read the bookmark first, whatever its [`BookmarkReading`]: a new
    /// tenure resumes where the previous holder stopped, not where this instance did.
    pub(crate) fn read_bookmark_before_next_run(&mut self) {
        self.bookmark_due = true;
    }

    /// Sets or clears the fence that bookmarks are written under.
    pub fn set_fence(&mut self, fence: Option<Fence>) {
        self.fence = fence;
    }

    /// The fence bookmarks are written under, if any.
    pub fn fence(&self) -> Option<&Fence> {
        self.fence.as_ref()
    }

    /// Reads the bookmark and moves the cursor to it (to the start when there is none).
    /// Without a reader the cursor stays.
    ///
    /// # Errors
    /// The storage's errors of [`EventStorage::get_bookmark`].
    pub async fn read_bookmark(&mut self) -> Result<Option<EventReference>, EventStorageError> {
        let Some(reader) = &self.reader else {
            return Ok(self.cursor);
        };
        let bookmark = self.storage.get_bookmark(reader).await?;
        self.cursor = bookmark;
        self.bookmark_due = false;
        Ok(bookmark)
    }

    /// Runs until the projection has caught up with the stream.
    ///
    /// # Errors
    /// As [`Projector::run_while`].
    pub async fn run(&mut self) -> Result<ProjectorRun, ProjectorError> {
        self.run_while(|| true).await
    }

    /// Runs batch after batch until caught up or until `keep_going` says no; it is asked
    /// before every batch, so a run stops between batches, never inside one.
    ///
    /// While a full batch is projected and bookmarked, the next one is read: a replay then
    /// takes the longer of reading and projecting per batch, not their sum. A batch read ahead
    /// is dropped unprojected when the run stops or fails first; reads change nothing.
    ///
    /// # Errors
    /// [`ProjectorError::Projection`] when the projection failed (the batch was cancelled and
    /// the cursor is back at its start); [`ProjectorError::Storage`] when the storage failed,
    /// including [`EventStorageError::Fenced`] when the fence no longer holds (the batch was
    /// committed by the projection, but the cursor is back at its start and the bookmark
    /// stays where it was).
    pub async fn run_while(
        &mut self,
        keep_going: impl FnMut() -> bool + Send,
    ) -> Result<ProjectorRun, ProjectorError> {
        let mut stopped = false;
        self.run_while_or_until(keep_going, pin!(std::future::pending()), &mut stopped)
            .await
    }

    /// [`Projector::run_while`], ended early once `stop` completes: a batch in hand is
    /// projected and bookmarked first, and a read under way (the bookmark's, a batch's) is
    /// dropped, to be read again by the next run. A storage that hangs then holds up no stop.
    /// `stop` is polled only while `stopped` is false, and `stopped` is set once it completed.
    pub(crate) async fn run_while_or_until<S: Future<Output = ()>>(
        &mut self,
        mut keep_going: impl FnMut() -> bool + Send,
        mut stop: Pin<&mut S>,
        stopped: &mut bool,
    ) -> Result<ProjectorRun, ProjectorError> {
        let mut run = ProjectorRun::default();
        if self.batch_open {
            // A run was dropped inside a batch (a caller's timeout or select around it).
            self.projection.cancel_batch().await;
            self.batch_open = false;
        }
        if self.bookmark_due || self.bookmark_reading == BookmarkReading::BeforeEachRun {
            match unless_stopped(self.read_bookmark(), stop.as_mut(), stopped).await {
                Some(read) => read?,
                None => return Ok(run),
            };
        }
        if !keep_going() {
            return Ok(run);
        }
        let reads = Reads {
            storage: self.storage.as_ref(),
            filter: self.projection.filter(),
            stream: &self.stream,
            batch_size: self.batch_size,
        };
        let bookmarks = Bookmarks {
            storage: self.storage.as_ref(),
            reader: self.reader.as_deref(),
            tags: &self.bookmark_tags,
            fence: self.fence.as_ref(),
        };
        let projection = &mut self.projection;
        let batch_open = &mut self.batch_open;
        let first = reads.after(self.cursor.as_ref());
        let mut batch = match unless_stopped(first, stop.as_mut(), stopped).await {
            Some(read) => read?,
            None => return Ok(run),
        };
        loop {
            run.queries += 1;
            run.events_read += batch.len() as u64;
            let Some(last) = batch.last().map(|event| event.reference) else {
                break;
            };
            let full = batch.len() as u64 >= reads.batch_size;
            let batch_start = self.cursor;
            let mut reading_ahead = pin!(async {
                if full {
                    Some(reads.after(Some(&last)).await)
                } else {
                    None
                }
            });
            let mut read_ahead = None;
            // The batch in hand is finished whatever happens; a stop meanwhile is noted.
            let completed = {
                let mut completing = pin!(complete(
                    projection,
                    batch_open,
                    &bookmarks,
                    &batch,
                    last,
                    batch_start
                ));
                loop {
                    tokio::select! {
                        biased;
                        completed = &mut completing => break completed,
                        read = &mut reading_ahead, if read_ahead.is_none() => {
                            read_ahead = Some(read);
                        }
                        () = &mut stop, if !*stopped => *stopped = true,
                    }
                }
            };
            completed?;
            self.cursor = Some(last);
            run.batches += 1;
            run.events_handled += batch.len() as u64;
            run.last_reference = Some(last);
            if !full || *stopped {
                break;
            }
            // A storage whose calls never wait (the in-memory one) would otherwise keep the
            // task busy for the whole backlog: whoever runs this gets to see a stop, and
            // other tasks on the thread get to run, between batches.
            tokio::task::yield_now().await;
            if stop_has_completed(stop.as_mut(), stopped) || !keep_going() {
                break;
            }
            let next = match read_ahead {
                Some(read) => read,
                None => match unless_stopped(reading_ahead, stop.as_mut(), stopped).await {
                    Some(read) => read,
                    None => break,
                },
            };
            match next {
                Some(read) => batch = read?,
                None => break,
            }
        }
        Ok(run)
    }
}

/// `future`'s output, or `None` when `stop` completes first (then `stopped` is set, and `stop`
/// is not polled again: with `stopped` already set, `None` at once). `stop` is asked first, so
/// that a read that never waits (the in-memory storage's) does not keep a stop out.
pub(super) async fn unless_stopped<T, S: Future<Output = ()>>(
    future: impl Future<Output = T>,
    stop: Pin<&mut S>,
    stopped: &mut bool,
) -> Option<T> {
    if *stopped {
        return None;
    }
    match select(stop, pin!(future)).await {
        Either::Left(((), _)) => {
            *stopped = true;
            None
        }
        Either::Right((output, _)) => Some(output),
    }
}

/// Whether `stop` has completed, asked once without waiting; sets `stopped` when it has.
fn stop_has_completed<S: Future<Output = ()>>(stop: Pin<&mut S>, stopped: &mut bool) -> bool {
    if !*stopped {
        *stopped = stop.now_or_never().is_some();
    }
    *stopped
}

/// How a projector reads its batches: the projection's filter over its stream, at most a
/// batch at a time.
struct Reads<'a> {
    storage: &'a dyn EventStorage,
    filter: EventFilter,
    stream: &'a EventStreamId,
    batch_size: u64,
}

impl Reads<'_> {
    /// The batch after `cursor` (`None`: from the start).
    async fn after(
        &self,
        cursor: Option<&EventReference>,
    ) -> Result<Vec<StoredEvent>, EventStorageError> {
        self.storage
            .query(
                &self.filter,
                self.stream,
                cursor,
                Limit::to(self.batch_size),
                Direction::Forward,
            )
            .await
    }
}

/// Where a projector places its bookmarks: under its reader, if it has one, and its fence,
/// if it runs under one.
struct Bookmarks<'a> {
    storage: &'a dyn EventStorage,
    reader: Option<&'a str>,
    tags: &'a Tags,
    fence: Option<&'a Fence>,
}

impl Bookmarks<'_> {
    /// Places the bookmark at `last`.
    async fn place(&self, last: &EventReference) -> Result<(), EventStorageError> {
        let Some(reader) = self.reader else {
            return Ok(());
        };
        let tags = self.tags.clone();
        match self.fence {
            Some(fence) => {
                self.storage
                    .bookmark_fenced(fence, reader, last, tags)
                    .await
            }
            None => self.storage.bookmark(reader, last, tags).await,
        }
    }
}

/// Projects `batch`, whose last event is `last`, and bookmarks it; a batch the projection
/// failed on is cancelled. `batch_open` is true from the start of the batch until it has
/// ended either way.
async fn complete<P: Projection>(
    projection: &mut P,
    batch_open: &mut bool,
    bookmarks: &Bookmarks<'_>,
    batch: &[StoredEvent],
    last: EventReference,
    batch_start: Option<EventReference>,
) -> Result<(), ProjectorError> {
    *batch_open = true;
    let projected = async {
        projection.before_batch().await?;
        for event in batch {
            projection.handle(event).await?;
        }
        projection.after_batch(&last).await
    }
    .await;
    if let Err(source) = projected {
        projection.cancel_batch().await;
        *batch_open = false;
        return Err(ProjectorError::Projection {
            batch_start,
            source,
        });
    }
    *batch_open = false;
    bookmarks.place(&last).await?;
    Ok(())
}
