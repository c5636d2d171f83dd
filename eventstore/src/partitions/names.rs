//! The lease names of a partition group: one lease per partition, one seat per live member.
//!
//! A member announces itself by holding a seat, `{group}/seats/{n}`: one of the lowest seats
//! no live member holds. Seats are taken again by the members that come after, so however
//! often members restart under new owner ids, a group's seats stay as many as its most
//! members at once (a crashed member's until it lapses) and [`FREE_SEATS`] more (lease rows
//! are never deleted: their tokens must never repeat). Members of earlier versions announced
//! themselves with a lease of their own, `{group}/members/{owner}`; those are still read, and
//! written while such a member is live, so that it sees the members that hold seats. Like
//! every lease row, those announcements stay once written.
//!
//! [`FREE_SEATS`]: super::FREE_SEATS

/// The lease name of `partition` in `group`: `{group}/{partition}`.
pub fn partition_lease_name(group: &str, partition: u32) -> String {
    format!("{group}/{partition}")
}

/// The lease name with which members of earlier versions announced `owner` as a live member
/// of `group`: `{group}/members/{owner}`. A member announces itself with this lease too while
/// a member that announces itself only so is live (a rolling upgrade).
pub fn member_lease_name(group: &str, owner: &str) -> String {
    format!("{group}/members/{owner}")
}

/// The lease name of seat `seat` of `group`: `{group}/seats/{seat}`. Its holder is a live
/// member of the group, and its priority the partition count that member was started with.
pub fn seat_lease_name(group: &str, seat: u32) -> String {
    format!("{group}/seats/{seat}")
}

/// What a lease of a group stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupLease<'a> {
    /// A partition, below the group's partition count.
    Partition(u32),
    /// A partition at or above this member's partition count: a member configured with more
    /// partitions asked for it.
    BeyondCount(u32),
    /// A seat: its holder is a member.
    Seat(u32),
    /// A membership lease as earlier versions named it, with the member's owner id.
    Member(&'a str),
}

/// Recognises the leases of one group among all of a storage's.
#[derive(Debug, Clone)]
pub(crate) struct GroupNames {
    prefix: String,
    partitions: u32,
}

impl GroupNames {
    pub(crate) fn new(group: &str, partitions: u32) -> Self {
        GroupNames {
            prefix: format!("{group}/"),
            partitions,
        }
    }

    /// What every lease name of the group starts with: `{group}/`.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// What `lease_name` stands for in this group, if anything.
    pub(crate) fn parse<'a>(&self, lease_name: &'a str) -> Option<GroupLease<'a>> {
        let rest = lease_name.strip_prefix(&self.prefix)?;
        if let Some(owner) = rest.strip_prefix("members/") {
            return Some(GroupLease::Member(owner));
        }
        if let Some(seat) = rest.strip_prefix("seats/") {
            return canonical_number(seat).map(GroupLease::Seat);
        }
        let partition = canonical_number(rest)?;
        Some(if partition < self.partitions {
            GroupLease::Partition(partition)
        } else {
            GroupLease::BeyondCount(partition)
        })
    }
}

/// `text` as a number, in its canonical spelling only: "007" is not 7.
fn canonical_number(text: &str) -> Option<u32> {
    let number: u32 = text.parse().ok()?;
    (number.to_string() == text).then_some(number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_strangers_are_ignored() {
        let names = GroupNames::new("orders", 12);
        assert_eq!(
            names.parse(&partition_lease_name("orders", 11)),
            Some(GroupLease::Partition(11))
        );
        assert_eq!(
            names.parse(&member_lease_name("orders", "pod-a")),
            Some(GroupLease::Member("pod-a"))
        );
        assert_eq!(
            names.parse(&seat_lease_name("orders", 3)),
            Some(GroupLease::Seat(3))
        );
        assert_eq!(names.parse("orders/12"), Some(GroupLease::BeyondCount(12)));
        for stranger in [
            "orders/007",
            "orders/seats/03",
            "orders/seats/",
            "orders/seats/-1",
            "orders/-1",
            "orders2/1",
            "billing/1",
            "orders",
        ] {
            assert_eq!(names.parse(stranger), None, "{stranger}");
        }
    }
}
