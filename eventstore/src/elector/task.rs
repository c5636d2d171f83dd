//! The lease loop the elector runs on its own tokio task.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::subscribing::Subscribing;
use tokio::sync::watch;
use tokio::time::{sleep_until, timeout, Instant};

use super::leadership::{Leadership, Shared, Tenure};
use crate::fallback::OptionalMethod;
use crate::{simulation, telemetry};
use crate::{
    Capability, EventStorage, EventStorageError, FencingToken, LeaseChangeKind, LeaseChanges,
    LeaseNotice, LeaseOutcome, LeaseRequest, LeaseResponse, LeaseScope, LeaseStatus, StorageResult,
};

/// The settings the loop runs with, validated by the builder.
#[derive(Debug, Clone)]
pub(super) struct LoopSettings {
    pub(super) ttl: Duration,
    pub(super) request_interval: Duration,
    pub(super) safety_margin: Duration,
    pub(super) handover_grace: Duration,
}

/// Why waiting stopped.
enum Wake {
    /// Time to request: the timer ran out, a notice or a new priority asks for it.
    Due,
    Shutdown,
    StepDownAcknowledged(FencingToken),
}

/// What woke one wait, before it is interpreted.
enum Woken {
    Timer,
    Acknowledgement,
    Notice(Option<LeaseNotice>),
    Subscribed(Option<LeaseChanges>),
    Priority,
}

/// The signals that can cut a wait short besides the timer and the acknowledgement.
struct Signals {
    /// Pushed lease changes of this lease; `None` when the storage pushes none (polling only).
    changes: Option<LeaseChanges>,
    /// The subscription on its way, until it is ready.
    subscribing: Subscribing,
    /// A request was sent: a subscription ready after it missed whatever changed in between.
    requested: bool,
    /// This instance's priority, changeable while running.
    priority: watch::Receiver<i64>,
}

pub(super) struct ElectionLoop {
    pub(super) storage: Arc<dyn EventStorage>,
    pub(super) shared: Arc<Shared>,
    pub(super) settings: LoopSettings,
    pub(super) shutdown: watch::Receiver<bool>,
    pub(super) handover: HandoverState,
    /// `request_leases_with_outcome`, until the storage shows it lacks it after all.
    pub(super) outcomes: Arc<OptionalMethod>,
}

impl Drop for ElectionLoop {
    /// However the loop ends (returned, aborted, or a panic in a storage it called), watchers
    /// hear that it stopped instead of waiting for a change that never comes.
    fn drop(&mut self) {
        self.shared.demote(Leadership::Stopped);
    }
}

/// What the loop remembers of its last handover.
#[derive(Debug, Default)]
pub(super) struct HandoverState {
    /// The lease was released after a step-down and no answer has come since.
    released: bool,
    /// Until then, a step-down request that no new contender made is not passed on: the
    /// preferred contender did not take the lease when it was handed over, so it is probably
    /// gone, and handing over again would only churn tokens until its registration lapses.
    quiet_until: Option<Instant>,
    /// A handover was not taken: the next one waits a request interval, not the grace.
    failed_before: bool,
}

/// `base` shortened by up to a fifth at random, so that instances drift apart instead of
/// requesting in lockstep. Never longer than `base`, so renewals keep their margin.
pub(crate) fn jittered(base: Duration) -> Duration {
    base.mul_f64(simulation::fraction(0.8, 1.0))
}

/// A few milliseconds at random: contenders woken by one notice do not ask in one burst.
pub(crate) fn herd_jitter() -> Duration {
    HERD_JITTER.mul_f64(simulation::fraction(0.0, 1.0))
}

/// The most a woken contender waits before it asks, so that a herd spreads out.
const HERD_JITTER: Duration = Duration::from_millis(3);

impl ElectionLoop {
    /// Requests on every interval, and early when a pushed change asks for it, until shut
    /// down; releases the lease on the way out.
    pub(super) async fn run(
        mut self,
        priority: watch::Receiver<i64>,
    ) -> Result<(), EventStorageError> {
        // Subscribing may wait for the storage (a listener connection): never hold the
        // requests up for it.
        let mut signals = Signals {
            changes: None,
            subscribing: self.subscribe(),
            requested: false,
            priority,
        };
        let mut next_request = Instant::now();
        let mut not_before = next_request;
        loop {
            match self
                .wait_until(next_request, not_before, &mut signals)
                .await
            {
                Wake::Shutdown => return self.release_and_stop().await,
                Wake::StepDownAcknowledged(token) => {
                    let stepped_down = Instant::now();
                    self.hand_over(token).await;
                    // The sit-out counts from the step-down: a release that hung (up to a
                    // ttl) left the preferred contender all that time to ask, and sitting out
                    // in full after it would leave the lease unled for two ttls.
                    next_request =
                        (stepped_down + self.sit_out_after_step_down(&signals)).max(Instant::now());
                    // No notice may cut the sit-out short: the preferred contender goes first.
                    not_before = next_request;
                    continue;
                }
                Wake::Due => {}
            }
            let priority = *signals.priority.borrow_and_update();
            signals.requested = true;
            // The next request is timed from this one's sending, not its answer: a slow answer
            // must not push the renewal after it past the deadline this one confirms.
            let sent = Instant::now();
            match self.request_once(priority).await {
                None => return self.release_and_stop().await,
                Some(RequestOutcome::Closed) => {
                    self.shared.demote(Leadership::Stopped);
                    return Ok(());
                }
                Some(RequestOutcome::Answered | RequestOutcome::Failed) => {}
            }
            next_request = sent + jittered(self.settings.request_interval);
        }
    }

