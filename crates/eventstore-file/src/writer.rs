//! The writer: one thread that orders every change, checks it, and makes it durable.
//!
//! Appends and bookmark changes arrive as [`Command`]s. The writer takes every command waiting
//! at once as one group: it checks each (fence, idempotency, criteria) against the index plus
//! the group's earlier commands, writes the group's frames with one write, syncs once, then
//! publishes the group to the index and answers. So concurrent appenders share one sync (group
//! commit), and nothing is visible or acknowledged before it is on disk.
//!
//! A group holding a fenced command holds the lease lock from the fence check until the group
//! is published, so no lease changes hands between the check and the write becoming visible.

use std::collections::HashSet;
use std::io;
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use eventstore_api::{
    AppendCriteria, Bookmark, EventId, EventReference, EventStorageError, EventStreamId,
    EventToStore, Fence, StoredEvent, Tags,
};
use eventstore_memory::StorageClock;
use tokio::sync::oneshot;

use crate::bookmark_journal::{BookmarkChange, BookmarkJournal, Bookmarks};
use crate::directory::DirectoryLock;
use crate::event_record::{encode_batch, EncodedBatch};
use crate::index::{EventIndex, IndexedEvent, Location};
use crate::lease_tokens::LeaseState;
use crate::segments::SegmentWriter;

/// Where a command's answer goes.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, EventStorageError>>;

/// The most commands one group takes, so that one group's write stays bounded.
const MAX_GROUP: usize = 1024;

/// A change for the writer to order and make durable.
#[derive(Debug)]
pub(crate) enum Command {
    /// `append` or `append_fenced`.
    Append {
        fence: Option<Fence>,
        criteria: AppendCriteria,
        stream: EventStreamId,
        events: Vec<EventToStore>,
        reply: Reply<Vec<StoredEvent>>,
    },
    /// `bookmark` or `bookmark_fenced`.
    Bookmark {
        fence: Option<Fence>,
        reader: String,
        reference: EventReference,
        tags: Tags,
        reply: Reply<()>,
    },
    /// `remove_bookmark`.
    RemoveBookmark { reader: String, reply: Reply<()> },
}

impl Command {
    fn fence(&self) -> Option<&Fence> {
        match self {
            Command::Append { fence, .. } | Command::Bookmark { fence, .. } => fence.as_ref(),
            Command::RemoveBookmark { .. } => None,
        }
    }

    fn refuse(self, error: EventStorageError) {
        match self {
            Command::Append { reply, .. } => drop(reply.send(Err(error))),
            Command::Bookmark { reply, .. } | Command::RemoveBookmark { reply, .. } => {
                drop(reply.send(Err(error)))
            }
        }
    }
}

/// What the writer shares with the storage handles.
#[derive(Debug, Clone)]
pub(crate) struct SharedState {
    pub(crate) index: Arc<RwLock<EventIndex>>,
    pub(crate) bookmarks: Arc<RwLock<Bookmarks>>,
    pub(crate) leases: Arc<tokio::sync::Mutex<LeaseState>>,
    pub(crate) clock: Arc<StorageClock>,
}

/// The writer thread's state. Dropping it releases the directory lock.
#[derive(Debug)]
pub(crate) struct Writer {
    pub(crate) dir: PathBuf,
    pub(crate) segments: SegmentWriter,
    pub(crate) bookmark_journal: BookmarkJournal,
    pub(crate) shared: SharedState,
    pub(crate) lock: DirectoryLock,
    /// Set when a write or sync failed: what was on disk is unknown, so no later write is
    /// accepted until the store is reopened (and recovery has looked at the disk).
    pub(crate) failure: Option<String>,
}

/// Decides how long a group waits for the commands of callers that are about to come back.
///
/// When the last group answered `n` callers, those callers usually send their next command
/// within microseconds of each other; committing the first arrival alone would split them
/// into a small group and a large one behind it. So a new group waits for up to as many
/// commands as the last group had, but never longer than a fraction of the last commit's
/// time. A lone appender (groups of one) never waits.
#[derive(Debug, Default)]
struct GroupGathering {
    last_size: usize,
    last_commit: Duration,
}

