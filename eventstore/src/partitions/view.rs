//! A group as one member plans from it: the group's status, with that member counted in.

use std::collections::{BTreeMap, BTreeSet};

use super::assignment::{assign, Assignment};
use super::status::GroupStatus;
use super::FREE_SEATS;

/// The live members of a group and the live holders of its partitions, at one instant of the
/// storage's clock, as a member started with some partition count plans from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupView {
    /// What the storage shows: members with their seats and counts, holders, seats.
    status: GroupStatus,
    /// Owner ids, sorted, this member's included.
    members: Vec<String>,
    /// Partition → index into `members`, for partitions below the count that a live member
    /// holds live.
    holders: BTreeMap<u32, usize>,
    /// The highest partition held live at or above this member's partition count, if any.
    beyond_count: Option<u32>,
    /// Another live member announces itself only with the lease earlier versions used, so it
    /// sees only the members that announce themselves so too.
    earlier_member_live: bool,
}

impl GroupView {
    /// The view of the group `status` shows to `me`, a member started with `partitions`
    /// partitions. `me` counts as a member whatever the status says: this instance is alive,
    /// and its membership may not be recorded yet.
    pub(crate) fn of_status(status: GroupStatus, partitions: u32, me: &str) -> Self {
        let mut members: Vec<String> = status.members.iter().map(|m| m.owner.clone()).collect();
        if let Err(at) = members.binary_search_by(|member| member.as_str().cmp(me)) {
            members.insert(at, me.to_owned());
        }
        let holders = status
            .holders
            .range(..partitions)
            .filter_map(|(partition, holder)| {
                let member = members.binary_search(holder).ok()?;
                Some((*partition, member))
            })
            .collect();
        let beyond_count = status
            .holders
            .range(partitions..)
            .next_back()
            .map(|(partition, _)| *partition);
        let earlier_member_live = status
            .members
            .iter()
            .any(|member| member.seat.is_none() && member.owner != me);
        GroupView {
            status,
            members,
            holders,
            beyond_count,
            earlier_member_live,
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
        // Members that announce no count (as before counts were announced) are left out.
        let other_count = self.status.members.iter().find_map(|other| {
            let count = other.partitions.filter(|count| *count != partitions)?;
            (other.owner != member).then(|| (other.owner.clone(), count))
        });
        let seats = self.seat_plan(member);
        let earlier_member_live = self.earlier_member_live;
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
                seats,
                earlier_member_live,
            },
            _ => Plan {
                target: Vec::new(),
                settled: false,
                unheld: BTreeSet::new(),
                held: BTreeSet::new(),
                beyond_count,
                other_count,
                seats,
                earlier_member_live,
            },
        }
    }

    /// The seats `member` holds, and the lowest ones nobody holds.
    fn seat_plan(&self, member: &str) -> SeatPlan {
        SeatPlan {
            held: self
                .status
                .seats
                .iter()
                .filter(|(_, holder)| *holder == member)
                .map(|(seat, _)| *seat)
                .collect(),
            free: (0..)
                .filter(|seat| !self.status.seats.contains_key(seat))
                .take(FREE_SEATS)
                .collect(),
        }
    }
}

