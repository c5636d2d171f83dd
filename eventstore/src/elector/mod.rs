//! The leader elector: a tokio task that runs the lease loop for its caller.
//!
//! Every instance of a deployment starts a [`LeaderElector`] for the same lease name. Each
//! sends one lease request per interval (a third of the ttl by default, with jitter) and
//! publishes what the answer means on a watch channel as a [`Leadership`]; the work guarded
//! by the lease starts when its instance leads and stops when it does not.
//!
//! Leadership counts only until the *send* time of the last confirmed request plus the ttl,
//! minus a small margin, measured on this process's monotonic clock: the storage judges
//! expiry from when it received that request, which is no earlier. A request that fails or
//! hangs never extends leadership, and the elector demotes itself by that deadline even while
//! a request is still outstanding. [`LeadershipWatch::is_leader`] checks the deadline itself
//! on every call, so it is right even when the elector's task is late.
//!
//! # Pushed and polled
//!
//! With a storage that pushes lease changes ([`Capability::LeaseChanges`]) the elector also
//! follows its lease's changes and asks at once when one calls for it:
//!
//! - a release wakes the standbys: the preferred contender (the live one with the highest
//!   priority) asks within a few milliseconds and leads with the next token; the others wait
//!   the handover grace ([`ElectorBuilder::handover_grace`]) and take the lease only if it has
//!   not;
//! - a higher-priority contender registering wakes the holder, which learns of the step-down
//!   request now instead of at its next renewal;
//! - a lost notification ([`crate::LeaseNotice::Missed`]) makes it ask at once.
//!
//! Renewals, and the takeover of a holder that died without releasing (within a ttl and a
//! request interval), stay on the timer. Notifications only wake the elector early: every
//! decision is the storage's answer to a request, so a storage without the capability, or a
//! notification lost on the way, costs latency and nothing else.
//!
//! See [`crate::guide`] for a complete leader-elected projector.

mod leadership;
mod owner;
mod subscribing;
mod task;
mod timing;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use leadership::{Leadership, LeadershipWaitError, LeadershipWatch};
pub use owner::unique_owner_id;

use crate::{validate, Capability, EventStorage, EventStorageError, FencingToken};
use leadership::Shared;
pub(crate) use subscribing::Subscribing;
pub(crate) use task::{herd_jitter, jittered};
use task::{release_within, ElectionLoop, HandoverState, LoopSettings};
pub(crate) use timing::{default_grace, shorter_than_ttl, Timings};

/// The ttl of an elector unless set otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Builds a [`LeaderElector`]; see [`LeaderElector::builder`].
#[derive(Debug)]
pub struct ElectorBuilder {
    storage: Arc<dyn EventStorage>,
    lease_name: String,
    owner: Option<String>,
    priority: i64,
    ttl: Duration,
    request_interval: Option<Duration>,
    safety_margin: Option<Duration>,
    handover_grace: Option<Duration>,
}

impl ElectorBuilder {
    /// This instance's owner id: stable for its lifetime, unique among contenders. By default
    /// a fresh [`unique_owner_id`].
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// The priority (0 by default): a live contender with a strictly higher priority asks the
    /// holder to step down.
    pub fn priority(mut self, priority: i64) -> Self {
        self.priority = priority;
        self
    }

    /// How long a lease lasts without renewal ([`DEFAULT_TTL`] by default); also how long a
    /// crashed leader's lease blocks a takeover.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How often to request (a third of the ttl by default, which leaves two failed attempts
    /// before leadership lapses). Each wait is shortened by up to a fifth at random.
    pub fn request_interval(mut self, interval: Duration) -> Self {
        self.request_interval = Some(interval);
        self
    }

    /// How much earlier than the storage this instance gives up leadership, to absorb clock
    /// rate differences and scheduling delay (a twentieth of the ttl by default, at least a
    /// hundredth).
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// How long contenders other than the preferred one wait after a pushed release before
    /// they ask (a fortieth of the ttl by default, at least 10 ms but at most half the ttl):
    /// the preferred contender (highest priority) asks at once and takes the lease with the
    /// next token; the others take it only if it has not asked by then. An instance that stepped down waits as long
    /// before asking again, and leads again if the preferred contender has not taken the
    /// lease; it then passes on no step-down request from that contender for a ttl (it
    /// probably died) and, should it hand over again, waits a whole request interval, for a
    /// contender that may only poll. Only used with storages that push lease changes.
    ///
    /// Set it longer than a request takes to reach the storage (the default suits a storage
    /// a few milliseconds away): the preferred contender's request must arrive before the one
    /// the instance that stepped down sends after the grace, or that instance takes the lease
    /// back and the handover waits a ttl.
    pub fn handover_grace(mut self, grace: Duration) -> Self {
        self.handover_grace = Some(grace);
        self
    }

    /// Checks the settings and starts the elector's task on the current tokio runtime.
    ///
    /// # Errors
    /// [`EventStorageError::Unsupported`] when the storage does not offer
    /// [`Capability::Lease`]; [`EventStorageError::InvalidInput`] for an invalid lease name
    /// or owner, a ttl out of range, a request interval that is zero or not shorter than the
    /// ttl, a safety margin that leaves no time between renewals, or a handover grace not
    /// shorter than the ttl.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn start(self) -> Result<LeaderElector, EventStorageError> {
        if !self.storage.supports(Capability::Lease) {
            return Err(EventStorageError::unsupported(
                "leader election (it needs Capability::Lease)",
                self.storage.name(),
            ));
        }
        let owner = self.owner.unwrap_or_else(unique_owner_id);
        validate::validate_name("lease name", &self.lease_name)?;
        validate::validate_name("lease owner", &owner)?;
        let Timings {
            ttl,
            request_interval,
            safety_margin,
            handover_grace,
        } = Timings::check(
            self.ttl,
            self.request_interval,
            self.safety_margin,
            self.handover_grace,
        )?;
        let shared = Shared::new(self.lease_name, owner);
        let (shutdown, shutdown_requested) = watch::channel(false);
        let (priority, priority_changes) = watch::channel(self.priority);
        let election = ElectionLoop {
            storage: self.storage,
            shared: Arc::clone(&shared),
            settings: LoopSettings {
                ttl,
                request_interval,
                safety_margin,
                handover_grace,
            },
            shutdown: shutdown_requested,
            handover: HandoverState::default(),
            outcomes: Default::default(),
        };
        let storage = Arc::clone(&election.storage);
        let task = tokio::spawn(election.run(priority_changes));
        Ok(LeaderElector {
            storage,
            ttl,
            watch: LeadershipWatch::new(shared),
            shutdown,
            priority,
            task: Some(task),
        })
    }
}

