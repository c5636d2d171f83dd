//! Partitioned work: M partitions of a group spread over the live instances, each partition
//! held under a lease of its own, balanced, fenced, and handed over by priority.
//!
//! Every instance of a deployment starts a [`PartitionElector`] for the same group. It holds
//! the leases `{group}/{partition}` for partitions `0..partitions` and announces itself by
//! holding a seat, `{group}/seats/{n}`, whose priority is its partition count. A member takes
//! one of the lowest seats nobody holds, so members that come and go under new owner ids take
//! the same seats again, and a group keeps its partitions' leases, a seat for each of its most
//! members at once and [`FREE_SEATS`] more (lease rows are never deleted). Once per request
//! interval it
//!
//! 1. reads the group from the storage: the live members and who holds which partition,
//!    judged on the storage's clock ([`EventStorageExt::get_leases_with_prefix`] of `{group}/`,
//!    the group's leases alone, and [`EventStorage::storage_time`], sent together);
//! 2. computes its target: a balanced assignment (each of N members gets ⌊M/N⌋ or ⌈M/N⌉
//!    partitions) that keeps every partition with its holder as far as balance allows, so a
//!    join or a leave moves about M/N partitions, and places the rest by rendezvous hashing;
//! 3. sends one [`EventStorage::request_leases`] batch: its seat, its target partitions
//!    with a high priority, and every other partition it still holds with a low one.
//!
//! [`GroupStatus::read`] shows a group as the storage has it (its live members, what each
//! holds, what nobody holds), for operators and health checks.
//!
//! Members of earlier versions announced themselves with a lease of their own,
//! `{group}/members/{owner}`, and see only members announced so. While one of them is live
//! (a rolling upgrade), a member announces itself that way too, besides its seat.
//!
//! The storage's step-down rule does the moving: a holder of a partition that should move
//! renews it with the low priority while its target member asks with the high one, so the
//! holder is asked to step down. The partition leaves [`PartitionWatch::held`] and shows in
//! [`PartitionWatch::handing_over`]; the work finishes the unit in hand and calls
//! [`PartitionWatch::hand_over`] (or the drain timeout passes), the elector releases it, and
//! the target member acquires it with the next token.
//!
//! Like the [`LeaderElector`](crate::LeaderElector), a partition counts only until the send
//! time of the last confirmed request plus the ttl minus the safety margin, on this process's
//! monotonic clock, and [`PartitionWatch::held`] checks that deadline on every call. Every
//! write stamped with a partition's [`Fence`] is refused once another member
//! holds it, so a paused member cannot write into a partition that moved.
//!
//! With a storage that pushes lease changes ([`Capability::LeaseChanges`]) an elector runs a
//! round as soon as a member joins or leaves, a partition of its target is released, or it is
//! asked to hand a partition over, so a join or a graceful leave settles in milliseconds.
//! Without, it settles within about two request intervals. A member that dies loses its
//! partitions when their leases expire; the others hold them within a ttl and an interval.
//!
//! # Examples
//! ```
//! # use std::{sync::Arc, time::Duration};
//! # use eventstore::{EventStorage, partitions::PartitionElector};
//! # async fn work(storage: Arc<dyn EventStorage>) -> Result<(), Box<dyn std::error::Error>> {
//! let elector = PartitionElector::builder(storage, "orders", 12)
//!     .owner("pod-a")
//!     .ttl(Duration::from_secs(15))
//!     .start()?;
//! let mut watch = elector.watch();
//! loop {
//!     for (partition, fence) in watch.held() {
//!         // one unit of work on `partition`, every write stamped with `fence`
//!     }
//!     for (partition, _fence) in watch.handing_over() {
//!         watch.hand_over(partition); // nothing in hand: let it go now
//!     }
//!     if watch.changed().await.is_err() {
//!         break; // the elector stopped
//!     }
//!     # break;
//! }
//! elector.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! [`EventStorageExt::get_leases_with_prefix`]: crate::EventStorageExt::get_leases_with_prefix
//! [`EventStorage::storage_time`]: crate::EventStorage::storage_time
//! [`EventStorage::request_leases`]: crate::EventStorage::request_leases

