//! The lease rules of the contract, for backends that keep leases in process memory.

use std::sync::Arc;
use std::time::Duration;

use crate::lease_changes::LeaseChangeHub;
use crate::{
    EventStorageError, Fence, FencingToken, Lease, LeaseChange, LeaseChangeKind, LeaseContender,
    LeaseOutcome, LeaseRequest, LeaseResponse, LeaseSelection, LeaseStatus, ReleaseOutcome,
};
use chrono::{DateTime, Utc};
// Keyed by names the caller chose: `hashbrown`'s `entry_ref` copies a name only when it is new
// (a renewal allocates nothing), and its default hasher costs a fraction of SipHash on names.
use hashbrown::hash_map::EntryRef;
use hashbrown::HashMap;

/// `ttl` cut down to whole microseconds, as PostgreSQL's `interval` keeps it: the same request
/// leaves the same lease on every backend.
fn whole_microseconds(ttl: Duration) -> Duration {
    let micros = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(micros)
}

/// How far `release` backdates the heartbeat past the ttl, so that the released lease is
/// expired at once on the storage's clock.
const RELEASE_BACKDATE: Duration = Duration::from_millis(1);

/// Every lease of one storage and its contenders, with the contract's rules applied.
///
/// The table is plain data: the caller serializes access (a mutex) and passes "now" from its
/// storage clock, so the rules are deterministic and testable. Each operation on one lease costs
/// O(contenders of that lease); nothing scans the other leases. Requests must be validated
/// first (`eventstore_api::validate`).
///
/// Every change is published on the table's [`LeaseChangeHub`] (see [`LeaseTable::changes`]),
/// in the order the table made them. A renewal publishes nothing of its own; every request
/// first drops the lease's contenders whose registration lapsed, announcing each as gone.
#[derive(Debug, Default)]
pub struct LeaseTable {
    leases: HashMap<String, LeaseEntry>,
    changes: Arc<LeaseChangeHub>,
}

#[derive(Debug, Default)]
struct LeaseEntry {
    /// The holder, or the last holder; `None` until first granted.
    record: Option<Lease>,
    /// Whether the last holder released the record (rather than letting it expire).
    released: bool,
    /// Tokens up to this one were handed out before (e.g. by an earlier process).
    floor: FencingToken,
    contenders: HashMap<String, Contender>,
}

#[derive(Debug)]
struct Contender {
    priority: i64,
    ttl: Duration,
    heartbeat_at: DateTime<Utc>,
}

impl Contender {
    fn is_live_at(&self, now: DateTime<Utc>) -> bool {
        now <= self.heartbeat_at + to_chrono(self.ttl)
    }
}

impl LeaseEntry {
    fn next_token(&self) -> FencingToken {
        let last = self
            .record
            .as_ref()
            .map_or(FencingToken(0), |lease| lease.fencing_token);
        last.max(self.floor).next()
    }

    fn wants_step_down(&self, owner: &str, priority: i64, now: DateTime<Utc>) -> bool {
        self.contenders.iter().any(|(contender, registration)| {
            contender != owner && registration.priority > priority && registration.is_live_at(now)
        })
    }

    /// The live contender that should lead next: the highest priority, then the smallest id.
    fn successor(&self, now: DateTime<Utc>) -> Option<String> {
        self.contenders
            .iter()
            .filter(|(_, registration)| registration.is_live_at(now))
            .min_by(|(a, a_reg), (b, b_reg)| b_reg.priority.cmp(&a_reg.priority).then(a.cmp(b)))
            .map(|(owner, _)| owner.clone())
    }
}

impl LeaseTable {
    /// An empty table.
    pub fn new() -> Self {
        LeaseTable::default()
    }

    /// Where the table publishes its changes; a backend may keep this handle beside the table
    /// to subscribe without locking it.
    pub fn changes(&self) -> Arc<LeaseChangeHub> {
        Arc::clone(&self.changes)
    }

    /// Applies one `request_lease` at `now`: registers the caller as contender, then acquires,
    /// renews, or answers standby.
    pub fn request(&mut self, request: &LeaseRequest, now: DateTime<Utc>) -> LeaseResponse {
        self.request_with_outcome(request, now).response
    }

