//! The writer: one thread that orders every change, checks it, and makes it durable.
//!
//! Appends and bookmark changes arrive as [`Command`]s. The writer takes every command waiting
//! at once as one group: it checks each (fence, idempotency, criteria) against the index plus
//! the group's earlier commands, writes the group's frames with one write, syncs once, then
//! publishes the group to the index and answers. So concurrent appenders share one sync (group
//! commit), and nothing is visible or acknowledged before it is on disk: not even an answer
//! that only refers to an earlier member of the group (a conflict with it, a retry of it).
//!
//! A group holding a fenced command holds the lease lock from the fence check until the group
//! is published, so no lease changes hands between the check and the write becoming visible.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use eventstore_api::append_hints::AppendHintHub;
use eventstore_api::idempotency::{self, Idempotency};
use eventstore_api::in_process::StorageClock;
use eventstore_api::{
    AppendCriteria, AppendHint, Bookmark, EventId, EventReference, EventStorageError,
    EventStreamId, EventToStore, StoredEvent,
};

use crate::disk::corruption::OpenFailure;
use crate::disk::directory::{sync_dir, DirectoryLock};
use crate::disk::file_failure::FileFailure;
use crate::journals::bookmark_journal::{
    BookmarkChange, BookmarkJournal, Bookmarks, BOOKMARKS_FILE,
};
use crate::journals::lease_tokens::LeaseState;
use crate::log::event_reader::read_events;
use crate::log::event_record::{encode_batch, EncodedBatch};
use crate::log::index::{EventIndex, IndexedEvent, Location};
use crate::log::recovery::recover_log;
use crate::log::segments::SegmentWriter;
use crate::options::FileStorageOptions;
use crate::writer::command::{Command, HeldAnswer, Reply};
use crate::writer::gathering::GroupGathering;

/// Histogram: how many commands (appends and bookmark changes) one group commit took.
pub(crate) const GROUP_SIZE: &str = "eventstore_file_group_size";

/// Histogram: seconds one group's write and sync of the event log took (groups that append).
pub(crate) const SYNC_SECONDS: &str = "eventstore_file_sync_seconds";

/// What the writer shares with the storage handles.
#[derive(Debug, Clone)]
pub(crate) struct SharedState {
    pub(crate) index: Arc<RwLock<EventIndex>>,
    pub(crate) bookmarks: Arc<RwLock<Bookmarks>>,
    pub(crate) leases: Arc<tokio::sync::Mutex<LeaseState>>,
    pub(crate) clock: Arc<StorageClock>,
    pub(crate) appends: Arc<AppendHintHub>,
}

/// The writer thread's state. Dropping it releases the directory lock.
#[derive(Debug)]
pub(crate) struct Writer {
    dir: PathBuf,
    segments: SegmentWriter,
    bookmark_journal: BookmarkJournal,
    /// The state the storage handles read.
    pub(crate) shared: SharedState,
    lock: DirectoryLock,
    /// Set when a write or sync failed: what was on disk is unknown, so no later write is
    /// accepted until the store is reopened (and recovery has looked at the disk).
    failure: Option<WriteFailure>,
}

/// An append that passed its checks, waiting for the group's sync.
struct PlannedAppend {
    events: Vec<StoredEvent>,
    encoded: EncodedBatch,
    reply: Reply<Vec<StoredEvent>>,
}

/// What the writer does with one append.
enum AppendPlan {
    /// Write these events, encoded.
    Write(Vec<StoredEvent>, EncodedBatch),
    /// Write nothing and answer these events (an empty batch, or a retry's stored events).
    Answer(Vec<StoredEvent>),
}

/// What one group will write, and the answers that wait for the write.
#[derive(Default)]
struct GroupPlan {
    next_position: u64,
    appends: Vec<PlannedAppend>,
    /// The events of the group's appends that carry an idempotency key, by stream and key.
    keys: HashMap<(EventStreamId, String), StoredEvent>,
    bookmarks: Vec<(BookmarkChange, Reply<()>)>,
    held: Vec<HeldAnswer>,
}

