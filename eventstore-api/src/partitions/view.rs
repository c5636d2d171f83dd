//! A group as the storage shows it: the live members and who holds which partition.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::assignment::{assign, Assignment};
use super::names::{GroupLease, GroupNames};
use crate::Lease;

/// The live members of a group and the live holders of its partitions, at one instant of the
/// storage's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupView {
    /// Owner ids, sorted.
    members: Vec<String>,
    /// Partition → index into `members`, for partitions a live member holds live.
    holders: BTreeMap<u32, usize>,
    /// The highest partition held live at or above this member's partition count, if any.
    beyond_count: Option<u32>,
    /// The partition counts live members announce with their membership, by member; members
    /// that announce none (priority 0, as before counts were announced) are left out.
    counts: BTreeMap<String, u32>,
}

impl GroupView {
    /// The view of the group `names` recognises in `leases`, judged live at `now` on the
    /// storage's clock. `me` counts as a member whatever the leases say: this instance is
    /// alive, and its membership may not be recorded yet.
    pub(crate) fn read(names: &GroupNames, leases: &[Lease], now: DateTime<Utc>, me: &str) -> Self {
        let live = |lease: &&Lease| !lease.is_expired_at(now);
        let mut members: BTreeSet<&str> = leases
            .iter()
            .filter(live)
            .filter_map(|lease| match names.parse(&lease.lease_name) {
                Some(GroupLease::Member(owner)) if owner == lease.owner => Some(owner),
                _ => None,
            })
            .collect();
        members.insert(me);
        let members: Vec<String> = members.into_iter().map(str::to_owned).collect();
        let holders = leases
            .iter()
            .filter(live)
            .filter_map(|lease| match names.parse(&lease.lease_name) {
                Some(GroupLease::Partition(partition)) => members
                    .binary_search(&lease.owner)
                    .ok()
                    .map(|member| (partition, member)),
                _ => None,
            })
            .collect();
        let beyond_count = leases
            .iter()
            .filter(live)
            .filter_map(|lease| match names.parse(&lease.lease_name) {
                Some(GroupLease::BeyondCount(partition)) => Some(partition),
                _ => None,
            })
            .max();
        let counts = leases
            .iter()
            .filter(live)
            .filter_map(|lease| match names.parse(&lease.lease_name) {
                Some(GroupLease::Member(owner)) if owner == lease.owner => {
                    let count = u32::try_from(lease.priority)
                        .ok()
                        .filter(|count| *count > 0)?;
                    Some((owner.to_owned(), count))
                }
                _ => None,
            })
            .collect();
        GroupView {
            members,
            holders,
            beyond_count,
            counts,
        }
    }

    /// The live members, sorted.
    #[cfg(test)]
    pub(crate) fn members(&self) -> &[String] {
        &self.members
    }

    /// The partitions the balanced assignment gives `member`.
    #[cfg(test)]
    pub(crate) fn target_of(&self, partitions: u32, member: &str) -> Vec<u32> {
        self.plan(partitions, member).target
    }

    /// `member`'s target, and whether the whole group has reached its assignment.
    pub(crate) fn plan(&self, partitions: u32, member: &str) -> Plan {
        let assignment: Option<Assignment> = assign(partitions, &self.members, &self.holders);
        let index = self.members.binary_search_by(|m| m.as_str().cmp(member));
        let beyond_count = self.beyond_count;
        let other_count = self
            .counts
            .iter()
            .find(|(owner, count)| *owner != member && **count != partitions)
            .map(|(owner, count)| (owner.clone(), *count));
        match (assignment, index) {
            (Some(assignment), Ok(index)) => Plan {
                target: assignment.partitions_of(index),
                settled: assignment.is_reached(&self.holders),
                unheld: (0..partitions)
                    .filter(|partition| !self.holders.contains_key(partition))
                    .collect(),
                held: self
                    .holders
                    .iter()
                    .filter(|(_, holder)| **holder == index)
                    .map(|(partition, _)| *partition)
                    .collect(),
                beyond_count,
                other_count,
            },
            _ => Plan {
                target: Vec::new(),
                settled: false,
                unheld: BTreeSet::new(),
                held: BTreeSet::new(),
                beyond_count,
                other_count,
            },
        }
    }
}