impl GroupGathering {
    /// The most a group waits, however slow the commit.
    const MAX_WAIT: Duration = Duration::from_millis(1);

    fn gather(&self, first: Command, commands: &Receiver<Command>) -> Vec<Command> {
        let mut group = vec![first];
        let expected = self.last_size.min(MAX_GROUP);
        let deadline = Instant::now() + (self.last_commit / 4).min(Self::MAX_WAIT);
        while group.len() < expected {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            match commands.recv_timeout(left) {
                Ok(command) => group.push(command),
                Err(_) => break,
            }
        }
        while group.len() < MAX_GROUP {
            match commands.try_recv() {
                Ok(command) => group.push(command),
                Err(_) => break,
            }
        }
        group
    }

    fn committed(&mut self, size: usize, took: Duration) {
        self.last_size = size;
        self.last_commit = took;
    }
}

/// An append that passed its checks, waiting for the group's sync.
struct PlannedAppend {
    events: Vec<StoredEvent>,
    encoded: EncodedBatch,
    reply: Reply<Vec<StoredEvent>>,
}

/// What one group will write, and the answers that wait for the write.
#[derive(Default)]
struct GroupPlan {
    next_position: u64,
    appends: Vec<PlannedAppend>,
    keys: HashSet<(EventStreamId, String)>,
    bookmarks: Vec<(BookmarkChange, Reply<()>)>,
    /// Successful answers that store nothing (retries, empty batches): sent once the group
    /// before them is durable, since a retry may refer to an append of this very group.
    unwritten: Vec<Reply<Vec<StoredEvent>>>,
}

impl Writer {
    /// Serves commands until every sender is gone, then releases the directory.
    pub(crate) fn run(mut self, commands: Receiver<Command>) {
        let mut siblings = GroupGathering::default();
        while let Ok(first) = commands.recv() {
            let group = siblings.gather(first, &commands);
            let started = Instant::now();
            let size = group.len();
            self.commit(group);
            siblings.committed(size, started.elapsed());
        }
        tracing::debug!(dir = %self.dir.display(), "event store writer stopped");
        drop(self.lock);
    }

    fn commit(&mut self, group: Vec<Command>) {
        if let Some(failure) = &self.failure {
            for command in group {
                command.refuse(failed_earlier(&self.dir, failure));
            }
            return;
        }
        let leases = Arc::clone(&self.shared.leases);
        let lease_guard = group
            .iter()
            .any(|command| command.fence().is_some())
            .then(|| leases.blocking_lock());
        let mut plan = {
            let index = self
                .shared
                .index
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            let mut plan = GroupPlan {
                next_position: index.next_position(),
                ..GroupPlan::default()
            };
            for command in group {
                if let Some(fence) = command.fence() {
                    let table = lease_guard
                        .as_ref()
                        .expect("locked for fenced groups")
                        .table();
                    if let Err(fenced) = table.check_fence(fence, self.shared.clock.now()) {
                        command.refuse(fenced);
                        continue;
                    }
                }
                self.plan_command(&index, &mut plan, command);
            }
            plan
        };
        self.write_and_publish(&mut plan);
        drop(lease_guard);
    }

    fn plan_command(&self, index: &EventIndex, plan: &mut GroupPlan, command: Command) {
        match command {
            Command::Append {
                criteria,
                stream,
                events,
                reply,
                ..
            } => match self.plan_append(index, plan, &criteria, stream, events) {
                Ok(Some((events, encoded))) => {
                    plan.next_position += events.len() as u64;
                    plan.appends.push(PlannedAppend {
                        events,
                        encoded,
                        reply,
                    });
                }
                Ok(None) => plan.unwritten.push(reply),
                Err(error) => drop(reply.send(Err(error))),
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
                None => drop(reply.send(Err(EventStorageError::UnknownEvent { id: reference.id }))),
            },
            Command::RemoveBookmark { reader, reply } => {
                plan.bookmarks
                    .push((BookmarkChange::Removed(reader), reply));
            }
        }
    }

