//! What one seed's run shares: its random streams, its trace, its counters, and the
//! violations its checks found.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use eventstore::{Fence, FencingToken, Lease};
use eventstore_tck::history::{CheckOptions, History};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::faults::{Call, LAN_LATENCY, LATENCY};
use crate::fleet::Watch;
use crate::TTL;

/// Locks `mutex`; a check that panicked leaves nothing half-done worth refusing.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The shared state of one run.
#[derive(Debug)]
pub(crate) struct World {
    start: Instant,
    faults_until: Instant,
    /// When the planned changes begin, over links as fast as a local network's.
    planned_from: Instant,
    /// A broken storage, for the test of the checks: every requester is told it leads.
    pub(crate) grants_everyone: bool,
    faults: Mutex<StdRng>,
    counters: Mutex<Counters>,
    trace: Mutex<Vec<String>>,
    violations: Mutex<Vec<String>>,
    /// Every lease request and release as the members saw it, for the linearizability check.
    pub(crate) history: History,
    /// Members whose shutdown returned: the storage must grant them nothing a request they
    /// would still have waited for asked.
    stopped: Mutex<BTreeSet<String>>,
    /// Per member and kind of call, when a fault last struck one.
    faults_on: Mutex<BTreeMap<(String, Call), Instant>>,
    /// Per member and lease, when the member last sent a release of it.
    releases: Mutex<BTreeMap<(String, String), Instant>>,
    /// Every member's view of what it holds, while its process runs.
    believers: Mutex<Vec<Believer>>,
    /// Per lease, the newest token the storage granted and to whom.
    granted: Mutex<BTreeMap<String, (FencingToken, String)>>,
}

/// A member's view of what it holds, and whether its process still runs.
#[derive(Debug)]
struct Believer {
    owner: String,
    watch: Watch,
    runs: Arc<AtomicBool>,
}

/// What a run counts.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counters {
    /// Calls a link delayed, lost, refused or hung.
    pub(crate) faults: u64,
    /// Members crashed, restarted, shut down, added, removed or reprioritized.
    pub(crate) lifecycle: u64,
    /// Fenced writes the storage accepted.
    pub(crate) fenced_accepted: u64,
    /// Fenced writes the storage refused because their tenure was over: a zombie's.
    pub(crate) fenced_refused: u64,
}

impl World {
    /// A world for `seed`: its faults on from now until `faults_for` has passed, its links
    /// those of a local network from `planned_from` on.
    pub(crate) fn new(
        seed: u64,
        faults_for: Duration,
        planned_from: Duration,
        grants_everyone: bool,
    ) -> World {
        let start = Instant::now();
        World {
            start,
            faults_until: start + faults_for,
            planned_from: start + planned_from,
            grants_everyone,
            faults: Mutex::new(StdRng::seed_from_u64(seed)),
            counters: Mutex::default(),
            trace: Mutex::default(),
            violations: Mutex::default(),
            granted: Mutex::default(),
            history: History::new(),
            stopped: Mutex::default(),
            believers: Mutex::default(),
            faults_on: Mutex::default(),
            releases: Mutex::default(),
        }
    }

    /// Virtual time since the run began.
    pub(crate) fn elapsed(&self) -> Duration {
        Instant::now() - self.start
    }

    /// When the faults stop.
    pub(crate) fn faults_until(&self) -> Instant {
        self.faults_until
    }

    pub(crate) fn faults_on(&self) -> bool {
        Instant::now() < self.faults_until
    }

