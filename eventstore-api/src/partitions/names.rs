//! The lease names of a partition group: one lease per partition, one per member.

/// The lease name of `partition` in `group`: `{group}/{partition}`.
pub fn partition_lease_name(group: &str, partition: u32) -> String {
    format!("{group}/{partition}")
}

/// The lease name that announces `owner` as a live member of `group`:
/// `{group}/members/{owner}`.
pub fn member_lease_name(group: &str, owner: &str) -> String {
    format!("{group}/members/{owner}")
}

/// What a lease of a group stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupLease<'a> {
    /// A partition, below the group's partition count.
    Partition(u32),
    /// A partition at or above this member's partition count: a member configured with more
    /// partitions asked for it.
    BeyondCount(u32),
    /// A member's membership lease, with the member's owner id.
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
        // Only the canonical spelling: "007" is not partition 7.
        let partition: u32 = rest.parse().ok()?;
        if partition.to_string() != rest {
            return None;
        }
        Some(if partition < self.partitions {
            GroupLease::Partition(partition)
        } else {
            GroupLease::BeyondCount(partition)
        })
    }
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
        assert_eq!(names.parse("orders/12"), Some(GroupLease::BeyondCount(12)));
        for stranger in [
            "orders/007",
            "orders/-1",
            "orders2/1",
            "billing/1",
            "orders",
        ] {
            assert_eq!(names.parse(stranger), None, "{stranger}");
        }
    }
}
