//! The storage handle: validation, then reads straight from the index and the segments, and
//! changes through the writer thread.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use eventstore_api::admission::{Admission, Operation};
use eventstore_api::event_stream::{self, ReadStream};
use eventstore_api::telemetry::{APPEND_SECONDS, FENCED_REFUSALS};
use eventstore_api::{
    AppendCriteria, Bookmark, Capability, Delivery, Direction, EventFilter, EventId,
    EventReference, EventStorage, EventStorageError, EventStreamId, EventToStore, Fence, Lease,
    LeaseContender, LeaseOutcome, LeaseRequest, LeaseResponse, LeaseSelection, Limit, Payloads,
    RawStoredEvent, ReadEvent, ReadRequest, ReleaseOutcome, StorageResult, StoredEvent, Subscribed,
    Subscription, Tags,
};
use tokio::sync::oneshot;

use crate::disk::corruption::OpenFailure;
use crate::disk::directory::{create_dir_durably, DirectoryLock};
use crate::journals::lease_tokens::LeaseState;
use crate::log::event_reader::read_events;
use crate::log::event_record::FromFields;
use crate::log::index::Location;
use crate::options::FileStorageOptions;
use crate::writer::command::{Command, Reply};
use crate::writer::{SharedState, Writer};

const BACKEND_NAME: &str = "file";

/// How a read-only handle names itself when it refuses an operation.
const READ_ONLY_BACKEND: &str = "read-only file";

/// Events and bookmarks durable in a directory, leases in memory.
///
/// Clones are cheap handles onto one storage; [`EventStorage::close`] on any of them closes
/// it for all. See the [crate documentation](crate) for what is guaranteed.
#[derive(Clone)]
pub struct FileEventStorage {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    state: SharedState,
    commands: Mutex<Option<Sender<Command>>>,
    writer: tokio::sync::Mutex<WriterThread>,
    admission: Admission,
    /// Opened by [`FileEventStorage::open_read_only`]: no writer, no lock, no change.
    read_only: bool,
}

impl fmt::Debug for FileEventStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileEventStorage")
            .field("dir", &self.inner.dir)
            .field("closed", &self.inner.admission.is_closed())
            .field("read_only", &self.inner.read_only)
            .finish_non_exhaustive()
    }
}

impl FileEventStorage {
    /// Opens the store in `dir`, creating the directory when missing, with default options.
    ///
    /// # Errors
    /// `Backend` when the directory is open elsewhere (naming it and the holder's pid), when
    /// the log is damaged other than by a torn last write (naming the file and offset; the
    /// source is then a [`crate::Corruption`]), or on I/O failure.
    pub async fn open(dir: impl AsRef<Path>) -> StorageResult<FileEventStorage> {
        FileEventStorage::open_with(dir, FileStorageOptions::default()).await
    }

    /// Opens the store in `dir` with `options`.
    ///
    /// # Errors
    /// As [`FileEventStorage::open`].
    pub async fn open_with(
        dir: impl AsRef<Path>,
        options: FileStorageOptions,
    ) -> StorageResult<FileEventStorage> {
        let dir = dir.as_ref().to_owned();
        tokio::task::spawn_blocking(move || open_blocking(dir, &options))
            .await
            .map_err(|error| EventStorageError::backend("opening the event store failed", error))?
    }

