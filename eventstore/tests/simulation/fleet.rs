//! The members of one run: electors that join, crash, restart, shut down and change
//! priority on a seeded schedule, each with a worker that writes through its fence.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eventstore::elector::LeaderElector;
use eventstore::partitions::PartitionElector;
use eventstore::projector::{ElectedProjector, PartitionedProjector};
use eventstore::{
    AppendCriteria, EventStorage, EventStorageError, EventStreamId, EventToStore, Fence,
    LeadershipWatch, PartitionWatch,
};
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::history::Recorder;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;
use tokio::time::sleep;

use crate::faults::{link, LATENCY};
use crate::projection::{projector, Ledger};
use crate::world::World;
use crate::{Timings, LEASE, PARTITIONS, TTL};

/// What the members elect on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Election {
    /// One `LeaderElector` per member, on one lease.
    Leader,
    /// One `PartitionElector` per member, in one group.
    Partitions,
}

/// What a member sees of what it holds.
#[derive(Debug, Clone)]
pub(crate) enum Watch {
    Leader(LeadershipWatch),
    Partitions(PartitionWatch),
}

impl Watch {
    /// Every fence the member believes it may write under at this instant: its tenure, or
    /// each partition it holds or is handing over.
    pub(crate) fn fences(&self) -> Vec<Fence> {
        match self {
            Watch::Leader(watch) => watch.fence().into_iter().collect(),
            Watch::Partitions(watch) => {
                let mut held = watch.held();
                held.extend(watch.handing_over());
                held.into_values().collect()
            }
        }
    }
}

enum Elector {
    Leader(LeaderElector),
    Partitions(PartitionElector),
}

impl Elector {
    fn abort(self) {
        match self {
            Elector::Leader(elector) => elector.abort(),
            Elector::Partitions(elector) => elector.abort(),
        }
    }

    async fn shutdown(self) -> Result<(), EventStorageError> {
        match self {
            Elector::Leader(elector) => elector.shutdown().await,
            Elector::Partitions(elector) => elector.shutdown().await,
        }
    }
}

/// Where a member is in its life.
enum Run {
    Live(Elector),
    ShuttingDown(JoinHandle<()>),
    Gone,
}

/// One member: an elector, its projector and its writer.
pub(crate) struct Member {
    pub(crate) owner: String,
    pub(crate) watch: Watch,
    /// The priority a leader elector asks with.
    pub(crate) priority: i64,
    run: Run,
    work: [JoinHandle<()>; 2],
    /// Cleared when the process stops: what it believes counts no more.
    runs: Arc<AtomicBool>,
}

impl Member {
    /// Whether the member's process still runs: what it believes counts.
    pub(crate) fn runs(&self) -> bool {
        match &self.run {
            Run::Live(_) => true,
            Run::ShuttingDown(task) => !task.is_finished(),
            Run::Gone => false,
        }
    }

    /// Whether the member runs and has not been asked to stop.
    pub(crate) fn is_live(&self) -> bool {
        matches!(self.run, Run::Live(_))
    }
}

/// The members of a run and the seeded schedule that changes them.
pub(crate) struct Fleet {
    election: Election,
    storage: MemoryEventStorage,
    world: Arc<World>,
    ledger: Arc<Ledger>,
    timings: Timings,
    rng: StdRng,
    pub(crate) members: Vec<Member>,
    next_id: usize,
}

/// How long the members other than the preferred one hold back after a release: longer
/// than a request takes to reach the storage over a healthy link, as the builders ask, or
/// the preferred contender's request comes second.
const HANDOVER_GRACE: Duration = LATENCY.saturating_mul(2);

/// The most members live at once.
const MOST_MEMBERS: usize = 7;

impl Fleet {
    /// A fleet of `members` members, its schedule following `seed`.
    pub(crate) fn start(
        election: Election,
        storage: MemoryEventStorage,
        world: Arc<World>,
        ledger: Arc<Ledger>,
        timings: Timings,
        seed: u64,
        members: usize,
    ) -> Fleet {
        let mut fleet = Fleet {
            election,
            storage,
            world,
            ledger,
            timings,
            rng: StdRng::seed_from_u64(seed ^ 0x5eed_f1ee_7000_0000),
            members: Vec::new(),
            next_id: 0,
        };
        for _ in 0..members {
            let owner = fleet.new_owner();
            fleet.add(owner, 0);
        }
        fleet
    }

    fn new_owner(&mut self) -> String {
        self.next_id += 1;
        format!("m{}", self.next_id)
    }

