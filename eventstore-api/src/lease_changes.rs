//! Lease changes pushed to subscribers ([`Capability::LeaseChanges`]), so that a standby asks
//! the moment a lease is released instead of at its next poll.
//!
//! A notification is a hint, never a decision: every decision is still made by
//! [`EventStorage::request_lease`] on the storage's clock. A lost, late or duplicated
//! notification costs latency only; a subscriber that may have missed some is told so with
//! [`LeaseNotice::Missed`] and should treat every lease it cares about as changed.
//!
//! Backends publish through one [`LeaseChangeHub`]: it fans each change out to the
//! subscribers of that lease and to those of every lease, never blocks the publisher, and
//! keeps a bounded backlog per subscriber (a slow one loses its oldest notices, not new ones).
//!
//! [`Capability::LeaseChanges`]: crate::Capability::LeaseChanges
//! [`EventStorage::request_lease`]: crate::EventStorage::request_lease

use std::sync::{Arc, Mutex, MutexGuard, Weak};

// Asked on every lease request: with no lease followed, a look-up returns before hashing.
use hashbrown::HashMap;

use tokio::sync::broadcast;

use crate::FencingToken;

/// How many notices a subscriber to every lease may fall behind before it loses the oldest
/// ones.
pub const SUBSCRIBER_BACKLOG: usize = 1024;

/// How many notices a subscriber to one lease may fall behind before it loses the oldest ones.
/// Smaller than [`SUBSCRIBER_BACKLOG`]: one lease changes a few times per handover, and a
/// storage keeps a channel, with room for this many notices, for each lease followed.
pub const LEASE_SUBSCRIBER_BACKLOG: usize = 64;

/// What happened to one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseChange {
    /// The lease concerned.
    pub lease_name: String,
    /// What happened.
    pub kind: LeaseChangeKind,
}

/// The kinds of [`LeaseChange`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseChangeKind {
    /// The holder released the lease: it is free for the next request.
    Released {
        /// The owner that released it.
        owner: String,
        /// The token of the tenure that ended.
        token: FencingToken,
        /// The live contender with the highest priority when it was released (ties go to the
        /// smallest owner id): the one that should ask first. A hint; the storage grants the
        /// lease to whichever request comes first.
        successor: Option<String>,
    },
    /// A contender acquired the lease with a new token.
    Acquired {
        /// The new holder.
        owner: String,
        /// Its token.
        token: FencingToken,
        /// Whether the previous holder's tenure had expired without a release (a takeover
        /// from a holder that stopped renewing), as seen by this request.
        after_expiry: bool,
    },
    /// A contender with a strictly higher priority than the live holder's registered: the
    /// holder's next request answers `LeaderStepDownRequested`, so it should ask now.
    StepDownRequested {
        /// The holder asked to step down.
        holder: String,
        /// The holder's token.
        token: FencingToken,
        /// The contender that outranks it.
        contender: String,
    },
    /// A contender registered, or registered again with another priority.
    ContenderJoined {
        /// The contender.
        owner: String,
        /// Its priority.
        priority: i64,
    },
    /// A contender withdrew (by releasing) or lapsed.
    ContenderLeft {
        /// The contender.
        owner: String,
    },
}

/// What a subscription yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseNotice {
    /// A change to a lease.
    Changed(LeaseChange),
    /// Notices may have been lost (the subscriber fell behind, or the storage lost its source
    /// of notifications for a while): anything may have changed.
    Missed,
}

/// Which leases a subscription follows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LeaseScope {
    /// Every lease of the storage.
    All,
    /// One lease, by name.
    Lease(String),
}

impl LeaseScope {
    /// One lease, by name.
    pub fn lease(lease_name: impl Into<String>) -> Self {
        LeaseScope::Lease(lease_name.into())
    }
}

/// A subscription to lease changes; see [`crate::EventStorageExt::subscribe_lease_changes`].
#[derive(Debug)]
pub struct LeaseChanges {
    receiver: broadcast::Receiver<LeaseNotice>,
    // Declared after the receiver, so dropped after it: then it can tell whether that was the
    // lease's last subscriber.
    _follower: Option<LeaseFollower>,
}

