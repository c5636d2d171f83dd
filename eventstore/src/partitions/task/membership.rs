//! How a member announces itself: a seat, and while a member of an earlier version is live,
//! the lease with which earlier versions announced themselves.

use rand::seq::SliceRandom;

use crate::partitions::names::{member_lease_name, seat_lease_name};
use crate::partitions::view::Plan;
use crate::simulation;
use crate::{LeaseResponse, LeaseStatus};

/// A member's announcement of itself, as the last view of the group and the last answers had
/// it.
#[derive(Debug, Default)]
pub(crate) struct Membership {
    /// The seat to ask for: the one held, or a free one.
    seat: Option<u32>,
    /// `seat` is held, as far as this member knows.
    seated: bool,
    /// Seats the storage says this member holds besides `seat`, to give back.
    extra_seats: Vec<u32>,
    /// Announce as earlier versions do too: one of them is live.
    as_before: bool,
    /// Announced so since `as_before` last turned on.
    as_before_sent: bool,
    /// Announced as earlier versions do at least once: leaving releases that lease too.
    announced_as_before: bool,
}

impl Membership {
    /// Takes in what a view of the group says: the seat held (or one of the lowest free
    /// ones, at random, which spreads members joining at once; one that loses a race for a
    /// seat picks again soon), and whether a member of an earlier version is live.
    pub(crate) fn read(&mut self, plan: &Plan) {
        let mut held = plan.seats.held.iter().copied();
        let kept = held.next();
        self.seated = kept.is_some();
        self.seat =
            kept.or_else(|| simulation::with_rng(|rng| plan.seats.free.choose(rng).copied()));
        self.extra_seats = held.collect();
        self.as_before = plan.earlier_member_live;
        self.as_before_sent &= self.as_before;
    }

    /// Whether a batch must announce this member, though it renews nothing else: it has no
    /// seat, or a member of an earlier version came that does not see it yet.
    pub(crate) fn due(&self) -> bool {
        !self.seated || (self.as_before && !self.as_before_sent)
    }

    /// The leases that announce this member, to renew (in this order).
    pub(crate) fn lease_names(&mut self, group: &str, owner: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .seat
            .iter()
            .map(|seat| seat_lease_name(group, *seat))
            .collect();
        if self.as_before {
            self.announced_as_before = true;
            names.push(member_lease_name(group, owner));
        }
        names
    }

    /// Takes in the answers to the requests for [`Membership::lease_names`].
    pub(crate) fn answered(&mut self, answers: &[LeaseResponse]) {
        // The batch carried the announcement as before if one was due: it has arrived.
        self.as_before_sent |= self.as_before;
        if self.seat.is_some() {
            // Standby: another member took the seat first; the next view shows a free one.
            self.seated = answers
                .first()
                .is_some_and(|answer| answer.status != LeaseStatus::Standby);
            if !self.seated {
                self.seat = None;
            }
        }
    }

    /// The seats held besides the one kept, to give back now.
    pub(crate) fn take_extra_seats(&mut self, group: &str) -> Vec<String> {
        let extra = std::mem::take(&mut self.extra_seats);
        extra
            .iter()
            .map(|seat| seat_lease_name(group, *seat))
            .collect()
    }

    /// Every lease this member may hold to announce itself, to release on leaving: the
    /// announcement as earlier versions make it first, so that no member reads it without
    /// the seat beside it and takes this one for a member of an earlier version.
    pub(crate) fn leaving(&self, group: &str, owner: &str) -> Vec<String> {
        let mut names = Vec::new();
        if self.announced_as_before {
            names.push(member_lease_name(group, owner));
        }
        names.extend(
            self.seat
                .iter()
                .chain(&self.extra_seats)
                .map(|seat| seat_lease_name(group, *seat)),
        );
        names
    }
}
