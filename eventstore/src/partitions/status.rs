//! A partition group as the storage shows it, for operators and health checks: who is a live
//! member, what each holds, what nobody holds.

use crate::LeaseSelection;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::names::{GroupLease, GroupNames};
use super::{validate_group_name, MAX_PARTITIONS};
use crate::{EventStorage, EventStorageError, Lease};

/// A partition group at one instant of the storage's clock.
///
/// # Examples
/// ```
/// # use eventstore::{EventStorage, partitions::GroupStatus};
/// # async fn check(storage: &dyn EventStorage) -> Result<(), eventstore::EventStorageError> {
/// let status = GroupStatus::read(storage, "orders").await?;
/// if !status.unheld().is_empty() {
///     eprintln!("partitions nobody holds: {:?}", status.unheld());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupStatus {
    /// The group's name.
    pub group: String,
    /// The instant on the storage's clock at which every lease was judged live or not.
    pub storage_time: DateTime<Utc>,
    /// The live members, by owner id.
    pub members: Vec<GroupMember>,
    /// The partitions held live, by partition: the holder's owner id. A holder whose
    /// membership has lapsed still holds what it holds until those leases lapse too.
    pub holders: BTreeMap<u32, String>,
    /// The seats held live, by seat: the holder's owner id. A member holds one, but for a
    /// moment in which it has taken a second and not yet let the first go.
    pub seats: BTreeMap<u32, String>,
}

/// A live member of a partition group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupMember {
    /// Its owner id.
    pub owner: String,
    /// Its seat (the lowest, should it hold two for a moment); `None` for a member of an
    /// earlier version, which announces itself with a lease of its own instead.
    pub seat: Option<u32>,
    /// The partition count it was started with, as it announces it (`None` when it announces
    /// none, or more than [`MAX_PARTITIONS`]).
    pub partitions: Option<u32>,
    /// The partitions it holds live, in order.
    pub held: Vec<u32>,
}

impl GroupStatus {
    /// Reads the leases of `group` and judges them on the storage's clock (two calls, sent
    /// together).
    ///
    /// # Errors
    /// `InvalidInput` for a name no group can have (blank, or with a `/`: `work/seats` would
    /// read the seats of `work` as partitions), without reading a lease; `Closed` comes first,
    /// as in every storage call. What the storage's [`EventStorageExt::get_leases_with_prefix`](crate::EventStorageExt::get_leases_with_prefix)
    /// and [`EventStorage::storage_time`] fail with: `Unsupported` without leases, say.
    pub async fn read(storage: &dyn EventStorage, group: &str) -> Result<Self, EventStorageError> {
        if let Err(invalid) = validate_group_name(group) {
            return Err(match storage.storage_time().await {
                Err(EventStorageError::Closed) => EventStorageError::Closed,
                _ => invalid,
            });
        }
        let prefix = format!("{group}/");
        let (leases, now) = tokio::join!(
            storage.list_leases(LeaseSelection::prefix(prefix)),
            storage.storage_time()
        );
        Ok(Self::of_leases(group, leases?, now?))
    }

