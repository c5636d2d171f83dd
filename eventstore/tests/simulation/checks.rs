//! What the members believe, checked at every sample on the virtual clock.

use std::collections::BTreeMap;
use std::time::Duration;

use eventstore::FencingToken;
use tokio::time::Instant;

use crate::faults::{Call, LATENCY, LONGEST_ON_THE_WAY};
use crate::fleet::{Election, Fleet, Member};
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
const EXPLAINED_WITHIN: Duration = Duration::from_secs(1);

/// How soon a planned change of a partition group settles, at most: the members hear of it
/// at once and move what should move within a few round trips of the local network, and a
/// look or two more where members read the group while it moved; never a renewal's wait.
const PARTITIONS_SETTLE_WITHIN: Duration = Duration::from_millis(1500);

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
    /// When the last planned change was made, while the group has not settled since.
    planned: Option<Instant>,
    /// How soon a planned change must settle.
    pub(crate) settles_within: Duration,
    /// The longest a planned change took to settle.
    pub(crate) longest_settling: Duration,
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
            planned: None,
            settles_within: match election {
                // A leader passes on no step-down request for a while after a handover nobody
                // took.
                Election::Leader => TTL + timings.interval * 2 + LATENCY * 4,
                Election::Partitions => PARTITIONS_SETTLE_WITHIN,
            },
            longest_settling: Duration::ZERO,
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
            self.settling(fleet, &holders, world);
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
                    && world.fault_since(&loss.owner, Call::Release, since));
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
        let wanted = self.wanted();
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

    /// A planned change was just made: what it moves must settle within `settles_within`.
    pub(crate) fn planned_change(&mut self) {
        self.planned = Some(Instant::now());
    }

    /// Once the faults are over, a planned change (a graceful join or leave, a priority
    /// change) settles within a few round trips: the lease led, every partition held and
    /// balanced. A member that waits for its next renewal to ask for a partition (or to
    /// hand one over) takes an interval instead.
    fn settling(
        &mut self,
        fleet: &Fleet,
        holders: &BTreeMap<String, Vec<(String, FencingToken)>>,
        world: &World,
    ) {
        let Some(at) = self.planned else {
            return;
        };
        let took = Instant::now() - at;
        if holders.len() == self.wanted() && self.has_settled(fleet) {
            self.longest_settling = self.longest_settling.max(took);
            self.planned = None;
        } else if took > self.settles_within {
            world.violation(format!(
                "a planned change had not settled after {:?}: {holders:?}",
                self.settles_within
            ));
            self.planned = None;
        }
    }

    /// Whether only live members hold anything (those leaving have let go), evenly, and a
    /// lease is led by a member no live one outranks.
    fn has_settled(&self, fleet: &Fleet) -> bool {
        let (live, leaving): (Vec<&Member>, Vec<&Member>) = fleet
            .members
            .iter()
            .filter(|m| m.runs())
            .partition(|m| m.is_live());
        if leaving.iter().any(|m| !m.watch.fences().is_empty()) {
            return false;
        }
        match self.election {
            Election::Leader => {
                let highest = live.iter().map(|m| m.priority).max();
                live.iter()
                    .any(|m| !m.watch.fences().is_empty() && Some(m.priority) == highest)
            }
            Election::Partitions => evenly_held(live.into_iter()),
        }
    }

    fn wanted(&self) -> usize {
        match self.election {
            Election::Leader => 1,
            Election::Partitions => PARTITIONS as usize,
        }
    }

    /// Whether the members that run hold partitions as evenly as can be.
    fn is_balanced(&self, fleet: &Fleet) -> bool {
        if self.election == Election::Leader {
            return true;
        }
        evenly_held(fleet.members.iter().filter(|m| m.runs()))
    }
}

/// Whether no one of `members` holds more than one partition more than another.
fn evenly_held<'a>(members: impl Iterator<Item = &'a Member>) -> bool {
    let counts: Vec<usize> = members.map(|m| m.watch.fences().len()).collect();
    let most = counts.iter().max().copied().unwrap_or(0);
    let least = counts.iter().min().copied().unwrap_or(0);
    most - least <= 1
}