    /// Opens the store in `dir` for reading only, beside the process that has it open.
    ///
    /// No lock is taken and no file is created or changed, so this works while another
    /// process (or another handle in this one) holds the directory: an operator's tool reads
    /// the events and bookmarks of a running service this way. The handle sees the store as
    /// it was on disk when opened; a frame still being written at the end of the log (a
    /// torn tail) is not an error but the end of what is read. What looks like damage is read
    /// again after a pause, up to three times within about a third of a second: a frame that
    /// the writer is copying into the segment can be seen with its later bytes before its
    /// header. Open again to see later events. It reads what the writer has written, synced or
    /// not yet: an event it shows may still be one the writer has not acknowledged, which a
    /// power loss before the writer's sync would take away.
    ///
    /// Every change is refused with [`EventStorageError::Unsupported`] naming the read-only
    /// storage: appends, bookmark changes and all lease operations (the leases of a file
    /// store live in the memory of the process that holds it). [`EventStorage::supports`]
    /// answers `false` for every capability.
    ///
    /// # Errors
    /// `Backend` when `dir` does not exist or holds no event log (nothing is created), when
    /// every attempt finds the log damaged in a way a write in progress cannot explain, or on
    /// I/O failure.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), eventstore_api::EventStorageError> {
    /// use eventstore_api::{AppendCriteria, EventStorage, EventStreamId, EventToStore};
    /// use eventstore_file::FileEventStorage;
    ///
    /// # let dir = tempfile::tempdir().unwrap();
    /// let writer = FileEventStorage::open(dir.path()).await?;
    /// let stream = EventStreamId::for_context("orders");
    /// writer
    ///     .append(AppendCriteria::none(), &stream, vec![EventToStore::new("OrderPlaced", serde_json::json!({}))])
    ///     .await?;
    ///
    /// // While `writer` still holds the directory:
    /// let reader = FileEventStorage::open_read_only(dir.path()).await?;
    /// assert_eq!(reader.head(&stream).await?.map(|head| head.position), Some(1));
    /// assert!(reader.append(AppendCriteria::none(), &stream, vec![]).await.is_err());
    /// # Ok(()) }
    /// ```
    pub async fn open_read_only(dir: impl AsRef<Path>) -> StorageResult<FileEventStorage> {
        let dir = dir.as_ref().to_owned();
        tokio::task::spawn_blocking(move || open_read_only_blocking(dir))
            .await
            .map_err(|error| {
                EventStorageError::backend("opening the event store read-only failed", error)
            })?
    }

    /// Whether this handle was opened by [`FileEventStorage::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// Refuses `operation` on a read-only handle.
    fn refuse_if_read_only(&self, operation: &str) -> StorageResult<()> {
        if self.inner.read_only {
            return Err(EventStorageError::unsupported(operation, READ_ONLY_BACKEND));
        }
        Ok(())
    }

    /// The storage's clock: lease expiry, `storage_time` and the times the storage stamps
    /// (events, bookmarks) are all read from it. A test may step it forward
    /// ([`StorageClock::advance`](eventstore_api::in_process::StorageClock::advance)) to
    /// check what the storage judges by it.
    pub fn clock(&self) -> &eventstore_api::in_process::StorageClock {
        &self.inner.state.clock
    }

    /// The store's directory.
    pub fn directory(&self) -> &Path {
        &self.inner.dir
    }

    /// Admits `operation`: `Closed` first, then its input rules.
    fn admit(&self, operation: Operation<'_>) -> StorageResult<()> {
        self.inner.admission.admit(operation)
    }

    /// Hands a command to the writer and waits for its answer.
    async fn submit<T>(&self, command: impl FnOnce(Reply<T>) -> Command) -> StorageResult<T> {
        let (reply, answer) = oneshot::channel();
        {
            let commands = self
                .inner
                .commands
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let sender = commands.as_ref().ok_or(EventStorageError::Closed)?;
            sender
                .send(command(reply))
                .map_err(|_| EventStorageError::Closed)?;
        }
        answer.await.map_err(|_| {
            EventStorageError::backend(
                format!(
                    "the writer of the event store in {} stopped",
                    self.inner.dir.display()
                ),
                std::io::Error::other("the writer thread ended without answering"),
            )
        })?
    }

    /// The events `query` selects, each made into an `E`.
    async fn select<E: FromFields + Send + 'static>(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<E>> {
        self.admit(Operation::Query { filter, stream })?;
        let locations = self.index().select(filter, stream, after, limit, direction);
        self.fetch(locations, direction).await
    }

    async fn fetch<E: FromFields + Send + 'static>(
        &self,
        mut locations: Vec<(Arc<File>, Location)>,
        direction: Direction,
    ) -> StorageResult<Vec<E>> {
        if locations.is_empty() {
            return Ok(Vec::new());
        }
        let dir = self.inner.dir.clone();
        let read = tokio::task::spawn_blocking(move || {
            // Fetch in ascending file order, so that neighbours share one read.
            let backward = direction == Direction::Backward;
            if backward {
                locations.reverse();
            }
            let mut events = read_events(&locations)?;
            if backward {
                events.reverse();
            }
            Ok::<_, crate::log::event_reader::ReadFailure>(events)
        });
        match read.await {
            Ok(Ok(events)) => Ok(events),
            Ok(Err(failure)) => Err(EventStorageError::backend(
                format!("cannot read from the event store in {}", dir.display()),
                failure,
            )),
            Err(error) => Err(EventStorageError::backend("reading events failed", error)),
        }
    }

    fn index(&self) -> std::sync::RwLockReadGuard<'_, crate::log::index::EventIndex> {
        self.inner
            .state
            .index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Locks the lease state, refusing when the storage is closed or the lease state was
    /// lost (see `lease_tokens`).
    async fn leases(&self) -> StorageResult<tokio::sync::OwnedMutexGuard<LeaseState>> {
        let guard = Arc::clone(&self.inner.state.leases).lock_owned().await;
        self.admit(Operation::Read)?;
        guard.table()?;
        Ok(guard)
    }

    async fn answer_lease_requests(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        let mut leases = self.leases().await?;
        let clock = Arc::clone(&self.inner.state.clock);
        let reservation = leases.reservation(&requests);
        if reservation.is_empty() {
            return Ok(leases.request_all(&requests, clock.now()));
        }
        // A thread of its own, which lets go of the lease lock when the write ends: a caller
        // that stops waiting must not stop it between the table's grants and the end of their
        // tokens' write, and the writer thread, which may wait for the lock, must not wait on
        // a task that only a runtime thread could run (the last handle's drop blocks one).
        tokio::task::spawn_blocking(move || {
            leases.reserve_and_request_all(reservation, &requests, clock.now())
        })
        .await
        .map_err(|error| EventStorageError::backend("answering lease requests failed", error))?
    }
}