impl Writer {
    /// Recovers the store in `dir`, which `lock` holds: the event log, the bookmarks and the
    /// lease token ceilings.
    ///
    /// # Errors
    /// I/O failure, or damage that a torn write cannot explain.
    pub(crate) fn open(
        dir: &Path,
        options: &FileStorageOptions,
        lock: DirectoryLock,
    ) -> Result<Writer, OpenFailure> {
        let (index, segments) = recover_log(dir, options.segment_bytes())?;
        let (bookmark_journal, bookmarks) = BookmarkJournal::open(dir)?;
        let leases = LeaseState::open(dir)?;
        // A file a crash left behind can be seen from the page cache with an entry that never
        // reached the disk; appends to it must not be acknowledged until it has.
        sync_dir(dir).map_err(OpenFailure::io("cannot sync the directory", dir))?;
        tracing::info!(dir = %dir.display(), events = index.len(), bookmarks = bookmarks.len(), "opened the event store");
        Ok(Writer {
            dir: dir.to_owned(),
            segments,
            bookmark_journal,
            shared: SharedState {
                index: Arc::new(RwLock::new(index)),
                bookmarks: Arc::new(RwLock::new(bookmarks)),
                leases: Arc::new(tokio::sync::Mutex::new(leases)),
                clock: Arc::new(StorageClock::new()),
                appends: Arc::new(AppendHintHub::new()),
            },
            lock,
            failure: None,
        })
    }

    /// Serves commands until every sender is gone, then releases the directory.
    pub(crate) fn run(mut self, commands: Receiver<Command>) {
        let mut gathering = GroupGathering::default();
        while let Ok(first) = commands.recv() {
            let group = gathering.gather(first, &commands);
            let started = Instant::now();
            let size = group.len();
            metrics::histogram!(GROUP_SIZE).record(size as f64);
            self.commit(group);
            gathering.committed(size, started.elapsed());
            self.prepare_for_next_group();
        }
        tracing::debug!(dir = %self.dir.display(), "event store writer stopped");
        drop(self.lock);
    }

    /// Work that waits until a group is answered: zero-filling the log ahead of its end.
    fn prepare_for_next_group(&mut self) {
        if self.failure.is_some() {
            return;
        }
        if let Err(failure) = self.segments.preallocate() {
            self.fail(failure);
        }
    }

    /// Checks, writes, publishes and answers one group.
    fn commit(&mut self, group: Vec<Command>) {
        if let Some(failure) = &self.failure {
            for command in group {
                command.refuse(failure.refusal());
            }
            return;
        }
        let leases = Arc::clone(&self.shared.leases);
        let lease_guard = group
            .iter()
            .any(|command| command.fence().is_some())
            .then(|| leases.blocking_lock());
        let index = Arc::clone(&self.shared.index);
        let plan = {
            let index = index.read().unwrap_or_else(PoisonError::into_inner);
            let mut plan = GroupPlan {
                next_position: index.next_position(),
                ..GroupPlan::default()
            };
            for command in group {
                if let Some(fence) = command.fence() {
                    // Taken above whenever a command of the group carries a fence.
                    #[allow(clippy::expect_used)]
                    let leases = lease_guard.as_ref().expect("locked for fenced groups");
                    if let Err(fenced) = leases.check_fence(fence, self.shared.clock.now()) {
                        plan.held.push(command.hold(fenced));
                        continue;
                    }
                }
                self.plan_command(&index, &mut plan, command);
            }
            plan
        };
        self.write_and_publish(plan);
        drop(lease_guard);
    }

    fn plan_command(&mut self, index: &EventIndex, plan: &mut GroupPlan, command: Command) {
        match command {
            Command::Append {
                criteria,
                stream,
                events,
                reply,
                ..
            } => match self.plan_append(index, plan, &criteria, stream, events) {
                Ok(AppendPlan::Write(events, encoded)) => {
                    plan.next_position += events.len() as u64;
                    plan.appends.push(PlannedAppend {
                        events,
                        encoded,
                        reply,
                    });
                }
                Ok(AppendPlan::Answer(events)) => {
                    plan.held.push(HeldAnswer::Events(reply, Ok(events)));
                }
                Err(error) => plan.held.push(HeldAnswer::Events(reply, Err(error))),
            },
            Command::Bookmark {
                reader,
                reference,
                tags,
                reply,
                ..
            } => match index.reference_of(reference.id) {
                Some(own) => {
                    let bookmark = Bookmark {
                        reader,
                        reference: own,
                        tags,
                        updated_at: self.shared.clock.now(),
                    };
                    plan.bookmarks
                        .push((BookmarkChange::Placed(bookmark), reply));
                }
                None => plan.held.push(HeldAnswer::Done(
                    reply,
                    Err(EventStorageError::unknown_event(reference.id)),
                )),
            },
            Command::RemoveBookmark { reader, reply } => {
                plan.bookmarks
                    .push((BookmarkChange::Removed(reader), reply));
            }
        }
    }