    fn add(&mut self, owner: String, priority: i64) {
        // What the member sees, lost answers included, goes into the run's lease history.
        let storage: Arc<dyn EventStorage> = Arc::new(Recorder::with_history(
            link(&self.storage, &owner, &self.world),
            self.world.history.clone(),
        ));
        self.world.started(&owner);
        let interval = self.timings.interval;
        // The first margin the builder accepts: the smallest, or the default.
        let margins = self.timings.margins();
        let (elector, watch) = match self.election {
            Election::Leader => {
                let elector = first_accepted(&margins, |margin| {
                    LeaderElector::builder(storage.clone(), LEASE)
                        .owner(owner.clone())
                        .priority(priority)
                        .ttl(TTL)
                        .request_interval(interval)
                        .safety_margin(margin)
                        .handover_grace(HANDOVER_GRACE)
                        .start()
                });
                let watch = Watch::Leader(elector.watch());
                (Elector::Leader(elector), watch)
            }
            Election::Partitions => {
                let elector = first_accepted(&margins, |margin| {
                    PartitionElector::builder(storage.clone(), LEASE, PARTITIONS)
                        .owner(owner.clone())
                        .ttl(TTL)
                        .request_interval(interval)
                        .safety_margin(margin)
                        .handover_grace(HANDOVER_GRACE)
                        .start()
                });
                let watch = Watch::Partitions(elector.watch());
                (Elector::Partitions(elector), watch)
            }
        };
        let projecting = tokio::spawn(project(storage.clone(), watch.clone(), self.ledger.clone()));
        let writing = tokio::spawn(write_while_holding(
            storage,
            watch.clone(),
            StdRng::seed_from_u64(self.rng.gen()),
        ));
        let runs = self.world.believer(&owner, watch.clone());
        self.members.push(Member {
            owner,
            watch,
            priority,
            run: Run::Live(elector),
            work: [projecting, writing],
            runs,
        });
    }

    /// Runs one step of the schedule: how long until the next one.
    pub(crate) fn step(&mut self) -> Duration {
        let live: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].is_live())
            .collect();
        let roll = self.rng.gen_range(0..100);
        match roll {
            0..=29 if !live.is_empty() => {
                let i = *live.choose(&mut self.rng).expect("some member is live");
                self.crash(i);
            }
            30..=49 => {
                let crashed: Vec<String> = self
                    .members
                    .iter()
                    .filter(|m| !m.runs())
                    .map(|m| m.owner.clone())
                    .collect();
                // Restarted under the same id (a process restarted in place) or a new one.
                let owner = match crashed.choose(&mut self.rng) {
                    Some(owner) if self.rng.gen_bool(0.5) => owner.clone(),
                    _ => self.new_owner(),
                };
                if live.len() < MOST_MEMBERS && !self.runs(&owner) {
                    self.world.trace(format!("{owner} starts"));
                    self.add(owner, 0);
                }
            }
            50..=64 if !live.is_empty() => {
                let i = *live.choose(&mut self.rng).expect("some member is live");
                self.shut_down(i);
            }
            65..=79 if !live.is_empty() && self.election == Election::Leader => {
                let i = *live.choose(&mut self.rng).expect("some member is live");
                let priority = self.rng.gen_range(0..3);
                self.set_priority(i, priority, "");
            }
            80..=91 => {
                for _ in 0..self.rng.gen_range(1..=3) {
                    if self.members.iter().filter(|m| m.is_live()).count() < MOST_MEMBERS {
                        let owner = self.new_owner();
                        self.world.trace(format!("{owner} joins"));
                        let priority = self.rng.gen_range(0..2);
                        self.add(owner, priority);
                    }
                }
            }
            _ => {
                let mut leaving = live;
                leaving.shuffle(&mut self.rng);
                for i in leaving.into_iter().take(self.rng.gen_range(1..=2)) {
                    self.shut_down(i);
                }
            }
        }
        self.world.count_lifecycle();
        Duration::from_millis(self.rng.gen_range(200..3_000))
    }

    /// Makes one planned change, as an operator would once the faults are over: members
    /// join and leave gracefully, and a leader's priority changes (a planned handover).
    /// Some member stays live. How long until the next one: often less than the group
    /// needs to settle, so that a change meets the moves of the one before.
    pub(crate) fn planned_step(&mut self) -> Duration {
        let mut live: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].is_live())
            .collect();
        live.shuffle(&mut self.rng);
        let (joining, leaving) = match self.rng.gen_range(0..4) {
            0 => (self.rng.gen_range(1..=2), 0),
            1 if live.len() > 1 => (0, 1),
            2 if self.election == Election::Leader && !live.is_empty() => {
                let i = live[0];
                let priority = self.rng.gen_range(0..3);
                self.set_priority(i, priority, " as planned");
                (0, 0)
            }
            // One joins as another leaves: what both hold moves at once.
            _ => (1, 1),
        };
        for _ in 0..joining.min(MOST_MEMBERS - live.len()) {
            let owner = self.new_owner();
            self.world.trace(format!("{owner} joins as planned"));
            self.add(owner, 0);
        }
        for &i in live.iter().take(leaving) {
            self.shut_down(i);
        }
        self.world.count_lifecycle();
        Duration::from_millis(self.rng.gen_range(200..3_000))
    }

    /// Gives live leader member `i` a new priority, traced with `how` after it.
    fn set_priority(&mut self, i: usize, priority: i64, how: &str) {
        let member = &mut self.members[i];
        if let Run::Live(Elector::Leader(elector)) = &member.run {
            let owner = &member.owner;
            self.world
                .trace(format!("{owner} takes priority {priority}{how}"));
            elector.set_priority(priority);
            member.priority = priority;
        }
    }

    fn runs(&self, owner: &str) -> bool {
        self.members.iter().any(|m| m.owner == owner && m.runs())
    }

    /// The process dies: no release, no more requests.
    fn crash(&mut self, i: usize) {
        let member = &mut self.members[i];
        self.world.trace(format!("{} crashes", member.owner));
        member.work.iter().for_each(JoinHandle::abort);
        member.runs.store(false, Ordering::Relaxed);
        if let Run::Live(elector) = std::mem::replace(&mut member.run, Run::Gone) {
            elector.abort();
        }
    }

    /// A graceful shutdown: the member releases what it holds and stops.
    fn shut_down(&mut self, i: usize) {
        let member = &mut self.members[i];
        if let Run::Live(elector) = std::mem::replace(&mut member.run, Run::Gone) {
            self.world.trace(format!("{} shuts down", member.owner));
            member.work.iter().for_each(JoinHandle::abort);
            let (world, owner, runs) = (
                self.world.clone(),
                member.owner.clone(),
                member.runs.clone(),
            );
            member.run = Run::ShuttingDown(tokio::spawn(async move {
                let _ = elector.shutdown().await;
                runs.store(false, Ordering::Relaxed);
                world.stopped(&owner);
            }));
        }
    }

    /// Makes sure some member is live once the faults stop, so that liveness is owed.
    pub(crate) fn ensure_one_live(&mut self) {
        if !self.members.iter().any(Member::is_live) {
            let owner = self.new_owner();
            self.world
                .trace(format!("{owner} joins as the last faults end"));
            self.add(owner, 0);
        }
    }

    /// Stops every member at once, at the end of the run.
    pub(crate) fn stop(self) {
        for member in self.members {
            member.work.iter().for_each(JoinHandle::abort);
            member.runs.store(false, Ordering::Relaxed);
            match member.run {
                Run::Live(elector) => elector.abort(),
                Run::ShuttingDown(task) => task.abort(),
                Run::Gone => {}
            }
        }
    }
}

