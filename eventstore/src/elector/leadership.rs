//! What an instance knows about its leadership, and the cheap handle work loops check.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::telemetry;
use crate::{Fence, FencingToken};

/// The leadership of one elector, as published on its watch channel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Leadership {
    /// Not leading, because leadership could not be confirmed: no answer yet, the last
    /// request failed or hung past the deadline, or the lease was just handed over.
    Unknown,
    /// This instance holds the lease: the single legitimate processor.
    Leader {
        /// The fencing token to stamp writes with.
        token: FencingToken,
    },
    /// This instance holds the lease, but a contender with a higher priority waits: finish
    /// the current unit of work, then [`LeadershipWatch::acknowledge_step_down`].
    StepDownRequested {
        /// The fencing token of this (ending) tenure.
        token: FencingToken,
    },
    /// This instance handed the lease over after a step-down request: it released it and
    /// stays out for a while (the handover grace when the storage pushes lease changes, a ttl
    /// when it does not), so that the higher-priority contender acquires it.
    SteppedDown {
        /// The token of the tenure that ended.
        token: FencingToken,
    },
    /// Another instance holds the lease.
    Standby {
        /// The holder's owner id.
        holder: String,
        /// The holder's token.
        token: FencingToken,
    },
    /// The elector has stopped (shut down, aborted, or the storage was closed).
    Stopped,
}

impl Leadership {
    /// The token of this instance's tenure, when it leads (step-down requested included).
    pub fn token(&self) -> Option<FencingToken> {
        match self {
            Leadership::Leader { token } | Leadership::StepDownRequested { token } => Some(*token),
            _ => None,
        }
    }

    /// Whether this says the instance leads (step-down requested included).
    pub fn is_leader(&self) -> bool {
        self.token().is_some()
    }
}

impl fmt::Display for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Leadership::Unknown => f.write_str("not leading (unconfirmed)"),
            Leadership::Leader { token } => write!(f, "leader with token {token}"),
            Leadership::StepDownRequested { token } => {
                write!(f, "leader with token {token}, step-down requested")
            }
            Leadership::SteppedDown { token } => {
                write!(f, "stepped down, lease with token {token} released")
            }
            Leadership::Standby { holder, token } => {
                write!(f, "standby; {holder} leads with token {token}")
            }
            Leadership::Stopped => f.write_str("stopped"),
        }
    }
}

/// Why [`LeadershipWatch::wait_for_leadership_within`] returned without a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeadershipWaitError {
    /// This instance did not lead within the time allowed.
    #[error("not leading lease {lease_name} after waiting {after:?}: {leadership}")]
    TimedOut {
        /// The lease waited for.
        lease_name: String,
        /// How long it waited.
        after: Duration,
        /// The leadership when it gave up.
        leadership: Leadership,
    },
    /// The elector stopped before this instance led.
    #[error("the elector of lease {lease_name} stopped before leading")]
    Stopped {
        /// The lease waited for.
        lease_name: String,
    },
}

/// A confirmed tenure: valid until `deadline` on this process's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tenure {
    pub(super) token: FencingToken,
    pub(super) deadline: Instant,
}

/// State shared by the elector task and every [`LeadershipWatch`].
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) lease_name: String,
    pub(super) owner: String,
    tenure: Mutex<Option<Tenure>>,
    acknowledged: Mutex<Option<FencingToken>>,
    /// The last token this elector led under, so that an acquisition is counted once.
    led_token: Mutex<Option<FencingToken>>,
    pub(super) acknowledgement: Notify,
    /// Publishes leadership; dropped once `Stopped` is published, so that watchers hear that
    /// nothing will change any more.
    publisher: Mutex<Option<watch::Sender<Leadership>>>,
    /// What new watches subscribe to, the last value included after the publisher is gone.
    published: watch::Receiver<Leadership>,
}

impl Shared {
    pub(super) fn new(lease_name: String, owner: String) -> Arc<Self> {
        let (publisher, published) = watch::channel(Leadership::Unknown);
        Arc::new(Shared {
            lease_name,
            owner,
            tenure: Mutex::new(None),
            acknowledged: Mutex::new(None),
            led_token: Mutex::new(None),
            acknowledgement: Notify::new(),
            publisher: Mutex::new(Some(publisher)),
            published,
        })
    }

