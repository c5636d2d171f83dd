//! A batch's plain requests in one statement, without the leases' advisory locks.
//!
//! In a steady fleet nearly every request of a batch is plain: a holder renewing its live
//! lease at the same priority, or a standby refreshing its live registration at the same
//! priority while none of the lease's contenders has lapsed. Taking an advisory lock per lease
//! costs a batch of a thousand about a seventh of its time when ten instances ask at once, so a
//! batch is first sent to `request_plain_leases`, which serves exactly these requests, without
//! those locks, in one statement. What it leaves unanswered goes to `request_leases` after it,
//! which decides as always.
//!
//! Why the locks are not needed:
//! - A renewal is the plain renewal of `renewals`, with its conditions: it only makes a live
//!   lease live for longer, and the functions lock a row they found expired and read it again
//!   before they take it.
//! - A refresh only makes a live registration live for longer, at the same priority (it never
//!   brings the registration's expiry forward). A decision that found it live holds whatever
//!   the refresh does. A decision that found it lapsed could be overturned, so the functions
//!   forget a lapsed contender only while its newest row version is still lapsed, notify only
//!   the ones they forgot, and count the ones that survived into a new holder's priority
//!   ceiling.
//!
//! Only requests for a lease asked for once in the batch are sent there, so that the requests
//! for one lease keep their order. The call runs in a transaction of its own, before the
//! other's: holding its row locks while waiting for an advisory lock could close a cycle with
//! a `request_leases` that holds that lock and waits for one of those rows. And it waits for a
//! row lock only briefly ([`LOCK_WAIT`]): shorter than PostgreSQL's deadlock check (1 s by
//! default), so that in a cycle with another transaction it is this call that gives way, and
//! the whole batch goes to `request_leases`.

use std::collections::HashMap;
use std::time::Duration;

use eventstore_api::{FencingToken, LeaseOutcome, LeaseRequest, LeaseResponse, LeaseStatus};

/// The longest the call waits for a row lock before the whole batch goes to `request_leases`.
pub(crate) const LOCK_WAIT: Duration = Duration::from_millis(100);

/// The places in `requests` of those asked for a lease no other request of the batch asks
/// for, ordered by lease name, so that every batch locks the rows it writes in one order.
pub(crate) fn candidates(requests: &[LeaseRequest]) -> Vec<usize> {
    let mut asked: HashMap<&str, usize> = HashMap::with_capacity(requests.len());
    for request in requests {
        *asked.entry(request.lease_name.as_str()).or_default() += 1;
    }
    let mut once: Vec<usize> = (0..requests.len())
        .filter(|&i| asked[requests[i].lease_name.as_str()] == 1)
        .collect();
    once.sort_by(|&a, &b| requests[a].lease_name.cmp(&requests[b].lease_name));
    once
}

/// The call of `function`, the storage's `request_plain_leases` (the schema holds the
/// conditions; see the module). Its arguments are the requests' names, owners, priorities and
/// ttls as arrays, and the lock timeout; it returns, for each request it served, its place in
/// the arrays (from 1), the lease's token and holder, and whether it was a standby's refresh
/// (else the holder's renewal).
pub(crate) fn statement(function: &str) -> String {
    format!(
        "SELECT lease_index, lease_token, lease_owner, lease_standby \
         FROM {function}($1, $2, $3, $4, $5)"
    )
}

/// What a request the call served answers: the holder renewed (`leader`, it took nothing
/// over), or a standby refreshed (`standby`, naming the holder).
pub(crate) fn served(token: FencingToken, holder: String, standby: bool) -> LeaseOutcome {
    LeaseOutcome {
        response: LeaseResponse {
            status: if standby {
                LeaseStatus::Standby
            } else {
                LeaseStatus::Leader
            },
            fencing_token: token,
            current_owner: holder,
        },
        took_over: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(lease: &str) -> LeaseRequest {
        LeaseRequest::new(lease, "a", 0, Duration::from_secs(30))
    }

    #[test]
    fn only_leases_asked_for_once_are_candidates_in_name_order() {
        let requests = [
            request("orders"),
            request("billing"),
            request("audit"),
            request("billing"),
            request("cart"),
        ];
        assert_eq!(candidates(&requests), [2, 4, 0]);
        assert!(candidates(&[]).is_empty());
    }
}