/// An elector started with the first of `margins` its builder accepts.
fn first_accepted<T>(
    margins: &[Duration],
    start: impl Fn(Duration) -> Result<T, EventStorageError>,
) -> T {
    margins
        .iter()
        .find_map(|&margin| start(margin).ok())
        .expect("an elector starts with one of the margins")
}

/// A member's projector: elected, or of the partitions it holds. A projector that ends on an
/// error starts over after a pause, as a supervisor would restart it.
async fn project(storage: Arc<dyn EventStorage>, watch: Watch, ledger: Arc<Ledger>) {
    loop {
        let _ = match &watch {
            Watch::Leader(leadership) => {
                let Ok(projector) = projector(storage.clone(), None, &ledger) else {
                    return;
                };
                ElectedProjector::new(projector, leadership.clone())
                    .poll_interval(POLL_INTERVAL)
                    .run_until(std::future::pending())
                    .await
            }
            Watch::Partitions(partitions) => {
                let make = |partition| projector(storage.clone(), Some(partition), &ledger);
                PartitionedProjector::new(partitions.clone(), make)
                    .poll_interval(POLL_INTERVAL)
                    .run_until(std::future::pending())
                    .await
            }
        };
        sleep(POLL_INTERVAL).await;
    }
}

/// How often a caught-up projector looks for new events.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// A member's worker: while it holds something, it writes under that fence, sometimes
/// after a pause past the ttl (a process stopped between its check and its write: the
/// zombie whose write the fence must refuse).
async fn write_while_holding(storage: Arc<dyn EventStorage>, watch: Watch, mut rng: StdRng) {
    let stream = EventStreamId::for_context("simulation");
    loop {
        sleep(TTL.mul_f64(rng.gen_range(0.03..0.2))).await;
        let fences = watch.fences();
        let Some(fence) = fences.choose(&mut rng).cloned() else {
            continue;
        };
        if rng.gen_bool(0.15) {
            sleep(TTL.mul_f64(rng.gen_range(0.5..2.0))).await;
        }
        let event = EventToStore::new("Worked", serde_json::json!({ "token": fence.token.0 }));
        let _ = storage
            .append_fenced(&fence, AppendCriteria::none(), &stream, vec![event])
            .await;
    }
}
