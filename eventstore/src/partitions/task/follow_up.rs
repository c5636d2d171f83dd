//! What a pushed lease change calls for.

use std::time::Duration;

use super::PartitionLoop;
use crate::elector::herd_jitter;
use crate::partitions::names::GroupLease;
use crate::simulation;
use crate::{LeaseChangeKind, LeaseNotice};

/// What a pushed change calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FollowUp {
    /// A round that reads the group and sends what should change: the group changed.
    Look,
    /// A claim of a target partition just released.
    Claim(u32),
}

impl PartitionLoop {
    /// What to do after `notice` and how soon, if it calls for anything before the next
    /// interval. A notice is only a hint: the request that follows decides.
    pub(super) fn follow_up(&self, notice: &LeaseNotice) -> Option<(FollowUp, Duration)> {
        let me = self.shared.owner.as_str();
        let change = match notice {
            LeaseNotice::Missed => {
                let spread = self
                    .settings
                    .handover_grace
                    .mul_f64(simulation::fraction(0.0, 1.0));
                return Some((FollowUp::Look, spread));
            }
            LeaseNotice::Changed(change) => change,
        };
        match (self.names.parse(&change.lease_name)?, &change.kind) {
            // A member joined or left: the target moves.
            (
                GroupLease::Member(member),
                LeaseChangeKind::Acquired { .. } | LeaseChangeKind::Released { .. },
            ) if member != me => Some((FollowUp::Look, herd_jitter())),
            (
                GroupLease::Seat(_),
                LeaseChangeKind::Acquired { owner, .. } | LeaseChangeKind::Released { owner, .. },
            ) if owner != me => Some((FollowUp::Look, herd_jitter())),
            // A partition this member should hold is free: take it.
            (GroupLease::Partition(partition), LeaseChangeKind::Released { owner, .. })
                if owner != me && self.target.contains(&partition) =>
            {
                Some((FollowUp::Claim(partition), herd_jitter()))
            }
            // This member is asked to hand a partition over: learn it now.
            (GroupLease::Partition(_), LeaseChangeKind::StepDownRequested { holder, .. })
                if holder == me =>
            {
                Some((FollowUp::Look, Duration::ZERO))
            }
            // Someone else took a partition this member believes it holds: learn it now.
            (GroupLease::Partition(partition), LeaseChangeKind::Acquired { owner, .. })
                if owner != me && self.shared.holdings().held.contains_key(&partition) =>
            {
                Some((FollowUp::Look, Duration::ZERO))
            }
            // Another member asks for a partition this member holds as its own target: the
            // two computed the target from different reads (one read before a move the other
            // saw), and neither outranks the other. Reading again settles it.
            (GroupLease::Partition(partition), LeaseChangeKind::ContenderJoined { owner, .. })
                if owner != me
                    && self.target.contains(&partition)
                    && self.shared.holdings().held.contains_key(&partition) =>
            {
                Some((FollowUp::Look, herd_jitter()))
            }
            _ => None,
        }
    }
}
