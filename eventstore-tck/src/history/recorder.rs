//! [`Recorder`]: a decorator that writes every lease operation into a [`History`].

use async_trait::async_trait;
use eventstore_api::decorator::Decorator;
use eventstore_api::{
    EventStorage, LeaseOutcome, LeaseRequest, LeaseResponse, ReleaseOutcome, StorageResult,
};
use tokio::time::Instant;

use super::record::{Answer, Entry, History, Operation, Outcome};

/// Wraps a storage and records every lease request and release it passes on, with the
/// call's invocation and return instants and its answer, in a [`History`] that
/// [`check`](super::check()) judges afterwards.
///
/// Instants come from [`tokio::time::Instant`], so a history recorded on tokio's paused clock
/// is as good as one recorded on the real clock. A call that fails, or that its caller drops
/// before it answers (a timeout, a shutdown), is recorded as [`Outcome::Unknown`]: it may or
/// may not have taken effect. Every other method is forwarded unchanged.
///
/// ```
/// use eventstore_tck::history::{History, Recorder};
///
/// # fn wrap<S: eventstore_api::EventStorage>(storage: S) {
/// let history = History::new();
/// let recorded = Recorder::with_history(storage, history.clone());
/// # let _ = recorded;
/// # }
/// ```
#[derive(Debug)]
pub struct Recorder<S> {
    inner: S,
    history: History,
}

impl<S> Recorder<S> {
    /// Wraps `inner`, recording into a history of its own.
    pub fn new(inner: S) -> Self {
        Recorder::with_history(inner, History::new())
    }

    /// Wraps `inner`, recording into `history`, which other recorders may share.
    pub fn with_history(inner: S, history: History) -> Self {
        Recorder { inner, history }
    }

    /// A handle to the history this recorder writes.
    pub fn history(&self) -> History {
        self.history.clone()
    }

    /// The wrapped storage.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The entries of a batch of requests, under way from now.
    fn requesting(&self, requests: &[LeaseRequest]) -> InFlight<'_> {
        let invoked = Instant::now();
        let entries = requests
            .iter()
            .map(|request| Entry {
                lease_name: request.lease_name.clone(),
                operation: Operation::Request {
                    owner: request.owner.clone(),
                    priority: request.priority,
                    ttl: request.ttl,
                },
                invoked,
                returned: invoked,
                outcome: Outcome::Unknown,
            })
            .collect();
        InFlight::new(&self.history, entries)
    }

    /// The entries of a release of `lease_names`, under way from now.
    fn releasing(&self, lease_names: &[String], owner: &str) -> InFlight<'_> {
        let invoked = Instant::now();
        let entries = lease_names
            .iter()
            .map(|lease_name| Entry {
                lease_name: lease_name.clone(),
                operation: Operation::Release {
                    owner: owner.to_owned(),
                },
                invoked,
                returned: invoked,
                outcome: Outcome::Unknown,
            })
            .collect();
        InFlight::new(&self.history, entries)
    }
}

/// The entries of one call under way. They go into the history when the call answers, each
/// with its answer, or, when the caller drops the call first (a timeout, a shutdown), as
/// unknown: a request on its way may still reach the storage after its caller gave up.
struct InFlight<'h> {
    history: &'h History,
    entries: Vec<Entry>,
}

impl<'h> InFlight<'h> {
    fn new(history: &'h History, entries: Vec<Entry>) -> Self {
        InFlight { history, entries }
    }

    /// The call answered: entry `i` gets `answer(i)`, a missing answer (a short batch) as
    /// good as a lost one.
    fn answered(mut self, answer: impl Fn(usize) -> Option<Answer>) {
        let returned = Instant::now();
        let mut entries = std::mem::take(&mut self.entries);
        for (index, entry) in entries.iter_mut().enumerate() {
            entry.returned = returned;
            entry.outcome = answer(index).map_or(Outcome::Unknown, Outcome::Known);
        }
        self.history.extend(entries);
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.entries.is_empty() {
            return;
        }
        let returned = Instant::now();
        let mut entries = std::mem::take(&mut self.entries);
        for entry in &mut entries {
            entry.returned = returned;
        }
        self.history.extend(entries);
    }
}

#[async_trait]
impl<S: EventStorage> Decorator for Recorder<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        let call = self.requesting(std::slice::from_ref(&request));
        let result = self.inner.request_lease(request).await;
        let answer = result.as_ref().ok().cloned().map(Answer::Lease);
        call.answered(|_| answer.clone());
        result
    }

    async fn request_leases(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseResponse>> {
        let call = self.requesting(&requests);
        let result = self.inner.request_leases(requests).await;
        let answers = result.as_deref().ok();
        call.answered(|i| answers.and_then(|a| a.get(i)).cloned().map(Answer::Lease));
        result
    }

    async fn request_leases_with_outcome(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        let call = self.requesting(&requests);
        let result = self.inner.request_leases_with_outcome(requests).await;
        let answers = result.as_deref().ok();
        call.answered(|i| {
            answers
                .and_then(|a| a.get(i))
                .map(|outcome| Answer::Lease(outcome.response.clone()))
        });
        result
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        let call = self.releasing(&[lease_name.to_owned()], owner);
        let result = self.inner.release_lease(lease_name, owner).await;
        let answered = result.is_ok();
        call.answered(|_| answered.then_some(Answer::Release(ReleaseOutcome::Unreported)));
        result
    }

    async fn release_leases(
        &self,
        lease_names: &[String],
        owner: &str,
    ) -> StorageResult<Vec<ReleaseOutcome>> {
        let call = self.releasing(lease_names, owner);
        let result = self.inner.release_leases(lease_names, owner).await;
        let answers = result.as_deref().ok();
        call.answered(|i| answers.and_then(|a| a.get(i)).copied().map(Answer::Release));
        result
    }
}
