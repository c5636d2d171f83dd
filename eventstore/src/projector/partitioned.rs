//! Projectors for partitioned work: one per partition this instance holds.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::elected::check_poll_interval;
use super::failure_pause::FailurePause;
use super::{Projection, Projector, ProjectorError, ProjectorRun, DEFAULT_POLL_INTERVAL};
use crate::partitions::PartitionWatch;
use crate::{Capability, EventStorageError};

/// How many batches one partition runs before the next held partition gets its turn.
const BATCHES_PER_TURN: u64 = 4;

/// Runs a [`Projector`] for every partition its instance holds, each bookmarking under its
/// own reader and, where the storage offers [`Capability::FencedWrites`], fenced by its
/// partition's lease.
///
/// `make` builds the projector of a partition the first time this instance holds it: its
/// stream (or filter) selects the partition's events, and its bookmark reader must differ
/// per partition (say `format!("order-totals-{partition}")`). Held partitions take turns of a
/// few batches each, so one long backlog does not starve the others. Each projector reads its
/// bookmark before every run, so a partition that moved resumes where its previous holder
/// stopped. A partition being handed over is acknowledged between turns, when nothing of it
/// is in hand. A storage failure that may pass ([`ProjectorError::may_pass`]) ends the
/// round of turns and pauses the projector, from 100 ms doubling up to 5 s.
#[derive(Debug)]
pub struct PartitionedProjector<P, F> {
    watch: PartitionWatch,
    make: F,
    projectors: BTreeMap<u32, Held<P>>,
    poll_interval: Duration,
    totals: ProjectorRun,
    failures: FailurePause,
}

/// A partition's projector and the tenure it last ran under.
#[derive(Debug)]
struct Held<P> {
    projector: Projector<P>,
    /// The fence of the last tenure the projector ran under.
    tenure: crate::Fence,
    /// Whether the storage refused that tenure's writes: the partition moved on before the
    /// elector saw it, and running again under the same fence would repeat a batch in vain.
    fenced_out: bool,
}

/// How a partition's turn ended.
enum Turn {
    /// It ran its whole budget of batches: there may be more.
    MoreToDo,
    /// It caught up, or another member holds the partition now.
    Done,
    /// The storage failed in a way that may pass.
    Failed,
}

