//! The loop a partition elector runs on its own tokio task.
//!
//! Once per request interval a renewal: read the group from the storage (its leases and the
//! storage's clock), compute this member's target partitions, and send one batch that renews
//! its seat, asks for every target partition with the high priority and renews
//! every other partition still held with the low one. Between renewals, pushed changes call
//! for smaller batches: a look (read the group, send only what should change) when a member
//! joins or leaves or this member is asked to hand a partition over, a claim (ask for the
//! target partitions not held) when one of them is released. A holder asked to step down
//! hands the partition over once its work acknowledges (or the drain timeout passes).

mod follow_up;
mod membership;
mod releases;
mod rounds;

pub(crate) use membership::Membership;
pub(super) use releases::release_within;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{sleep_until, timeout, Instant};

use super::names::GroupNames;
use super::watch::Shared;
use crate::elector::Subscribing;
use crate::elector::{herd_jitter, jittered};
use crate::{EventStorage, EventStorageError, LeaseChanges, LeaseNotice, LeaseScope};
use follow_up::FollowUp;
use rounds::Scope;

/// The first wait before looking at the group again while it is moving partitions; it
/// doubles up to the request interval. Members read the group at slightly different instants
/// while partitions move, and may disagree for a moment on where a free partition goes:
/// reading again soon settles it without waiting a whole interval.
const FIRST_SETTLING_WAIT: Duration = Duration::from_millis(10);

/// The settings the loop runs with, validated by the builder.
#[derive(Debug, Clone)]
pub(super) struct LoopSettings {
    pub(super) ttl: Duration,
    pub(super) request_interval: Duration,
    pub(super) safety_margin: Duration,
    pub(super) handover_grace: Duration,
    pub(super) drain_timeout: Duration,
}

/// Whether the group had reached its assignment when a round read it.
enum Pace {
    /// Every partition is with its target member: nothing to do until the next renewal.
    Steady,
    /// Partitions are moving: look again soon.
    Settling,
}

/// When each kind of request is due next.
#[derive(Debug, Clone, Copy)]
struct Due {
    renewal: Instant,
    look: Option<Instant>,
    claim: Option<Instant>,
}

impl Due {
    /// The earliest of them, and what it is.
    fn next(&self) -> (Instant, Wake) {
        let mut next = (self.renewal, Wake::Renewal);
        for (at, wake) in [(self.look, Wake::Look), (self.claim, Wake::Claim)] {
            if let Some(at) = at.filter(|at| *at < next.0) {
                next = (at, wake);
            }
        }
        next
    }
}

/// Why waiting stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    Renewal,
    Look,
    Claim,
    /// Handovers are due: acknowledged, or their drain timeout passed.
    Handovers,
    Shutdown,
}

/// What woke one wait, before it is interpreted.
enum Woken {
    Due(Wake),
    Acknowledgement,
    DrainTimeout,
    Notice(Option<LeaseNotice>),
    Subscribed(Option<LeaseChanges>),
}

pub(super) struct PartitionLoop {
    pub(super) storage: Arc<dyn EventStorage>,
    pub(super) shared: Arc<Shared>,
    pub(super) names: GroupNames,
    pub(super) settings: LoopSettings,
    pub(super) shutdown: watch::Receiver<bool>,
    /// The partitions asked for with the target priority in the last round.
    pub(super) target: BTreeSet<u32>,
    /// When each partition being handed over is released at the latest.
    pub(super) drain_deadlines: BTreeMap<u32, Instant>,
    /// Target partitions released since the last claim.
    pub(super) released: BTreeSet<u32>,
    /// Partitions asked for with the target priority since the last renewal: this member is
    /// registered as their contender, so their holder is asked to step down.
    pub(super) registered: BTreeSet<u32>,
    /// Partitions whose release is on its way: a shutdown that cuts it short, having taken
    /// them out of every other set, releases them again.
    pub(super) releasing: BTreeSet<u32>,
    /// The partitions the storage recorded this member as holding when the group was last
    /// read: after a lapse it may still hold some that it neither holds nor hands over as far
    /// as it knows, and a shutdown releases those too.
    pub(super) held_when_read: BTreeSet<u32>,
    /// A request was sent: a subscription ready after it missed whatever changed in between.
    pub(super) requested: bool,
    /// The last read of the group showed a member counting other partitions than this one.
    pub(super) count_mismatched: bool,
    /// How this member announces itself.
    pub(super) membership: Membership,
}

