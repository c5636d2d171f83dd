//! What a backend can do beyond events and bookmarks.

use serde::{Deserialize, Serialize};

/// An optional part of the [`crate::EventStorage`] SPI that a backend may offer.
///
/// A backend says what it offers with [`crate::EventStorage::supports`]; the methods of a
/// capability it does not offer return [`crate::EventStorageError::Unsupported`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Capability {
    /// Leases for leader election: `request_lease`, `request_leases`, `release_lease`,
    /// `release_leases`, `get_leases`, `list_leases`, `list_contenders` and `storage_time`.
    /// `list_contenders`' default body answers `Unsupported` whatever the backend declares, so
    /// a backend with leases implements it.
    Lease,
    /// Appends and bookmarks guarded by a [`crate::Fence`]: `append_fenced` and
    /// `bookmark_fenced`, checked atomically with the write. Implies [`Capability::Lease`].
    FencedWrites,
    /// Lease changes pushed to subscribers: `subscribe` with
    /// [`Subscription::LeaseChanges`](crate::Subscription::LeaseChanges). Notifications only
    /// wake requesters early; every decision is still `request_lease`'s. Implies
    /// [`Capability::Lease`].
    LeaseChanges,
    /// Answers that say what happened: `request_leases_with_outcome` (whether an acquisition
    /// took over an expired holder) and `release_leases`' [`crate::ReleaseOutcome`]s (whether
    /// the caller held each lease). Implies [`Capability::Lease`].
    LeaseOutcomes,
    /// Hints pushed after appends: `subscribe` with
    /// [`Subscription::Appends`](crate::Subscription::Appends). A hint only wakes a reader
    /// early; the read decides what is new.
    AppendHints,
    /// A `read` with [`Payloads::Raw`](crate::Payloads::Raw) hands out payloads as the JSON
    /// text the backend reads, with no [`serde_json::Value`] built in between: cheaper than
    /// decoded payloads for a caller that decodes them into its own types, as the typed facade
    /// does. Without it, a raw read writes the decoded values out as text, and such a caller
    /// had better decode those values.
    RawPayloads,
}