/// What one member should ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Its target partitions.
    pub(crate) target: Vec<u32>,
    /// Whether every partition is held by its target member: nothing is moving.
    pub(crate) settled: bool,
    /// The partitions no live member holds.
    pub(crate) unheld: BTreeSet<u32>,
    /// The partitions the storage says this member holds, live.
    pub(crate) held: BTreeSet<u32>,
    /// The highest partition held live at or above this member's partition count: another
    /// member was configured with more partitions.
    pub(crate) beyond_count: Option<u32>,
    /// A live member that announces another partition count than this member's, and that
    /// count.
    pub(crate) other_count: Option<(String, u32)>,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::FencingToken;

    fn lease(name: &str, owner: &str, heartbeat_at: DateTime<Utc>) -> Lease {
        Lease {
            lease_name: name.into(),
            owner: owner.into(),
            priority: 0,
            fencing_token: FencingToken(1),
            acquired_at: heartbeat_at,
            heartbeat_at,
            ttl: Duration::from_secs(10),
        }
    }

    #[test]
    fn expired_members_and_their_partitions_do_not_count() {
        let now = Utc::now();
        let old = now - chrono::Duration::seconds(11);
        let names = GroupNames::new("g", 4);
        let leases = vec![
            lease("g/members/a", "a", now),
            lease("g/members/b", "b", old),
            lease("g/0", "a", now),
            lease("g/1", "b", old),
            lease("g/2", "b", now), // live, but b is no member any more
            lease("other/members/c", "c", now),
        ];
        let view = GroupView::read(&names, &leases, now, "me");
        assert_eq!(view.members(), ["a", "me"]);
        assert_eq!(view.holders, BTreeMap::from([(0, 0)]));
        assert_eq!(view.target_of(4, "a").len(), 2);
        assert!(view.target_of(4, "a").contains(&0), "a keeps what it holds");
        assert_eq!(view.target_of(4, "stranger"), Vec::<u32>::new());
    }

    #[test]
    fn a_live_partition_beyond_the_count_is_seen_and_an_expired_one_is_not() {
        let now = Utc::now();
        let old = now - chrono::Duration::seconds(11);
        let names = GroupNames::new("g", 4);
        let view = |leases: Vec<Lease>| GroupView::read(&names, &leases, now, "me");
        let plan = view(vec![lease("g/5", "b", now), lease("g/7", "b", old)]).plan(4, "me");
        assert_eq!(plan.beyond_count, Some(5));
        let plan = view(vec![lease("g/3", "b", now)]).plan(4, "me");
        assert_eq!(plan.beyond_count, None);
    }

    #[test]
    fn a_live_member_announcing_another_count_is_seen_and_others_are_not() {
        let now = Utc::now();
        let old = now - chrono::Duration::seconds(11);
        let names = GroupNames::new("g", 4);
        let member = |owner: &str, count: i64, at| Lease {
            priority: count,
            ..lease(&format!("g/members/{owner}"), owner, at)
        };
        let plan = |leases: Vec<Lease>| GroupView::read(&names, &leases, now, "me").plan(4, "me");
        assert_eq!(
            plan(vec![member("a", 4, now), member("b", 6, now)]).other_count,
            Some(("b".to_owned(), 6))
        );
        // Announcing the same count, announcing none, or no longer live: nothing to see.
        let plan = plan(vec![
            member("a", 4, now),
            member("b", 0, now),
            member("c", 2, old),
        ]);
        assert_eq!(plan.other_count, None);
    }

    #[test]
    fn the_plan_names_what_the_storage_says_the_member_holds() {
        let now = Utc::now();
        let names = GroupNames::new("g", 4);
        let leases = vec![
            lease("g/members/b", "b", now),
            lease("g/0", "me", now),
            lease("g/3", "me", now),
            lease("g/1", "b", now),
        ];
        let plan = GroupView::read(&names, &leases, now, "me").plan(4, "me");
        assert_eq!(plan.held, BTreeSet::from([0, 3]));
    }
}