impl Drop for PartitionLoop {
    /// However the loop ends (returned, aborted, or a panic in a storage it called), watchers
    /// hear that it stopped instead of waiting for a change that never comes, and the
    /// mismatch gauge no longer speaks for a member that is gone.
    fn drop(&mut self) {
        self.shared.lapse(true);
        self.count_mismatch(None, None);
    }
}

impl PartitionLoop {
    /// Renews on every interval, and asks early when a pushed change calls for it, until shut
    /// down; releases everything on the way out.
    pub(super) async fn run(mut self) -> Result<(), EventStorageError> {
        let mut changes = None;
        let mut subscribing = self.subscribe();
        let mut due = Due {
            renewal: Instant::now(),
            look: None,
            claim: None,
        };
        let mut settling_wait = FIRST_SETTLING_WAIT;
        loop {
            let wake = self.wait(&mut due, &mut changes, &mut subscribing).await;
            let scope = match self.renewing_instead(wake, &due) {
                Wake::Shutdown => return self.release_all().await,
                Wake::Handovers => {
                    // A release that hangs must not keep the deadline from lapsing.
                    let (shared, mut shutdown) = (Arc::clone(&self.shared), self.shutdown.clone());
                    if while_waiting(&shared, &mut shutdown, self.hand_over_due())
                        .await
                        .is_none()
                    {
                        return self.release_all().await;
                    }
                    continue;
                }
                Wake::Claim => {
                    due.claim = None;
                    let (shared, mut shutdown) = (Arc::clone(&self.shared), self.shutdown.clone());
                    self.requested = true;
                    let ttl = self.settings.ttl;
                    match finishing(&shared, &mut shutdown, self.claim(), ttl).await {
                        None => return self.release_all().await,
                        Some(Err(EventStorageError::Closed)) => return self.stop(),
                        Some(Err(error)) => self.warn("claiming released partitions", &error),
                        Some(Ok(())) => {}
                    }
                    if self.membership.due() {
                        // No seat yet (or lost a race for one): look again soon, as after a
                        // round.
                        due.look
                            .get_or_insert(Instant::now() + FIRST_SETTLING_WAIT + herd_jitter());
                    }
                    continue;
                }
                Wake::Renewal => {
                    due.renewal = Instant::now() + jittered(self.settings.request_interval);
                    due.claim = None;
                    self.released.clear();
                    Scope::Renewal
                }
                Wake::Look => Scope::Changes,
            };
            due.look = None;
            let (shared, mut shutdown) = (Arc::clone(&self.shared), self.shutdown.clone());
            self.requested = true;
            let ttl = self.settings.ttl;
            let pace = match finishing(&shared, &mut shutdown, self.round(scope), ttl).await {
                None => return self.release_all().await,
                Some(Err(EventStorageError::Closed)) => return self.stop(),
                Some(Err(error)) => {
                    self.warn("partition round", &error);
                    // A member without a seat is not counted by the others: try again soon.
                    if self.membership.due() {
                        Pace::Settling
                    } else {
                        Pace::Steady
                    }
                }
                Some(Ok(pace)) => pace,
            };
            if let Pace::Settling = pace {
                let wait = settling_wait.min(self.settings.request_interval) + herd_jitter();
                settling_wait = settling_wait.saturating_mul(2);
                due.look = Some(Instant::now() + wait);
            } else {
                settling_wait = FIRST_SETTLING_WAIT;
            }
        }
    }

    /// A look or a claim the renewal would have to wait for renews instead. The renewal's
    /// room (from when it is due to the deadline, what the interval and the margin leave of
    /// the ttl) holds one round: a look that starts within it, or within half an interval of
    /// the renewal when the room is larger, could push the renewal past the deadline. A
    /// renewal asks for every target partition, so it does what the look or claim would have.
    fn renewing_instead(&self, wake: Wake, due: &Due) -> Wake {
        let settings = &self.settings;
        let room = settings
            .ttl
            .saturating_sub(settings.request_interval + settings.safety_margin);
        let window = room.min(settings.request_interval / 2);
        match wake {
            Wake::Look | Wake::Claim if due.renewal <= Instant::now() + window => Wake::Renewal,
            other => other,
        }
    }

    /// The storage closed: nothing is held any more.
    fn stop(&self) -> Result<(), EventStorageError> {
        self.shared.lapse(true);
        Ok(())
    }

    fn warn(&self, what: &str, error: &EventStorageError) {
        tracing::warn!(group = %self.shared.group, owner = %self.shared.owner,
            error = %error.report(), "{what} failed; the next renewal tries again");
    }

