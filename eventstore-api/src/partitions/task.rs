//! The loop a partition elector runs on its own tokio task.
//!
//! One round: read the group from the storage (its leases and the storage's clock), compute
//! this member's target partitions, and send one batch that renews the membership lease,
//! asks for every target partition with the high priority and renews every other partition
//! still held with the low one. A holder asked to step down hands the partition over once its
//! work acknowledges (or the drain timeout passes) by releasing it.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{sleep_until, timeout, Instant};

use super::names::{member_lease_name, partition_lease_name, GroupLease, GroupNames};
use super::view::GroupView;
use super::watch::{Holdings, Shared};
use crate::elector::{herd_jitter, jittered};
use crate::{
    Capability, EventStorage, EventStorageError, LeaseChangeKind, LeaseChanges, LeaseNotice,
    LeaseRequest, LeaseResponse, LeaseScope, LeaseStatus,
};

/// The priority a member asks for its target partitions with; every other request uses
/// [`OTHER_PRIORITY`], so a holder of a partition that should move is asked to step down.
const TARGET_PRIORITY: i64 = 1;
/// The priority of the membership lease and of held partitions that should move.
const OTHER_PRIORITY: i64 = 0;

/// The settings the loop runs with, validated by the builder.
#[derive(Debug, Clone)]
pub(super) struct LoopSettings {
    pub(super) ttl: Duration,
    pub(super) request_interval: Duration,
    pub(super) safety_margin: Duration,
    pub(super) handover_grace: Duration,
    pub(super) drain_timeout: Duration,
}

/// Why waiting stopped.
enum Wake {
    /// Time for a round.
    Due,
    /// Handovers are due: acknowledged, or their drain timeout passed.
    Handovers,
    Shutdown,
}

/// What woke one wait, before it is interpreted.
enum Woken {
    Timer,
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
}

impl PartitionLoop {
    /// Runs rounds on every interval, and early when a pushed change calls for one, until
    /// shut down; releases everything on the way out.
    pub(super) async fn run(mut self) -> Result<(), EventStorageError> {
        let mut changes = None;
        let mut subscribing = self.subscribe();
        let mut next_round = Instant::now();
        loop {
            match self
                .wait_until(next_round, &mut changes, &mut subscribing)
                .await
            {
                Wake::Shutdown => return self.release_all().await,
                Wake::Handovers => {
                    self.hand_over_due().await;
                    continue;
                }
                Wake::Due => {}
            }
            let (shared, mut shutdown) = (Arc::clone(&self.shared), self.shutdown.clone());
            match while_waiting(&shared, &mut shutdown, self.round()).await {
                None => return self.release_all().await,
                Some(Err(EventStorageError::Closed)) => {
                    self.shared.lapse(true);
                    return Ok(());
                }
                Some(Err(error)) => {
                    tracing::warn!(group = %self.shared.group, owner = %self.shared.owner,
                        error = %error.report(), "partition round failed; holding nothing new");
                }
                Some(Ok(())) => {}
            }
            next_round = Instant::now() + jittered(self.settings.request_interval);
        }
    }

    /// Follows the storage's lease changes on a task of its own, if it pushes any.
    fn subscribe(&self) -> Option<JoinHandle<Option<LeaseChanges>>> {
        if !self.storage.supports(Capability::LeaseChanges) {
            return None;
        }
        let storage = Arc::clone(&self.storage);
        let shared = Arc::clone(&self.shared);
        Some(tokio::spawn(async move {
            match storage.subscribe_lease_changes(LeaseScope::All).await {
                Ok(changes) => Some(changes),
                Err(error) => {
                    tracing::warn!(group = %shared.group, owner = %shared.owner,
                        error = %error.report(), "cannot follow pushed lease changes; polling only");
                    None
                }
            }
        }))
    }

    /// One round: read the group, ask for the target, renew what is held, publish.
    async fn round(&mut self) -> Result<(), EventStorageError> {
        let previous_target = self.target.clone();
        self.target = match self.read_target().await {
            Ok(target) => target,
            Err(EventStorageError::Closed) => return Err(EventStorageError::Closed),
            Err(error) => {
                // Without a fresh view the last target stands: renewing what is held matters
                // more than balance.
                tracing::warn!(group = %self.shared.group, owner = %self.shared.owner,
                    error = %error.report(), "cannot read the group; keeping the last target");
                self.target.clone()
            }
        };
        let previous = self.shared.holdings();
        let partitions = self.partitions_to_request(&previous);
        let mut requests = Vec::with_capacity(partitions.len() + 1);
        requests.push(self.request(
            member_lease_name(&self.shared.group, &self.shared.owner),
            OTHER_PRIORITY,
        ));
        for partition in &partitions {
            let priority = if self.target.contains(partition) {
                TARGET_PRIORITY
            } else {
                OTHER_PRIORITY
            };
            let lease_name = partition_lease_name(&self.shared.group, *partition);
            requests.push(self.request(lease_name, priority));
        }
        let sent = Instant::now();
        let valid_until = sent + self.settings.ttl - self.settings.safety_margin;
        let storage = Arc::clone(&self.storage);
        let answer = timeout(valid_until - sent, async move {
            storage.request_leases(requests).await
        })
        .await;
        let responses = match answer {
            Ok(Ok(responses)) => responses,
            Ok(Err(error)) => return Err(error),
            Err(_elapsed) => {
                return Err(EventStorageError::Timeout {
                    operation: format!("request_leases(group {})", self.shared.group),
                    after: valid_until - sent,
                })
            }
        };
        if Instant::now() >= valid_until {
            self.shared.lapse(false);
            return Ok(());
        }
        self.apply(&partitions, &responses[1..], valid_until);
        self.withdraw_dropped(&previous, &previous_target).await;
        Ok(())
    }