fn open_blocking(dir: PathBuf, options: &FileStorageOptions) -> StorageResult<FileEventStorage> {
    create_dir_durably(&dir).map_err(|error| {
        EventStorageError::backend(
            format!("cannot create the event store directory {}", dir.display()),
            error,
        )
    })?;
    let lock = DirectoryLock::acquire(&dir).map_err(|failure| {
        EventStorageError::backend(
            format!("cannot lock the event store directory {}", dir.display()),
            failure,
        )
    })?;
    let opened = |failure: OpenFailure| {
        let message = format!("cannot open the event store in {}", dir.display());
        match failure {
            OpenFailure::Corrupt(corruption) => EventStorageError::backend(message, corruption),
            io => EventStorageError::backend(message, io),
        }
    };
    let writer = Writer::open(&dir, options, lock).map_err(opened)?;
    let state = writer.shared.clone();
    let (sender, commands) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("eventstore-file-writer".to_owned())
        .spawn(move || writer.run(commands))
        .map_err(|error| {
            EventStorageError::backend("cannot start the event store writer", error)
        })?;
    Ok(FileEventStorage {
        inner: Arc::new(Inner {
            dir,
            state,
            commands: Mutex::new(Some(sender)),
            writer: tokio::sync::Mutex::new(WriterThread::Running(WriterHandle::new(thread))),
            admission: Admission::new(),
            read_only: false,
        }),
    })
}

/// How often a read-only open reads the store before it reports what it found. The writer
/// beside it may change a file while it is read: seal a segment or compact the bookmarks (an
/// I/O error), or be in the middle of writing a frame into the segment's zeroed space, whose
/// bytes a reader can see land in any order (what looks like damage at the end of the log).
/// Both pass within moments; damage that is really there is found by every attempt.
const READ_ONLY_ATTEMPTS: u32 = 4;
/// The pause before the second attempt; each later pause is five times the one before.
const READ_ONLY_FIRST_PAUSE: Duration = Duration::from_millis(10);

