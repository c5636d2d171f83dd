//! The target assignment: which live member should hold which partition.
//!
//! Every member computes it from the same storage snapshot, so it must be a pure function of
//! that snapshot, identical on every build and platform (no `std` hasher, whose output may
//! change between Rust releases). It is:
//!
//! - **balanced**: with N members each gets ⌊M/N⌋ or ⌈M/N⌉ of the M partitions;
//! - **sticky**: a member keeps what it holds up to its share, so only the surplus and the
//!   partitions of members that left move (about M/N on a join or a leave);
//! - **a fixed point**: once every partition is held by its target, the target stays.
//!
//! Partitions that must move go, in partition order, to the member with room that ranks
//! highest for that partition (rendezvous hashing), which spreads them evenly and keeps the
//! choice independent of the order members are listed in.

use std::collections::BTreeMap;

/// The target owner of each partition, by index into the member list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assignment {
    owners: Vec<usize>,
}

impl Assignment {
    /// The partitions assigned to `member` (an index into the member list given to
    /// [`assign`]), in order.
    pub(crate) fn partitions_of(&self, member: usize) -> Vec<u32> {
        self.owners
            .iter()
            .enumerate()
            .filter(|(_, owner)| **owner == member)
            .filter_map(|(partition, _)| u32::try_from(partition).ok())
            .collect()
    }

    /// Whether every partition is held by its target member.
    pub(crate) fn is_reached(&self, holders: &BTreeMap<u32, usize>) -> bool {
        holders.len() == self.owners.len()
            && holders
                .iter()
                .all(|(partition, member)| self.owners.get(*partition as usize) == Some(member))
    }

    /// The target member of `partition`.
    #[cfg(test)]
    pub(crate) fn owner_of(&self, partition: u32) -> usize {
        self.owners[partition as usize]
    }
}

/// Assigns `partitions` partitions over `members` (sorted, without duplicates, not empty),
/// keeping each partition with its current live holder (`holders`: partition → index into
/// `members`) as far as balance allows. `None` when there are no members.
pub(crate) fn assign(
    partitions: u32,
    members: &[String],
    holders: &BTreeMap<u32, usize>,
) -> Option<Assignment> {
    let member_count = u32::try_from(members.len()).ok().filter(|n| *n > 0)?;
    let floor = partitions / member_count;
    let extra = (partitions % member_count) as usize;

    let mut held: Vec<Vec<u32>> = vec![Vec::new(); members.len()];
    for (&partition, &member) in holders {
        if partition < partitions && member < members.len() {
            held[member].push(partition);
        }
    }
    // The extra partitions go first to members that already hold that many (moving the
    // fewest), then by a rank of the member alone. Never by how many a member holds below
    // that: those counts change while partitions move, and members reading the group a
    // moment apart would disagree on who gets the extra ones.
    let ceil = floor as usize + 1;
    let mut extra_first: Vec<usize> = (0..members.len()).collect();
    extra_first.sort_by_key(|member| {
        let full = held[*member].len() >= ceil;
        (
            !full,
            std::cmp::Reverse(rank(partitions, &members[*member])),
        )
    });
    let mut quota = vec![floor as usize; members.len()];
    for member in extra_first.into_iter().take(extra) {
        quota[member] += 1;
    }

    let mut owners: Vec<Option<usize>> = vec![None; partitions as usize];
    let mut count = vec![0usize; members.len()];
    for (member, partitions_held) in held.iter_mut().enumerate() {
        // Keep the partitions this member ranks highest for: the same ones whoever computes.
        partitions_held
            .sort_by_key(|partition| std::cmp::Reverse(rank(*partition, &members[member])));
        for &partition in partitions_held.iter().take(quota[member]) {
            owners[partition as usize] = Some(member);
            count[member] += 1;
        }
    }
    for (partition, owner) in owners.iter_mut().enumerate() {
        if owner.is_some() {
            continue;
        }
        let partition = partition as u32;
        *owner = (0..members.len())
            .filter(|member| count[*member] < quota[*member])
            .max_by_key(|member| rank(partition, &members[*member]));
        if let Some(member) = *owner {
            count[member] += 1;
        }
    }
    // The quotas add up to `partitions`, so every partition found a member with room.
    let owners = owners.into_iter().collect::<Option<Vec<_>>>()?;
    Some(Assignment { owners })
}

