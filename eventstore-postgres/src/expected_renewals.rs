//! Which leases this storage last saw their owner lead, so that the owner's next request is
//! first tried as a plain renewal (see `renewals`).

use std::collections::HashMap;
use std::sync::Mutex;

use eventstore_api::{LeaseOutcome, LeaseRequest, LeaseStatus};

/// The most leases remembered, so that a process that leads ever new leases and lets them
/// lapse without a release does not grow without bound; beyond it, requests for leases not
/// remembered go to the function, as they always may.
const MOST_REMEMBERED: usize = 10_000;

/// The owner and priority each lease was last answered `leader` for.
#[derive(Debug, Default)]
pub(crate) struct ExpectedRenewals {
    leaders: Mutex<HashMap<String, (String, i64)>>,
}

impl ExpectedRenewals {
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
            if leaders.len() < MOST_REMEMBERED || leaders.contains_key(&request.lease_name) {
                leaders.insert(
                    request.lease_name.clone(),
                    (request.owner.clone(), request.priority),
                );
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use eventstore_api::{FencingToken, LeaseResponse};

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
        let renewals = ExpectedRenewals::default();
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
        let renewals = ExpectedRenewals::default();
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
