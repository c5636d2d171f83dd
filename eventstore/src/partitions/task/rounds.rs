//! What a member asks the storage: rounds that read the group and send a batch, and claims.

use crate::LeaseSelection;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{timeout, Instant};

use super::{Pace, PartitionLoop};
use crate::partitions::names::partition_lease_name;
use crate::partitions::status::GroupStatus;
use crate::partitions::view::{GroupView, Plan};
use crate::partitions::watch::Holdings;
use crate::{telemetry, EventStorageError, LeaseRequest, LeaseResponse, LeaseStatus};

/// The priority a member asks for its target partitions with; every other request uses
/// [`OTHER_PRIORITY`], so a holder of a partition that should move is asked to step down.
const TARGET_PRIORITY: i64 = 1;
/// The priority of held partitions that should move. A member's seat is asked for with the
/// member's partition count instead, which tells the other members what this one counts.
const OTHER_PRIORITY: i64 = 0;

/// What a round sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// Everything: the seat, the target and every partition held, which confirms them
    /// all until a new deadline. Once per request interval.
    Renewal,
    /// Only what should change: the target partitions not held (with the target priority)
    /// and the held partitions out of the target (with the other one, so that their target
    /// member's request asks for a step-down). For the rounds a pushed change calls for.
    Changes,
}

impl PartitionLoop {
    /// How long a call in the loop may take: `cap`, or half the time left until what is
    /// held lapses if that comes sooner, so that a call that hangs (a read of the group, a
    /// release) still leaves time for the renewal that follows it.
    pub(super) fn before_renewals(&self, cap: Duration) -> Duration {
        let now = Instant::now();
        self.shared
            .holdings()
            .deadline
            .filter(|deadline| *deadline > now)
            .map_or(cap, |deadline| (deadline - now).div_f64(2.0).min(cap))
    }

    /// Reads the group, updates the target, sends what `scope` asks for and publishes the
    /// answers; how soon to look again.
    pub(super) async fn round(&mut self, scope: Scope) -> Result<Pace, EventStorageError> {
        let previous_target = self.target.clone();
        let mut unheld = None;
        let mut held_in_storage = BTreeSet::new();
        let pace = match self.read_plan().await {
            Ok(plan) => {
                self.membership.read(&plan);
                self.target = plan.target.into_iter().collect();
                unheld = Some(plan.unheld);
                held_in_storage = plan.held;
                self.held_when_read.clone_from(&held_in_storage);
                self.count_mismatch(plan.beyond_count, plan.other_count);
                if plan.settled {
                    Pace::Steady
                } else {
                    Pace::Settling
                }
            }
            Err(EventStorageError::Closed) => return Err(EventStorageError::Closed),
            Err(error) => {
                // Without a fresh view the last target stands: renewing what is held matters
                // more than balance.
                tracing::warn!(group = %self.shared.group, owner = %self.shared.owner,
                    error = %error.report(), "cannot read the group; keeping the last target");
                Pace::Steady
            }
        };
        if *self.shutdown.borrow() {
            // Shut down while the group was read: the releases follow, and a batch sent now
            // could reach the storage after them and take back what they release.
            return Ok(pace);
        }
        let before = self.shared.holdings();
        let partitions = match scope {
            Scope::Renewal => self.everything(&before),
            Scope::Changes => self.changes(&before, unheld.as_ref()),
        };
        self.send_and_apply(scope, partitions).await?;
        self.withdraw_dropped(&before, &previous_target, &held_in_storage)
            .await;
        let extra_seats = self.membership.take_extra_seats(&self.shared.group);
        if !extra_seats.is_empty() {
            let _ = self.release_leases(&extra_seats).await;
        }
        // Without a seat the others do not count this member yet: try another one soon.
        Ok(if !self.membership.due() {
            pace
        } else {
            Pace::Settling
        })
    }

    /// Says, once per episode, that a member of the group was configured with another
    /// partition count, and keeps the gauge of it: a member that announces another count
    /// with its membership (`other_count`), or partitions held at or beyond this member's
    /// count (`beyond_count`, the highest such). The members never agree on the assignment
    /// then: every member of a group must be started with the same partition count.
    pub(super) fn count_mismatch(
        &mut self,
        beyond_count: Option<u32>,
        other_count: Option<(String, u32)>,
    ) {
        let mismatched = beyond_count.is_some() || other_count.is_some();
        if mismatched != self.count_mismatched {
            metrics::gauge!(telemetry::PARTITION_COUNT_MISMATCH,
                "group" => self.shared.group.clone(), "owner" => self.shared.owner.clone())
            .set(f64::from(u8::from(mismatched)));
        }
        if mismatched && !self.count_mismatched {
            let partitions = self.shared.partitions;
            match (other_count, beyond_count) {
                (Some((member, count)), _) => tracing::warn!(group = %self.shared.group,
                    owner = %self.shared.owner, partitions, other_member = %member,
                    other_count = count,
                    "member {member} of the group counts {count} partitions, this member \
                     counts {partitions}; members of one group must count the same \
                     partitions, or they never agree on who holds which"),
                (None, Some(partition)) => tracing::warn!(group = %self.shared.group,
                    owner = %self.shared.owner, partitions, seen = partition,
                    "another member of the group was started with more partitions: partition \
                     {partition} is held, this member counts {partitions}; members of one \
                     group must count the same partitions, or they never agree on who holds \
                     which"),
                (None, None) => {}
            }
        }
        self.count_mismatched = mismatched;
    }

    /// Asks for the target partitions released since the last claim, without reading the
    /// group: the target is known, so one small batch takes them.
    pub(super) async fn claim(&mut self) -> Result<(), EventStorageError> {
        let holdings = self.shared.holdings();
        let released = std::mem::take(&mut self.released);
        let wanted: Vec<u32> = self
            .missing(&holdings)
            .intersection(&released)
            .copied()
            .collect();
        self.send_and_apply(Scope::Changes, wanted).await
    }