/// Runs the lease loop for one instance on a tokio task and publishes its [`Leadership`].
///
/// Stop it with [`LeaderElector::shutdown`], which releases the lease so that a standby takes
/// over at its next request instead of after a ttl. Dropping the elector shuts it down too,
/// in the background.
///
/// # Examples
/// ```
/// # use std::{sync::Arc, time::Duration};
/// # use eventstore::{EventStorage, elector::*};
/// # async fn lead(storage: Arc<dyn EventStorage>) -> Result<(), Box<dyn std::error::Error>> {
/// let elector = LeaderElector::builder(storage, "order-dispatcher")
///     .ttl(Duration::from_secs(15))
///     .start()?;
/// let mut leadership = elector.watch();
/// while let Some(token) = leadership.wait_for_leadership().await {
///     while leadership.token() == Some(token) {
///         // one unit of work, stamped with `token`; stop when a step-down is requested
///         if let Leadership::StepDownRequested { token } = leadership.current() {
///             leadership.acknowledge_step_down(token);
///             break;
///         }
///         # break;
///     }
///     # break;
/// }
/// elector.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LeaderElector {
    /// For the release a shutdown makes when the loop died before it could.
    storage: Arc<dyn EventStorage>,
    ttl: Duration,
    watch: LeadershipWatch,
    shutdown: watch::Sender<bool>,
    priority: watch::Sender<i64>,
    task: Option<JoinHandle<Result<(), EventStorageError>>>,
}

impl LeaderElector {
    /// A builder for an elector of `lease_name` on `storage`.
    pub fn builder(
        storage: Arc<dyn EventStorage>,
        lease_name: impl Into<String>,
    ) -> ElectorBuilder {
        ElectorBuilder {
            storage,
            lease_name: lease_name.into(),
            owner: None,
            priority: 0,
            ttl: DEFAULT_TTL,
            request_interval: None,
            safety_margin: None,
            handover_grace: None,
        }
    }

    /// Changes this instance's priority; a request with it is sent at once (e.g.
    /// `in_preferred_zone ? 10 : 0`). With a storage that pushes lease changes the holder
    /// hears of a higher priority at once; otherwise at its next renewal. A holder whose last
    /// handover was not taken passes on no step-down request for a ttl (see
    /// [`ElectorBuilder::handover_grace`]), unless a contender newly registers.
    pub fn set_priority(&self, priority: i64) {
        self.priority.send_if_modified(|current| {
            let changed = *current != priority;
            *current = priority;
            changed
        });
    }

    /// This instance's priority.
    pub fn priority(&self) -> i64 {
        *self.priority.borrow()
    }

    /// A handle for the work the lease guards; clone it freely.
    pub fn watch(&self) -> LeadershipWatch {
        self.watch.clone()
    }

    /// This instance's owner id.
    pub fn owner(&self) -> &str {
        self.watch.owner()
    }

    /// Whether this instance leads right now (checks the self-demotion deadline).
    pub fn is_leader(&self) -> bool {
        self.watch.is_leader()
    }

    /// The token of the current tenure, if this instance leads right now.
    pub fn token(&self) -> Option<FencingToken> {
        self.watch.token()
    }

    /// The current leadership (see [`LeadershipWatch::current`]).
    pub fn leadership(&self) -> Leadership {
        self.watch.current()
    }

    /// Stops the loop and releases the lease, so the next contender's request acquires it.
    /// Stop the guarded work first.
    ///
    /// A lease request under way is let finish first (within its own timeout, under a ttl),
    /// so that it cannot reach the storage after the release and take the lease back; a
    /// release that hangs is given up after a ttl.
    ///
    /// # Errors
    /// The release's error (the lease then expires after its ttl).
    pub async fn shutdown(mut self) -> Result<(), EventStorageError> {
        let _ = self.shutdown.send(true);
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match task.await {
            Ok(released) => released,
            // The loop panicked (in a storage it called, say) and released nothing.
            Err(died) => {
                let (lease_name, owner) = (self.watch.lease_name(), self.watch.owner());
                tracing::error!(lease = %lease_name, %owner, error = %died,
                    "the elector's loop died; releasing its lease on shutdown");
                release_within(self.storage.as_ref(), lease_name, owner, self.ttl).await
            }
        }
    }

    /// Stops the loop at once without releasing the lease, as if the process had died: the
    /// lease lapses after its ttl. For tests and demonstrations of a crash.
    pub fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        // Drop must not signal a shutdown: a task still inside its current poll would see it
        // and release. Dropping the real sender without a value is no signal to it.
        self.shutdown = watch::channel(false).0;
        self.watch.shared().demote(Leadership::Stopped);
    }
}

impl Drop for LeaderElector {
    fn drop(&mut self) {
        // The task sees the signal and releases the lease on its own.
        let _ = self.shutdown.send(true);
    }
}
