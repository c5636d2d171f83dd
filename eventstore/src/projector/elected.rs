//! A projector that runs only while its instance leads.

use std::future::Future;
use std::time::{Duration, Instant};

use super::failure_pause::FailurePause;
use super::{unless_stopped, Projection, Projector, ProjectorError, ProjectorRun};
use crate::elector::{Leadership, LeadershipWatch};
use crate::fallback::OptionalMethod;
use crate::EventStorageExt;
use crate::{
    AppendHints, AppendNotice, Capability, EventReference, EventStorageError, Fence, FencingToken,
};

/// How long an elected projector waits for new events between runs unless set otherwise.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Refuses a poll interval of zero, under which a projector that caught up would read the
/// storage again and again without a pause.
pub(super) fn check_poll_interval(interval: Duration) -> Result<(), ProjectorError> {
    if interval.is_zero() {
        return Err(EventStorageError::invalid(
            "poll interval",
            "0s",
            "must be more than zero: a projector that caught up would read the storage \
             without a pause (append hints, where the storage offers them, wake it at once \
             whatever the interval)",
        )
        .into());
    }
    Ok(())
}

/// The first wait before reading again when a hint announced an event the read did not find
/// yet; it doubles up to [`LAST_RETRY`] or the poll interval, whichever is shorter.
const FIRST_RETRY: Duration = Duration::from_millis(5);

/// The longest wait between reads while a hinted event stays out of sight. A long
/// transaction anywhere on the server can hold readers back for seconds (PostgreSQL's
/// visibility barrier); once it ends, the projector should find the event within this, not
/// after a wait that kept doubling all along.
const LAST_RETRY: Duration = Duration::from_millis(250);

/// How long the projector keeps reading at the retry pace after hints may have been missed
/// (a listener reconnected): what they announced may still be out of sight, and nothing else
/// will wake the projector before its poll interval.
const LOOK_AFTER_MISSED: Duration = Duration::from_secs(10);

/// Runs a [`Projector`] on the one instance that leads, with its writes fenced.
///
/// While its instance leads it runs the projector (which reads the bookmark before each run,
/// so it resumes where the previous leader stopped), then waits for new events: woken by an
/// append hint where the storage offers [`Capability::AppendHints`], and by the poll
/// interval in any case, as the safety net for a hint that never came. When hints may have
/// been missed (the storage's listener reconnected), it reads at once and keeps reading at a
/// quick pace for a few seconds, as what they announced may not be in sight yet. It stops
/// between batches as soon as the tenure ends. On a step-down request it finishes the batch
/// in hand, then acknowledges, so the elector releases the lease to the waiting contender.
/// Where the storage offers [`Capability::FencedWrites`] every bookmark carries the tenure's
/// fence, so a superseded leader cannot move the bookmark. A storage failure that may pass
/// ([`ProjectorError::may_pass`]: a lost connection, a server restarting) pauses the
/// projector, from 100 ms doubling up to 5 s, instead of ending it: an instance that goes on
/// leading goes on projecting once the storage is back.
#[derive(Debug)]
pub struct ElectedProjector<P> {
    projector: Projector<P>,
    leadership: LeadershipWatch,
    poll_interval: Duration,
    totals: ProjectorRun,
    failures: FailurePause,
    /// `subscribe_appends`, until the storage shows it lacks it after all.
    append_hints: OptionalMethod,
}

impl<P: Projection> ElectedProjector<P> {
    /// Runs `projector` while `leadership` says this instance leads.
    pub fn new(projector: Projector<P>, leadership: LeadershipWatch) -> Self {
        ElectedProjector {
            projector,
            leadership,
            poll_interval: DEFAULT_POLL_INTERVAL,
            totals: ProjectorRun::default(),
            failures: FailurePause::default(),
            append_hints: OptionalMethod::default(),
        }
    }

    /// How long to wait for new events after catching up ([`DEFAULT_POLL_INTERVAL`]). With
    /// append hints this is only the safety net: an append wakes the projector at once. Zero
    /// is refused when the projector runs.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The projector.
    pub fn projector(&self) -> &Projector<P> {
        &self.projector
    }

    /// The projector, consuming this.
    pub fn into_projector(self) -> Projector<P> {
        self.projector
    }

    /// What all runs so far did together.
    pub fn totals(&self) -> ProjectorRun {
        self.totals
    }

