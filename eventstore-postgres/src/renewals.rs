//! Renewals in one `UPDATE`, for the leases this storage last saw their owner lead.
//!
//! Most lease requests are a holder renewing its live lease. `request_lease` answers those
//! from its first statement, but a call of a PL/pgSQL function costs the server more than the
//! statement itself. So the storage remembers, per lease, the owner and priority it last
//! answered `leader` ([`ExpectedRenewals`]); that owner's next request at that priority is
//! first sent as one `UPDATE` that renews the lease only when it is live (not released), held
//! by that owner at that priority, no contender can outrank it (its priority ceiling), and the
//! renewal does not bring its expiry forward: exactly when `request_lease` would answer
//! `leader` from its first statement. When it changes nothing (the lease lapsed, moved, may
//! have an outranking contender, or is renewed for a shorter time) the request goes to the
//! function, which decides as always.
//!
//! The `UPDATE` takes the lease row's lock but not the lease's advisory lock, which every
//! other decision takes: the only thing it changes is how long a live lease stays live, and
//! only later. A decision that a lease is live holds whatever such a renewal does; a decision
//! that it expired is the one it could overturn, so the functions lock the row before they
//! take an expired lease and read it again.

use std::collections::HashMap;
use std::sync::Mutex;

use eventstore_api::{FencingToken, LeaseOutcome, LeaseRequest, LeaseResponse, LeaseStatus};

/// The most leases remembered, so that a process that leads ever new leases and lets them
/// lapse without a release does not grow without bound; beyond it, requests for leases not
/// remembered go to the function, as they always may.
const MOST_REMEMBERED: usize = 10_000;

/// The owner and priority each lease was last answered `leader` for, and the statement that
/// renews such a lease.
#[derive(Debug)]
pub(crate) struct ExpectedRenewals {
    leaders: Mutex<HashMap<String, (String, i64)>>,
    statement: String,
}

impl ExpectedRenewals {
    /// Nothing expected yet, on the table `leases`; `session_defaults` as in `Settings`.
    pub(crate) fn new(leases: &str, session_defaults: bool) -> Self {
        ExpectedRenewals {
            leaders: Mutex::default(),
            statement: statement(leases, session_defaults),
        }
    }

    /// The plain renewal (see [`statement`]), built once.
    pub(crate) fn statement(&self) -> &str {
        &self.statement
    }

    /// Whether `request` is expected to renew a lease its owner leads.
    pub(crate) fn expects(&self, request: &LeaseRequest) -> bool {
        self.leaders()
            .get(&request.lease_name)
            .is_some_and(|(owner, priority)| {
                *owner == request.owner && *priority == request.priority
            })
    }

    /// Remembers what `request` was answered: its owner leads, or no longer does.
    pub(crate) fn record(&self, request: &LeaseRequest, outcome: &LeaseOutcome) {
        if outcome.response.status == LeaseStatus::Leader {
            let mut leaders = self.leaders();
            let remembered = || (request.owner.clone(), request.priority);
            let room = leaders.len() < MOST_REMEMBERED;
            match leaders.get_mut(&request.lease_name) {
                // A renewal: most often what is remembered already, which copies nothing.
                Some(known) if known.0 == request.owner => known.1 = request.priority,
                Some(known) => *known = remembered(),
                None if room => {
                    leaders.insert(request.lease_name.clone(), remembered());
                }
                None => {}
            }
        } else {
            self.forget(&request.lease_name, &request.owner);
        }
    }

    /// Forgets `owner`'s lead on `lease_name`, if remembered.
    pub(crate) fn forget(&self, lease_name: &str, owner: &str) {
        let mut leaders = self.leaders();
        if leaders
            .get(lease_name)
            .is_some_and(|(held_by, _)| held_by == owner)
        {
            leaders.remove(lease_name);
        }
    }