mod assignment;
mod names;
mod status;
mod task;
mod view;
mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch as channel;
use tokio::task::JoinHandle;

pub use names::{member_lease_name, partition_lease_name, seat_lease_name};
pub use status::{GroupMember, GroupStatus};
pub use watch::{PartitionElectorStopped, PartitionWatch};

use crate::elector::{default_grace, shorter_than_ttl, Timings, DEFAULT_TTL};
use crate::{validate, Capability, EventStorage, EventStorageError, Fence};
use names::GroupNames;
use task::{release_within, LoopSettings, Membership, PartitionLoop};
use watch::Shared;

/// How many of the lowest free seats a joining member picks its seat from, at random: members
/// that join at once spread over them (one that loses a race for a seat picks again soon), and
/// a group never has more seats than this beyond its most members at once.
pub const FREE_SEATS: usize = 4;

/// The most partitions a group may have: every member reads the whole group each interval,
/// and a lone member renews every partition in one batch.
pub const MAX_PARTITIONS: u32 = 100_000;

// A lone member renews every partition, its seat and (in a rolling upgrade) its announcement
// as earlier versions made it, in one batch.
const _: () = assert!((MAX_PARTITIONS as usize) + 2 <= validate::MAX_LEASE_BATCH);

/// Builds a [`PartitionElector`]; see [`PartitionElector::builder`].
#[derive(Debug)]
pub struct PartitionElectorBuilder {
    storage: Arc<dyn EventStorage>,
    group: String,
    partitions: u32,
    owner: Option<String>,
    ttl: Duration,
    request_interval: Option<Duration>,
    safety_margin: Option<Duration>,
    handover_grace: Option<Duration>,
    drain_timeout: Option<Duration>,
}

impl PartitionElectorBuilder {
    /// This instance's owner id: stable for its lifetime, unique in the group. By default a
    /// fresh [`crate::elector::unique_owner_id`].
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// How long a partition (and this member) lasts without renewal
    /// ([`crate::elector::DEFAULT_TTL`] by default); also how long a crashed member's
    /// partitions stay blocked.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How often to run a round (a third of the ttl by default). Each wait is shortened by up
    /// to a fifth at random.
    pub fn request_interval(mut self, interval: Duration) -> Self {
        self.request_interval = Some(interval);
        self
    }

    /// How much earlier than the storage this instance gives its partitions up (a twentieth
    /// of the ttl by default, at least a hundredth).
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// Over how long a lost-notification signal spreads the members' rounds (a fortieth of the
    /// ttl by default, at least 10 ms, at most half the ttl). Only used with storages that
    /// push lease changes.
    pub fn handover_grace(mut self, grace: Duration) -> Self {
        self.handover_grace = Some(grace);
        self
    }