    /// As [`LeaseTable::request`], saying also whether the caller took the lease over from
    /// another owner that let it expire.
    pub fn request_with_outcome(
        &mut self,
        request: &LeaseRequest,
        now: DateTime<Utc>,
    ) -> LeaseOutcome {
        let followed = self.changes.is_followed(&request.lease_name);
        let ttl = whole_microseconds(request.ttl);
        let mut changes = Vec::new();
        let entry = self
            .leases
            .entry_ref(request.lease_name.as_str())
            .or_default();
        // Contenders whose own ttl lapsed are gone; dropping them here keeps the map bounded.
        entry.contenders.retain(|owner, contender| {
            let live = contender.is_live_at(now);
            if !live && followed {
                changes.push(LeaseChangeKind::ContenderLeft {
                    owner: owner.clone(),
                });
            }
            live
        });
        let registration = Contender {
            priority: request.priority,
            ttl,
            heartbeat_at: now,
        };
        let previous_priority = match entry.contenders.entry_ref(request.owner.as_str()) {
            EntryRef::Occupied(mut known) => {
                // Heartbeats never move back, even when a caller passes an earlier "now" than
                // a request it applied before.
                let heartbeat_at = known.get().heartbeat_at.max(now);
                let previous = known.insert(Contender {
                    heartbeat_at,
                    ..registration
                });
                Some(previous.priority)
            }
            EntryRef::Vacant(new) => {
                new.insert(registration);
                None
            }
        };
        let newly_ranked = previous_priority != Some(request.priority);
        if followed && newly_ranked {
            changes.push(LeaseChangeKind::ContenderJoined {
                owner: request.owner.clone(),
                priority: request.priority,
            });
        }

        let next_token = entry.next_token();
        let mut took_over = false;
        let response = match &mut entry.record {
            Some(lease) if !lease.is_expired_at(now) && lease.owner != request.owner => {
                if followed && newly_ranked && request.priority > lease.priority {
                    changes.push(LeaseChangeKind::StepDownRequested {
                        holder: lease.owner.clone(),
                        token: lease.fencing_token,
                        contender: request.owner.clone(),
                    });
                }
                LeaseResponse {
                    status: LeaseStatus::Standby,
                    fencing_token: lease.fencing_token,
                    current_owner: lease.owner.clone(),
                }
            }
            record => {
                let lease = match record {
                    Some(lease) if !lease.is_expired_at(now) => {
                        lease.heartbeat_at = lease.heartbeat_at.max(now);
                        lease.ttl = ttl;
                        lease.priority = request.priority;
                        lease
                    }
                    // Never granted, released or expired: the caller acquires it.
                    record => {
                        let after_expiry = record.is_some() && !entry.released;
                        took_over = after_expiry
                            && record
                                .as_ref()
                                .is_some_and(|expired| expired.owner != request.owner);
                        entry.released = false;
                        if followed {
                            changes.push(LeaseChangeKind::Acquired {
                                owner: request.owner.clone(),
                                token: next_token,
                                after_expiry,
                            });
                        }
                        record.insert(Lease {
                            lease_name: request.lease_name.clone(),
                            owner: request.owner.clone(),
                            priority: request.priority,
                            fencing_token: next_token,
                            acquired_at: now,
                            heartbeat_at: now,
                            ttl,
                        })
                    }
                };
                let fencing_token = lease.fencing_token;
                let current_owner = lease.owner.clone();
                let status = if entry.wants_step_down(&request.owner, request.priority, now) {
                    LeaseStatus::LeaderStepDownRequested
                } else {
                    LeaseStatus::Leader
                };
                LeaseResponse {
                    status,
                    fencing_token,
                    current_owner,
                }
            }
        };
        self.publish(&request.lease_name, changes);
        LeaseOutcome {
            response,
            took_over,
        }
    }

    /// Applies `release_lease` at `now`: withdraws `owner` as contender and, if it holds the
    /// live lease, backdates the heartbeat so the lease is acquirable at once. The record and its
    /// token stay, so tokens never repeat. Says whether `owner` held the lease.
    pub fn release(&mut self, lease_name: &str, owner: &str, now: DateTime<Utc>) -> ReleaseOutcome {
        let Some(entry) = self.leases.get_mut(lease_name) else {
            return ReleaseOutcome::NotHeld;
        };
        let followed = self.changes.is_followed(lease_name);
        let mut changes = Vec::new();
        let was_contender = entry.contenders.remove(owner).is_some();
        // An expired lease is held by nobody, so releasing it changes nothing.
        let held = entry
            .record
            .as_mut()
            .filter(|lease| lease.owner == owner && !lease.is_expired_at(now));
        let outcome = if held.is_some() {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        };
        if let Some(lease) = held {
            lease.heartbeat_at = now - to_chrono(lease.ttl) - to_chrono(RELEASE_BACKDATE);
            entry.released = true;
            if followed {
                changes.push(LeaseChangeKind::Released {
                    owner: owner.to_owned(),
                    token: lease.fencing_token,
                    successor: entry.successor(now),
                });
            }
        }
        if followed && was_contender {
            changes.push(LeaseChangeKind::ContenderLeft {
                owner: owner.to_owned(),
            });
        }
        self.publish(lease_name, changes);
        outcome
    }