    /// Checks an append against the index and the group so far. `None`: nothing to write
    /// (an empty batch or a retry).
    fn plan_append(
        &self,
        index: &EventIndex,
        plan: &mut GroupPlan,
        criteria: &AppendCriteria,
        stream: EventStreamId,
        events: Vec<EventToStore>,
    ) -> Result<Option<(Vec<StoredEvent>, EncodedBatch)>, EventStorageError> {
        let is_stored = |key: &str| {
            index.has_key(&stream, key) || plan.keys.contains(&(stream.clone(), key.to_owned()))
        };
        let (stored, new): (Vec<&str>, Vec<&str>) = events
            .iter()
            .filter_map(|event| event.idempotency_key.as_deref())
            .partition(|key| is_stored(key));
        if !stored.is_empty() {
            if stored.len() == events.len() {
                return Ok(None);
            }
            return Err(EventStorageError::IdempotencyConflict {
                stream: stream.to_string(),
                stored: stored.into_iter().map(str::to_owned).collect(),
                new: new.into_iter().map(str::to_owned).collect(),
            });
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
                return Err(EventStorageError::OptimisticLock {
                    stream: stream.to_string(),
                    expected_last: condition.expected_last,
                    conflicting,
                });
            }
        }
        if events.is_empty() {
            return Ok(None);
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
        for key in stored
            .iter()
            .filter_map(|event| event.idempotency_key.as_ref())
        {
            plan.keys.insert((stream.clone(), key.clone()));
        }
        Ok(Some((stored, encoded)))
    }

    fn write_and_publish(&mut self, plan: &mut GroupPlan) {
        let written = self.write_events(&plan.appends);
        let appends = std::mem::take(&mut plan.appends);
        match written {
            Ok(locations) => self.publish_events(appends, locations),
            Err(error) => {
                let failure = self.fail("write events to", &error);
                for append in appends {
                    drop(append.reply.send(Err(failure_error(&failure, &error))));
                }
                for reply in plan.unwritten.drain(..) {
                    drop(reply.send(Err(failure_error(&failure, &error))));
                }
            }
        }
        for reply in plan.unwritten.drain(..) {
            drop(reply.send(Ok(Vec::new())));
        }
        self.write_bookmarks(std::mem::take(&mut plan.bookmarks));
    }

    fn write_events(&mut self, appends: &[PlannedAppend]) -> io::Result<Vec<Vec<Location>>> {
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
        self.segments.sync()?;
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
            drop(append.reply.send(Ok(append.events)));
        }
    }

    fn write_bookmarks(&mut self, changes: Vec<(BookmarkChange, Reply<()>)>) {
        if changes.is_empty() {
            return;
        }
        if let Some(failure) = &self.failure {
            for (_, reply) in changes {
                drop(reply.send(Err(failed_earlier(&self.dir, failure))));
            }
            return;
        }
        let records: Vec<BookmarkChange> =
            changes.iter().map(|(change, _)| change.clone()).collect();
        if let Err(error) = self.bookmark_journal.record(&records) {
            let failure = self.fail("write bookmarks to", &error);
            for (_, reply) in changes {
                drop(reply.send(Err(failure_error(&failure, &error))));
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
            // The journal as it stands is still complete; compaction is retried later.
            tracing::warn!(dir = %self.dir.display(), %error, "cannot compact the bookmark journal");
        }
        drop(bookmarks);
        for reply in replies {
            drop(reply.send(Ok(())));
        }
    }

    fn fail(&mut self, action: &str, error: &io::Error) -> String {
        let failure = format!(
            "cannot {action} the event store in {}: {error}",
            self.dir.display()
        );
        tracing::error!(dir = %self.dir.display(), %error, "{failure}; refusing writes until reopened");
        self.failure = Some(failure.clone());
        failure
    }
}

fn failure_error(message: &str, error: &io::Error) -> EventStorageError {
    EventStorageError::backend(
        message.to_owned(),
        io::Error::new(error.kind(), error.to_string()),
    )
}

fn failed_earlier(dir: &std::path::Path, failure: &str) -> EventStorageError {
    EventStorageError::backend(
        format!(
            "the event store in {} refuses writes after an earlier failure; reopen it to recover",
            dir.display()
        ),
        io::Error::other(failure.to_owned()),
    )
}