/// Where a member sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SeatPlan {
    /// The seats the storage says the member holds, live, lowest first (one but for a moment).
    pub(crate) held: Vec<u32>,
    /// The lowest seats no live member holds, [`FREE_SEATS`] of them.
    pub(crate) free: Vec<u32>,
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
    /// Where the member sits, or may.
    pub(crate) seats: SeatPlan,
    /// Another live member announces itself only as earlier versions did: this one must
    /// announce itself so too, or that member does not see it.
    pub(crate) earlier_member_live: bool,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::{DateTime, Utc};

    use super::*;
    use crate::{FencingToken, Lease};

    /// The view of group `g` (4 partitions) that `leases` show `me` at `now`.
    fn view(leases: &[Lease], now: DateTime<Utc>) -> GroupView {
        GroupView::of_status(GroupStatus::of_leases("g", leases.to_vec(), now), 4, "me")
    }

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
        let leases = vec![
            lease("g/members/a", "a", now),
            lease("g/members/b", "b", old),
            lease("g/0", "a", now),
            lease("g/1", "b", old),
            lease("g/2", "b", now), // live, but b is no member any more
            lease("other/members/c", "c", now),
        ];
        let view = view(&leases, now);
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
        let plan = |leases: Vec<Lease>| view(&leases, now).plan(4, "me");
        let plan_with = plan(vec![lease("g/5", "b", now), lease("g/7", "b", old)]);
        assert_eq!(plan_with.beyond_count, Some(5));
        assert_eq!(plan(vec![lease("g/3", "b", now)]).beyond_count, None);
    }

    #[test]
    fn a_live_member_announcing_another_count_is_seen_and_others_are_not() {
        let now = Utc::now();
        let old = now - chrono::Duration::seconds(11);
        let member = |owner: &str, count: i64, at| Lease {
            priority: count,
            ..lease(&format!("g/members/{owner}"), owner, at)
        };
        let plan = |leases: Vec<Lease>| view(&leases, now).plan(4, "me");
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
        let leases = vec![
            lease("g/members/b", "b", now),
            lease("g/0", "me", now),
            lease("g/3", "me", now),
            lease("g/1", "b", now),
        ];
        let plan = view(&leases, now).plan(4, "me");
        assert_eq!(plan.held, BTreeSet::from([0, 3]));
    }

    #[test]
    fn seat_holders_are_members_and_announce_their_counts() {
        let now = Utc::now();
        let old = now - chrono::Duration::seconds(11);
        let seat = |n: u32, owner: &str, count: i64, at| Lease {
            priority: count,
            ..lease(&format!("g/seats/{n}"), owner, at)
        };
        let leases = vec![
            seat(0, "a", 4, now),
            seat(1, "b", 6, old),
            seat(2, "c", 6, now),
            lease("g/1", "c", now),
            lease("g/2", "b", now), // live, but b's seat lapsed
        ];
        let view = view(&leases, now);
        assert_eq!(view.members(), ["a", "c", "me"]);
        assert_eq!(view.holders, BTreeMap::from([(1, 1)]));
        let plan = view.plan(4, "me");
        assert_eq!(plan.other_count, Some(("c".to_owned(), 6)));
        let free_again = SeatPlan {
            held: vec![],
            free: vec![1, 3, 4, 5],
        };
        assert_eq!(plan.seats, free_again, "b's seat is free again");
        assert_eq!(view.plan(4, "c").seats.held, [2]);
        assert!(!plan.earlier_member_live);
    }

    #[test]
    fn the_lowest_seats_nobody_holds_are_free() {
        let now = Utc::now();
        let seats = |held: &[u32]| {
            let leases: Vec<Lease> = held
                .iter()
                .map(|n| lease(&format!("g/seats/{n}"), &format!("m{n}"), now))
                .collect();
            view(&leases, now).plan(4, "me").seats.free
        };
        assert_eq!(seats(&[]), [0, 1, 2, 3]);
        assert_eq!(seats(&[0, 1, 3]), [2, 4, 5, 6]);
        assert_eq!(seats(&[1, 2]), [0, 3, 4, 5]);
    }

    #[test]
    fn a_member_announced_only_as_earlier_versions_did_is_seen_until_it_holds_a_seat() {
        let now = Utc::now();
        let old = now - chrono::Duration::seconds(11);
        let plan = |leases: Vec<Lease>| view(&leases, now).plan(4, "me");
        let earlier = plan(vec![lease("g/members/old", "old", now)]);
        assert!(earlier.earlier_member_live);
        assert_eq!(
            earlier.target.len(),
            2,
            "the earlier member counts: {earlier:?}"
        );
        // A member announced both ways is one that holds a seat, this member itself is no
        // earlier member, a lapsed announcement is nobody, and a lease named for another
        // owner announces nobody.
        for leases in [
            vec![
                lease("g/members/new", "new", now),
                lease("g/seats/0", "new", now),
            ],
            vec![lease("g/members/me", "me", now)],
            vec![lease("g/members/old", "old", old)],
            vec![lease("g/members/old", "someone", now)],
        ] {
            assert!(!plan(leases.clone()).earlier_member_live, "{leases:?}");
        }
    }
}
