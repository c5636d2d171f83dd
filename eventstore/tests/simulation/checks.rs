//! What the members believe, checked at every sample on the virtual clock.

use std::collections::BTreeMap;

use eventstore::FencingToken;
use tokio::time::Instant;

use crate::faults::{Call, LATENCY, LONGEST_ON_THE_WAY};
use crate::fleet::{Election, Fleet};
use crate::world::World;
use crate::{Timings, PARTITIONS, TTL};

/// A lease a live member stopped believing it holds, and when.
#[derive(Debug)]
struct Loss {
    owner: String,
    lease_name: String,
    at: Instant,
}

/// How soon a release that explains a loss is sent, at most.
const EXPLAINED_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// The checks of one run and what they remember between samples.
#[derive(Debug)]
pub(crate) struct Checks {
    election: Election,
    /// Per lease, the newest token a member believed it held, and that member.
    newest: BTreeMap<String, (FencingToken, String)>,
    /// What each member (by its place in the fleet: a restart is another member) believed
    /// at the previous sample.
    beliefs: BTreeMap<usize, Vec<(String, FencingToken)>>,
    /// What live members stopped believing they hold, to be judged once a release that
    /// explains it would have been sent.
    losses: Vec<Loss>,
    /// Once the faults stop, by when everything must be held, and balanced.
    deadline: Instant,
    held_all: bool,
    balanced: bool,
}

impl Checks {
    pub(crate) fn new(election: Election, timings: Timings, world: &World) -> Checks {
        Checks {
            election,
            newest: BTreeMap::new(),
            beliefs: BTreeMap::new(),
            losses: Vec::new(),
            // The faults stop when the last call they held up has landed.
            deadline: world.faults_until() + LONGEST_ON_THE_WAY + TTL + timings.interval * 2,
            held_all: false,
            balanced: false,
        }
    }

    /// Looks at every member that runs: no lease believed held by two at once, no belief
    /// under a token below one believed before or under another member's token, and, once
    /// the faults have stopped long enough, everything held (and partitions balanced).
    pub(crate) fn sample(&mut self, fleet: &Fleet, world: &World) {
        let mut holders: BTreeMap<String, Vec<(String, FencingToken)>> = BTreeMap::new();
        for (place, member) in fleet.members.iter().enumerate().filter(|(_, m)| m.runs()) {
            let fences = member.watch.fences();
            let belief: Vec<(String, FencingToken)> = fences
                .iter()
                .map(|fence| (fence.lease_name.clone(), fence.token))
                .collect();
            if self.beliefs.get(&place) != Some(&belief) {
                world.trace(format!("{} believes it holds {belief:?}", member.owner));
                let before = self.beliefs.insert(place, belief.clone());
                if member.is_live() {
                    let lost = before
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|(lease_name, _)| {
                            !belief.iter().any(|(held, _)| held == lease_name)
                        });
                    self.losses.extend(lost.map(|(lease_name, _)| Loss {
                        owner: member.owner.clone(),
                        lease_name,
                        at: Instant::now(),
                    }));
                }
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
        self.judge_losses(world);
    }

    /// A live member loses what it holds only for a cause: it released it (handing over,
    /// stepping down), or a fault struck one of its lease requests. A loss for no cause is
    /// a renewal the elector failed to make in time over a healthy link: a renewal timed from
    /// a slow answer, say. A partition member's round reads the group and sends its releases
    /// before it renews, each given up after half the time left, so a read or release that
    /// hangs may still cost a renewal when the interval leaves little room: for partitions, a
    /// fault on any of the member's calls is a cause.
    fn judge_losses(&mut self, world: &World) {
        let now = Instant::now();
        let (due, waiting): (Vec<Loss>, Vec<Loss>) = std::mem::take(&mut self.losses)
            .into_iter()
            .partition(|loss| now >= loss.at + EXPLAINED_WITHIN);
        self.losses = waiting;
        for loss in due {
            let released = world.released_since(
                &loss.owner,
                &loss.lease_name,
                loss.at - LONGEST_ON_THE_WAY - EXPLAINED_WITHIN,
            );
            // A fault on a call sent at `t` can cost what a request before it confirmed, which
            // lapses by `t` plus a ttl; a loss later than that has another cause.
            let since = loss.at - TTL - LATENCY * 2;
            let struck = world.fault_since(&loss.owner, Call::Request, since)
                || (self.election == Election::Partitions
                    && (world.fault_since(&loss.owner, Call::Other, since)
                        || world.fault_since(&loss.owner, Call::Release, since)));
            if !released && !struck {
                world.violation(format!(
                    "{} lost {:?} with no fault on its requests and no release",
                    loss.owner, loss.lease_name
                ));
            }
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
