//! What [`EventStorage::subscribe`](crate::EventStorage::subscribe) follows, and what it
//! hands back.

use crate::{AppendHints, EventStreamId, LeaseChanges, LeaseScope};

/// A subscription to ask a storage for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Subscription {
    /// Changes of the leases in a scope ([`Capability::LeaseChanges`](crate::Capability::LeaseChanges)).
    LeaseChanges(LeaseScope),
    /// Hints of appends to the streams a stream id covers
    /// ([`Capability::AppendHints`](crate::Capability::AppendHints)).
    Appends(EventStreamId),
}

impl Subscription {
    /// The method's name as the SPI knew it, for messages: `subscribe_lease_changes` or
    /// `subscribe_appends`.
    pub fn operation(&self) -> &'static str {
        match self {
            Subscription::LeaseChanges(_) => "subscribe_lease_changes",
            Subscription::Appends(_) => "subscribe_appends",
        }
    }
}

/// A subscription's notifications: the kind its [`Subscription`] asked for.
#[derive(Debug)]
#[non_exhaustive]
pub enum Subscribed {
    /// Lease changes.
    LeaseChanges(LeaseChanges),
    /// Append hints.
    Appends(AppendHints),
}
