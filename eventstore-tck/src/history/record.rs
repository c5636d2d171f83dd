//! What a history holds: one entry per lease operation, with its interval and its answer.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use eventstore_api::{LeaseResponse, ReleaseOutcome};
use tokio::time::Instant;

/// A lease operation as the caller asked for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Operation {
    /// A `request_lease` (or one request of a batch).
    Request {
        /// The caller.
        owner: String,
        /// The caller's priority.
        priority: i64,
        /// The ttl asked for.
        ttl: Duration,
    },
    /// A `release_lease` (or one lease of a `release_leases`).
    Release {
        /// The caller.
        owner: String,
    },
}

impl Operation {
    /// The caller of the operation.
    pub fn owner(&self) -> &str {
        match self {
            Operation::Request { owner, .. } | Operation::Release { owner } => owner,
        }
    }
}

/// What the storage answered to one operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Answer {
    /// The answer to a request.
    Lease(LeaseResponse),
    /// The answer to a release; `release_lease`, which says nothing, is recorded as
    /// [`ReleaseOutcome::Unreported`].
    Release(ReleaseOutcome),
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The storage answered: the operation took effect once, between invocation and return.
    Known(Answer),
    /// The call failed (timed out, lost its answer, was refused): it may have taken effect at
    /// any instant from its invocation on, or never.
    Unknown,
}

/// One operation on one lease. A batch call is one entry per lease, all with the call's
/// invocation and return instants.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The lease operated on.
    pub lease_name: String,
    /// What was asked.
    pub operation: Operation,
    /// When the call was made.
    pub invoked: Instant,
    /// When the call returned (or failed).
    pub returned: Instant,
    /// The answer, or [`Outcome::Unknown`] when the call failed.
    pub outcome: Outcome,
}

/// A shared, append-only log of lease operations. Clones are handles to the same log, so
/// that several recorders (one per process of a test, say) can write one history.
#[derive(Debug, Clone, Default)]
pub struct History {
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        History::default()
    }

    /// Appends `entry`.
    pub fn push(&self, entry: Entry) {
        self.lock().push(entry);
    }

    /// Appends every entry of `entries`, in order.
    pub fn extend(&self, entries: impl IntoIterator<Item = Entry>) {
        self.lock().extend(entries);
    }

    /// A copy of the entries recorded so far, in the order they were recorded.
    pub fn entries(&self) -> Vec<Entry> {
        self.lock().clone()
    }

    /// How many entries were recorded.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Entry>> {
        // A panic while pushing leaves the vector whole: keep recording.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