    fn publish(&self, lease_name: &str, changes: Vec<LeaseChangeKind>) {
        for kind in changes {
            self.changes.publish(LeaseChange {
                lease_name: lease_name.to_owned(),
                kind,
            });
        }
    }

    /// The token the next grant of `lease_name` would get.
    pub fn next_token(&self, lease_name: &str) -> FencingToken {
        self.leases
            .get(lease_name)
            .map_or(FencingToken(1), LeaseEntry::next_token)
    }

    /// Makes every later grant of `lease_name` get a token above `floor`, e.g. the highest
    /// token an earlier process of a persistent storage handed out.
    pub fn raise_floor(&mut self, lease_name: &str, floor: FencingToken) {
        let entry = self.leases.entry_ref(lease_name).or_default();
        entry.floor = entry.floor.max(floor);
    }

    /// The record of `lease_name`, live or not.
    pub fn lease(&self, lease_name: &str) -> Option<&Lease> {
        self.leases.get(lease_name)?.record.as_ref()
    }

    /// Every lease ever granted, expired and released ones included, ordered by name.
    pub fn leases(&self) -> Vec<Lease> {
        self.leases_in(&LeaseSelection::All)
    }

    /// As [`LeaseTable::leases`], only those `selection` covers; the others are not copied.
    pub fn leases_in(&self, selection: &LeaseSelection) -> Vec<Lease> {
        let mut leases: Vec<Lease> = self
            .leases
            .iter()
            .filter(|(name, _)| selection.selects(name))
            .filter_map(|(_, entry)| entry.record.clone())
            .collect();
        leases.sort_by(|a, b| a.lease_name.cmp(&b.lease_name));
        leases
    }

    /// The contenders of `lease_name` besides its holder of record, by priority (highest
    /// first), then owner id. Lapsed ones stay until the lease's next request drops them.
    pub fn contenders(&self, lease_name: &str) -> Vec<LeaseContender> {
        let Some(entry) = self.leases.get(lease_name) else {
            return Vec::new();
        };
        let holder = entry.record.as_ref().map(|lease| lease.owner.as_str());
        let mut contenders: Vec<LeaseContender> = entry
            .contenders
            .iter()
            .filter(|(owner, _)| Some(owner.as_str()) != holder)
            .map(|(owner, contender)| LeaseContender {
                lease_name: lease_name.to_owned(),
                owner: owner.clone(),
                priority: contender.priority,
                heartbeat_at: contender.heartbeat_at,
                ttl: contender.ttl,
            })
            .collect();
        contenders.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.owner.cmp(&b.owner)));
        contenders
    }

    /// As [`LeaseTable::contenders`] for every lease `selection` covers, the leases by name.
    pub fn contenders_in(&self, selection: &LeaseSelection) -> Vec<LeaseContender> {
        let mut names: Vec<&String> = self
            .leases
            .keys()
            .filter(|name| selection.selects(name))
            .collect();
        names.sort();
        names
            .into_iter()
            .flat_map(|name| self.contenders(name))
            .collect()
    }

    /// Checks `fence` against the lease it names at `now`.
    ///
    /// # Errors
    /// [`EventStorageError::Fenced`] when that lease is unknown, not live, or holds another token.
    pub fn check_fence(&self, fence: &Fence, now: DateTime<Utc>) -> Result<(), EventStorageError> {
        fence.check(self.lease(&fence.lease_name), now)
    }
}