    /// The status of `group` that `leases` show, judged live at `now`. Takes the leases, whose
    /// owner ids it keeps: a group may have 100,000 partitions, read every interval.
    pub fn of_leases(group: &str, leases: Vec<Lease>, now: DateTime<Utc>) -> Self {
        // Every number is a partition here: the count is what the members announce.
        let names = GroupNames::new(group, u32::MAX);
        let mut members: BTreeMap<String, GroupMember> = BTreeMap::new();
        let mut holders = BTreeMap::new();
        let mut seats = BTreeMap::new();
        for lease in leases.into_iter().filter(|lease| !lease.is_expired_at(now)) {
            match names.parse(&lease.lease_name) {
                Some(GroupLease::Partition(partition) | GroupLease::BeyondCount(partition)) => {
                    holders.insert(partition, lease.owner);
                    continue;
                }
                Some(GroupLease::Seat(seat)) => {
                    seats.insert(seat, lease.owner.clone());
                }
                Some(GroupLease::Member(owner)) if owner == lease.owner => {}
                _ => continue,
            }
            let member = members
                .entry(lease.owner.clone())
                .or_insert_with(|| GroupMember {
                    owner: lease.owner.clone(),
                    seat: None,
                    partitions: None,
                    held: Vec::new(),
                });
            // Its membership's priority is the count it announces; 0 announces none, and
            // neither does a priority no member could be started with (another application's
            // lease under the group's names, say), which would make a range of billions.
            member.partitions = member.partitions.or_else(|| {
                u32::try_from(lease.priority)
                    .ok()
                    .filter(|count| (1..=MAX_PARTITIONS).contains(count))
            });
        }
        // In order, so that a member holding two seats for a moment shows the lowest.
        for (seat, holder) in &seats {
            if let Some(member) = members.get_mut(holder) {
                member.seat.get_or_insert(*seat);
            }
        }
        for (partition, holder) in &holders {
            if let Some(member) = members.get_mut(holder) {
                member.held.push(*partition);
            }
        }
        GroupStatus {
            group: group.to_owned(),
            storage_time: now,
            members: members.into_values().collect(),
            holders,
            seats,
        }
    }

    /// The partition counts the live members announce (members of versions that announced
    /// none are left out): one when they agree.
    pub fn announced_counts(&self) -> Vec<u32> {
        let counts: std::collections::BTreeSet<u32> =
            self.members.iter().filter_map(|m| m.partitions).collect();
        counts.into_iter().collect()
    }

    /// The partition count the live members announce, if some announce one and all that do
    /// agree.
    pub fn partitions(&self) -> Option<u32> {
        match self.announced_counts()[..] {
            [count] => Some(count),
            _ => None,
        }
    }

    /// The partitions below the members' count that nobody holds live (none when the count
    /// is not known: see [`GroupStatus::partitions`]).
    pub fn unheld(&self) -> Vec<u32> {
        let count = self.partitions().unwrap_or(0);
        (0..count)
            .filter(|partition| !self.holders.contains_key(partition))
            .collect()
    }