fn open_read_only_blocking(dir: PathBuf) -> StorageResult<FileEventStorage> {
    let cannot_open = || format!("cannot open the event store in {}", dir.display());
    // The error as the system gives it (missing, permission denied, name too long), and "not
    // a directory" only for what exists and is none.
    let metadata = std::fs::metadata(&dir)
        .map_err(|error| EventStorageError::backend(cannot_open(), error))?;
    if !metadata.is_dir() {
        return Err(EventStorageError::backend(
            cannot_open(),
            std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!("{} is not a directory", dir.display()),
            ),
        ));
    }
    let mut attempt = 1;
    let (index, bookmarks) = loop {
        // The bookmarks first: the writer journals a bookmark only once its event is synced
        // into the log, so a log read after them holds every event they name.
        let read = crate::journals::bookmark_journal::BookmarkJournal::read_only(&dir)
            .and_then(|bookmarks| Ok((crate::log::recovery::read_log(&dir)?, bookmarks)));
        match read {
            Ok(read) => break read,
            Err(OpenFailure::Io { .. } | OpenFailure::Corrupt(_))
                if attempt < READ_ONLY_ATTEMPTS =>
            {
                std::thread::sleep(READ_ONLY_FIRST_PAUSE * 5u32.pow(attempt - 1));
                attempt += 1;
            }
            Err(failure) => {
                let message = format!("cannot open the event store in {} read-only", dir.display());
                return Err(match failure {
                    OpenFailure::Corrupt(corruption) => {
                        EventStorageError::backend(message, corruption)
                    }
                    other => EventStorageError::backend(message, other),
                });
            }
        }
    };
    tracing::debug!(dir = %dir.display(), events = index.len(), bookmarks = bookmarks.len(), "opened the event store read-only");
    let state = SharedState {
        index: Arc::new(std::sync::RwLock::new(index)),
        bookmarks: Arc::new(std::sync::RwLock::new(bookmarks)),
        leases: Arc::new(tokio::sync::Mutex::new(LeaseState::read_only())),
        clock: Arc::new(eventstore_api::in_process::StorageClock::new()),
        appends: Arc::new(eventstore_api::append_hints::AppendHintHub::new()),
    };
    Ok(FileEventStorage {
        inner: Arc::new(Inner {
            dir,
            state,
            commands: Mutex::new(None),
            writer: tokio::sync::Mutex::new(WriterThread::Ended),
            admission: Admission::new(),
            read_only: true,
        }),
    })
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone without `close`: stop the writer and wait for it, so that
        // the directory is free again once the drop returns.
        drop(
            self.commands
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        match std::mem::take(self.writer.get_mut()) {
            WriterThread::Running(thread) | WriterThread::Joining { thread, .. } => {
                let _ = thread.join();
            }
            WriterThread::Ended => {}
        }
    }
}

/// The writer thread, as far as closing the storage has got with it.
#[derive(Default)]
enum WriterThread {
    /// Working, or finishing the commands it has.
    Running(WriterHandle),
    /// A `close` waits for it to end. Kept here, so that a `close` given up part-way (a
    /// caller's timeout around it) leaves the next one something to wait on, and the last
    /// handle's drop the thread to wait for.
    Joining {
        joined: tokio::task::JoinHandle<std::thread::Result<()>>,
        thread: WriterHandle,
    },
    /// Ended (or never started: read-only), and the directory free.
    #[default]
    Ended,
}

/// The writer thread's handle, joined by whichever comes first of a `close` (on the blocking
/// pool) and the last handle's drop. The one joining holds the lock until the thread has
/// ended, so the other waits for that too.
#[derive(Clone)]
struct WriterHandle(Arc<Mutex<Option<JoinHandle<()>>>>);

impl WriterHandle {
    fn new(thread: JoinHandle<()>) -> Self {
        WriterHandle(Arc::new(Mutex::new(Some(thread))))
    }

    /// Waits for the thread to end; `Err` if it panicked and nobody joined it before.
    fn join(&self) -> std::thread::Result<()> {
        let mut thread = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        thread.take().map_or(Ok(()), JoinHandle::join)
    }
}

#[async_trait]
impl EventStorage for FileEventStorage {
    fn name(&self) -> &str {
        BACKEND_NAME
    }

