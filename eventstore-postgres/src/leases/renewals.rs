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
use std::time::Instant;

use eventstore_api::{FencingToken, LeaseOutcome, LeaseRequest, LeaseResponse, LeaseStatus};

/// The most leases remembered, so that a process that leads ever new leases and lets them
/// lapse without a release does not grow without bound. When it is reached, the leases whose
/// last `leader` answer has lapsed since are forgotten to make room; beyond it, requests for
/// leases not remembered go to the function, as they always may.
const MOST_REMEMBERED: usize = 10_000;

/// What a lease was last answered `leader` for.
#[derive(Debug)]
struct Leader {
    owner: String,
    priority: i64,
    /// When that answer's ttl ran out, on this process's clock: after it, the lease may have
    /// lapsed, and the plain renewal would change nothing.
    lapses_at: Instant,
}

/// The owner and priority each lease was last answered `leader` for, and the statement that
/// renews such a lease.
#[derive(Debug)]
pub(crate) struct ExpectedRenewals {
    leaders: Mutex<HashMap<String, Leader>>,
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
            .is_some_and(|known| known.owner == request.owner && known.priority == request.priority)
    }

    /// Remembers what `request`, sent at `sent`, was answered: its owner leads, or no longer
    /// does.
    pub(crate) fn record(&self, request: &LeaseRequest, sent: Instant, outcome: &LeaseOutcome) {
        if outcome.response.status != LeaseStatus::Leader {
            self.forget(&request.lease_name, &request.owner);
            return;
        }
        let lapses_at = sent + request.ttl;
        let mut leaders = self.leaders();
        if let Some(known) = leaders.get_mut(&request.lease_name) {
            // A renewal: most often the owner remembered already, which copies nothing.
            if known.owner != request.owner {
                known.owner.clone_from(&request.owner);
            }
            known.priority = request.priority;
            known.lapses_at = lapses_at;
            return;
        }
        if leaders.len() >= MOST_REMEMBERED {
            leaders.retain(|_, known| known.lapses_at > sent);
        }
        if leaders.len() < MOST_REMEMBERED {
            let leader = Leader {
                owner: request.owner.clone(),
                priority: request.priority,
                lapses_at,
            };
            leaders.insert(request.lease_name.clone(), leader);
        }
    }

    /// Forgets `owner`'s lead on `lease_name`, if remembered.
    pub(crate) fn forget(&self, lease_name: &str, owner: &str) {
        let mut leaders = self.leaders();
        if leaders
            .get(lease_name)
            .is_some_and(|known| known.owner == owner)
        {
            leaders.remove(lease_name);
        }
    }

    fn leaders(&self) -> std::sync::MutexGuard<'_, HashMap<String, Leader>> {
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

    impl ExpectedRenewals {
        fn record_now(&self, request: &LeaseRequest, outcome: &LeaseOutcome) {
            self.record(request, Instant::now(), outcome);
        }
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
        renewals.record_now(&request("a", 0), &answered(LeaseStatus::Leader, "a"));
        assert!(renewals.expects(&request("a", 0)));
        assert!(!renewals.expects(&request("a", 1)), "another priority");
        assert!(!renewals.expects(&request("b", 0)), "another owner");

        renewals.record_now(&request("b", 0), &answered(LeaseStatus::Standby, "a"));
        assert!(
            renewals.expects(&request("a", 0)),
            "a standby's answer leaves a's"
        );
        renewals.record_now(
            &request("a", 0),
            &answered(LeaseStatus::LeaderStepDownRequested, "a"),
        );
        assert!(!renewals.expects(&request("a", 0)), "asked to step down");

        renewals.record_now(&request("a", 0), &answered(LeaseStatus::Leader, "a"));
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
            renewals.record_now(&lease(n), &answered(LeaseStatus::Leader, "a"));
        }
        assert_eq!(renewals.leaders().len(), MOST_REMEMBERED);
        assert!(renewals.expects(&lease(0)));
        assert!(
            !renewals.expects(&lease(MOST_REMEMBERED)),
            "the one past the bound"
        );
        renewals.record_now(&request("b", 0), &answered(LeaseStatus::Leader, "b"));
        assert!(!renewals.expects(&request("b", 0)));
        renewals.record_now(&lease(0), &answered(LeaseStatus::Leader, "a"));
        assert!(
            renewals.expects(&lease(0)),
            "a remembered lease is still updated"
        );
    }

    #[test]
    fn once_full_the_leases_whose_lead_has_lapsed_make_room() {
        let renewals = ExpectedRenewals::new("leases", true);
        let ttl = Duration::from_secs(30);
        let lease = |n: usize| LeaseRequest::new(format!("job-{n}"), "a", 0, ttl);
        let start = Instant::now();
        let leader = answered(LeaseStatus::Leader, "a");
        for n in 0..MOST_REMEMBERED {
            // Every other lease renewed later, its lead still running when the bound is met.
            let sent = if n % 2 == 0 { start } else { start + ttl };
            renewals.record(&lease(n), sent, &leader);
        }
        let later = start + ttl + Duration::from_secs(1);
        renewals.record(&lease(MOST_REMEMBERED), later, &leader);
        assert!(
            renewals.expects(&lease(MOST_REMEMBERED)),
            "a new lease once the lapsed ones made room"
        );
        assert_eq!(renewals.leaders().len(), MOST_REMEMBERED / 2 + 1);
        assert!(!renewals.expects(&lease(0)), "lapsed, forgotten");
        assert!(renewals.expects(&lease(1)), "still running, kept");
    }
}