/// Forgets its lease's channel when the last subscription to that lease goes, so that a
/// storage whose subscribers come and go over many leases keeps no channel nobody reads.
#[derive(Debug)]
struct LeaseFollower {
    channels: Weak<Mutex<Option<Channels>>>,
    lease_name: String,
}

impl Drop for LeaseFollower {
    fn drop(&mut self) {
        let Some(channels) = self.channels.upgrade() else {
            return;
        };
        let mut channels = lock(&channels);
        let Some(channels) = channels.as_mut() else {
            return;
        };
        if channels
            .by_lease
            .get(&self.lease_name)
            .is_some_and(|lease| lease.receiver_count() == 0)
        {
            channels.by_lease.remove(&self.lease_name);
        }
    }
}

impl LeaseChanges {
    /// The next notice if one is waiting, without waiting: `None` when none is (or the
    /// storage is closed).
    pub fn try_next(&mut self) -> Option<LeaseNotice> {
        match self.receiver.try_recv() {
            Ok(notice) => Some(notice),
            Err(broadcast::error::TryRecvError::Lagged(_)) => Some(LeaseNotice::Missed),
            Err(_) => None,
        }
    }

    /// The next notice; `None` once the storage is closed and every notice was read.
    pub async fn next(&mut self) -> Option<LeaseNotice> {
        match self.receiver.recv().await {
            Ok(notice) => Some(notice),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(LeaseNotice::Missed),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

/// The publishing side of lease changes for one storage, shared by its handles.
#[derive(Debug)]
pub struct LeaseChangeHub {
    channels: Arc<Mutex<Option<Channels>>>,
}

#[derive(Debug)]
struct Channels {
    all: broadcast::Sender<LeaseNotice>,
    by_lease: HashMap<String, broadcast::Sender<LeaseNotice>>,
}

impl Default for LeaseChangeHub {
    fn default() -> Self {
        LeaseChangeHub {
            channels: Arc::new(Mutex::new(Some(Channels {
                all: broadcast::Sender::new(SUBSCRIBER_BACKLOG),
                by_lease: HashMap::new(),
            }))),
        }
    }
}

impl LeaseChangeHub {
    /// A hub without subscribers.
    pub fn new() -> Self {
        LeaseChangeHub::default()
    }

    fn channels(&self) -> MutexGuard<'_, Option<Channels>> {
        lock(&self.channels)
    }

    /// A subscription to the leases of `scope`; after [`LeaseChangeHub::close`] one that
    /// yields nothing.
    pub fn subscribe(&self, scope: &LeaseScope) -> LeaseChanges {
        let mut channels = self.channels();
        let (receiver, follower) = match (channels.as_mut(), scope) {
            (Some(channels), LeaseScope::All) => (channels.all.subscribe(), None),
            (Some(channels), LeaseScope::Lease(name)) => {
                let receiver = channels
                    .by_lease
                    .entry_ref(name.as_str())
                    .or_insert_with(|| broadcast::Sender::new(LEASE_SUBSCRIBER_BACKLOG))
                    .subscribe();
                let follower = LeaseFollower {
                    channels: Arc::downgrade(&self.channels),
                    lease_name: name.clone(),
                };
                (receiver, Some(follower))
            }
            // Closed: a receiver whose sender is already gone ends at once.
            (None, _) => (broadcast::Sender::new(1).subscribe(), None),
        };
        LeaseChanges {
            receiver,
            _follower: follower,
        }
    }

    /// Sends `change` to the subscribers of its lease and of every lease. Never blocks.
    pub fn publish(&self, change: LeaseChange) {
        let mut channels = self.channels();
        let Some(channels) = channels.as_mut() else {
            return;
        };
        if let Some(lease) = channels.by_lease.get(&change.lease_name) {
            let _ = lease.send(LeaseNotice::Changed(change.clone()));
        }
        if channels.all.receiver_count() > 0 {
            let _ = channels.all.send(LeaseNotice::Changed(change));
        }
    }

    /// Tells every subscriber that notices may have been lost.
    pub fn missed(&self) {
        let mut channels = self.channels();
        let Some(channels) = channels.as_mut() else {
            return;
        };
        channels
            .by_lease
            .retain(|_, lease| lease.send(LeaseNotice::Missed).is_ok());
        let _ = channels.all.send(LeaseNotice::Missed);
    }

    /// Whether anyone follows `lease_name` (or every lease), so a backend can skip building a
    /// change nobody reads.
    pub fn is_followed(&self, lease_name: &str) -> bool {
        let channels = self.channels();
        let Some(channels) = channels.as_ref() else {
            return false;
        };
        channels.by_lease.contains_key(lease_name) || channels.all.receiver_count() > 0
    }

    /// Ends every subscription once its backlog is read; later subscriptions end at once.
    pub fn close(&self) {
        self.channels().take();
    }
}

fn lock(channels: &Mutex<Option<Channels>>) -> MutexGuard<'_, Option<Channels>> {
    channels
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn released(lease: &str) -> LeaseChange {
        LeaseChange {
            lease_name: lease.to_owned(),
            kind: LeaseChangeKind::Released {
                owner: "a".into(),
                token: FencingToken(1),
                successor: None,
            },
        }
    }

    #[tokio::test]
    async fn a_change_reaches_its_lease_and_every_lease_but_not_other_leases() {
        let hub = LeaseChangeHub::new();
        let mut orders = hub.subscribe(&LeaseScope::lease("orders"));
        let mut billing = hub.subscribe(&LeaseScope::lease("billing"));
        let mut all = hub.subscribe(&LeaseScope::All);
        assert!(hub.is_followed("orders") && hub.is_followed("anything"));

        hub.publish(released("orders"));
        let expected = Some(LeaseNotice::Changed(released("orders")));
        assert_eq!(orders.next().await, expected);
        assert_eq!(all.next().await, expected);
        assert_eq!(billing.try_next(), None, "billing heard of orders");

        hub.close();
        assert_eq!(orders.next().await, None);
        assert_eq!(hub.subscribe(&LeaseScope::All).next().await, None);
    }

    #[tokio::test]
    async fn a_slow_subscriber_is_told_it_missed_notices_and_then_gets_the_newest() {
        let hub = LeaseChangeHub::new();
        let mut slow = hub.subscribe(&LeaseScope::lease("orders"));
        for _ in 0..LEASE_SUBSCRIBER_BACKLOG + 10 {
            hub.publish(released("orders"));
        }
        assert_eq!(slow.next().await, Some(LeaseNotice::Missed));
        assert_eq!(
            slow.next().await,
            Some(LeaseNotice::Changed(released("orders")))
        );
    }

    fn followed_leases(hub: &LeaseChangeHub) -> usize {
        hub.channels()
            .as_ref()
            .map_or(0, |channels| channels.by_lease.len())
    }

    #[tokio::test]
    async fn a_lease_nobody_follows_any_more_is_forgotten() {
        let hub = LeaseChangeHub::new();
        drop(hub.subscribe(&LeaseScope::lease("orders")));
        assert!(!hub.is_followed("orders"));
        assert_eq!(followed_leases(&hub), 0);
    }

    #[test]
    fn a_lease_channel_goes_with_its_last_subscriber_even_if_the_lease_never_changes() {
        let hub = LeaseChangeHub::new();
        let first: Vec<_> = (0..10_000)
            .map(|lease| hub.subscribe(&LeaseScope::lease(format!("orders/{lease}"))))
            .collect();
        let second = hub.subscribe(&LeaseScope::lease("orders/7"));
        assert_eq!(followed_leases(&hub), 10_000);

        drop(first);
        assert_eq!(followed_leases(&hub), 1, "orders/7 still has a subscriber");
        assert!(hub.is_followed("orders/7"));
        drop(second);
        assert_eq!(followed_leases(&hub), 0);
        assert!(!hub.is_followed("orders/7"));
    }
}