    /// Whether the group has settled: the members agree on the count M, each of the M
    /// partitions is held by a live member, none at or above M is held, and each of the N
    /// members holds ⌊M/N⌋ or ⌈M/N⌉.
    pub fn is_balanced(&self) -> bool {
        let Some(count) = self.partitions() else {
            return false;
        };
        let members = self.members.len() as u32;
        let (floor, ceil) = (count / members, count.div_ceil(members));
        let with_members = self
            .holders
            .values()
            .all(|holder| self.members.iter().any(|m| m.owner == *holder));
        self.holders.keys().copied().eq(0..count)
            && with_members
            && self.members.iter().all(|member| {
                let held = member.held.len() as u32;
                floor <= held && held <= ceil
            })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::FencingToken;

    fn lease(name: &str, owner: &str, priority: i64, at: DateTime<Utc>) -> Lease {
        Lease {
            lease_name: name.into(),
            owner: owner.into(),
            priority,
            fencing_token: FencingToken(1),
            acquired_at: at,
            heartbeat_at: at,
            ttl: Duration::from_secs(10),
        }
    }

    #[test]
    fn members_holders_and_what_nobody_holds() {
        let now = Utc::now();
        let old = now - chrono::Duration::seconds(11);
        let status = GroupStatus::of_leases(
            "g",
            vec![
                lease("g/seats/1", "b", 4, now),
                lease("g/seats/0", "a", 4, now),
                lease("g/seats/2", "c", 4, old),
                lease("g/members/earlier", "earlier", 4, now),
                lease("g/0", "a", 1, now),
                lease("g/1", "b", 1, now),
                lease("g/3", "c", 1, now), // c's seat lapsed; it still holds 3 for now
                lease("g/2", "a", 1, old),
                lease("other/seats/0", "z", 4, now),
            ],
            now,
        );
        let owners: Vec<(&str, Option<u32>, Vec<u32>)> = status
            .members
            .iter()
            .map(|m| (m.owner.as_str(), m.seat, m.held.clone()))
            .collect();
        assert_eq!(
            owners,
            [
                ("a", Some(0), vec![0]),
                ("b", Some(1), vec![1]),
                ("earlier", None, vec![])
            ]
        );
        assert_eq!(status.holders.get(&3).map(String::as_str), Some("c"));
        assert_eq!(status.partitions(), Some(4));
        assert_eq!(status.unheld(), [2]);
        assert!(!status.is_balanced());
    }

    #[test]
    fn balanced_needs_every_partition_with_a_member_and_the_members_agreeing() {
        let now = Utc::now();
        let mut leases = [
            lease("g/seats/0", "a", 3, now),
            lease("g/seats/1", "b", 3, now),
            lease("g/0", "a", 1, now),
            lease("g/1", "b", 1, now),
            lease("g/2", "a", 1, now),
        ];
        assert!(GroupStatus::of_leases("g", leases.to_vec(), now).is_balanced());
        leases[1].priority = 4;
        let disagreeing = GroupStatus::of_leases("g", leases.to_vec(), now);
        assert_eq!(disagreeing.partitions(), None);
        assert!(!disagreeing.is_balanced());
        assert!(disagreeing.unheld().is_empty());
        leases[1].priority = 3;
        leases[4].owner = "a-stranger".into();
        assert!(!GroupStatus::of_leases("g", leases.to_vec(), now).is_balanced());
    }

    #[test]
    fn a_partition_beyond_the_count_stands_in_for_no_unheld_one() {
        let now = Utc::now();
        let leases = [
            lease("g/seats/0", "a", 4, now),
            lease("g/seats/1", "b", 4, now),
            lease("g/0", "a", 1, now),
            lease("g/1", "a", 1, now),
            lease("g/2", "b", 1, now),
            lease("g/7", "b", 1, now),
        ];
        let status = GroupStatus::of_leases("g", leases.to_vec(), now);
        assert_eq!(status.unheld(), [3]);
        assert!(
            !status.is_balanced(),
            "balanced while partition 3 is unheld"
        );
    }

    #[test]
    fn members_that_announce_no_count_are_left_out_of_the_count() {
        let now = Utc::now();
        let mut leases = vec![
            lease("g/members/a", "a", 0, now),
            lease("g/members/b", "b", 0, now),
            lease("g/0", "a", 1, now),
            lease("g/1", "b", 1, now),
        ];
        let status = GroupStatus::of_leases("g", leases.to_vec(), now);
        assert_eq!(status.announced_counts(), Vec::<u32>::new());
        assert_eq!(status.partitions(), None);
        leases.push(lease("g/seats/0", "c", 2, now));
        let status = GroupStatus::of_leases("g", leases.to_vec(), now);
        assert_eq!(status.announced_counts(), [2]);
        assert_eq!(status.partitions(), Some(2));
        // Two partitions over three members: one each for two of them.
        assert!(status.is_balanced(), "{status:?}");
        assert!(status.unheld().is_empty());
    }

    #[test]
    fn a_member_holding_two_seats_for_a_moment_shows_the_lowest_and_both_are_taken() {
        let now = Utc::now();
        let leases = [
            lease("g/seats/3", "a", 2, now),
            lease("g/seats/1", "a", 2, now),
            lease("g/seats/0", "b", 2, now),
        ];
        let status = GroupStatus::of_leases("g", leases.to_vec(), now);
        let seats: Vec<(&str, Option<u32>)> = status
            .members
            .iter()
            .map(|m| (m.owner.as_str(), m.seat))
            .collect();
        assert_eq!(seats, [("a", Some(1)), ("b", Some(0))]);
        assert_eq!(
            status.seats.keys().copied().collect::<Vec<u32>>(),
            [0, 1, 3]
        );
    }

    #[test]
    fn a_count_no_member_could_be_started_with_is_no_count() {
        let now = Utc::now();
        let status = GroupStatus::of_leases(
            "g",
            vec![lease("g/seats/0", "a", i64::from(u32::MAX), now)],
            now,
        );
        assert_eq!(status.members[0].partitions, None);
        assert_eq!(status.partitions(), None);
        assert!(status.unheld().is_empty());
    }
}