    fn leaders(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, i64)>> {
        self.leaders.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The plain renewal of a lease of the table `leases` (see the module), with the arguments of
/// `request_lease`: the lease's fencing token when it renewed, no row when it was not a plain
/// renewal and changed nothing. A row that another decision changed meanwhile is checked
/// again in its newest version, which needs `READ COMMITTED`; and its wait for the row's lock
/// is bounded by the lock timeout. Unless the connection starts with both as its defaults
/// (`session_defaults`), a filter on the row checks the one and sets the other before the
/// lock is awaited.
fn statement(leases: &str, session_defaults: bool) -> String {
    let per_statement = if session_defaults {
        ""
    } else {
        "AND current_setting('transaction_isolation') = 'read committed' \
         AND set_config('lock_timeout', $5, true) IS NOT NULL "
    };
    format!(
        "UPDATE {leases} AS l \
            SET heartbeat_at = greatest(l.heartbeat_at, now()), ttl = $4 \
          WHERE l.lease_name = $1 AND l.owner = $2 AND l.priority = $3 \
            AND l.heartbeat_at + l.ttl >= now() AND NOT l.released \
            AND greatest(l.heartbeat_at, now()) + $4 >= l.heartbeat_at + l.ttl \
            AND l.contender_priority_ceiling <= $3 \
            {per_statement}\
         RETURNING l.fencing_token"
    )
}

/// What a plain renewal of `request` that returned `token` answers: its owner still leads,
/// under the same token, and took nothing over.
pub(crate) fn renewed(request: &LeaseRequest, token: FencingToken) -> LeaseOutcome {
    LeaseOutcome {
        response: LeaseResponse {
            status: LeaseStatus::Leader,
            fencing_token: token,
            current_owner: request.owner.clone(),
        },
        took_over: false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn request(owner: &str, priority: i64) -> LeaseRequest {
        LeaseRequest::new("orders", owner, priority, Duration::from_secs(30))
    }

    fn answered(status: LeaseStatus, owner: &str) -> LeaseOutcome {
        LeaseOutcome {
            response: LeaseResponse {
                status,
                fencing_token: FencingToken(1),
                current_owner: owner.to_owned(),
            },
            took_over: false,
        }
    }

    #[test]
    fn only_the_owner_last_answered_leader_at_its_priority_is_expected_to_renew() {
        let renewals = ExpectedRenewals::new("leases", true);
        assert!(!renewals.expects(&request("a", 0)), "nothing answered yet");
        renewals.record(&request("a", 0), &answered(LeaseStatus::Leader, "a"));
        assert!(renewals.expects(&request("a", 0)));
        assert!(!renewals.expects(&request("a", 1)), "another priority");
        assert!(!renewals.expects(&request("b", 0)), "another owner");

        renewals.record(&request("b", 0), &answered(LeaseStatus::Standby, "a"));
        assert!(
            renewals.expects(&request("a", 0)),
            "a standby's answer leaves a's"
        );
        renewals.record(
            &request("a", 0),
            &answered(LeaseStatus::LeaderStepDownRequested, "a"),
        );
        assert!(!renewals.expects(&request("a", 0)), "asked to step down");

        renewals.record(&request("a", 0), &answered(LeaseStatus::Leader, "a"));
        renewals.forget("orders", "b");
        assert!(
            renewals.expects(&request("a", 0)),
            "b's release forgets nothing of a's"
        );
        renewals.forget("orders", "a");
        assert!(!renewals.expects(&request("a", 0)), "released");
    }

    #[test]
    fn no_more_than_the_most_remembered_leases_are_kept() {
        let renewals = ExpectedRenewals::new("leases", true);
        let lease =
            |n: usize| LeaseRequest::new(format!("job-{n}"), "a", 0, Duration::from_secs(30));
        for n in 0..=MOST_REMEMBERED {
            renewals.record(&lease(n), &answered(LeaseStatus::Leader, "a"));
        }
        assert_eq!(renewals.leaders().len(), MOST_REMEMBERED);
        assert!(renewals.expects(&lease(0)));
        assert!(
            !renewals.expects(&lease(MOST_REMEMBERED)),
            "the one past the bound"
        );
        renewals.record(&request("b", 0), &answered(LeaseStatus::Leader, "b"));
        assert!(!renewals.expects(&request("b", 0)));
        renewals.record(&lease(0), &answered(LeaseStatus::Leader, "a"));
        assert!(
            renewals.expects(&lease(0)),
            "a remembered lease is still updated"
        );
    }
}
