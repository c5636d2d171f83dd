//! The changes the storage handles send to the writer, and how their answers travel back.

use eventstore_api::{
    AppendCriteria, EventReference, EventStorageError, EventStreamId, EventToStore, Fence,
    StoredEvent, Tags,
};
use tokio::sync::oneshot;

/// Where a command's answer goes.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, EventStorageError>>;

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
    /// The fence the command is written under, if any.
    pub(crate) fn fence(&self) -> Option<&Fence> {
        match self {
            Command::Append { fence, .. } | Command::Bookmark { fence, .. } => fence.as_ref(),
            Command::RemoveBookmark { .. } => None,
        }
    }

    /// Answers the command with `error`.
    pub(crate) fn refuse(self, error: EventStorageError) {
        self.hold(error).send();
    }

    /// An answer refusing the command with `error`, to be sent later.
    pub(crate) fn hold(self, error: EventStorageError) -> HeldAnswer {
        match self {
            Command::Append { reply, .. } => HeldAnswer::Events(reply, Err(error)),
            Command::Bookmark { reply, .. } | Command::RemoveBookmark { reply, .. } => {
                HeldAnswer::Done(reply, Err(error))
            }
        }
    }
}

/// An answer that writes nothing (a retry, an empty batch, a refusal), held back until the
/// writes of its group are durable: it may depend on them, e.g. a conflict with an earlier
/// append of the same group, which must not be reported if that append never reaches the disk.
#[derive(Debug)]
pub(crate) enum HeldAnswer {
    /// The answer to an append.
    Events(
        Reply<Vec<StoredEvent>>,
        Result<Vec<StoredEvent>, EventStorageError>,
    ),
    /// The answer to a bookmark change.
    Done(Reply<()>, Result<(), EventStorageError>),
}

impl HeldAnswer {
    /// Sends the answer; a caller that stopped waiting is no concern.
    pub(crate) fn send(self) {
        match self {
            HeldAnswer::Events(reply, answer) => drop(reply.send(answer)),
            HeldAnswer::Done(reply, answer) => drop(reply.send(answer)),
        }
    }

    /// Sends `error` instead: the group's write failed, so the answer may be wrong.
    pub(crate) fn fail(self, error: EventStorageError) {
        match self {
            HeldAnswer::Events(reply, _) => drop(reply.send(Err(error))),
            HeldAnswer::Done(reply, _) => drop(reply.send(Err(error))),
        }
    }
}
