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
//! See [`crate::guide`] for a complete leader-elected projector.

mod leadership;
mod owner;
mod task;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use leadership::{Leadership, LeadershipWatch};
pub use owner::unique_owner_id;

use crate::{validate, Capability, EventStorage, EventStorageError, FencingToken};
use leadership::Shared;
use task::{ElectionLoop, LoopSettings};

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
    /// rate differences and scheduling delay (a twentieth of the ttl by default).
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// Checks the settings and starts the elector's task on the current tokio runtime.
    ///
    /// # Errors
    /// [`EventStorageError::Unsupported`] when the storage does not offer
    /// [`Capability::Lease`]; [`EventStorageError::InvalidInput`] for an invalid lease name
    /// or owner, a ttl out of range, a request interval that is zero or not shorter than the
    /// ttl, or a safety margin that leaves no time between renewals.
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
        validate::validate_ttl(self.ttl)?;
        let ttl = self.ttl;
        let request_interval = self.request_interval.unwrap_or(ttl / 3);
        if request_interval.is_zero() || request_interval >= ttl {
            return Err(EventStorageError::invalid(
                "request interval",
                format!("{request_interval:?}"),
                format!(
                    "must be above zero and shorter than the ttl {ttl:?} (a third of it is \
                     the default), or a single slow request loses the lease"
                ),
            ));
        }
        let safety_margin = self.safety_margin.unwrap_or(ttl / 20);
        if request_interval + safety_margin >= ttl {
            return Err(EventStorageError::invalid(
                "safety margin",
                format!("{safety_margin:?}"),
                format!(
                    "with the request interval {request_interval:?} it must stay below the \
                     ttl {ttl:?}, or leadership lapses between renewals"
                ),
            ));
        }
        let shared = Shared::new(self.lease_name, owner);
        let (shutdown, shutdown_requested) = watch::channel(false);
        let election = ElectionLoop {
            storage: self.storage,
            shared: Arc::clone(&shared),
            settings: LoopSettings {
                priority: self.priority,
                ttl,
                request_interval,
                safety_margin,
            },
            shutdown: shutdown_requested,
        };
        let task = tokio::spawn(election.run());
        Ok(LeaderElector {
            watch: LeadershipWatch::new(shared),
            shutdown,
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
/// # use eventstore_api::{EventStorage, elector::*};
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
    watch: LeadershipWatch,
    shutdown: watch::Sender<bool>,
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
        }
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
    /// # Errors
    /// The release's error (the lease then expires after its ttl).
    pub async fn shutdown(mut self) -> Result<(), EventStorageError> {
        let _ = self.shutdown.send(true);
        match self.task.take() {
            Some(task) => task.await.unwrap_or(Ok(())),
            None => Ok(()),
        }
    }

    /// Stops the loop at once without releasing the lease, as if the process had died: the
    /// lease lapses after its ttl. For tests and demonstrations of a crash.
    pub fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.watch.shared().demote(Leadership::Stopped);
    }
}

impl Drop for LeaderElector {
    fn drop(&mut self) {
        // The task sees the signal and releases the lease on its own.
        let _ = self.shutdown.send(true);
    }
}