    /// Subscribes to this lease's pushed changes on a task of its own, if the storage pushes
    /// any; the loop picks the subscription up when it is ready.
    fn subscribe(&self) -> Subscribing {
        let shared = Arc::clone(&self.shared);
        let scope = LeaseScope::lease(shared.lease_name.clone());
        Subscribing::start(&self.storage, scope, move |error| {
            tracing::warn!(lease = %shared.lease_name, owner = %shared.owner,
                error = %error.report(), "cannot follow pushed lease changes; polling only");
        })
    }

    /// How long an instance that just handed over waits before it asks again.
    ///
    /// With pushed changes the preferred contender hears of the release at once and asks
    /// within milliseconds; waiting the handover grace lets it win, and still takes the lease
    /// back soon if it never asks. Without them the contender only learns at its next poll,
    /// so the instance stays out for a ttl.
    ///
    /// After a handover the preferred contender did not take, the next sit-out lasts a request
    /// interval: that contender may hear nothing pushed (its own notifications may be down)
    /// and only learns of a release at its next poll.
    fn sit_out_after_step_down(&self, signals: &Signals) -> Duration {
        if signals.changes.is_none() {
            self.settings.ttl + jittered(self.settings.ttl / 5)
        } else if self.handover.failed_before {
            self.settings.request_interval + herd_jitter()
        } else {
            self.settings.handover_grace + herd_jitter()
        }
    }

