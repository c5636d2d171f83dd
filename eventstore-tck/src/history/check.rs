//! The search for a linearization, lease by lease (Wing and Gong's algorithm with Lowe's
//! memoization): take, one at a time, an operation that real time allows next and the model
//! accepts there; back up when none is left; never revisit a set of taken operations with a
//! model state seen before. Of failed operations that differ only in when they were invoked,
//! the earliest is always taken first: any later one could do no more.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use eventstore_api::LeaseStatus;
use tokio::time::Instant;

use super::model::{Expected, Model, Nanos, Op, OpKind, OwnerId, State, Token, NEVER};
use super::options::CheckOptions;
use super::record::{Answer, Entry, History, Operation, Outcome};
use super::report::{
    CheckFailure, CheckSummary, Inconclusive, ReportedOperation, Seconds, Violation,
};

/// How many operations of the explanation a violation shows before the point it fails.
const TAIL: usize = 6;
/// How many candidates a violation shows at most.
const SHOWN: usize = 8;

/// Checks that `history` is linearizable against the contract's lease rules, with the
/// strictest [`CheckOptions`].
///
/// Every lease is judged alone. Its operations pass when some order of them, consistent with
/// real time (one that returned before another was invoked comes first), with each taking
/// effect at one instant of its interval, gets from the rules exactly the answers recorded.
/// A failed call may take effect at any instant from its invocation on, or never. The
/// history must begin with the lease not held live by anyone outside it.
///
/// The rules, per lease: a request finds the lease free (never granted, released, or
/// expired: strictly after heartbeat + ttl) and is granted the next token; or finds the
/// caller holding it live and renews it, same token; or finds another holder and answers
/// standby naming that holder and its token. A release by the live holder frees the lease,
/// keeping the token for the next grant; any other release changes nothing. Priorities are
/// not modelled: a holder's answer may be leader or step-down requested.
///
/// # Errors
/// [`CheckFailure::Violation`] naming the lease and the operations no order explains;
/// [`CheckFailure::Inconclusive`] when a lease's search ran out of steps.
pub fn check(history: &History) -> Result<CheckSummary, CheckFailure> {
    CheckOptions::default().check(history)
}

/// [`check`] over `entries`, with `options`.
pub(crate) fn check_entries(
    entries: &[Entry],
    options: &CheckOptions,
) -> Result<CheckSummary, CheckFailure> {
    let mut summary = CheckSummary {
        leases: 0,
        operations: entries.len(),
        unknown: entries
            .iter()
            .filter(|entry| entry.outcome == Outcome::Unknown)
            .count(),
        steps: 0,
    };
    let Some(start) = entries.iter().map(|entry| entry.invoked).min() else {
        return Ok(summary);
    };
    let mut leases: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for entry in entries {
        leases.entry(&entry.lease_name).or_default().push(entry);
    }
    let model = Model {
        tolerance: nanos(options.tolerance),
        tokens: options.tokens,
    };
    for (lease_name, mut entries) in leases {
        entries.sort_by_key(|entry| (entry.invoked, entry.returned));
        let lease = Lease::compile(lease_name, entries, start, options);
        let mut search = Search::new(&lease.ops, model, options.step_budget);
        let end = search.run();
        summary.leases += 1;
        summary.steps += search.steps;
        match end {
            End::Linearized => {}
            End::OutOfSteps => {
                return Err(CheckFailure::Inconclusive(Inconclusive {
                    lease_name: lease_name.to_owned(),
                    operations: lease.ops.len(),
                    steps: search.steps,
                }))
            }
            End::Stuck => return Err(CheckFailure::Violation(lease.violation(&search))),
        }
    }
    Ok(summary)
}

fn nanos(duration: Duration) -> Nanos {
    Nanos::try_from(duration.as_nanos()).unwrap_or(NEVER - 1)
}

/// One lease's operations, ordered by invocation, in the model's terms and as recorded.
struct Lease<'a> {
    name: &'a str,
    entries: Vec<&'a Entry>,
    ops: Vec<Op>,
    owners: Vec<&'a str>,
    start: Instant,
}