    pub(super) fn tenure(&self) -> Option<Tenure> {
        *lock(&self.tenure)
    }

    /// Records a confirmed tenure (or none) and publishes `leadership` if it changed; nothing
    /// once `Stopped` is published. Both happen under the publisher's lock, so an answer
    /// applied while [`LeaderElector::abort`](super::LeaderElector::abort) stops the elector
    /// on another thread cannot bring a tenure back after `Stopped`.
    pub(super) fn confirm(&self, tenure: Option<Tenure>, leadership: Leadership) {
        let mut publisher = lock(&self.publisher);
        let Some(sender) = publisher.as_ref() else {
            return;
        };
        let stopped = leadership == Leadership::Stopped;
        sender.send_if_modified(|current| {
            let mut held = lock(&self.tenure);
            // A tenure whose deadline passed while the task did not run (a pause, a starved
            // runtime) was never published as lost, yet watchers saw it lapse and wait for a
            // change: a renewal that confirms the same token must wake them.
            let lapsed_unseen = held.is_some_and(|held| Instant::now() >= held.deadline);
            *held = tenure;
            drop(held);
            let changed = self.publish(current, leadership);
            changed || (lapsed_unseen && tenure.is_some())
        });
        if stopped {
            *publisher = None;
        }
    }

    /// Drops any tenure and publishes `leadership` (`Unknown` or `Stopped`).
    pub(super) fn demote(&self, leadership: Leadership) {
        self.confirm(None, leadership);
    }

    /// Replaces `current` with `leadership` if it differs, logging and counting the change.
    fn publish(&self, current: &mut Leadership, leadership: Leadership) -> bool {
        if *current == leadership {
            return false;
        }
        tracing::info!(lease = %self.lease_name, owner = %self.owner, %leadership, "leadership changed");
        if let Some(token) = leadership.token() {
            let mut led = lock(&self.led_token);
            if *led != Some(token) {
                *led = Some(token);
                metrics::counter!(telemetry::LEASE_ACQUISITIONS, "lease" => self.lease_name.clone())
                    .increment(1);
            }
        }
        if let Leadership::SteppedDown { .. } = leadership {
            metrics::counter!(telemetry::LEASE_STEP_DOWNS, "lease" => self.lease_name.clone())
                .increment(1);
        }
        metrics::gauge!(
            telemetry::ELECTOR_LEADER,
            "lease" => self.lease_name.clone(),
            "owner" => self.owner.clone()
        )
        .set(if leadership.is_leader() { 1.0 } else { 0.0 });
        *current = leadership;
        true
    }

    /// Takes the step-down acknowledgement if it is for `token`.
    pub(super) fn take_acknowledgement(&self, token: FencingToken) -> bool {
        let mut acknowledged = lock(&self.acknowledged);
        if *acknowledged == Some(token) {
            *acknowledged = None;
            true
        } else {
            false
        }
    }
}

/// A cheap, cloneable view of one elector's leadership for the work it guards.
///
/// [`LeadershipWatch::token`] and [`LeadershipWatch::is_leader`] check the self-demotion
/// deadline on every call, so they turn false on time even when the elector task is starved
/// or its request hangs.
#[derive(Debug, Clone)]
pub struct LeadershipWatch {
    shared: Arc<Shared>,
    receiver: watch::Receiver<Leadership>,
}