    /// Sends one request and applies the answer; demotes at the deadline while it waits.
    /// `None` when shut down meanwhile.
    async fn request_once(&mut self, priority: i64) -> Option<RequestOutcome> {
        let request = LeaseRequest::new(
            self.shared.lease_name.clone(),
            self.shared.owner.clone(),
            priority,
            self.settings.ttl,
        );
        let sent = Instant::now();
        // An answer confirms leadership only until sent + ttl - margin; one arriving later
        // confers nothing, so that is also how long it is worth waiting for.
        let valid_until = sent + self.settings.ttl - self.settings.safety_margin;
        let storage = Arc::clone(&self.storage);
        let outcomes = Arc::clone(&self.outcomes);
        let sending = AtomicBool::new(false);
        let mut answer = pin!(timeout(valid_until - sent, async {
            sending.store(true, Ordering::Relaxed);
            ask_with_outcome(storage.as_ref(), request, &outcomes).await
        }));
        let Some(answer) = self.while_waiting(answer.as_mut()).await else {
            // Shut down while the request is out: it reaches the storage whether or not
            // anyone waits, and the release that follows must not overtake it, or it takes
            // the lease back for an elector that has stopped. Its own timeout bounds the wait.
            // A request the shutdown came before is never sent.
            if sending.load(Ordering::Relaxed) {
                let _ = answer.await;
            }
            return None;
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(_elapsed) => {
                self.count_request("failed");
                tracing::warn!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                    "lease request unanswered within the ttl; not leading");
                self.shared.demote(Leadership::Unknown);
                return Some(RequestOutcome::Failed);
            }
        };
        match answer {
            Ok(LeaseOutcome {
                response,
                took_over,
            }) => {
                self.count_request(telemetry::outcome_label(response.status));
                if took_over {
                    metrics::counter!(telemetry::LEASE_TAKEOVERS,
                        "lease" => self.shared.lease_name.clone())
                    .increment(1);
                    tracing::info!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                        token = %response.fencing_token,
                        "took the lease over from a holder that let it expire");
                }
                self.apply(response, valid_until, sent);
                Some(RequestOutcome::Answered)
            }
            Err(EventStorageError::Closed) => Some(RequestOutcome::Closed),
            Err(error) => {
                self.count_request("failed");
                // A failed renewal is never evidence of still leading.
                tracing::warn!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                    error = %error.report(), "lease request failed; not leading");
                self.shared.demote(Leadership::Unknown);
                Some(RequestOutcome::Failed)
            }
        }
    }

    fn count_request(&self, outcome: &'static str) {
        metrics::counter!(
            telemetry::LEASE_REQUESTS,
            "lease" => self.shared.lease_name.clone(),
            "outcome" => outcome
        )
        .increment(1);
    }

    fn apply(&mut self, mut response: LeaseResponse, valid_until: Instant, sent: Instant) {
        if Instant::now() >= valid_until {
            self.shared.demote(Leadership::Unknown);
            return;
        }
        if std::mem::take(&mut self.handover.released) && response.status.is_leader() {
            tracing::warn!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                "the preferred contender did not take the lease handed over to it; leading again");
            self.handover.quiet_until = Some(sent + self.settings.ttl);
            self.handover.failed_before = true;
        }
        let quiet = self.handover.quiet_until.is_some_and(|until| sent < until);
        if quiet && response.status == LeaseStatus::LeaderStepDownRequested {
            response.status = LeaseStatus::Leader;
        }
        let token = response.fencing_token;
        let tenure = Some(Tenure {
            token,
            deadline: valid_until,
        });
        match response.status {
            LeaseStatus::Leader => {
                // Nobody asks for a step-down any more (the contender left, or this elector
                // ignores the request for a while): an acknowledgement the work gave meanwhile
                // hands nothing over.
                self.shared.take_acknowledgement(token);
                self.shared.confirm(tenure, Leadership::Leader { token });
            }
            LeaseStatus::LeaderStepDownRequested => self
                .shared
                .confirm(tenure, Leadership::StepDownRequested { token }),
            LeaseStatus::Standby => self.shared.confirm(
                None,
                Leadership::Standby {
                    holder: response.current_owner,
                    token,
                },
            ),
        }
    }

    /// Drives `work` to completion, demoting when the tenure's deadline passes meanwhile.
    /// `None` when shut down first.
    async fn while_waiting<T>(&mut self, work: impl Future<Output = T>) -> Option<T> {
        tokio::pin!(work);
        loop {
            let deadline = self.shared.tenure().map(|tenure| tenure.deadline);
            tokio::select! {
                biased;
                Ok(()) = self.shutdown.changed() => return None,
                output = &mut work => return Some(output),
                () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    tracing::warn!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                        "leadership deadline passed without a confirmed renewal; not leading");
                    self.shared.demote(Leadership::Unknown);
                }
            }
        }
    }

    /// Waits until `until`, which pushed changes may bring forward; returns early on
    /// shutdown, an acknowledged step-down or a new priority.
    async fn wait_until(
        &mut self,
        mut until: Instant,
        not_before: Instant,
        signals: &mut Signals,
    ) -> Wake {
        loop {
            if let Some(tenure) = self.shared.tenure() {
                if self.shared.take_acknowledgement(tenure.token) {
                    return Wake::StepDownAcknowledged(tenure.token);
                }
            }
            let acknowledgement = Arc::clone(&self.shared);
            let notified = async move { acknowledgement.acknowledgement.notified().await };
            let Signals {
                changes,
                subscribing,
                priority,
                ..
            } = signals;
            let woken = self
                .while_waiting(async {
                    tokio::select! {
                        () = sleep_until(until) => Woken::Timer,
                        () = notified => Woken::Acknowledgement,
                        notice = next_notice(changes) => Woken::Notice(notice),
                        subscribed = subscribing.ready() => Woken::Subscribed(subscribed),
                        Ok(()) = priority.changed() => Woken::Priority,
                    }
                })
                .await;
            match woken {
                None => return Wake::Shutdown,
                Some(Woken::Timer) => return Wake::Due,
                Some(Woken::Priority) if Instant::now() >= not_before => return Wake::Due,
                Some(Woken::Priority) => until = until.min(not_before),
                Some(Woken::Acknowledgement) => {}
                Some(Woken::Subscribed(subscribed)) => {
                    // A release between the first answer and this subscription reached
                    // nobody here: ask again soon, as after a missed notice.
                    if subscribed.is_some() && signals.requested {
                        if let Some(delay) = self.request_delay_after(&LeaseNotice::Missed) {
                            until = until.min((Instant::now() + delay).max(not_before));
                        }
                    }
                    signals.changes = subscribed;
                }
                Some(Woken::Notice(None)) => {
                    // The storage closed the subscription: poll from here on.
                    signals.changes = None;
                }
                Some(Woken::Notice(Some(notice))) => {
                    if let Some(delay) = self.request_delay_after(&notice) {
                        until = until.min((Instant::now() + delay).max(not_before));
                    }
                }
            }
        }
    }

    /// How soon to ask after `notice`, if it calls for asking before the next poll.
    ///
    /// A notice is only a hint: whatever it says, the request that follows decides.
    fn request_delay_after(&mut self, notice: &LeaseNotice) -> Option<Duration> {
        let me = self.shared.owner.as_str();
        let change = match notice {
            // Anything may have changed meanwhile: ask, as every contender of every lease does,
            // so spread the requests over the handover grace.
            LeaseNotice::Missed => {
                return Some(
                    self.settings
                        .handover_grace
                        .mul_f64(simulation::fraction(0.0, 1.0)),
                );
            }
            LeaseNotice::Changed(change) => change,
        };
        match &change.kind {
            LeaseChangeKind::Released {
                owner, successor, ..
            } if owner != me => match successor.as_deref() {
                // The preferred contender asks at once; the others give it the handover grace
                // and take the lease only if it never does.
                Some(successor) if successor != me => {
                    Some(self.settings.handover_grace + herd_jitter())
                }
                _ => Some(herd_jitter()),
            },
            // The holder hears of a higher-priority contender now, not at its next renewal;
            // a contender that newly asks is alive, so its request is passed on again.
            LeaseChangeKind::StepDownRequested { holder, .. } if holder == me => {
                self.handover.quiet_until = None;
                Some(Duration::ZERO)
            }
            // Someone else acquired the lease while this instance believes it leads: ask, and
            // learn that it does not.
            LeaseChangeKind::Acquired { owner, .. }
                if owner != me && self.shared.tenure().is_some() =>
            {
                Some(Duration::ZERO)
            }
            _ => None,
        }
    }

    /// Releases the lease after an acknowledged step-down and stands by.
    async fn hand_over(&mut self, token: FencingToken) {
        self.shared.demote(Leadership::SteppedDown { token });
        match self.release().await {
            Ok(()) => {
                self.handover.released = true;
                tracing::info!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                    "stepped down and released the lease");
            }
            Err(error) => {
                tracing::warn!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                error = %error.report(), "releasing the lease after stepping down failed; it expires after its ttl")
            }
        }
    }

    async fn release_and_stop(&mut self) -> Result<(), EventStorageError> {
        self.shared.demote(Leadership::Stopped);
        let released = self.release().await;
        if let Err(error) = &released {
            tracing::warn!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                error = %error.report(), "releasing the lease on shutdown failed; it expires after its ttl");
        }
        released
    }

    /// Releases the lease, giving up after a ttl (a hung storage must not hang a shutdown).
    async fn release(&self) -> Result<(), EventStorageError> {
        release_within(
            self.storage.as_ref(),
            &self.shared.lease_name,
            &self.shared.owner,
            self.settings.ttl,
        )
        .await
    }
}