impl<'a> Lease<'a> {
    fn compile(
        name: &'a str,
        entries: Vec<&'a Entry>,
        start: Instant,
        options: &CheckOptions,
    ) -> Self {
        let mut ids: HashMap<&'a str, OwnerId> = HashMap::new();
        let mut owners = Vec::new();
        let mut intern = |owner: &'a str| {
            *ids.entry(owner).or_insert_with(|| {
                owners.push(owner);
                OwnerId::try_from(owners.len() - 1).expect("fewer than 2^32 owners")
            })
        };
        let ops = entries
            .iter()
            .map(|entry| {
                let invoked = nanos(entry.invoked - start);
                let returned = nanos(entry.returned - start);
                let (owner, kind) = match &entry.operation {
                    Operation::Request { owner, ttl, .. } => {
                        // Storages keep ttls in whole microseconds.
                        let micros = Nanos::try_from(ttl.as_micros()).unwrap_or(NEVER);
                        let ttl = micros.saturating_mul(1_000);
                        (intern(owner), OpKind::Request { ttl })
                    }
                    Operation::Release { owner } => (intern(owner), OpKind::Release),
                };
                let answer = match &entry.outcome {
                    Outcome::Known(Answer::Lease(response)) => Some(Expected::Lease {
                        leads: response.status != LeaseStatus::Standby,
                        token: response.fencing_token.0,
                        owner: intern(&response.current_owner),
                    }),
                    Outcome::Known(Answer::Release(released)) => Some(Expected::Release(*released)),
                    Outcome::Unknown => None,
                };
                let returned = match (&answer, options.unknown_horizon) {
                    (Some(_), _) => returned,
                    (None, None) => NEVER,
                    (None, Some(horizon)) => returned.max(invoked.saturating_add(nanos(horizon))),
                };
                Op {
                    owner,
                    kind,
                    invoked,
                    returned,
                    answer,
                }
            })
            .collect();
        Lease {
            name,
            entries,
            ops,
            owners,
            start,
        }
    }

    fn reported(&self, index: usize) -> ReportedOperation {
        let entry = self.entries[index];
        ReportedOperation {
            index,
            operation: entry.operation.clone(),
            invoked: entry.invoked - self.start,
            returned: entry.returned - self.start,
            outcome: entry.outcome.clone(),
        }
    }

    fn violation(&self, search: &Search<'_>) -> Violation {
        let deepest = &search.deepest;
        let tail_from = deepest.path.len().saturating_sub(TAIL);
        let unexplained = search
            .candidates(&deepest.done)
            .into_iter()
            .filter(|&index| self.ops[index].answer.is_some())
            .take(SHOWN)
            .map(|index| self.reported(index))
            .collect();
        Violation {
            lease_name: self.name.to_owned(),
            explained: deepest.known_done,
            answered: search.known,
            explained_tail: deepest.path[tail_from..]
                .iter()
                .map(|&index| self.reported(index))
                .collect(),
            state: self.describe(&deepest.state),
            unexplained,
        }
    }

    fn describe(&self, state: &State) -> String {
        let token = match state.token {
            Token::Exact(token) => format!("token {token}"),
            Token::AtLeast(token) => format!("token unknown, at least {token}"),
        };
        let Some(tenure) = state.tenure else {
            return "never granted".to_owned();
        };
        let owner = self.owners[tenure.owner as usize];
        let at = |instant: Nanos| match instant {
            NEVER => "unbounded".to_owned(),
            instant => Seconds(Duration::from_nanos(instant)).to_string(),
        };
        if tenure.ended {
            return format!("released or expired, last held by {owner:?} ({token})");
        }
        format!(
            "held by {owner:?} ({token}), last heartbeat between {} and {}, ttl {}",
            at(tenure.heartbeat_lo),
            at(tenure.heartbeat_hi),
            Seconds(Duration::from_nanos(tenure.ttl))
        )
    }
}

/// A set of operations as the cache keeps it: how many leading words are full, then the
/// words up to the last with a member.
type Key = (usize, Box<[u64]>);

/// A set of operations, by index.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(len: usize) -> Self {
        Bits(vec![0; len.div_ceil(64)])
    }

    fn flip(&mut self, index: usize) {
        self.0[index / 64] ^= 1 << (index % 64);
    }

    /// The indices not in the set, in order, from the first one on.
    fn absent(&self, len: usize) -> impl Iterator<Item = usize> + '_ {
        let first_word = self.0.iter().position(|word| *word != u64::MAX);
        let from = first_word.unwrap_or(self.0.len());
        self.0[from..]
            .iter()
            .enumerate()
            .flat_map(move |(offset, word)| {
                let base = (from + offset) * 64;
                let mut missing = !word;
                std::iter::from_fn(move || {
                    (missing != 0).then(|| {
                        let bit = missing.trailing_zeros() as usize;
                        missing &= missing - 1;
                        base + bit
                    })
                })
            })
            .take_while(move |&index| index < len)
    }

    /// A compact copy for the cache: most taken sets are a full prefix and a few more.
    fn key(&self) -> Key {
        let full = self.0.iter().take_while(|word| **word == u64::MAX).count();
        let end = self
            .0
            .iter()
            .rposition(|word| *word != 0)
            .map_or(0, |last| last + 1);
        (full, self.0[full..end.max(full)].into())
    }
}

/// How a lease's search ended.
enum End {
    Linearized,
    Stuck,
    OutOfSteps,
}

/// The furthest the search got: the most answered operations explained.
struct Deepest {
    known_done: usize,
    path: Vec<usize>,
    done: Bits,
    state: State,
}