    /// Projects while leading, stands by otherwise, until `stop` completes or the elector
    /// stops. A `stop` during a run ends it after the batch in hand, however long the backlog:
    /// a batch is always finished, and a deploy that stops the work before it releases the
    /// lease does not wait for a replay. A read under way is dropped at once (the next run
    /// reads it again), so a storage that hangs holds up no stop. However the run ends, a
    /// step-down asked for is acknowledged as it ends: nothing of the tenure is in hand.
    ///
    /// A write refused by the fence, the bookmark's or one the projection made
    /// ([`ProjectorError::is_fenced`]), ends the tenure's work quietly: another instance
    /// leads, and the projector waits for the next tenure instead of running again under the
    /// refused one. Each tenure starts from the bookmark. A storage failure that may pass is
    /// logged, and the projector runs again after a pause.
    ///
    /// # Errors
    /// The projection's errors and the storage's errors that will not pass by themselves
    /// (e.g. `Closed`, `Schema`) end the loop; the elector keeps running, so shut it down (or
    /// retry) as suits the caller. A poll interval of zero is `InvalidInput` before anything
    /// is read.
    pub async fn run_until(
        &mut self,
        stop: impl Future<Output = ()>,
    ) -> Result<ProjectorRun, ProjectorError> {
        check_poll_interval(self.poll_interval)?;
        let ended = self.project_until(stop).await;
        // However the run ended, nothing of the tenure is in hand: a step-down asked for
        // meanwhile (by the change that also stopped it, say) is acknowledged, so the elector,
        // which keeps the lease until then, hands it over at once.
        if let Leadership::StepDownRequested { token } = self.leadership.current() {
            self.leadership.acknowledge_step_down(token);
        }
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
        let fenced = self.projector.storage.supports(Capability::FencedWrites);
        let subscribing = self.subscribe_to_appends();
        let Some(mut hints) = unless_stopped(subscribing, stop.as_mut(), &mut stopped).await else {
            return Ok(self.totals);
        };
        // The newest event a hint announced, and how soon to look again while the projector
        // has not reached it: a hint may come before readers can see the event (PostgreSQL's
        // visibility barrier), and that must not cost a whole poll interval.
        let mut announced: Option<EventReference> = None;
        // Until when to keep looking after hints may have been missed.
        let mut look_until: Option<Instant> = None;
        let mut retry = FIRST_RETRY;
        // Set when the last run failed in a way that may pass: how long to pause.
        let mut paused: Option<Duration> = None;
        // The token of the last tenure this projector ran under, and whether the fence
        // refused that tenure's writes: the storage knows the tenure is over before the
        // elector does, and running again under it would only repeat a batch in vain.
        let mut tenure: Option<FencingToken> = None;
        let mut fenced_out = false;
        loop {
            // The leadership is read after this, so only later changes call for another run.
            self.leadership.mark_changes_seen();
            let leadership = self.leadership.current();
            match leadership {
                Leadership::Stopped => return Ok(self.totals),
                Leadership::StepDownRequested { token } => {
                    // Nothing is in hand between runs: the unit of work is finished.
                    self.leadership.acknowledge_step_down(token);
                }
                Leadership::Leader { token } if tenure == Some(token) && fenced_out => {}
                Leadership::Leader { token } => {
                    if tenure != Some(token) {
                        tenure = Some(token);
                        fenced_out = false;
                        self.projector.read_bookmark_before_next_run();
                    }
                    let fence = fenced.then(|| Fence::new(self.leadership.lease_name(), token));
                    self.projector.set_fence(fence);
                    let watch = self.leadership.clone();
                    let keep_going = || watch.current() == Leadership::Leader { token };
                    // What readers see before the run: a hinted event at or below it is read
                    // by the run, whether the projection takes it or not (another type, say),
                    // so the hint needs no look after it.
                    let visible = match announced {
                        Some(_) => {
                            let head = self.projector.visible_head();
                            match unless_stopped(head, stop.as_mut(), &mut stopped).await {
                                Some(visible) => visible,
                                None => return Ok(self.totals),
                            }
                        }
                        None => None,
                    };
                    if announced.is_some_and(|last| visible >= Some(last)) {
                        announced = None;
                    }
                    let outcome = self
                        .projector
                        .run_while_or_until(keep_going, stop.as_mut(), &mut stopped)
                        .await;
                    match outcome {
                        Ok(run) => {
                            self.totals.add(&run);
                            self.failures.reset();
                        }
                        Err(error) if error.is_fenced() => {
                            tracing::warn!(lease = %self.leadership.lease_name(), %token,
                                error = %error.report(),
                                "a write refused by the fence; another instance leads, waiting \
                                 for the elector to see it");
                            fenced_out = true;
                        }
                        Err(error) if error.may_pass() => {
                            let pause = self.failures.after_failure();
                            tracing::warn!(lease = %self.leadership.lease_name(), %token,
                                error = %error.report(), ?pause,
                                "the projector's run failed; running again after a pause");
                            paused = Some(pause);
                        }
                        Err(error) => return Err(error),
                    }
                    if let Leadership::StepDownRequested { token } = self.leadership.current() {
                        self.leadership.acknowledge_step_down(token);
                    }
                    if stopped {
                        return Ok(self.totals);
                    }
                }
                Leadership::Unknown
                | Leadership::SteppedDown { .. }
                | Leadership::Standby { .. } => {}
            }
            let missed_lately = look_until.is_some_and(|until| Instant::now() < until);
            let behind = self.leadership.is_leader()
                && !fenced_out
                && (missed_lately
                    || announced.is_some_and(|last| self.projector.position() < Some(last)));
            // A pause is waited out whatever hints say; the leadership still ends it.
            let pause = paused.take();
            let wait = if let Some(pause) = pause {
                pause
            } else if behind {
                let wait = retry.min(LAST_RETRY).min(self.poll_interval);
                retry = retry.saturating_mul(2);
                wait
            } else {
                announced = None;
                look_until = None;
                retry = FIRST_RETRY;
                self.poll_interval
            };
            tokio::select! {
                () = &mut stop => return Ok(self.totals),
                changed = self.leadership.changed() => {
                    if changed.is_err() {
                        return Ok(self.totals);
                    }
                }
                notice = next_hint(&mut hints), if pause.is_none() => match notice {
                    Some(AppendNotice::Appended(hint)) => {
                        announced = announced.max(Some(hint.last));
                        retry = FIRST_RETRY;
                    }
                    Some(AppendNotice::Missed) => {
                        look_until = Some(Instant::now() + LOOK_AFTER_MISSED);
                        retry = FIRST_RETRY;
                    }
                    // The storage closed the subscription: poll from here on.
                    None => hints = None,
                },
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Append hints for the projector's stream, if the storage pushes any.
    async fn subscribe_to_appends(&self) -> Option<AppendHints> {
        let storage = &self.projector.storage;
        if !storage.supports(Capability::AppendHints) || !self.append_hints.available() {
            return None;
        }
        match storage.subscribe_appends(&self.projector.stream).await {
            Ok(hints) => Some(hints),
            Err(error) => {
                let polling = "polling only";
                if !self.append_hints.falls_back(
                    storage.as_ref(),
                    "subscribe_appends",
                    polling,
                    &error,
                ) {
                    tracing::warn!(stream = %self.projector.stream, error = %error.report(),
                        "cannot follow append hints; {polling}");
                }
                None
            }
        }
    }
}

/// The next append hint, with every hint already behind it taken in: the furthest append
/// they announce, or `Missed` if any says so (a run reads everything up to the furthest, so
/// hints that piled up during a run call for one look, not one each). Never, when nothing is
/// pushed.
async fn next_hint(hints: &mut Option<AppendHints>) -> Option<AppendNotice> {
    let Some(hints) = hints else {
        return std::future::pending().await;
    };
    let mut notice = hints.next().await?;
    while let Some(next) = hints.try_next() {
        notice = match (notice, next) {
            (AppendNotice::Appended(first), AppendNotice::Appended(next)) => {
                AppendNotice::Appended(if next.last > first.last { next } else { first })
            }
            _ => AppendNotice::Missed,
        };
    }
    Some(notice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::append_hints::{AppendHint, AppendHintHub};
    use crate::{EventId, EventStreamId};

    fn hint(position: u64) -> AppendHint {
        AppendHint {
            stream: EventStreamId::for_context("orders"),
            last: EventReference::at(EventId::new(), position),
        }
    }

    #[tokio::test]
    async fn hints_that_piled_up_are_taken_as_one_for_the_furthest() {
        let hub = AppendHintHub::new();
        let mut hints = Some(hub.subscribe(&EventStreamId::for_context("orders")));
        for position in [3, 9, 5] {
            hub.publish(hint(position));
        }
        let Some(AppendNotice::Appended(furthest)) = next_hint(&mut hints).await else {
            panic!("one notice for the hints that piled up");
        };
        assert_eq!(furthest.last.position, 9);
        hub.publish(hint(10));
        hub.missed();
        hub.publish(hint(11));
        assert_eq!(next_hint(&mut hints).await, Some(AppendNotice::Missed));
    }
}