enum RequestOutcome {
    Answered,
    Failed,
    Closed,
}

/// The next pushed notice, or never when nothing is pushed.
async fn next_notice(changes: &mut Option<LeaseChanges>) -> Option<LeaseNotice> {
    match changes {
        Some(changes) => changes.next().await,
        None => std::future::pending().await,
    }
}

/// Releases `lease_name` held by `owner`, giving up after `ttl` (a hung storage must not hang
/// a shutdown; the lease then expires).
pub(super) async fn release_within(
    storage: &dyn EventStorage,
    lease_name: &str,
    owner: &str,
    ttl: Duration,
) -> Result<(), EventStorageError> {
    match timeout(ttl, storage.release_lease(lease_name, owner)).await {
        Ok(released) => {
            if released.is_ok() {
                metrics::counter!(telemetry::LEASE_RELEASES, "lease" => lease_name.to_owned())
                    .increment(1);
            }
            released
        }
        Err(_elapsed) => Err(EventStorageError::timeout(
            format!("release_lease({lease_name})"),
            ttl,
        )),
    }
}

/// Asks for the lease, with the outcome where the storage says it
/// ([`Capability::LeaseOutcomes`]); elsewhere no answer says it took over.
///
/// A storage that claims the capability but answers `Unsupported` (a decorator that forwards
/// only the fixed methods) is asked with `request_lease` from then on: an `Unsupported`
/// answer changed nothing, so asking again is safe.
async fn ask_with_outcome(
    storage: &dyn EventStorage,
    request: LeaseRequest,
    outcomes: &OptionalMethod,
) -> StorageResult<LeaseOutcome> {
    if storage.supports(Capability::LeaseOutcomes) && outcomes.available() {
        match storage
            .request_leases_with_outcome(vec![request.clone()])
            .await
        {
            Ok(mut answers) => {
                return answers.pop().ok_or_else(|| {
                    EventStorageError::backend(
                        "request_leases_with_outcome answered no request",
                        "one request sent, no answer",
                    )
                })
            }
            Err(error) => {
                if !outcomes.falls_back(
                    storage,
                    "request_leases_with_outcome",
                    "request_lease",
                    &error,
                ) {
                    return Err(error);
                }
            }
        }
    }
    let response = storage.request_lease(request).await?;
    Ok(LeaseOutcome {
        response,
        took_over: false,
    })
}