/// A point of the search: the operations it may take next, with the state each leaves.
struct Frame {
    alternatives: Vec<(usize, State)>,
    next: usize,
    /// The operation taken to get here.
    taken: Option<usize>,
}

struct Search<'a> {
    ops: &'a [Op],
    model: Model,
    budget: u64,
    steps: u64,
    /// Operations with a known answer: all of them must be taken.
    known: usize,
    known_done: usize,
    done: Bits,
    path: Vec<usize>,
    seen: HashSet<(Key, State)>,
    deepest: Deepest,
}

impl<'a> Search<'a> {
    fn new(ops: &'a [Op], model: Model, budget: u64) -> Self {
        Search {
            ops,
            model,
            budget,
            steps: 0,
            known: ops.iter().filter(|op| op.answer.is_some()).count(),
            known_done: 0,
            done: Bits::new(ops.len()),
            path: Vec::new(),
            seen: HashSet::new(),
            deepest: Deepest {
                known_done: 0,
                path: Vec::new(),
                done: Bits::new(ops.len()),
                state: State::initial(),
            },
        }
    }

    fn run(&mut self) -> End {
        let mut frames = match self.visit(State::initial(), None) {
            Ok(Some(frame)) => vec![frame],
            Ok(None) => return End::Stuck,
            Err(end) => return end,
        };
        while let Some(frame) = frames.last_mut() {
            if let Some(&(index, state)) = frame.alternatives.get(frame.next) {
                frame.next += 1;
                self.take(index);
                match self.visit(state, Some(index)) {
                    Ok(Some(frame)) => frames.push(frame),
                    Ok(None) => self.untake(index),
                    Err(end) => return end,
                }
            } else {
                let taken = frame.taken;
                frames.pop();
                if let Some(index) = taken {
                    self.untake(index);
                }
            }
        }
        End::Stuck
    }

    fn take(&mut self, index: usize) {
        self.done.flip(index);

        self.path.push(index);
        if self.ops[index].answer.is_some() {
            self.known_done += 1;
        }
    }

    fn untake(&mut self, index: usize) {
        self.done.flip(index);

        self.path.pop();
        if self.ops[index].answer.is_some() {
            self.known_done -= 1;
        }
    }

    /// Arrives at `state` with the operations taken so far: `Err` ends the search, `Ok(None)`
    /// is a point seen before, `Ok(Some)` the alternatives from here.
    fn visit(&mut self, state: State, taken: Option<usize>) -> Result<Option<Frame>, End> {
        self.steps += 1;
        if self.known_done == self.known {
            return Err(End::Linearized);
        }
        if self.steps > self.budget {
            return Err(End::OutOfSteps);
        }
        if !self.seen.insert((self.done.key(), state)) {
            return Ok(None);
        }
        if self.known_done > self.deepest.known_done || self.deepest.path.is_empty() {
            self.deepest = Deepest {
                known_done: self.known_done,
                path: self.path.clone(),
                done: self.done.clone(),
                state,
            };
        }
        let mut alternatives = Vec::new();
        let mut next = Vec::new();
        // Answered operations first: a failed one is taken only when nothing else explains
        // what follows.
        let candidates = self.candidates(&self.done);
        let (answered, failed): (Vec<usize>, Vec<usize>) = candidates
            .into_iter()
            .partition(|&index| self.ops[index].answer.is_some());
        let failed = self.distinct(failed);
        for index in answered.into_iter().chain(failed) {
            next.clear();
            self.model.step(&state, &self.ops[index], &mut next);
            alternatives.extend(next.iter().map(|state| (index, *state)));
        }
        Ok(Some(Frame {
            alternatives,
            next: 0,
            taken,
        }))
    }

    /// Of failed candidates, in invocation order, those no earlier one stands in for.
    fn distinct(&self, failed: Vec<usize>) -> Vec<usize> {
        let mut distinct: Vec<usize> = Vec::new();
        for candidate in failed {
            let op = &self.ops[candidate];
            if !distinct
                .iter()
                .any(|&earlier| self.ops[earlier].stands_in_for(op))
            {
                distinct.push(candidate);
            }
        }
        distinct
    }

    /// The operations not taken that real time allows next: invoked no later than every
    /// operation not taken with a known answer returned. (A failed one never has to come
    /// before another: it may take effect late, or never.)
    fn candidates(&self, done: &Bits) -> Vec<usize> {
        let mut earliest_return = NEVER;
        let mut candidates = Vec::new();
        for index in done.absent(self.ops.len()) {
            let op = &self.ops[index];
            if op.invoked > earliest_return {
                break;
            }
            if op.answer.is_some() {
                earliest_return = earliest_return.min(op.returned);
            }
            candidates.push(index);
        }
        candidates
    }
}