impl<P, F> PartitionedProjector<P, F>
where
    P: Projection,
    F: FnMut(u32) -> Result<Projector<P>, EventStorageError> + Send,
{
    /// Projects the partitions `watch` says this instance holds, with projectors from `make`.
    pub fn new(watch: PartitionWatch, make: F) -> Self {
        PartitionedProjector {
            watch,
            make,
            projectors: BTreeMap::new(),
            poll_interval: DEFAULT_POLL_INTERVAL,
            totals: ProjectorRun::default(),
            failures: FailurePause::default(),
        }
    }

    /// How long to wait for new events once every held partition has caught up
    /// ([`DEFAULT_POLL_INTERVAL`]); a change of the held partitions wakes it at once. Zero is
    /// refused when the projector runs.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The projector of `partition`, if this instance has held it.
    pub fn projector(&self, partition: u32) -> Option<&Projector<P>> {
        self.projectors.get(&partition).map(|held| &held.projector)
    }

    /// What all runs so far did together.
    pub fn totals(&self) -> ProjectorRun {
        self.totals
    }

    /// Projects the held partitions until `stop` completes or the elector stops. A `stop`
    /// ends the work after the batch in hand, if any: a read under way is dropped at once
    /// (the next run reads it again), so a storage that hangs holds up no stop. However the
    /// run ends, the partitions asked for are let go as it ends: none is in hand.
    ///
    /// A write refused by a fence ([`ProjectorError::is_fenced`]) ends that partition's work
    /// quietly until its next tenure: another member holds it now. Each tenure of a partition
    /// starts from its bookmark. A storage failure that may pass is logged, and the projector
    /// runs again after a pause.
    ///
    /// # Errors
    /// A projector that cannot be built, the projection's errors and the storage's errors
    /// that will not pass by themselves end the loop; the elector keeps running. A poll
    /// interval of zero is `InvalidInput` before anything is read.
    pub async fn run_until(
        &mut self,
        stop: impl Future<Output = ()>,
    ) -> Result<ProjectorRun, ProjectorError> {
        check_poll_interval(self.poll_interval)?;
        let ended = self.project_until(stop).await;
        // However the run ended, no partition is in hand: a handover asked for meanwhile (by
        // the change that also stopped it, say) is acknowledged, so the elector lets the
        // partition go at once rather than after its drain timeout.
        self.acknowledge_handovers();
        ended
    }

    /// [`Self::run_until`]'s work, its poll interval checked.
    async fn project_until(
        &mut self,
        stop: impl Future<Output = ()>,
    ) -> Result<ProjectorRun, ProjectorError> {
        tokio::pin!(stop);
        // Set once `stop` completed: whatever is under way then, but a batch in hand, is
        // dropped, so that a storage that hangs holds up no stop.
        let mut stopped = false;
        loop {
            if self.watch.is_stopped() {
                return Ok(self.totals);
            }
            let (mut more_pending, mut failed) = (false, false);
            // What is held is read after this, so only later changes call for another round.
            self.watch.mark_changes_seen();
            for (partition, fence) in self.watch.held() {
                let turn = self.take_turn(partition, fence, stop.as_mut(), &mut stopped);
                match turn.await? {
                    Turn::MoreToDo => more_pending = true,
                    Turn::Done => {}
                    Turn::Failed => failed = true,
                }
                self.acknowledge_handovers();
                if stopped {
                    return Ok(self.totals);
                }
                if failed {
                    break;
                }
            }
            self.acknowledge_handovers();
            let wait = if failed {
                self.failures.after_failure()
            } else {
                self.failures.reset();
                // More to do: only a stop or a change of the held partitions comes first.
                if more_pending {
                    Duration::ZERO
                } else {
                    self.poll_interval
                }
            };
            tokio::select! {
                biased;
                () = &mut stop => return Ok(self.totals),
                changed = self.watch.changed() => {
                    if changed.is_err() {
                        return Ok(self.totals);
                    }
                }
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Runs a few batches of `partition`, or fewer once `stop` completes (see
    /// [`Projector::run_while_or_until`]).
    async fn take_turn<S: Future<Output = ()>>(
        &mut self,
        partition: u32,
        fence: crate::Fence,
        stop: Pin<&mut S>,
        stopped: &mut bool,
    ) -> Result<Turn, ProjectorError> {
        let held = match self.projectors.entry(partition) {
            std::collections::btree_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::btree_map::Entry::Vacant(entry) => {
                let mut projector = (self.make)(partition)?;
                // Its first tenure starts from the bookmark too, whatever the projector's
                // bookmark reading: the member that held the partition before moved it.
                projector.read_bookmark_before_next_run();
                entry.insert(Held {
                    projector,
                    tenure: fence.clone(),
                    fenced_out: false,
                })
            }
        };
        if held.tenure != fence {
            // A new tenure: another member may have moved the bookmark meanwhile.
            held.tenure = fence.clone();
            held.fenced_out = false;
            held.projector.read_bookmark_before_next_run();
        }
        if held.fenced_out {
            return Ok(Turn::Done);
        }
        let projector = &mut held.projector;
        let fenced = projector.storage.supports(Capability::FencedWrites);
        projector.set_fence(fenced.then(|| fence.clone()));
        let watch = self.watch.clone();
        let mut budget = BATCHES_PER_TURN;
        // Set when the budget, not a short batch or a handover, ended the turn: only then may
        // more be waiting (a full last batch).
        let mut out_of_budget = false;
        let spent = &mut out_of_budget;
        let keep_going = move || {
            if !watch.holds(partition, &fence) {
                return false;
            }
            if budget == 0 {
                *spent = true;
                return false;
            }
            budget -= 1;
            true
        };
        match projector
            .run_while_or_until(keep_going, stop, stopped)
            .await
        {
            Ok(run) => {
                self.totals.add(&run);
                Ok(if out_of_budget {
                    Turn::MoreToDo
                } else {
                    Turn::Done
                })
            }
            Err(error) if error.is_fenced() => {
                tracing::warn!(group = %self.watch.group(), partition, error = %error.report(),
                    "a write refused by the fence; another member holds the partition");
                held.fenced_out = true;
                Ok(Turn::Done)
            }
            Err(error) if error.may_pass() => {
                tracing::warn!(group = %self.watch.group(), partition, error = %error.report(),
                    "the partition's run failed; running again after a pause");
                Ok(Turn::Failed)
            }
            Err(error) => Err(error),
        }
    }

    /// Lets go of every partition being handed over: none is in hand between turns.
    fn acknowledge_handovers(&self) {
        for partition in self.watch.handing_over().into_keys() {
            self.watch.hand_over(partition);
        }
    }
}