    /// How long a partition being handed over waits for [`PartitionWatch::hand_over`] before
    /// it is released anyway (a twentieth of the ttl by default, at least 10 ms, at most half
    /// the ttl). A write of the unit still in hand after that is refused by the fence.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = Some(timeout);
        self
    }

    /// Checks the settings and starts the elector's task on the current tokio runtime.
    ///
    /// # Errors
    /// [`EventStorageError::Unsupported`] when the storage does not offer
    /// [`Capability::Lease`]; [`EventStorageError::InvalidInput`] for a partition count of 0
    /// or above [`MAX_PARTITIONS`], a group name that is blank, holds a `/` or makes a lease
    /// name too long, an invalid owner, a ttl out of range, or timings that cannot work (see
    /// [`crate::elector::ElectorBuilder::start`]; the drain timeout must be shorter than the
    /// ttl).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn start(self) -> Result<PartitionElector, EventStorageError> {
        if !self.storage.supports(Capability::Lease) {
            return Err(EventStorageError::unsupported(
                "partitioned election (it needs Capability::Lease)",
                self.storage.name(),
            ));
        }
        validate_partitions(self.partitions)?;
        let owner = self
            .owner
            .clone()
            .unwrap_or_else(crate::elector::unique_owner_id);
        validate_group(&self.group, self.partitions, &owner)?;
        let settings = self.settings()?;
        let ttl = settings.ttl;
        let shared = Shared::new(self.group.clone(), owner, self.partitions);
        let (shutdown, shutdown_requested) = channel::channel(false);
        let rounds = PartitionLoop {
            storage: self.storage,
            shared: Arc::clone(&shared),
            names: GroupNames::new(&self.group, self.partitions),
            settings,
            shutdown: shutdown_requested,
            target: BTreeSet::new(),
            drain_deadlines: BTreeMap::new(),
            released: BTreeSet::new(),
            registered: BTreeSet::new(),
            releasing: BTreeSet::new(),
            held_when_read: BTreeSet::new(),
            requested: false,
            count_mismatched: false,
            membership: Membership::default(),
        };
        let storage = Arc::clone(&rounds.storage);
        let task = tokio::spawn(rounds.run());
        Ok(PartitionElector {
            storage,
            ttl,
            watch: PartitionWatch::new(shared),
            shutdown,
            task: Some(task),
        })
    }

    fn settings(&self) -> Result<LoopSettings, EventStorageError> {
        let timings = Timings::check(
            self.ttl,
            self.request_interval,
            self.safety_margin,
            self.handover_grace,
        )?;
        let drain_timeout = self
            .drain_timeout
            .unwrap_or_else(|| default_grace(timings.ttl, 20));
        shorter_than_ttl("drain timeout", drain_timeout, timings.ttl)?;
        Ok(LoopSettings {
            ttl: timings.ttl,
            request_interval: timings.request_interval,
            safety_margin: timings.safety_margin,
            handover_grace: timings.handover_grace,
            drain_timeout,
        })
    }
}

fn validate_partitions(partitions: u32) -> Result<(), EventStorageError> {
    if partitions == 0 || partitions > MAX_PARTITIONS {
        return Err(EventStorageError::invalid(
            "partition count",
            partitions.to_string(),
            format!("must be between 1 and {MAX_PARTITIONS}"),
        ));
    }
    Ok(())
}

fn validate_group(group: &str, partitions: u32, owner: &str) -> Result<(), EventStorageError> {
    validate_group_name(group)?;
    validate::validate_name("lease owner", owner)?;
    validate::validate_name("lease name", &member_lease_name(group, owner))?;
    validate::validate_name("lease name", &partition_lease_name(group, partitions - 1))
}

/// A group's name as its lease names can carry it: a name without `/`, which separates the
/// group from what follows in them (a group `work/seats` would read the seats of `work`).
fn validate_group_name(group: &str) -> Result<(), EventStorageError> {
    validate::validate_name("partition group", group)?;
    if group.contains('/') {
        return Err(EventStorageError::invalid(
            "partition group",
            group,
            "must not contain '/', which separates the group from the partition in lease names",
        ));
    }
    Ok(())
}

/// Holds a balanced share of a group's partitions for one instance, on a tokio task; see the
/// [module documentation](self).
///
/// Stop it with [`PartitionElector::shutdown`], which leaves the group and releases every
/// partition, so the others take them at once. Dropping it shuts it down too, in the
/// background.
#[derive(Debug)]
pub struct PartitionElector {
    /// For the releases a shutdown makes when the loop died before it could.
    storage: Arc<dyn EventStorage>,
    ttl: Duration,
    watch: PartitionWatch,
    shutdown: channel::Sender<bool>,
    task: Option<JoinHandle<Result<(), EventStorageError>>>,
}