    /// Follows the storage's lease changes on a task of its own, if it pushes any.
    fn subscribe(&self) -> Subscribing {
        let shared = Arc::clone(&self.shared);
        Subscribing::start(&self.storage, LeaseScope::All, move |error| {
            tracing::warn!(group = %shared.group, owner = %shared.owner,
                error = %error.report(), "cannot follow pushed lease changes; polling only");
        })
    }

    /// Brings forward the request `notice` calls for, if any.
    fn follow(&mut self, notice: &LeaseNotice, due: &mut Due) {
        let Some((follow_up, delay)) = self.follow_up(notice) else {
            return;
        };
        let at = Instant::now() + delay;
        let slot = match follow_up {
            FollowUp::Look => &mut due.look,
            FollowUp::Claim(partition) => {
                self.released.insert(partition);
                &mut due.claim
            }
        };
        *slot = Some(slot.map_or(at, |due| due.min(at)));
    }

    /// Waits until a request is due, which pushed changes may bring forward; returns early on
    /// shutdown and when handovers are due.
    async fn wait(
        &mut self,
        due: &mut Due,
        changes: &mut Option<LeaseChanges>,
        subscribing: &mut Subscribing,
    ) -> Wake {
        loop {
            let (at, wake) = due.next();
            let drain = self.drain_deadlines.values().min().copied();
            let shared = Arc::clone(&self.shared);
            let mut shutdown = self.shutdown.clone();
            let woken = while_waiting(&shared, &mut shutdown, async {
                tokio::select! {
                    () = sleep_until(at) => Woken::Due(wake),
                    () = shared.acknowledgement.notified() => Woken::Acknowledgement,
                    () = sleep_until(drain.unwrap_or(at)), if drain.is_some() => Woken::DrainTimeout,
                    notice = next_notice(changes) => Woken::Notice(notice),
                    subscribed = subscribing.ready() => Woken::Subscribed(subscribed),
                }
            })
            .await;
            match woken {
                None => return Wake::Shutdown,
                Some(Woken::Due(wake)) => return wake,
                Some(Woken::Acknowledgement | Woken::DrainTimeout) => return Wake::Handovers,
                Some(Woken::Subscribed(subscribed)) => {
                    // A change between the first round and this subscription reached nobody
                    // here: look again soon, as after a missed notice.
                    if subscribed.is_some() && self.requested {
                        self.follow(&LeaseNotice::Missed, due);
                    }
                    *changes = subscribed;
                }
                // The storage closed the subscription: poll from here on.
                Some(Woken::Notice(None)) => *changes = None,
                Some(Woken::Notice(Some(notice))) => self.follow(&notice, due),
            }
        }
    }
}

/// Drives `work` to completion, lapsing every partition when the deadline passes meanwhile.
/// `None` when shut down first.
async fn while_waiting<T>(
    shared: &Shared,
    shutdown: &mut watch::Receiver<bool>,
    work: impl Future<Output = T>,
) -> Option<T> {
    tokio::pin!(work);
    if *shutdown.borrow() {
        return None;
    }
    loop {
        let deadline = shared.holdings().deadline;
        tokio::select! {
            biased;
            Ok(()) = shutdown.changed() => return None,
            output = &mut work => return Some(output),
            () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                // The work may have renewed meanwhile (a round renews, then releases): only
                // the deadline waited for, still unmoved, lapses.
                if shared.holdings().deadline == deadline {
                    tracing::warn!(group = %shared.group, owner = %shared.owner,
                        "deadline passed without a confirmed renewal; holding no partition");
                    shared.lapse(false);
                }
            }
        }
    }
}

/// As [`while_waiting`], but requests under way when the shutdown came are let finish, for at
/// most `ttl`: a request already sent reaches the storage whether or not anyone waits, and the
/// releases that follow must not overtake it, or it takes back what they released. Requests
/// the shutdown came before are never started.
async fn finishing<T>(
    shared: &Shared,
    shutdown: &mut watch::Receiver<bool>,
    requests: impl Future<Output = T>,
    ttl: Duration,
) -> Option<T> {
    let started = AtomicBool::new(false);
    let mut requests = pin!(async {
        started.store(true, Ordering::Relaxed);
        requests.await
    });
    let output = while_waiting(shared, shutdown, requests.as_mut()).await;
    if output.is_none() && started.load(Ordering::Relaxed) {
        let _ = timeout(ttl, requests).await;
    }
    output
}

/// The next pushed notice, or never when nothing is pushed.
async fn next_notice(changes: &mut Option<LeaseChanges>) -> Option<LeaseNotice> {
    match changes {
        Some(changes) => changes.next().await,
        None => std::future::pending().await,
    }
}
