//! Letting partitions go: handovers, withdrawn registrations, and leaving the group.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::{timeout, Instant};

use super::PartitionLoop;
use crate::partitions::names::partition_lease_name;
use crate::partitions::watch::Holdings;
use crate::{EventStorage, EventStorageError};

impl PartitionLoop {
    /// Withdraws the contender registrations of partitions neither in the target nor held any
    /// more, so that a stale registration never asks their holder to step down; and releases
    /// those the storage still records this member as holding (`held_in_storage`, as the round
    /// read them) though it neither holds nor hands them over as far as it knows: after a
    /// lapse, or an answer that came too late to count, nothing works on them here, and they
    /// would keep their target member waiting for their ttl.
    pub(super) async fn withdraw_dropped(
        &mut self,
        previous: &Holdings,
        previous_target: &BTreeSet<u32>,
        held_in_storage: &BTreeSet<u32>,
    ) {
        let holdings = self.shared.holdings();
        let dropped: BTreeSet<u32> = previous
            .held
            .keys()
            .chain(previous.handing_over.keys())
            .chain(previous_target)
            .chain(held_in_storage)
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
    pub(super) async fn hand_over_due(&mut self) {
        let now = Instant::now();
        let acknowledged = self.shared.take_acknowledged();
        let mut holdings = self.shared.holdings();
        // A lapse ends every handover at once; its drain deadlines must go with it, or the
        // wait would wake for them again and again.
        self.drain_deadlines
            .retain(|partition, _| holdings.handing_over.contains_key(partition));
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

    /// Releases `partitions` in one call, given up after a ttl, or sooner while partitions are
    /// held (see [`PartitionLoop::before_renewals`]): a hung storage must not hang the loop;
    /// what is not released expires. Until the call returns they count as
    /// `releasing`, for a shutdown that cuts it short.
    async fn release(&mut self, partitions: Vec<u32>) {
        // A member leaving with nothing held asks nothing (a closed storage would answer an
        // empty call `Closed`, which would be logged as a failed release).
        if partitions.is_empty() {
            return;
        }
        let lease_names: Vec<String> = partitions
            .iter()
            .map(|partition| partition_lease_name(&self.shared.group, *partition))
            .collect();
        self.releasing.extend(&partitions);
        // A release withdraws the registration as contender too: a partition back in the
        // target must be asked for again, not taken for registered.
        for partition in &partitions {
            self.registered.remove(partition);
        }
        self.release_leases(&lease_names).await.ok();
        for partition in &partitions {
            self.releasing.remove(partition);
        }
    }

    pub(super) async fn release_leases(
        &self,
        lease_names: &[String],
    ) -> Result<(), EventStorageError> {
        let owner = &self.shared.owner;
        // A hung release of partitions handed over must not hold up the renewal of those kept.
        let limit = self.before_renewals(self.settings.ttl);
        let released = release_within(self.storage.as_ref(), lease_names, owner, limit).await;
        if let Err(error) = &released {
            tracing::warn!(group = %self.shared.group, %owner, leases = ?lease_names,
                error = %error.report(), "release failed; the leases expire after their ttl");
        }
        released
    }

    /// Leaves the group: the membership first, so that the others rebalance at once, then
    /// every partition held, asked for, on its way out when the shutdown came, or recorded as
    /// this member's when the group was last read (a lapse forgets those it still holds).
    pub(super) async fn release_all(&mut self) -> Result<(), EventStorageError> {
        let holdings = self.shared.holdings();
        self.shared.lapse(true);
        let leaving = self
            .membership
            .leaving(&self.shared.group, &self.shared.owner);
        let membership = if leaving.is_empty() {
            Ok(())
        } else {
            self.release_leases(&leaving).await
        };
        let partitions: BTreeSet<u32> = holdings
            .held
            .keys()
            .chain(holdings.handing_over.keys())
            .chain(self.target.iter())
            .chain(self.releasing.iter())
            .chain(self.held_when_read.iter())
            .copied()
            .collect();
        self.release(partitions.into_iter().collect()).await;
        membership
    }
}

/// Releases `lease_names` held by `owner` in one call, giving up after `ttl` (a hung storage
/// must not hang the loop or a shutdown; what is not released expires).
pub(crate) async fn release_within(
    storage: &dyn EventStorage,
    lease_names: &[String],
    owner: &str,
    ttl: Duration,
) -> Result<(), EventStorageError> {
    match timeout(ttl, storage.release_leases(lease_names, owner)).await {
        Ok(released) => released.map(drop),
        Err(_elapsed) => Err(EventStorageError::timeout(
            format!("release_leases({} leases)", lease_names.len()),
            ttl,
        )),
    }
}