impl PartitionElector {
    /// A builder for an elector of `partitions` partitions of `group` on `storage`.
    ///
    /// Every member of a group must count the same partitions: members that count
    /// differently never agree on who holds which. Each member announces its count as the
    /// priority of its seat (see the [module documentation](self)). A member that sees
    /// another live member announce another count, or a partition of its group at or above
    /// its own count held, logs a warning once and sets the gauge
    /// [`PARTITION_COUNT_MISMATCH`](crate::telemetry::PARTITION_COUNT_MISMATCH) to 1 for as
    /// long as it sees either (0 again once it stops); it runs on, so that a rolling change
    /// of the count can pass through.
    pub fn builder(
        storage: Arc<dyn EventStorage>,
        group: impl Into<String>,
        partitions: u32,
    ) -> PartitionElectorBuilder {
        PartitionElectorBuilder {
            storage,
            group: group.into(),
            partitions,
            owner: None,
            ttl: DEFAULT_TTL,
            request_interval: None,
            safety_margin: None,
            handover_grace: None,
            drain_timeout: None,
        }
    }

    /// A handle for the work the partitions guard; clone it freely.
    pub fn watch(&self) -> PartitionWatch {
        self.watch.clone()
    }

    /// The partitions held at this instant, each with its fence (see
    /// [`PartitionWatch::held`]).
    pub fn held(&self) -> BTreeMap<u32, Fence> {
        self.watch.held()
    }

    /// This instance's owner id.
    pub fn owner(&self) -> &str {
        self.watch.owner()
    }

    /// Leaves the group and releases every partition, so the other members take them at
    /// once. Stop the guarded work first.
    ///
    /// Requests under way are let finish first (for at most a ttl), so that none can reach
    /// the storage after the releases and take back what they released; releases that hang
    /// are given up after a ttl.
    ///
    /// # Errors
    /// The release of the leases that announce the member (its seat) failed (the partitions are released anyway; what
    /// fails to release expires after its ttl).
    pub async fn shutdown(mut self) -> Result<(), EventStorageError> {
        let _ = self.shutdown.send(true);
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match task.await {
            Ok(released) => released,
            // The loop panicked (in a storage it called, say) and released nothing; what it
            // held is no longer known, so the membership and every partition are released.
            Err(died) => {
                let watch = &self.watch;
                tracing::error!(group = %watch.group(), owner = %watch.owner(), error = %died,
                    "the partition elector's loop died; releasing its leases on shutdown");
                let mut lease_names = watch.membership();
                lease_names.extend(
                    (0..watch.partitions()).map(|n| partition_lease_name(watch.group(), n)),
                );
                release_within(self.storage.as_ref(), &lease_names, watch.owner(), self.ttl).await
            }
        }
    }

    /// Stops at once without releasing anything, as if the process had died: the partitions
    /// lapse after their ttl. For tests and demonstrations of a crash.
    pub fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        // Drop must not signal a shutdown: a task still inside its current poll would see it
        // and release. Dropping the real sender without a value is no signal to it.
        self.shutdown = channel::channel(false).0;
        self.watch.lapse_as_stopped();
    }
}

impl Drop for PartitionElector {
    fn drop(&mut self) {
        // The task sees the signal and releases on its own.
        let _ = self.shutdown.send(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_counts_and_groups_name_the_value_and_the_limit() {
        let error = validate_partitions(0).unwrap_err().to_string();
        assert!(
            error.contains("partition count") && error.contains("100000"),
            "{error}"
        );
        assert!(validate_partitions(MAX_PARTITIONS + 1).is_err());
        assert!(validate_partitions(MAX_PARTITIONS).is_ok());
        let error = validate_group("a/b", 1, "o").unwrap_err().to_string();
        assert!(error.contains("a/b") && error.contains('/'), "{error}");
        assert!(validate_group(" ", 1, "o").is_err());
        let long = "g".repeat(500);
        let error = validate_group(&long, 1, "owner-x").unwrap_err().to_string();
        assert!(error.contains("lease name"), "{error}");
    }
}
