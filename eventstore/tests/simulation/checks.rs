//! What the members believe, checked at every sample on the virtual clock.

use std::collections::BTreeMap;

use eventstore::FencingToken;
use tokio::time::Instant;

use crate::fleet::{Election, Fleet};
use crate::world::World;
use crate::{INTERVAL, PARTITIONS, TTL};

/// The checks of one run and what they remember between samples.
#[derive(Debug)]
pub(crate) struct Checks {
    election: Election,
    /// Per lease, the newest token a member believed it held, and that member.
    newest: BTreeMap<String, (FencingToken, String)>,
    /// What each member believed at the previous sample, for the trace.
    beliefs: BTreeMap<String, Vec<(String, FencingToken)>>,
    /// Once the faults stop, by when everything must be held, and balanced.
    deadline: Instant,
    held_all: bool,
    balanced: bool,
}

impl Checks {
    pub(crate) fn new(election: Election, world: &World) -> Checks {
        Checks {
            election,
            newest: BTreeMap::new(),
            beliefs: BTreeMap::new(),
            deadline: world.faults_until() + TTL + INTERVAL * 2,
            held_all: false,
            balanced: false,
        }
    }

    /// Looks at every member that runs: no lease believed held by two at once, no belief
    /// under a token below one believed before or under another member's token, and, once
    /// the faults have stopped long enough, everything held (and partitions balanced).
    pub(crate) fn sample(&mut self, fleet: &Fleet, world: &World) {
        let mut holders: BTreeMap<String, Vec<(String, FencingToken)>> = BTreeMap::new();
        for member in fleet.members.iter().filter(|m| m.runs()) {
            let fences = member.watch.fences();
            let belief: Vec<(String, FencingToken)> = fences
                .iter()
                .map(|fence| (fence.lease_name.clone(), fence.token))
                .collect();
            if self.beliefs.get(&member.owner) != Some(&belief) {
                world.trace(format!("{} believes it holds {belief:?}", member.owner));
                self.beliefs.insert(member.owner.clone(), belief);
            }
            for fence in fences {
                self.token_seen(&fence.lease_name, fence.token, &member.owner, world);
                holders
                    .entry(fence.lease_name)
                    .or_default()
                    .push((member.owner.clone(), fence.token));
            }
        }
        for (lease_name, holders) in &holders {
            if holders.len() > 1 {
                world.violation(format!("{lease_name:?} held by two at once: {holders:?}"));
            }
        }
        if !world.faults_on() {
            self.liveness(fleet, &holders, world);
        }
    }

    fn token_seen(&mut self, lease_name: &str, token: FencingToken, owner: &str, world: &World) {
        match self.newest.get(lease_name) {
            Some((newest, by)) if token < *newest => world.violation(format!(
                "{owner} holds {lease_name:?} under {token}, below {newest} held by {by} before"
            )),
            Some((newest, by)) if token == *newest && by != owner => world.violation(format!(
                "{owner} holds {lease_name:?} under {token}, the token {by} held"
            )),
            _ => {
                self.newest
                    .insert(lease_name.to_owned(), (token, owner.to_owned()));
            }
        }
    }

    fn liveness(
        &mut self,
        fleet: &Fleet,
        holders: &BTreeMap<String, Vec<(String, FencingToken)>>,
        world: &World,
    ) {
        let wanted = match self.election {
            Election::Leader => 1,
            Election::Partitions => PARTITIONS as usize,
        };
        self.held_all |= holders.len() == wanted;
        self.balanced |= holders.len() == wanted && self.is_balanced(fleet);
        if Instant::now() >= self.deadline {
            if !self.held_all {
                world.violation(format!(
                    "{} of {wanted} held a ttl and two intervals after the faults stopped",
                    holders.len()
                ));
            } else if !self.balanced {
                world.violation(
                    "the partitions were not balanced a ttl and two intervals after the faults \
                     stopped"
                        .to_owned(),
                );
            }
            // Reported once.
            self.held_all = true;
            self.balanced = true;
        }
    }

    /// Whether the members that run hold partitions as evenly as can be.
    fn is_balanced(&self, fleet: &Fleet) -> bool {
        if self.election == Election::Leader {
            return true;
        }
        let counts: Vec<usize> = fleet
            .members
            .iter()
            .filter(|m| m.runs())
            .map(|m| m.watch.fences().len())
            .collect();
        let most = counts.iter().max().copied().unwrap_or(0);
        let least = counts.iter().min().copied().unwrap_or(0);
        most - least <= 1
    }
}