    fn supports(&self, capability: Capability) -> bool {
        // Payloads are stored as JSON text, which reads hand out as it is, read-only or not.
        capability == Capability::RawPayloads
            || !self.inner.read_only
                && matches!(
                    capability,
                    Capability::Lease
                        | Capability::FencedWrites
                        | Capability::LeaseChanges
                        | Capability::LeaseOutcomes
                        | Capability::AppendHints
                )
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", stream = %stream, events = events.len()))]
    async fn append(
        &self,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.admit(Operation::Append {
            criteria: &criteria,
            stream,
            events: &events,
        })?;
        self.refuse_if_read_only("append")?;
        let started = std::time::Instant::now();
        let appended = self
            .submit(|reply| Command::Append {
                fence: None,
                criteria,
                stream: stream.clone(),
                events,
                reply,
            })
            .await;
        metrics::histogram!(APPEND_SECONDS, "backend" => BACKEND_NAME)
            .record(started.elapsed().as_secs_f64());
        appended
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", stream = %stream, limit = ?limit.0, ?direction))]
    async fn query(
        &self,
        filter: &EventFilter,
        stream: &EventStreamId,
        after: Option<&EventReference>,
        limit: Limit,
        direction: Direction,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.select(filter, stream, after, limit, direction).await
    }

    /// Raw payloads are read as the text the log holds, whole or page by page; decoded reads
    /// take the trait's default over `query`.
    fn read<'a>(&'a self, request: ReadRequest) -> ReadStream<'a> {
        if request.payloads != Payloads::Raw || request.delivery != Delivery::Whole {
            return event_stream::default_read(self, request);
        }
        event_stream::whole(async move {
            let events: Vec<RawStoredEvent> = self
                .select(
                    &request.filter,
                    &request.stream,
                    request.after.as_ref(),
                    request.limit,
                    request.direction,
                )
                .await?;
            Ok(events.into_iter().map(ReadEvent::Raw).collect())
        })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", id = %id.0))]
    async fn get_event_by_id(&self, id: EventId) -> StorageResult<Option<StoredEvent>> {
        self.admit(Operation::Read)?;
        let Some(location) = self.index().locate_id(id) else {
            return Ok(None);
        };
        Ok(self.fetch(vec![location], Direction::Forward).await?.pop())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", stream = %stream))]
    async fn head(&self, stream: &EventStreamId) -> StorageResult<Option<EventReference>> {
        self.admit(Operation::Head { stream })?;
        Ok(self.index().head(stream))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", reader = reader, position = reference.position))]
    async fn bookmark(
        &self,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        self.admit(Operation::Bookmark {
            reader,
            tags: &tags,
        })?;
        self.refuse_if_read_only("bookmark")?;
        self.submit(|reply| Command::Bookmark {
            fence: None,
            reader: reader.to_owned(),
            reference: *reference,
            tags,
            reply,
        })
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", reader = reader))]
    async fn get_bookmark(&self, reader: &str) -> StorageResult<Option<EventReference>> {
        self.admit(Operation::Reader { reader })?;
        let bookmarks = self
            .inner
            .state
            .bookmarks
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(bookmarks.get(reader).map(|bookmark| bookmark.reference))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", reader = reader))]
    async fn remove_bookmark(&self, reader: &str) -> StorageResult<()> {
        self.admit(Operation::Reader { reader })?;
        self.refuse_if_read_only("remove_bookmark")?;
        self.submit(|reply| Command::RemoveBookmark {
            reader: reader.to_owned(),
            reply,
        })
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file"))]
    async fn get_bookmarks(&self) -> StorageResult<Vec<Bookmark>> {
        self.admit(Operation::Read)?;
        let bookmarks = self
            .inner
            .state
            .bookmarks
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(bookmarks.values().cloned().collect())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", lease = %request.lease_name, owner = %request.owner))]
    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        self.admit(Operation::RequestLease { request: &request })?;
        self.refuse_if_read_only("request_lease")?;
        let mut outcomes = self.answer_lease_requests(vec![request]).await?;
        Ok(outcomes.remove(0).response)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", lease = %eventstore_api::telemetry::LeaseNames(&requests), requests = requests.len()))]
    async fn request_leases(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseResponse>> {
        self.admit(Operation::RequestLeases {
            requests: &requests,
        })?;
        self.refuse_if_read_only("request_leases")?;
        let outcomes = self.answer_lease_requests(requests).await?;
        Ok(outcomes
            .into_iter()
            .map(|outcome| outcome.response)
            .collect())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", lease = %eventstore_api::telemetry::LeaseNames(&requests), requests = requests.len()))]
    async fn request_leases_with_outcome(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        self.admit(Operation::RequestLeases {
            requests: &requests,
        })?;
        self.refuse_if_read_only("request_leases_with_outcome")?;
        self.answer_lease_requests(requests).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", lease = lease_name, owner = owner))]
    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        self.admit(Operation::ReleaseLease { lease_name, owner })?;
        self.refuse_if_read_only("release_lease")?;
        let mut leases = self.leases().await?;
        leases.release(lease_name, owner, self.inner.state.clock.now());
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", lease = lease_names.first().map(String::as_str), owner = owner, leases = lease_names.len()))]
    async fn release_leases(
        &self,
        lease_names: &[String],
        owner: &str,
    ) -> StorageResult<Vec<ReleaseOutcome>> {
        self.admit(Operation::ReleaseLeases { lease_names, owner })?;
        self.refuse_if_read_only("release_leases")?;
        let mut leases = self.leases().await?;
        let now = self.inner.state.clock.now();
        Ok(lease_names
            .iter()
            .map(|lease_name| leases.release(lease_name, owner, now))
            .collect())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file"))]
    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        self.admit(Operation::Read)?;
        self.refuse_if_read_only("get_leases")?;
        Ok(self.leases().await?.table()?.leases())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", selection = ?selection))]
    async fn list_leases(&self, selection: LeaseSelection) -> StorageResult<Vec<Lease>> {
        self.admit(Operation::Leases {
            selection: &selection,
        })?;
        self.refuse_if_read_only("list_leases")?;
        Ok(self.leases().await?.table()?.leases_in(&selection))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", selection = ?selection))]
    async fn list_contenders(
        &self,
        selection: LeaseSelection,
    ) -> StorageResult<Vec<LeaseContender>> {
        self.admit(Operation::Leases {
            selection: &selection,
        })?;
        self.refuse_if_read_only("list_contenders")?;
        Ok(self.leases().await?.table()?.contenders_in(&selection))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file"))]
    async fn storage_time(&self) -> StorageResult<DateTime<Utc>> {
        self.admit(Operation::Read)?;
        self.refuse_if_read_only("storage_time")?;
        Ok(self.inner.state.clock.now())
    }

    async fn subscribe(&self, subscription: Subscription) -> StorageResult<Subscribed> {
        match subscription {
            Subscription::Appends(stream) => {
                self.admit(Operation::SubscribeAppends { stream: &stream })?;
                self.refuse_if_read_only("subscribe_appends")?;
                Ok(Subscribed::Appends(
                    self.inner.state.appends.subscribe(&stream),
                ))
            }
            Subscription::LeaseChanges(scope) => {
                self.admit(Operation::Read)?;
                self.refuse_if_read_only("subscribe_lease_changes")?;
                let changes = self.leases().await?.changes();
                Ok(Subscribed::LeaseChanges(changes.subscribe(&scope)))
            }
            other => Err(EventStorageError::unsupported(
                other.operation(),
                self.name(),
            )),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", stream = %stream, events = events.len(), lease = %fence.lease_name, token = fence.token.0))]
    async fn append_fenced(
        &self,
        fence: &Fence,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        self.admit(Operation::AppendFenced {
            criteria: &criteria,
            fence,
            stream,
            events: &events,
        })?;
        self.refuse_if_read_only("append_fenced")?;
        let started = std::time::Instant::now();
        let appended = self
            .submit(|reply| Command::Append {
                fence: Some(fence.clone()),
                criteria,
                stream: stream.clone(),
                events,
                reply,
            })
            .await;
        metrics::histogram!(APPEND_SECONDS, "backend" => BACKEND_NAME)
            .record(started.elapsed().as_secs_f64());
        counting_refusal(appended)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(backend = "file", reader = reader, position = reference.position, lease = %fence.lease_name, token = fence.token.0))]
    async fn bookmark_fenced(
        &self,
        fence: &Fence,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        self.admit(Operation::BookmarkFenced {
            fence,
            reader,
            tags: &tags,
        })?;
        self.refuse_if_read_only("bookmark_fenced")?;
        counting_refusal(
            self.submit(|reply| Command::Bookmark {
                fence: Some(fence.clone()),
                reader: reader.to_owned(),
                reference: *reference,
                tags,
                reply,
            })
            .await,
        )
    }

    async fn close(&self) -> StorageResult<()> {
        // Under the lease lock, so that no lease operation runs on after the close.
        let leases = self.inner.state.leases.lock().await;
        if self.inner.admission.close() {
            leases.changes().close();
            self.inner.state.appends.close();
        }
        drop(leases);
        let mut writer = self.inner.writer.lock().await;
        drop(
            self.inner
                .commands
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        *writer = match std::mem::take(&mut *writer) {
            // The writer finishes the commands it has, then releases the directory.
            WriterThread::Running(thread) => WriterThread::Joining {
                joined: tokio::task::spawn_blocking({
                    let thread = thread.clone();
                    move || thread.join()
                }),
                thread,
            },
            other => other,
        };
        if let WriterThread::Joining {
            joined: joining, ..
        } = &mut *writer
        {
            let joined = joining.await;
            *writer = WriterThread::Ended;
            joined
                .map_err(|error| {
                    EventStorageError::backend("closing the event store failed", error)
                })?
                .map_err(|_| {
                    EventStorageError::backend(
                        format!(
                            "the writer of the event store in {} panicked",
                            self.inner.dir.display()
                        ),
                        std::io::Error::other("writer thread panicked"),
                    )
                })?;
        }
        Ok(())
    }
}

/// `result`, counted under the name every backend counts a refused fence by when it is one.
fn counting_refusal<T>(result: StorageResult<T>) -> StorageResult<T> {
    if let Err(EventStorageError::Fenced { lease_name, .. }) = &result {
        metrics::counter!(FENCED_REFUSALS, "lease" => lease_name.clone()).increment(1);
    }
    result
}