fn to_chrono(duration: Duration) -> chrono::Duration {
    chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_700_000_000_000 + ms).unwrap()
    }

    fn ask(
        table: &mut LeaseTable,
        owner: &str,
        priority: i64,
        now: DateTime<Utc>,
    ) -> LeaseResponse {
        table.request(&LeaseRequest::new("l", owner, priority, TTL), now)
    }

    #[test]
    fn expiry_is_judged_strictly_after_heartbeat_plus_ttl() {
        let mut table = LeaseTable::new();
        assert_eq!(
            ask(&mut table, "a", 0, at(0)).fencing_token,
            FencingToken(1)
        );
        let standby = ask(&mut table, "b", 0, at(10_000));
        assert_eq!(standby.status, LeaseStatus::Standby);
        let taken = ask(&mut table, "b", 0, at(10_001));
        assert_eq!(
            (taken.status, taken.fencing_token),
            (LeaseStatus::Leader, FencingToken(2))
        );
    }

    #[test]
    fn a_renewal_applied_with_an_earlier_now_keeps_the_later_heartbeat() {
        let mut table = LeaseTable::new();
        ask(&mut table, "a", 0, at(0));
        ask(&mut table, "a", 0, at(500));
        let renewed = ask(&mut table, "a", 0, at(300));
        assert_eq!(renewed.status, LeaseStatus::Leader);
        assert_eq!(table.leases()[0].heartbeat_at, at(500));
        ask(&mut table, "a", 5, at(200));
        assert_eq!(table.leases()[0].heartbeat_at, at(500));
    }

    #[test]
    fn a_floor_lifts_the_next_token_but_never_lowers_it() {
        let mut table = LeaseTable::new();
        table.raise_floor("l", FencingToken(41));
        assert_eq!(table.next_token("l"), FencingToken(42));
        assert_eq!(
            ask(&mut table, "a", 0, at(0)).fencing_token,
            FencingToken(42)
        );
        table.raise_floor("l", FencingToken(7));
        table.release("l", "a", at(1));
        assert_eq!(
            ask(&mut table, "a", 0, at(2)).fencing_token,
            FencingToken(43)
        );
        assert!(table.leases().iter().all(|lease| lease.lease_name == "l"));
    }

    #[test]
    fn lapsed_contenders_are_dropped_and_stop_asking_for_step_down() {
        let mut table = LeaseTable::new();
        ask(&mut table, "low", 0, at(0));
        table.request(
            &LeaseRequest::new("l", "high", 5, Duration::from_millis(100)),
            at(0),
        );
        assert_eq!(
            ask(&mut table, "low", 0, at(100)).status,
            LeaseStatus::LeaderStepDownRequested
        );
        assert_eq!(
            ask(&mut table, "low", 0, at(101)).status,
            LeaseStatus::Leader
        );
        assert_eq!(table.leases["l"].contenders.len(), 1);
    }

    /// Every notice waiting on `changes`, as kinds.
    fn drain(changes: &mut crate::LeaseChanges) -> Vec<LeaseChangeKind> {
        let mut kinds = Vec::new();
        while let Some(notice) = changes.try_next() {
            match notice {
                crate::LeaseNotice::Changed(change) => kinds.push(change.kind),
                crate::LeaseNotice::Missed => panic!("no notice may be missed here"),
            }
        }
        kinds
    }

    #[test]
    fn every_change_is_published_and_a_renewal_publishes_nothing() {
        let mut table = LeaseTable::new();
        let mut changes = table.changes().subscribe(&crate::LeaseScope::lease("l"));
        ask(&mut table, "a", 0, at(0));
        assert_eq!(
            drain(&mut changes),
            [
                LeaseChangeKind::ContenderJoined {
                    owner: "a".into(),
                    priority: 0
                },
                LeaseChangeKind::Acquired {
                    owner: "a".into(),
                    token: FencingToken(1),
                    after_expiry: false
                },
            ]
        );
        ask(&mut table, "a", 0, at(1));
        assert_eq!(drain(&mut changes), [], "a renewal publishes nothing");

        ask(&mut table, "b", 5, at(2));
        ask(&mut table, "c", 1, at(2));
        assert_eq!(
            drain(&mut changes),
            [
                LeaseChangeKind::ContenderJoined {
                    owner: "b".into(),
                    priority: 5
                },
                LeaseChangeKind::StepDownRequested {
                    holder: "a".into(),
                    token: FencingToken(1),
                    contender: "b".into()
                },
                LeaseChangeKind::ContenderJoined {
                    owner: "c".into(),
                    priority: 1
                },
                LeaseChangeKind::StepDownRequested {
                    holder: "a".into(),
                    token: FencingToken(1),
                    contender: "c".into()
                },
            ]
        );
        ask(&mut table, "b", 5, at(3));
        assert_eq!(
            drain(&mut changes),
            [],
            "a standby's refresh publishes nothing"
        );

        table.release("l", "a", at(4));
        assert_eq!(
            drain(&mut changes),
            [
                LeaseChangeKind::Released {
                    owner: "a".into(),
                    token: FencingToken(1),
                    successor: Some("b".into())
                },
                LeaseChangeKind::ContenderLeft { owner: "a".into() },
            ]
        );
        ask(&mut table, "b", 5, at(5));
        assert!(drain(&mut changes).contains(&LeaseChangeKind::Acquired {
            owner: "b".into(),
            token: FencingToken(2),
            after_expiry: false
        }));
    }

    #[test]
    fn a_takeover_of_an_expired_tenure_says_so() {
        let mut table = LeaseTable::new();
        let mut changes = table.changes().subscribe(&crate::LeaseScope::All);
        ask(&mut table, "a", 0, at(0));
        drain(&mut changes);
        ask(&mut table, "b", 0, at(10_001));
        let kinds = drain(&mut changes);
        assert!(
            kinds.contains(&LeaseChangeKind::ContenderLeft { owner: "a".into() }),
            "{kinds:?}"
        );
        assert!(
            kinds.contains(&LeaseChangeKind::Acquired {
                owner: "b".into(),
                token: FencingToken(2),
                after_expiry: true
            }),
            "{kinds:?}"
        );
    }
}