    /// This member's plan, from the group's leases on the storage's clock (those alone: the
    /// storage may hold many more). Given up after a request interval, or after half the time
    /// left until what is held lapses, if that comes sooner: a hung read must not hold up the
    /// renewal that follows it past the deadline.
    async fn read_plan(&self) -> Result<Plan, EventStorageError> {
        let limit = self.before_renewals(self.settings.request_interval);
        let group_leases = self
            .storage
            .list_leases(LeaseSelection::prefix(self.names.prefix()));
        let read = async { tokio::join!(group_leases, self.storage.storage_time()) };
        let (leases, now) = timeout(limit, read).await.map_err(|_elapsed| {
            EventStorageError::timeout(
                format!("reading partition group {}", self.shared.group),
                limit,
            )
        })?;
        let status = GroupStatus::of_leases(&self.shared.group, leases?, now?);
        let (partitions, owner) = (self.shared.partitions, &self.shared.owner);
        Ok(GroupView::of_status(status, partitions, owner).plan(partitions, owner))
    }

    /// The target, and every partition still held (renewed until handed over).
    fn everything(&self, holdings: &Holdings) -> Vec<u32> {
        let mut partitions: BTreeSet<u32> = self.target.clone();
        partitions.extend(holdings.held.keys());
        partitions.extend(holdings.handing_over.keys());
        partitions.into_iter().collect()
    }

    /// The target partitions nobody holds or this member has not registered for (those
    /// another member holds come with its release, which the registration as contender asked
    /// for), and the held ones out of the target. Without a view of the group, every target
    /// partition not held.
    fn changes(&self, holdings: &Holdings, unheld: Option<&BTreeSet<u32>>) -> Vec<u32> {
        let mut partitions = self.missing(holdings);
        if let Some(unheld) = unheld {
            partitions.retain(|partition| {
                unheld.contains(partition) || !self.registered.contains(partition)
            });
        }
        partitions.extend(
            holdings
                .held
                .keys()
                .filter(|partition| !self.target.contains(partition)),
        );
        partitions.into_iter().collect()
    }

    fn missing(&self, holdings: &Holdings) -> BTreeSet<u32> {
        self.target
            .iter()
            .copied()
            .filter(|partition| {
                !holdings.held.contains_key(partition)
                    && !holdings.handing_over.contains_key(partition)
            })
            .collect()
    }

    /// Sends one batch for `partitions` (and the membership with a renewal, or when it is due
    /// sooner) and publishes what the answers mean.
    async fn send_and_apply(
        &mut self,
        scope: Scope,
        partitions: Vec<u32>,
    ) -> Result<(), EventStorageError> {
        let renewal = scope == Scope::Renewal;
        let membership = if renewal || self.membership.due() {
            let (group, owner) = (&self.shared.group, &self.shared.owner);
            let lease_names = self.membership.lease_names(group, owner);
            self.shared
                .set_membership(self.membership.leaving(group, owner));
            lease_names
        } else {
            Vec::new()
        };
        if partitions.is_empty() && membership.is_empty() {
            return Ok(());
        }
        let announcements = membership.len();
        let mut requests = Vec::with_capacity(partitions.len() + announcements);
        for lease_name in membership {
            requests.push(self.request(lease_name, i64::from(self.shared.partitions)));
        }
        for partition in &partitions {
            let priority = if self.target.contains(partition) {
                TARGET_PRIORITY
            } else {
                OTHER_PRIORITY
            };
            let lease_name = partition_lease_name(&self.shared.group, *partition);
            requests.push(self.request(lease_name, priority));
        }
        if renewal {
            self.registered.clear();
        }
        self.registered
            .extend(partitions.iter().filter(|p| self.target.contains(p)));
        let sent = Instant::now();
        let valid_until = sent + self.settings.ttl - self.settings.safety_margin;
        let responses = self.send(requests, valid_until - sent).await?;
        let (announced, answers) = responses.split_at(announcements.min(responses.len()));
        if announcements > 0 {
            self.membership.answered(announced);
        }
        if Instant::now() >= valid_until {
            // Too late to confer anything; what was held lapses at its own deadline.
            return Ok(());
        }
        self.apply(scope, &partitions, answers, valid_until);
        Ok(())
    }

    /// Sends a batch, giving up after `limit`.
    async fn send(
        &self,
        requests: Vec<LeaseRequest>,
        limit: Duration,
    ) -> Result<Vec<LeaseResponse>, EventStorageError> {
        let storage = Arc::clone(&self.storage);
        match timeout(limit, async move { storage.request_leases(requests).await }).await {
            Ok(answer) => answer,
            Err(_elapsed) => Err(EventStorageError::timeout(
                format!("request_leases(group {})", self.shared.group),
                limit,
            )),
        }
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
    ///
    /// A renewal confirmed every partition held, so its deadline replaces the last one; any
    /// other batch confirmed only some, so the earlier deadline stands for all.
    fn apply(
        &mut self,
        scope: Scope,
        partitions: &[u32],
        answers: &[LeaseResponse],
        valid_until: Instant,
    ) {
        let mut holdings = match scope {
            Scope::Renewal => Holdings::default(),
            Scope::Changes => self.shared.holdings(),
        };
        holdings.deadline = match (scope, holdings.deadline) {
            (Scope::Changes, Some(deadline)) => Some(deadline.min(valid_until)),
            _ => Some(valid_until),
        };
        for (partition, answer) in partitions.iter().zip(answers) {
            holdings.held.remove(partition);
            holdings.handing_over.remove(partition);
            let token = answer.fencing_token;
            match answer.status {
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
}