    /// Checks an append against the index and the group so far.
    fn plan_append(
        &mut self,
        index: &EventIndex,
        plan: &mut GroupPlan,
        criteria: &AppendCriteria,
        stream: EventStreamId,
        events: Vec<EventToStore>,
    ) -> Result<AppendPlan, EventStorageError> {
        let stored = self.stored_under_keys(index, plan, &stream, &events)?;
        if let Idempotency::Retry(stored) = idempotency::judge(&stream, &events, &stored)? {
            return Ok(AppendPlan::Answer(stored));
        }
        if let Some(condition) = &criteria.condition {
            let conflicting = index.first_violation(&stream, condition).or_else(|| {
                plan.appends
                    .iter()
                    .flat_map(|append| &append.events)
                    .find(|event| event.stream == stream && criteria.is_violated_by(event))
                    .map(|event| event.reference)
            });
            if let Some(conflicting) = conflicting {
                return Err(EventStorageError::optimistic_lock(
                    stream.to_string(),
                    condition.expected_last,
                    conflicting,
                ));
            }
        }
        if events.is_empty() {
            return Ok(AppendPlan::Answer(Vec::new()));
        }
        let timestamp = self.shared.clock.now();
        let stored: Vec<StoredEvent> = events
            .into_iter()
            .zip(plan.next_position..)
            .map(|(event, position)| StoredEvent {
                stream: stream.clone(),
                event_type: event.event_type,
                reference: EventReference::at(EventId::new(), position),
                payload: event.payload,
                tags: event.tags,
                timestamp,
                idempotency_key: event.idempotency_key,
            })
            .collect();
        let encoded = encode_batch(&stored)?;
        for event in &stored {
            if let Some(key) = &event.idempotency_key {
                plan.keys
                    .insert((stream.clone(), key.clone()), event.clone());
            }
        }
        Ok(AppendPlan::Write(stored, encoded))
    }

    /// The events of `stream` stored under the batch's idempotency keys, in the log (read from
    /// disk: only retries and conflicts find any) or earlier in this group.
    fn stored_under_keys(
        &self,
        index: &EventIndex,
        plan: &GroupPlan,
        stream: &EventStreamId,
        events: &[EventToStore],
    ) -> Result<Vec<StoredEvent>, EventStorageError> {
        let mut in_log = Vec::new();
        let mut stored = Vec::new();
        for key in idempotency::keys(events) {
            if let Some(location) = index.locate_key(stream, key) {
                in_log.push(location);
            } else if let Some(event) = plan.keys.get(&(stream.clone(), key.to_owned())) {
                stored.push(event.clone());
            }
        }
        if !in_log.is_empty() {
            in_log.sort_by_key(|(_, location)| (location.segment, location.offset));
            let read = read_events::<StoredEvent>(&in_log).map_err(|failure| {
                EventStorageError::backend(
                    format!(
                        "cannot read the events stored under the batch's idempotency keys in {}",
                        self.dir.display()
                    ),
                    failure,
                )
            })?;
            stored.extend(read);
        }
        Ok(stored)
    }

    /// Writes the group's events and bookmarks, publishes them, then sends every answer.
    fn write_and_publish(&mut self, plan: GroupPlan) {
        let GroupPlan {
            appends,
            bookmarks,
            held,
            ..
        } = plan;
        match self.write_events(&appends) {
            Ok(locations) => self.publish_events(appends, locations),
            Err(failure) => {
                let failure = self.fail(failure);
                for append in appends {
                    drop(append.reply.send(Err(failure.error())));
                }
                for answer in held {
                    answer.fail(failure.error());
                }
                self.write_bookmarks(bookmarks);
                return;
            }
        }
        self.write_bookmarks(bookmarks);
        for answer in held {
            answer.send();
        }
    }

    fn write_events(
        &mut self,
        appends: &[PlannedAppend],
    ) -> Result<Vec<Vec<Location>>, FileFailure> {
        let mut all = Vec::with_capacity(appends.len());
        for append in appends {
            let first_position = append.events[0].reference.position;
            let (segment, frame_offset) = self
                .segments
                .append(&append.encoded.frame, first_position)?;
            all.push(
                append
                    .encoded
                    .events
                    .iter()
                    .map(|&(offset, length)| Location {
                        segment,
                        length,
                        offset: frame_offset + offset,
                    })
                    .collect(),
            );
        }
        let syncing = Instant::now();
        self.segments.sync()?;
        if !appends.is_empty() {
            metrics::histogram!(SYNC_SECONDS).record(syncing.elapsed().as_secs_f64());
        }
        Ok(all)
    }