impl LeadershipWatch {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        let mut receiver = shared.published.clone();
        // As a new subscriber would: what is published now counts as seen.
        receiver.mark_unchanged();
        LeadershipWatch { shared, receiver }
    }

    pub(super) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The lease elected on.
    pub fn lease_name(&self) -> &str {
        &self.shared.lease_name
    }

    /// This instance's owner id.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// The token of the current tenure, if this instance leads right now: confirmed by the
    /// storage and before its deadline.
    pub fn token(&self) -> Option<FencingToken> {
        self.shared
            .tenure()
            .filter(|tenure| Instant::now() < tenure.deadline)
            .map(|tenure| tenure.token)
    }

    /// Whether this instance leads right now (see [`LeadershipWatch::token`]).
    pub fn is_leader(&self) -> bool {
        self.token().is_some()
    }

    /// The fence for writes of the current tenure, if this instance leads right now.
    pub fn fence(&self) -> Option<Fence> {
        self.token()
            .map(|token| Fence::new(self.shared.lease_name.clone(), token))
    }

    /// The last published leadership, with a lapsed tenure shown as [`Leadership::Unknown`].
    pub fn current(&self) -> Leadership {
        let published = self.receiver.borrow().clone();
        match published.token() {
            Some(token) if self.token() != Some(token) => Leadership::Unknown,
            _ => published,
        }
    }

    /// Takes every change so far as seen: [`LeadershipWatch::changed`] waits for the next one.
    /// Called before reading the leadership, so that a change already read is not waited for.
    pub(crate) fn mark_changes_seen(&mut self) {
        self.receiver.borrow_and_update();
    }

    /// Waits until the published leadership changes.
    ///
    /// # Errors
    /// When the elector is gone and nothing will change any more: once
    /// [`Leadership::Stopped`] is published and seen.
    pub async fn changed(&mut self) -> Result<(), watch::error::RecvError> {
        self.receiver.changed().await
    }

    /// Waits until this instance leads and returns the token; `None` when the elector stops.
    pub async fn wait_for_leadership(&mut self) -> Option<FencingToken> {
        loop {
            if let Some(token) = self.token() {
                return Some(token);
            }
            if self.current() == Leadership::Stopped || self.changed().await.is_err() {
                return None;
            }
        }
    }

    /// As [`LeadershipWatch::wait_for_leadership`], giving up after `limit`.
    ///
    /// # Errors
    /// [`LeadershipWaitError::TimedOut`] when this instance does not lead within `limit`;
    /// [`LeadershipWaitError::Stopped`] when the elector stops first.
    pub async fn wait_for_leadership_within(
        &mut self,
        limit: Duration,
    ) -> Result<FencingToken, LeadershipWaitError> {
        match tokio::time::timeout(limit, self.wait_for_leadership()).await {
            Ok(Some(token)) => Ok(token),
            Ok(None) => Err(LeadershipWaitError::Stopped {
                lease_name: self.shared.lease_name.clone(),
            }),
            Err(_elapsed) => Err(LeadershipWaitError::TimedOut {
                lease_name: self.shared.lease_name.clone(),
                after: limit,
                leadership: self.current(),
            }),
        }
    }

    /// A receiver of every published change, for `tokio::select!` loops.
    pub fn subscribe(&self) -> watch::Receiver<Leadership> {
        self.receiver.clone()
    }

    /// Tells the elector that the work of the tenure `token` has finished its current unit
    /// and stopped, so the lease can be released to the higher-priority contender.
    ///
    /// Until this is called the elector keeps renewing: a leader that cannot stop safely
    /// keeps the lease.
    pub fn acknowledge_step_down(&self, token: FencingToken) {
        *lock(&self.shared.acknowledged) = Some(token);
        self.shared.acknowledgement.notify_one();
    }
}

/// Locks a mutex; every update under it is a single assignment, so a panic elsewhere while
/// it was held left consistent data, and poisoning is ignored.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn nothing_brings_a_tenure_back_once_stopped_is_published() {
        let shared = Shared::new("jobs".into(), "a".into());
        let watch = LeadershipWatch::new(Arc::clone(&shared));
        let token = FencingToken(1);
        let tenure = || Tenure {
            token,
            deadline: Instant::now() + Duration::from_secs(60),
        };
        shared.confirm(Some(tenure()), Leadership::Leader { token });
        assert_eq!(watch.token(), Some(token));

        // An abort on one thread while the loop, on another, applies a renewal it had
        // already received.
        shared.demote(Leadership::Stopped);
        shared.confirm(Some(tenure()), Leadership::Leader { token });
        assert_eq!(*watch.subscribe().borrow(), Leadership::Stopped);
        assert_eq!(watch.token(), None);
        assert!(!watch.is_leader());
    }
}