    /// This member's target partitions, from the group's leases on the storage's clock.
    async fn read_target(&self) -> Result<BTreeSet<u32>, EventStorageError> {
        let (leases, now) = tokio::join!(self.storage.get_leases(), self.storage.storage_time());
        let view = GroupView::read(&self.names, &leases?, now?, &self.shared.owner);
        Ok(view
            .target_of(self.shared.partitions, &self.shared.owner)
            .into_iter()
            .collect())
    }

    /// The target, and every partition still held (renewed until handed over).
    fn partitions_to_request(&self, holdings: &Holdings) -> Vec<u32> {
        let mut partitions: BTreeSet<u32> = self.target.clone();
        partitions.extend(holdings.held.keys());
        partitions.extend(holdings.handing_over.keys());
        partitions.into_iter().collect()
    }

    fn request(&self, lease_name: String, priority: i64) -> LeaseRequest {
        LeaseRequest::new(
            lease_name,
            self.shared.owner.clone(),
            priority,
            self.settings.ttl,
        )
    }

    /// Publishes what the answers mean: held, being handed over, or not held.
    fn apply(&mut self, partitions: &[u32], responses: &[LeaseResponse], valid_until: Instant) {
        let mut holdings = Holdings {
            deadline: Some(valid_until),
            ..Holdings::default()
        };
        for (partition, response) in partitions.iter().zip(responses) {
            let token = response.fencing_token;
            match response.status {
                LeaseStatus::Leader => {
                    holdings.held.insert(*partition, token);
                }
                LeaseStatus::LeaderStepDownRequested => {
                    holdings.handing_over.insert(*partition, token);
                }
                LeaseStatus::Standby => {}
            }
        }
        let drain = Instant::now() + self.settings.drain_timeout;
        self.drain_deadlines
            .retain(|partition, _| holdings.handing_over.contains_key(partition));
        for partition in holdings.handing_over.keys() {
            self.drain_deadlines.entry(*partition).or_insert(drain);
        }
        self.shared.publish(holdings);
    }

    /// Withdraws the contender registrations of partitions neither in the target nor held any
    /// more, so that a stale registration never asks their holder to step down.
    async fn withdraw_dropped(&self, previous: &Holdings, previous_target: &BTreeSet<u32>) {
        let holdings = self.shared.holdings();
        let dropped: BTreeSet<u32> = previous
            .held
            .keys()
            .chain(previous.handing_over.keys())
            .chain(previous_target.iter())
            .copied()
            .filter(|partition| {
                !self.target.contains(partition)
                    && !holdings.held.contains_key(partition)
                    && !holdings.handing_over.contains_key(partition)
            })
            .collect();
        if !dropped.is_empty() {
            self.release(dropped.into_iter().collect()).await;
        }
    }

    /// Releases the partitions whose handover is due: acknowledged by the work, or past the
    /// drain timeout.
    async fn hand_over_due(&mut self) {
        let now = Instant::now();
        let acknowledged = self.shared.take_acknowledged();
        let mut holdings = self.shared.holdings();
        let due: Vec<u32> = holdings
            .handing_over
            .keys()
            .copied()
            .filter(|partition| {
                acknowledged.contains(partition)
                    || self
                        .drain_deadlines
                        .get(partition)
                        .is_some_and(|deadline| *deadline <= now)
            })
            .collect();
        if due.is_empty() {
            return;
        }
        for partition in &due {
            holdings.handing_over.remove(partition);
            self.drain_deadlines.remove(partition);
        }
        // Stop renewing them before the release: whatever the release's fate, they lapse.
        self.shared.publish(holdings);
        tracing::info!(group = %self.shared.group, owner = %self.shared.owner, partitions = ?due,
            "handing partitions over");
        self.release(due).await;
    }

    /// Releases `partitions` concurrently, each given up after a ttl.
    async fn release(&self, partitions: Vec<u32>) {
        let mut releases = JoinSet::new();
        for partition in partitions {
            let lease_name = partition_lease_name(&self.shared.group, partition);
            releases.spawn(self.release_one(lease_name));
        }
        while releases.join_next().await.is_some() {}
    }