    pub(crate) fn fault_rng(&self) -> MutexGuard<'_, StdRng> {
        lock(&self.faults)
    }

    /// How long a healthy link takes there and back for one call: up to [`LATENCY`] each
    /// way, or [`LAN_LATENCY`] once the planned changes begin.
    pub(crate) fn latency(&self) -> (Duration, Duration) {
        let most = if Instant::now() < self.planned_from {
            LATENCY
        } else {
            LAN_LATENCY
        };
        let mut rng = self.fault_rng();
        let mut one_way = || most.mul_f64(rng.gen_range(0.0..=1.0));
        (one_way(), one_way())
    }

    /// A fault struck a `call` of `member`.
    pub(crate) fn fault_on(&self, member: &str, call: Call) {
        lock(&self.faults_on).insert((member.to_owned(), call), Instant::now());
    }

    /// Whether a fault struck a `call` of `member` at or after `since`.
    pub(crate) fn fault_since(&self, member: &str, call: Call, since: Instant) -> bool {
        lock(&self.faults_on)
            .get(&(member.to_owned(), call))
            .is_some_and(|at| *at >= since)
    }

    /// `owner` sends a release of `lease_names`.
    pub(crate) fn releasing(&self, owner: &str, lease_names: &[String]) {
        let now = Instant::now();
        let mut releases = lock(&self.releases);
        for name in lease_names {
            releases.insert((owner.to_owned(), name.clone()), now);
        }
    }

    /// Whether `owner` sent a release of `lease_name` at or after `since`.
    pub(crate) fn released_since(&self, owner: &str, lease_name: &str, since: Instant) -> bool {
        lock(&self.releases)
            .get(&(owner.to_owned(), lease_name.to_owned()))
            .is_some_and(|at| *at >= since)
    }

    /// Registers a member's view of what it holds; the flag says whether its process runs.
    pub(crate) fn believer(&self, owner: &str, watch: Watch) -> Arc<AtomicBool> {
        let runs = Arc::new(AtomicBool::new(true));
        lock(&self.believers).push(Believer {
            owner: owner.to_owned(),
            watch,
            runs: runs.clone(),
        });
        runs
    }

    /// `owner`'s shutdown returned.
    pub(crate) fn stopped(&self, owner: &str) {
        lock(&self.stopped).insert(owner.to_owned());
    }

    /// `owner` runs again (restarted under its old id).
    pub(crate) fn started(&self, owner: &str) {
        lock(&self.stopped).remove(owner);
    }

    pub(crate) fn count_fault(&self) {
        lock(&self.counters).faults += 1;
    }

    pub(crate) fn count_lifecycle(&self) {
        lock(&self.counters).lifecycle += 1;
    }

    pub(crate) fn counters(&self) -> Counters {
        *lock(&self.counters)
    }

    /// Adds a line to the trace, stamped with the virtual time.
    pub(crate) fn trace(&self, line: String) {
        let at = self.elapsed();
        lock(&self.trace).push(format!("{:>9.3}s {line}", at.as_secs_f64()));
    }

    pub(crate) fn take_trace(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.trace))
    }

    /// Records a broken invariant, stamped with the virtual time.
    pub(crate) fn violation(&self, what: String) {
        let line = format!("{:.3}s: {what}", self.elapsed().as_secs_f64());
        self.trace(format!("VIOLATION {what}"));
        lock(&self.violations).push(line);
    }

    /// Checks the lease history against the contract's rules: some order of the calls, each
    /// taking effect within its span (a failed one maybe never), explains every answer. The
    /// storage's clock runs up to one part in a hundred off tokio's, so expiry is judged
    /// within that much of a ttl; and no call spends longer than `longest_on_the_way` between
    /// its caller and the storage, so a call its caller gave up on took effect by then, or
    /// never.
    pub(crate) fn check_history(
        &self,
        ttl: std::time::Duration,
        longest_on_the_way: std::time::Duration,
    ) {
        let margin = std::time::Duration::from_millis(1);
        let options = CheckOptions::new()
            .tolerance(ttl / 100 + margin)
            .unknown_horizon(longest_on_the_way + margin);
        if let Err(failure) = options.check(&self.history) {
            self.violation(format!("the lease history does not linearize: {failure}"));
        }
    }

    pub(crate) fn take_violations(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.violations))
    }

    /// The storage granted (or renewed) `lease_name` to `owner` under `token`, for a request
    /// sent `in_flight` ago: a new token must be above every one before it, one token belongs
    /// to one owner, and a member whose shutdown returned gets nothing from a request it
    /// would still have waited for (a shutdown lets the requests under way arrive, each for
    /// as long as its own timeout, at least the ttl less the default margin, before it
    /// releases).
    pub(crate) fn granted(
        &self,
        lease_name: &str,
        owner: &str,
        token: FencingToken,
        in_flight: Duration,
    ) {
        // Granted while another running member still counts on it by its own clock: the
        // margin an elector keeps must cover the storage's clock running fast.
        let others: Vec<(String, FencingToken)> = lock(&self.believers)
            .iter()
            .filter(|b| b.owner != owner && b.runs.load(Ordering::Relaxed))
            .flat_map(|b| {
                let fences = b.watch.fences();
                fences
                    .into_iter()
                    .filter(|fence| fence.lease_name == lease_name)
                    .map(|fence| (b.owner.clone(), fence.token))
                    .collect::<Vec<_>>()
            })
            .collect();
        if !others.is_empty() {
            self.violation(format!(
                "{lease_name:?} granted under {token} to {owner} while {others:?} still count on it"
            ));
        }
        if lock(&self.stopped).contains(owner) && in_flight < TTL.mul_f64(0.95) {
            self.violation(format!(
                "{lease_name:?} granted under {token} to {owner} after its shutdown returned, \
                 by a request sent {in_flight:?} before"
            ));
        }
        let mut granted = lock(&self.granted);
        match granted.get(lease_name) {
            Some((newest, holder)) if token < *newest => {
                let what = format!(
                    "{lease_name:?} granted to {owner} under {token}, below {newest} of {holder}"
                );
                drop(granted);
                self.violation(what);
            }
            Some((newest, holder)) if token == *newest && holder != owner => {
                let what =
                    format!("{lease_name:?} token {token} granted to {owner} and to {holder}");
                drop(granted);
                self.violation(what);
            }
            _ => {
                granted.insert(lease_name.to_owned(), (token, owner.to_owned()));
            }
        }
    }

    /// A fenced write was applied: accepted (`accepted`) or refused, while the storage held
    /// `lease` at `now`. Accepted only under the lease's live token; refused otherwise.
    pub(crate) fn fenced_write(
        &self,
        fence: &Fence,
        lease: Option<Lease>,
        now: DateTime<Utc>,
        accepted: bool,
    ) {
        let live_token = lease
            .filter(|lease| now <= lease.expires_at())
            .map(|lease| lease.fencing_token);
        let newest = lock(&self.granted)
            .get(&fence.lease_name)
            .map(|(token, _)| *token);
        let holds = live_token == Some(fence.token) && newest == Some(fence.token);
        {
            let mut counters = lock(&self.counters);
            if accepted {
                counters.fenced_accepted += 1;
            } else {
                counters.fenced_refused += 1;
            }
        }
        if accepted && !holds {
            self.violation(format!(
                "a write under {} {} accepted while the live token was {live_token:?} and \
                 the newest granted {newest:?}",
                fence.lease_name, fence.token
            ));
        }
        if !accepted && holds {
            self.violation(format!(
                "a write under {} {} refused while that tenure was live",
                fence.lease_name, fence.token
            ));
        }
    }
}