    fn publish_events(&mut self, appends: Vec<PlannedAppend>, locations: Vec<Vec<Location>>) {
        let opened = self.segments.take_opened();
        {
            let mut index = self
                .shared
                .index
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            for file in opened {
                index.add_segment(file);
            }
            for (append, locations) in appends.iter().zip(&locations) {
                for (event, &location) in append.events.iter().zip(locations) {
                    index.insert(&IndexedEvent {
                        id: event.reference.id,
                        context: event.stream.context.as_deref().unwrap_or_default(),
                        purpose: event.stream.purpose.as_deref().unwrap_or_default(),
                        event_type: event.event_type.as_str(),
                        tags: event
                            .tags
                            .iter()
                            .map(|tag| (tag.key.as_str(), tag.value.as_str()))
                            .collect(),
                        idempotency_key: event.idempotency_key.as_deref(),
                        location,
                    });
                }
            }
        }
        for append in appends {
            // Durable and in the index: readers woken by the hint find the events.
            if let Some(last) = append.events.last() {
                self.shared.appends.publish(AppendHint {
                    stream: last.stream.clone(),
                    last: last.reference,
                });
            }
            drop(append.reply.send(Ok(append.events)));
        }
    }

    fn write_bookmarks(&mut self, changes: Vec<(BookmarkChange, Reply<()>)>) {
        if changes.is_empty() {
            return;
        }
        if let Some(failure) = &self.failure {
            for (_, reply) in changes {
                drop(reply.send(Err(failure.refusal())));
            }
            return;
        }
        let records: Vec<BookmarkChange> =
            changes.iter().map(|(change, _)| change.clone()).collect();
        if let Err(error) = self.bookmark_journal.record(&records) {
            let path = self.dir.join(BOOKMARKS_FILE);
            let failure = self.fail(FileFailure::new("write bookmarks to", &path, error));
            for (_, reply) in changes {
                drop(reply.send(Err(failure.error())));
            }
            return;
        }
        let mut bookmarks = self
            .shared
            .bookmarks
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let mut replies = Vec::with_capacity(changes.len());
        for (change, reply) in changes {
            change.apply_to(&mut bookmarks);
            replies.push(reply);
        }
        if let Err(error) = self.bookmark_journal.compact_if_worthwhile(&bookmarks) {
            // Both the old journal and the rewritten one hold every change so far; the journal
            // itself refuses further changes if it cannot tell which of them a crash keeps.
            tracing::warn!(dir = %self.dir.display(), %error, "cannot compact the bookmark journal");
        }
        drop(bookmarks);
        for reply in replies {
            drop(reply.send(Ok(())));
        }
    }

    /// Records the first failed write: what is on disk is unknown from here on.
    fn fail(&mut self, failure: FileFailure) -> WriteFailure {
        tracing::error!(dir = %self.dir.display(), "{failure}; refusing writes until reopened");
        let failure = WriteFailure(failure);
        self.failure = Some(failure.clone());
        failure
    }
}

/// A write, sync or space reservation that failed, named (operation, file, kind of OS error)
/// in its own error and in every later refusal, with the OS error as their source: refusals
/// reach callers long after the failure and must say what failed (a full disk, say) without
/// the first failure's log line at hand.
#[derive(Debug, Clone)]
struct WriteFailure(FileFailure);

impl WriteFailure {
    /// The error of the changes that were being written when it failed.
    fn error(&self) -> EventStorageError {
        EventStorageError::backend(self.0.to_string(), self.0.cause())
    }