    fn release_one(
        &self,
        lease_name: String,
    ) -> impl Future<Output = Result<(), EventStorageError>> + Send + 'static {
        let storage = Arc::clone(&self.storage);
        let owner = self.shared.owner.clone();
        let ttl = self.settings.ttl;
        async move {
            let released = match timeout(ttl, storage.release_lease(&lease_name, &owner)).await {
                Ok(released) => released,
                Err(_elapsed) => Err(EventStorageError::Timeout {
                    operation: format!("release_lease({lease_name})"),
                    after: ttl,
                }),
            };
            if let Err(error) = &released {
                tracing::warn!(lease = %lease_name, %owner, error = %error.report(),
                    "release failed; the lease expires after its ttl");
            }
            released
        }
    }

    /// Leaves the group: the membership first, so that the others rebalance at once, then
    /// every partition held or asked for.
    async fn release_all(&mut self) -> Result<(), EventStorageError> {
        let holdings = self.shared.holdings();
        self.shared.lapse(true);
        let membership = self
            .release_one(member_lease_name(&self.shared.group, &self.shared.owner))
            .await;
        let partitions: BTreeSet<u32> = holdings
            .held
            .keys()
            .chain(holdings.handing_over.keys())
            .chain(self.target.iter())
            .copied()
            .collect();
        self.release(partitions.into_iter().collect()).await;
        membership
    }

    /// Waits until `until`, which pushed changes may bring forward; returns early on
    /// shutdown and when handovers are due.
    async fn wait_until(
        &mut self,
        mut until: Instant,
        changes: &mut Option<LeaseChanges>,
        subscribing: &mut Option<JoinHandle<Option<LeaseChanges>>>,
    ) -> Wake {
        loop {
            let drain = self.drain_deadlines.values().min().copied();
            let shared = Arc::clone(&self.shared);
            let mut shutdown = self.shutdown.clone();
            let woken = while_waiting(&shared, &mut shutdown, async {
                    tokio::select! {
                        () = sleep_until(until) => Woken::Timer,
                        () = shared.acknowledgement.notified() => Woken::Acknowledgement,
                        () = sleep_until(drain.unwrap_or(until)), if drain.is_some() => Woken::DrainTimeout,
                        notice = next_notice(changes) => Woken::Notice(notice),
                        subscribed = subscription(subscribing) => Woken::Subscribed(subscribed),
                    }
                })
                .await;
            match woken {
                None => return Wake::Shutdown,
                Some(Woken::Timer) => return Wake::Due,
                Some(Woken::Acknowledgement | Woken::DrainTimeout) => return Wake::Handovers,
                Some(Woken::Subscribed(subscribed)) => {
                    *subscribing = None;
                    *changes = subscribed;
                }
                // The storage closed the subscription: poll from here on.
                Some(Woken::Notice(None)) => *changes = None,
                Some(Woken::Notice(Some(notice))) => {
                    if let Some(delay) = self.round_delay_after(&notice) {
                        until = until.min(Instant::now() + delay);
                    }
                }
            }
        }
    }

    /// How soon to run a round after `notice`, if it calls for one before the next interval.
    /// A notice is only a hint: the round that follows decides.
    fn round_delay_after(&self, notice: &LeaseNotice) -> Option<Duration> {
        let me = self.shared.owner.as_str();
        let change = match notice {
            LeaseNotice::Missed => {
                return Some(
                    self.settings
                        .handover_grace
                        .mul_f64(rand::thread_rng().gen()),
                )
            }
            LeaseNotice::Changed(change) => change,
        };
        match (self.names.parse(&change.lease_name)?, &change.kind) {
            // A member joined or left: the target moves.
            (
                GroupLease::Member(member),
                LeaseChangeKind::Acquired { .. } | LeaseChangeKind::Released { .. },
            ) if member != me => Some(herd_jitter()),
            // A partition this member should hold is free.
            (GroupLease::Partition(partition), LeaseChangeKind::Released { owner, .. })
                if owner != me && self.target.contains(&partition) =>
            {
                Some(herd_jitter())
            }
            // This member is asked to hand a partition over: learn it now.
            (GroupLease::Partition(_), LeaseChangeKind::StepDownRequested { holder, .. })
                if holder == me =>
            {
                Some(Duration::ZERO)
            }
            // Someone else took a partition this member believes it holds: learn it now.
            (GroupLease::Partition(partition), LeaseChangeKind::Acquired { owner, .. })
                if owner != me && self.shared.holdings().held.contains_key(&partition) =>
            {
                Some(Duration::ZERO)
            }
            _ => None,
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
            _ = shutdown.changed() => return None,
            output = &mut work => return Some(output),
            () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                tracing::warn!(group = %shared.group, owner = %shared.owner,
                    "deadline passed without a confirmed renewal; holding no partition");
                shared.lapse(false);
            }
        }
    }
}

/// The next pushed notice, or never when nothing is pushed.
async fn next_notice(changes: &mut Option<LeaseChanges>) -> Option<LeaseNotice> {
    match changes {
        Some(changes) => changes.next().await,
        None => std::future::pending().await,
    }
}

/// The subscription once it is ready, or never when none is on its way.
async fn subscription(
    subscribing: &mut Option<JoinHandle<Option<LeaseChanges>>>,
) -> Option<LeaseChanges> {
    match subscribing {
        Some(task) => task.await.ok().flatten(),
        None => std::future::pending().await,
    }
}
