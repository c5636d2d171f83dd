//! The lease loop the elector runs on its own tokio task.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;
use tokio::time::{sleep_until, timeout, Instant};

use super::leadership::{Leadership, Shared, Tenure};
use crate::{
    EventStorage, EventStorageError, FencingToken, LeaseRequest, LeaseResponse, LeaseStatus,
};

/// The settings the loop runs with, validated by the builder.
#[derive(Debug, Clone)]
pub(super) struct LoopSettings {
    pub(super) priority: i64,
    pub(super) ttl: Duration,
    pub(super) request_interval: Duration,
    pub(super) safety_margin: Duration,
}

/// Why waiting stopped early.
enum Interrupt {
    Shutdown,
    StepDownAcknowledged(FencingToken),
}

pub(super) struct ElectionLoop {
    pub(super) storage: Arc<dyn EventStorage>,
    pub(super) shared: Arc<Shared>,
    pub(super) settings: LoopSettings,
    pub(super) shutdown: watch::Receiver<bool>,
}

/// `base` shortened by up to a fifth at random, so that instances drift apart instead of
/// requesting in lockstep. Never longer than `base`, so renewals keep their margin.
fn jittered(base: Duration) -> Duration {
    base.mul_f64(rand::thread_rng().gen_range(0.8..=1.0))
}

impl ElectionLoop {
    /// Requests on every interval until shut down; releases the lease on the way out.
    pub(super) async fn run(mut self) -> Result<(), EventStorageError> {
        let mut next_request = Instant::now();
        loop {
            match self.wait_until(next_request).await {
                Some(Interrupt::Shutdown) => return self.release_and_stop().await,
                Some(Interrupt::StepDownAcknowledged(token)) => {
                    self.hand_over(token).await;
                    // Stay out for a ttl so that the waiting contender acquires the released
                    // lease before this instance's own request would take it back.
                    next_request =
                        Instant::now() + self.settings.ttl + jittered(self.settings.ttl / 5);
                    continue;
                }
                None => {}
            }
            match self.request_once().await {
                None => return self.release_and_stop().await,
                Some(RequestOutcome::Closed) => {
                    self.shared.demote(Leadership::Stopped);
                    return Ok(());
                }
                Some(RequestOutcome::Answered | RequestOutcome::Failed) => {}
            }
            next_request = Instant::now() + jittered(self.settings.request_interval);
        }
    }

    /// Sends one request and applies the answer; demotes at the deadline while it waits.
    /// `None` when shut down meanwhile.
    async fn request_once(&mut self) -> Option<RequestOutcome> {
        let request = LeaseRequest::new(
            self.shared.lease_name.clone(),
            self.shared.owner.clone(),
            self.settings.priority,
            self.settings.ttl,
        );
        let sent = Instant::now();
        // An answer confirms leadership only until sent + ttl - margin; one arriving later
        // confers nothing, so that is also how long it is worth waiting for.
        let valid_until = sent + self.settings.ttl - self.settings.safety_margin;
        let storage = Arc::clone(&self.storage);
        let answer = timeout(valid_until - sent, async move {
            storage.request_lease(request).await
        });
        let answer = match self.while_waiting(answer).await? {
            Ok(answer) => answer,
            Err(_elapsed) => {
                tracing::warn!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                    "lease request unanswered within the ttl; not leading");
                self.shared.demote(Leadership::Unknown);
                return Some(RequestOutcome::Failed);
            }
        };
        match answer {
            Ok(response) => {
                self.apply(response, valid_until);
                Some(RequestOutcome::Answered)
            }
            Err(EventStorageError::Closed) => Some(RequestOutcome::Closed),
            Err(error) => {
                // A failed renewal is never evidence of still leading.
                tracing::warn!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                    %error, "lease request failed; not leading");
                self.shared.demote(Leadership::Unknown);
                Some(RequestOutcome::Failed)
            }
        }
    }

    fn apply(&self, response: LeaseResponse, valid_until: Instant) {
        if Instant::now() >= valid_until {
            self.shared.demote(Leadership::Unknown);
            return;
        }
        let token = response.fencing_token;
        let tenure = Some(Tenure {
            token,
            deadline: valid_until,
        });
        match response.status {
            LeaseStatus::Leader => self.shared.confirm(tenure, Leadership::Leader { token }),
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
                _ = self.shutdown.changed() => return None,
                output = &mut work => return Some(output),
                () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    tracing::warn!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                        "leadership deadline passed without a confirmed renewal; not leading");
                    self.shared.demote(Leadership::Unknown);
                }
            }
        }
    }

    /// Waits until `until`, returning early on shutdown or an acknowledged step-down.
    async fn wait_until(&mut self, until: Instant) -> Option<Interrupt> {
        loop {
            if let Some(tenure) = self.shared.tenure() {
                if self.shared.take_acknowledgement(tenure.token) {
                    return Some(Interrupt::StepDownAcknowledged(tenure.token));
                }
            }
            let acknowledgement = Arc::clone(&self.shared);
            let notified = async move { acknowledgement.acknowledgement.notified().await };
            match self
                .while_waiting(async {
                    tokio::select! {
                        () = sleep_until(until) => false,
                        () = notified => true,
                    }
                })
                .await
            {
                None => return Some(Interrupt::Shutdown),
                Some(false) => return None,
                Some(true) => continue,
            }
        }
    }

    /// Releases the lease after an acknowledged step-down and stands by.
    async fn hand_over(&mut self, token: FencingToken) {
        self.shared.demote(Leadership::SteppedDown { token });
        match self.release().await {
            Ok(()) => tracing::info!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                "stepped down and released the lease"),
            Err(error) => {
                tracing::warn!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                %error, "releasing the lease after stepping down failed; it expires after its ttl")
            }
        }
    }

    async fn release_and_stop(&mut self) -> Result<(), EventStorageError> {
        self.shared.demote(Leadership::Stopped);
        let released = self.release().await;
        if let Err(error) = &released {
            tracing::warn!(lease = %self.shared.lease_name, owner = %self.shared.owner,
                %error, "releasing the lease on shutdown failed; it expires after its ttl");
        }
        released
    }

    /// Releases the lease, giving up after a ttl (a hung storage must not hang a shutdown).
    async fn release(&self) -> Result<(), EventStorageError> {
        let operation = self
            .storage
            .release_lease(&self.shared.lease_name, &self.shared.owner);
        match timeout(self.settings.ttl, operation).await {
            Ok(released) => released,
            Err(_elapsed) => Err(EventStorageError::Timeout {
                operation: format!("release_lease({})", self.shared.lease_name),
                after: self.settings.ttl,
            }),
        }
    }
}

enum RequestOutcome {
    Answered,
    Failed,
    Closed,
}
