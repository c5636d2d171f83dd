//! What an instance holds of a partition group, and the cheap handle work loops check.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::names::partition_lease_name;
use crate::{Fence, FencingToken};

/// The partitions of one instance as the storage last confirmed them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Holdings {
    /// Held, to be worked on: partition → token.
    pub(super) held: BTreeMap<u32, FencingToken>,
    /// Held, but another member should have them: finish the unit of work in hand, then
    /// [`PartitionWatch::hand_over`].
    pub(super) handing_over: BTreeMap<u32, FencingToken>,
    /// Every partition counts only until then: the send time of the last confirmed request
    /// plus the ttl minus the safety margin, on this process's monotonic clock.
    pub(super) deadline: Option<Instant>,
    /// The elector has stopped.
    pub(super) stopped: bool,
}

impl Holdings {
    fn valid_now(&self) -> bool {
        self.deadline
            .is_some_and(|deadline| Instant::now() < deadline)
    }
}

/// State shared by the elector task and every [`PartitionWatch`].
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) group: String,
    pub(super) owner: String,
    pub(super) partitions: u32,
    publisher: watch::Sender<Holdings>,
    /// Partitions whose handover the work acknowledged, not yet released.
    acknowledged: Mutex<BTreeSet<u32>>,
    /// Wakes the task when the work acknowledges a handover.
    pub(super) acknowledgement: Notify,
    /// The leases this member may hold to announce itself: what a shutdown releases when the
    /// loop died before it could.
    membership: Mutex<Vec<String>>,
}

impl Shared {
    pub(super) fn new(group: String, owner: String, partitions: u32) -> Arc<Self> {
        let (publisher, _) = watch::channel(Holdings::default());
        Arc::new(Shared {
            group,
            owner,
            partitions,
            publisher,
            acknowledged: Mutex::new(BTreeSet::new()),
            acknowledgement: Notify::new(),
            membership: Mutex::new(Vec::new()),
        })
    }

    pub(super) fn holdings(&self) -> Holdings {
        self.publisher.borrow().clone()
    }

    /// Publishes `holdings`, telling watchers only when something they see changed. Once
    /// stopped is published nothing replaces it: an abort may land while the task is inside
    /// a poll that publishes what it just learned.
    pub(super) fn publish(&self, holdings: Holdings) {
        self.publisher.send_if_modified(|current| {
            if current.stopped {
                return false;
            }
            // Holdings whose deadline passed while the task did not run (a pause, a starved
            // runtime) were never published as lost, yet watchers saw them lapse (`held`
            // judges the deadline) and wait for a change: holdings valid again wake them,
            // though they name the same partitions and tokens.
            let lapsed_unseen = current.deadline.is_some() && !current.valid_now();
            let changed = current.held != holdings.held
                || current.handing_over != holdings.handing_over
                || current.stopped != holdings.stopped
                || current.deadline.is_some() != holdings.deadline.is_some()
                || (lapsed_unseen && holdings.valid_now());
            *current = holdings;
            changed
        });
    }

    /// Nothing counts any more: the deadline passed unconfirmed, or the elector stopped.
    pub(super) fn lapse(&self, stopped: bool) {
        self.publish(Holdings {
            stopped,
            ..Holdings::default()
        });
    }

    /// Records the leases this member may hold to announce itself.
    pub(super) fn set_membership(&self, lease_names: Vec<String>) {
        *lock(&self.membership) = lease_names;
    }

    /// The leases this member may hold to announce itself.
    pub(super) fn membership(&self) -> Vec<String> {
        lock(&self.membership).clone()
    }

    /// Takes the acknowledged handovers.
    pub(super) fn take_acknowledged(&self) -> BTreeSet<u32> {
        std::mem::take(&mut *lock(&self.acknowledged))
    }