    /// The error of every later change: refused, naming the first failure.
    fn refusal(&self) -> EventStorageError {
        EventStorageError::backend(
            format!(
                "the event store refuses writes since an earlier failure: {}; \
                 reopen it to recover",
                self.0
            ),
            self.0.cause(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventstore_api::{EventFilter, EventStorageError, Tags};
    use serde_json::json;
    use std::fs::File;
    use std::io;
    use tokio::sync::oneshot;
    use tokio::sync::oneshot::Receiver;

    fn open(dir: &Path) -> Writer {
        let lock = DirectoryLock::acquire(dir).unwrap();
        Writer::open(dir, &FileStorageOptions::default(), lock).unwrap()
    }

    fn stream() -> EventStreamId {
        EventStreamId::for_context("orders")
    }

    fn append(
        criteria: AppendCriteria,
        events: Vec<EventToStore>,
    ) -> (
        Command,
        Receiver<Result<Vec<StoredEvent>, EventStorageError>>,
    ) {
        let (reply, answer) = oneshot::channel();
        let command = Command::Append {
            fence: None,
            criteria,
            stream: stream(),
            events,
            reply,
        };
        (command, answer)
    }

    fn placed(key: &str) -> EventToStore {
        EventToStore::new("Placed", json!({ "key": key })).with_idempotency_key(key)
    }

    /// Makes the active segment's writes fail; returns the writable handle.
    fn break_writes(writer: &mut Writer, dir: &Path) -> File {
        let segment = crate::log::segments::list_segments(dir)
            .unwrap()
            .pop()
            .unwrap()
            .1;
        writer.segments.replace_file(File::open(segment).unwrap())
    }

    fn is_backend<T: std::fmt::Debug>(answer: &Result<T, EventStorageError>) -> bool {
        matches!(answer, Err(EventStorageError::Backend { .. }))
    }

    #[test]
    fn after_a_failed_write_every_later_change_is_refused_until_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = open(dir.path());
        let (kept, kept_answer) = append(AppendCriteria::none(), vec![placed("a")]);
        writer.commit(vec![kept]);
        let kept = kept_answer.blocking_recv().unwrap().unwrap();

        let writable = break_writes(&mut writer, dir.path());
        let (failed, failed_answer) = append(AppendCriteria::none(), vec![placed("b")]);
        writer.commit(vec![failed]);
        let failed = failed_answer.blocking_recv().unwrap();
        assert!(is_backend(&failed), "{failed:?}");

        // The disk works again, but what the failed write left there is unknown.
        writer.segments.replace_file(writable);
        let (later, later_answer) = append(AppendCriteria::none(), vec![placed("c")]);
        let (reply, bookmark_answer) = oneshot::channel();
        let bookmark = Command::Bookmark {
            fence: None,
            reader: "reader".to_owned(),
            reference: kept[0].reference,
            tags: Tags::none(),
            reply,
        };
        writer.commit(vec![later, bookmark]);
        let later = later_answer.blocking_recv().unwrap();
        let message = format!("{later:?}");
        assert!(
            is_backend(&later) && message.contains("earlier failure"),
            "{message}"
        );
        let refusal = later
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(
            refusal.contains("failure: cannot write events to ") && refusal.contains(".log ("),
            "the refusal names the first failure's operation and file, got {refusal:?}"
        );
        let os_error = later
            .as_ref()
            .err()
            .and_then(std::error::Error::source)
            .and_then(|source| source.downcast_ref::<Arc<io::Error>>())
            .map(|error| error.kind());
        assert!(os_error.is_some(), "the OS error is the refusal's source");
        assert!(is_backend(&bookmark_answer.blocking_recv().unwrap()));
        // Reads still see every acknowledged event.
        let index = writer.shared.index.read().unwrap();
        assert_eq!(index.len(), 1);
        drop(index);

        drop(writer);
        let reopened = open(dir.path());
        assert_eq!(reopened.shared.index.read().unwrap().len(), 1);
        assert!(reopened.shared.bookmarks.read().unwrap().is_empty());
    }

    #[test]
    fn a_failed_preallocation_refuses_later_changes() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = open(dir.path());
        let (first, first_answer) = append(AppendCriteria::none(), vec![placed("a")]);
        writer.commit(vec![first]);
        assert!(first_answer.blocking_recv().unwrap().is_ok());
        let writable = break_writes(&mut writer, dir.path());
        writer.prepare_for_next_group();
        writer.segments.replace_file(writable);
        let (later, later_answer) = append(AppendCriteria::none(), vec![placed("b")]);
        writer.commit(vec![later]);
        let later = later_answer.blocking_recv().unwrap();
        assert!(
            is_backend(&later) && format!("{later:?}").contains("earlier failure"),
            "{later:?}"
        );
    }

    #[test]
    fn answers_that_depend_on_earlier_members_of_a_group_wait_for_its_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = open(dir.path());
        break_writes(&mut writer, dir.path());
        let (first, first_answer) = append(AppendCriteria::none(), vec![placed("a")]);
        // Conflicts with `first`, which the failed write never stores.
        let (conditional, conditional_answer) = append(
            AppendCriteria::of(EventFilter::match_all(), None),
            vec![EventToStore::new("Other", json!({}))],
        );
        // A retry of `first`, and a batch mixing its key with a new one.
        let (retry, retry_answer) = append(AppendCriteria::none(), vec![placed("a")]);
        let (mixed, mixed_answer) =
            append(AppendCriteria::none(), vec![placed("a"), placed("new")]);
        writer.commit(vec![first, conditional, retry, mixed]);
        for (what, answer) in [
            ("the first append", first_answer.blocking_recv().unwrap()),
            (
                "the conditional append",
                conditional_answer.blocking_recv().unwrap(),
            ),
            ("the retry", retry_answer.blocking_recv().unwrap()),
            ("the mixed batch", mixed_answer.blocking_recv().unwrap()),
        ] {
            assert!(
                is_backend(&answer),
                "{what} must not be answered as if the failed append were stored: {answer:?}"
            );
        }
    }
}