/// How much `member` wants `partition`: a hash of both, stable across builds and platforms.
fn rank(partition: u32, member: &str) -> (u64, &str) {
    // FNV-1a over the member id, then the partition mixed in with splitmix64's finaliser,
    // which spreads nearby partition numbers over the whole range. The member id breaks ties.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in member.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let mut mixed = hash ^ u64::from(partition).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (mixed ^ (mixed >> 31), member)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<String> {
        let mut members: Vec<String> = (0..n).map(|i| format!("pod-{i}")).collect();
        members.sort();
        members
    }

    fn counts(assignment: &Assignment, members: usize) -> Vec<usize> {
        (0..members)
            .map(|member| assignment.partitions_of(member).len())
            .collect()
    }

    fn assert_balanced(assignment: &Assignment, partitions: u32, members: usize) {
        let counts = counts(assignment, members);
        let floor = partitions as usize / members;
        let ceil = (partitions as usize).div_ceil(members);
        assert!(
            counts.iter().all(|c| *c == floor || *c == ceil),
            "each of {members} members holds {floor} or {ceil} of {partitions}: {counts:?}"
        );
        assert_eq!(counts.iter().sum::<usize>(), partitions as usize);
    }

    /// The holders once every member holds its target.
    fn holders_of(assignment: &Assignment, partitions: u32) -> BTreeMap<u32, usize> {
        (0..partitions)
            .map(|partition| (partition, assignment.owner_of(partition)))
            .collect()
    }

    #[test]
    fn a_fresh_group_is_balanced() {
        for (partitions, n) in [(12, 3), (12, 5), (1000, 10), (7, 10), (1, 1), (100_000, 7)] {
            let target = assign(partitions, &members(n), &BTreeMap::new()).unwrap();
            assert_balanced(&target, partitions, n);
        }
    }

    #[test]
    fn no_members_no_assignment() {
        assert_eq!(assign(12, &[], &BTreeMap::new()), None);
    }

    #[test]
    fn a_reached_target_stays_the_target() {
        for (partitions, n) in [(12, 5), (1000, 10), (10, 4)] {
            let members = members(n);
            let target = assign(partitions, &members, &BTreeMap::new()).unwrap();
            assert!(!target.is_reached(&BTreeMap::new()));
            let holders = holders_of(&target, partitions);
            assert!(target.is_reached(&holders));
            let again = assign(partitions, &members, &holders).unwrap();
            assert_eq!(again, target, "{partitions} partitions over {n} members");
        }
    }

    #[test]
    fn a_join_moves_about_one_share() {
        for (partitions, n) in [(12, 3), (1000, 9), (1000, 1), (13, 4)] {
            let before_members = members(n);
            let before = assign(partitions, &before_members, &BTreeMap::new()).unwrap();
            let mut after_members = before_members.clone();
            after_members.push("pod-new".to_owned());
            after_members.sort();
            // Holders re-indexed into the new member list.
            let holders: BTreeMap<u32, usize> = holders_of(&before, partitions)
                .into_iter()
                .map(|(p, m)| {
                    let name = &before_members[m];
                    (p, after_members.iter().position(|x| x == name).unwrap())
                })
                .collect();
            let after = assign(partitions, &after_members, &holders).unwrap();
            assert_balanced(&after, partitions, n + 1);
            let moved = holders
                .iter()
                .filter(|(p, m)| after.owner_of(**p) != **m)
                .count();
            let share = (partitions as usize).div_ceil(n + 1);
            assert!(
                moved <= share,
                "a join to {n} members moved {moved} of {partitions}, more than ⌈M/N⌉ = {share}"
            );
        }
    }

    #[test]
    fn a_leave_moves_only_the_leavers_partitions() {
        let partitions = 1000;
        let before_members = members(10);
        let before = assign(partitions, &before_members, &BTreeMap::new()).unwrap();
        let gone = 3;
        let after_members: Vec<String> = before_members
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != gone)
            .map(|(_, m)| m.clone())
            .collect();
        let holders: BTreeMap<u32, usize> = holders_of(&before, partitions)
            .into_iter()
            .filter(|(_, m)| *m != gone)
            .map(|(p, m)| (p, if m > gone { m - 1 } else { m }))
            .collect();
        let after = assign(partitions, &after_members, &holders).unwrap();
        assert_balanced(&after, partitions, 9);
        let kept_elsewhere = holders
            .iter()
            .filter(|(p, m)| after.owner_of(**p) != **m)
            .count();
        assert_eq!(kept_elsewhere, 0, "only the leaver's partitions move");
    }

    #[test]
    fn the_rank_is_stable_across_builds() {
        // Values computed independently of this code: every member of a fleet, whatever it was built with, must agree.
        assert_eq!(rank(0, "pod-a").0, 0x0b0a_d09b_d3de_ad6b);
        assert_eq!(rank(7, "pod-b").0, 0xa450_4216_d5e3_19fa);
    }
}