    fn fences(&self, partitions: &BTreeMap<u32, FencingToken>) -> BTreeMap<u32, Fence> {
        partitions
            .iter()
            .map(|(partition, token)| {
                let lease_name = partition_lease_name(&self.group, *partition);
                (*partition, Fence::new(lease_name, *token))
            })
            .collect()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The elector stopped; see [`PartitionWatch::changed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the partition elector stopped")]
pub struct PartitionElectorStopped;

/// A handle on the partitions an instance holds, for the work they guard; clone it freely.
///
/// Every answer checks the deadline of the last confirmed request itself, so it is right even
/// when the elector's task runs late.
#[derive(Debug, Clone)]
pub struct PartitionWatch {
    shared: Arc<Shared>,
    changes: watch::Receiver<Holdings>,
}

impl PartitionWatch {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        let changes = shared.publisher.subscribe();
        PartitionWatch { shared, changes }
    }

    /// The partitions this instance holds at this instant, each with the [`Fence`] to stamp
    /// its writes with; partitions being handed over are not among them.
    pub fn held(&self) -> BTreeMap<u32, Fence> {
        let holdings = self.shared.publisher.borrow();
        if holdings.valid_now() {
            self.shared.fences(&holdings.held)
        } else {
            BTreeMap::new()
        }
    }

    /// Whether this instance holds `partition` at this instant with `fence`'s token (not
    /// while handing it over). A cheap check between units of work.
    pub fn holds(&self, partition: u32, fence: &Fence) -> bool {
        let holdings = self.shared.publisher.borrow();
        holdings.valid_now() && holdings.held.get(&partition) == Some(&fence.token)
    }

    /// The partitions this instance still holds but should give up: the balance moves them
    /// to another member. Start no new work on them; finish the unit in hand (its writes still
    /// pass the fence) and call [`PartitionWatch::hand_over`]. The elector releases a
    /// partition nobody acknowledges after the drain timeout
    /// ([`super::PartitionElectorBuilder::drain_timeout`]).
    pub fn handing_over(&self) -> BTreeMap<u32, Fence> {
        let holdings = self.shared.publisher.borrow();
        if holdings.valid_now() {
            self.shared.fences(&holdings.handing_over)
        } else {
            BTreeMap::new()
        }
    }

    /// Says the work on `partition` is finished: the elector releases it at once, and the
    /// member it moves to takes it with the next token.
    pub fn hand_over(&self, partition: u32) {
        lock(&self.shared.acknowledged).insert(partition);
        self.shared.acknowledgement.notify_one();
    }

    /// Waits until the held or handed-over partitions change.
    ///
    /// # Errors
    /// [`PartitionElectorStopped`] once the elector has stopped.
    pub async fn changed(&mut self) -> Result<(), PartitionElectorStopped> {
        if self.changes.borrow().stopped {
            return Err(PartitionElectorStopped);
        }
        self.changes
            .changed()
            .await
            .map_err(|_| PartitionElectorStopped)?;
        if self.changes.borrow_and_update().stopped {
            return Err(PartitionElectorStopped);
        }
        Ok(())
    }

    /// Takes every change so far as seen: [`PartitionWatch::changed`] waits for the next one.
    /// Called before reading what is held, so that a change already read is not waited for.
    pub(crate) fn mark_changes_seen(&mut self) {
        self.changes.borrow_and_update();
    }

    /// Marks the elector stopped: nothing is held any more.
    pub(super) fn lapse_as_stopped(&self) {
        self.shared.lapse(true);
    }

    /// The leases this member may hold to announce itself.
    pub(super) fn membership(&self) -> Vec<String> {
        self.shared.membership()
    }

    /// Whether the elector has stopped.
    pub fn is_stopped(&self) -> bool {
        self.shared.publisher.borrow().stopped
    }

    /// The group's name.
    pub fn group(&self) -> &str {
        &self.shared.group
    }

    /// How many partitions the group has.
    pub fn partitions(&self) -> u32 {
        self.shared.partitions
    }

    /// This instance's owner id.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn nothing_the_task_publishes_replaces_stopped() {
        let shared = Shared::new("numbers".into(), "node-a".into(), 2);
        let watch = PartitionWatch::new(Arc::clone(&shared));
        // An abort lands while the task is inside a poll...
        watch.lapse_as_stopped();
        // ...which then publishes what its round just confirmed.
        shared.publish(Holdings {
            held: BTreeMap::from([(0, FencingToken(1))]),
            deadline: Some(Instant::now() + Duration::from_secs(60)),
            ..Holdings::default()
        });
        assert!(watch.is_stopped());
        assert!(watch.held().is_empty(), "{:?}", watch.held());
    }
}
