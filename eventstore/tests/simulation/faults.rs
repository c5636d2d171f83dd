//! The storage every member reaches through a link of seeded faults, and the oracle that
//! watches what the storage itself does.
//!
//! The memory storage answers every call at once (a call never waits), so the order in which
//! calls reach it is the order in which it applies them. The oracle looks at each call as it
//! is applied, before any fault touches the answer: which tokens are granted to whom, whether
//! a fenced write is accepted under a token that is not the lease's live one, and whether a
//! release changed a lease its caller did not hold.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use eventstore::decorator::Decorator;
use eventstore::{
    AppendCriteria, EventReference, EventStorage, EventStorageError, EventStreamId, EventToStore,
    Fence, Lease, LeaseOutcome, LeaseRequest, LeaseResponse, LeaseSelection, LeaseStatus,
    ReleaseOutcome, StorageResult, StoredEvent, Tags,
};
use eventstore_memory::MemoryEventStorage;
use futures_util::FutureExt;
use rand::Rng;
use tokio::time::{sleep, Instant};

use crate::world::World;
use crate::TTL;

/// What a call asks of the storage, as far as the checks care.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Call {
    /// A lease request: a fault on it excuses losing a lease.
    Request,
    /// A release.
    Release,
    /// Anything else: releases, reads, writes.
    Other,
}

/// What a link did to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Forwarded as it came.
    None,
    /// Held on the way to the storage.
    DelayThere(std::time::Duration),
    /// Applied, and the answer held on the way back.
    DelayBack(std::time::Duration),
    /// Applied, and the answer lost: the caller gets an error.
    LostAnswer,
    /// Refused before reaching the storage.
    Refused,
    /// The storage hangs for a while, then answers.
    Hang(std::time::Duration),
}

/// The most a healthy link takes each way.
pub(crate) const LATENCY: std::time::Duration = std::time::Duration::from_millis(150);

/// The most a link takes each way once the planned changes begin: a local network.
pub(crate) const LAN_LATENCY: std::time::Duration = std::time::Duration::from_millis(20);

/// The longest a call spends between its caller and the storage: a hang of two ttls on top
/// of the latency there.
pub(crate) const LONGEST_ON_THE_WAY: std::time::Duration =
    TTL.saturating_mul(2).saturating_add(LATENCY);

/// One member's link to the shared storage.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    pub(crate) storage: MemoryEventStorage,
    pub(crate) member: String,
    pub(crate) world: Arc<World>,
}

/// The answer of a memory storage's call, which never waits.
pub(crate) fn at_once<F: Future>(call: F) -> F::Output {
    call.now_or_never()
        .expect("the memory storage answers without waiting")
}

impl Link {
    fn pick(&self) -> Fault {
        if !self.world.faults_on() {
            return Fault::None;
        }
        let mut rng = self.world.fault_rng();
        // Up to 1.5 ttls: below a hang, the longest a call is held.
        let long = |rng: &mut rand::rngs::StdRng| TTL.mul_f64(rng.gen_range(0.0..1.5));
        let fault = match rng.gen_range(0..100) {
            0..=59 => Fault::None,
            60..=71 => Fault::DelayThere(long(&mut rng)),
            72..=83 => Fault::DelayBack(long(&mut rng)),
            84..=89 => Fault::LostAnswer,
            90..=95 => Fault::Refused,
            _ => Fault::Hang(TTL * 2),
        };
        drop(rng);
        if fault != Fault::None {
            self.world.count_fault();
        }
        fault
    }

    /// Applies `call` to the storage with the fault the seed picks for it, after the
    /// link's latency there, and answers after its latency back. Once sent, a lease request
    /// reaches the storage whether or not its caller still waits (it travels on a task of its
    /// own), as a request on the wire does. Any other call its caller gives up on never
    /// arrives: delivered late, a release (which names the lease and the owner, not the
    /// tenure) ends a later tenure of the same owner behind its back, and a bookmark written
    /// earlier in a tenure lands after a later one and moves it back. Both are known
    /// weaknesses of the contract's calls, not of the runtime's use of them.
    async fn faulty<T: Send + 'static>(
        &self,
        call: Call,
        what: &str,
        apply: impl FnOnce(&Link) -> StorageResult<T> + Send + 'static,
    ) -> StorageResult<T> {
        let fault = self.pick();
        let (there, back) = self.world.latency();
        self.world
            .trace(format!("{} {what}: {fault:?}", self.member));
        if fault != Fault::None {
            self.world.fault_on(&self.member, call);
        }
        let lost = || EventStorageError::backend("the answer was lost", "simulated fault");
        let (there, back) = match fault {
            Fault::DelayThere(delay) | Fault::Hang(delay) => (there + delay, back),
            Fault::DelayBack(delay) => (there, back + delay),
            _ => (there, back),
        };
        let link = self.clone();
        let on_the_wire = async move {
            sleep(there).await;
            match fault {
                Fault::Refused => Err(EventStorageError::backend(
                    "the request was refused",
                    "simulated fault",
                )),
                Fault::LostAnswer => apply(&link).and(Err(lost())),
                _ => apply(&link),
            }
        };
        let answer = if call == Call::Request {
            tokio::spawn(on_the_wire).await.expect("a call on the wire")
        } else {
            on_the_wire.await
        };
        sleep(back).await;
        answer
    }

    /// The lease as the storage holds it now.
    fn lease(&self, lease_name: &str) -> Option<Lease> {
        at_once(self.storage.list_leases(LeaseSelection::named(lease_name)))
            .ok()
            .and_then(|leases| leases.into_iter().next())
    }

    /// Applies a batch of requests and shows the oracle what the storage granted.
    fn apply_requests(
        &self,
        requests: Vec<LeaseRequest>,
        sent: Instant,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        let asked: Vec<(String, String)> = requests
            .iter()
            .map(|r| (r.lease_name.clone(), r.owner.clone()))
            .collect();
        let outcomes = at_once(self.storage.request_leases_with_outcome(requests))?;
        for ((lease_name, owner), outcome) in asked.iter().zip(&outcomes) {
            self.world.trace(format!(
                "  applied: {owner} asked {lease_name}: {:?} {} of {}",
                outcome.response.status,
                outcome.response.fencing_token,
                outcome.response.current_owner
            ));
            if outcome.response.status.is_leader() {
                self.world.granted(
                    lease_name,
                    owner,
                    outcome.response.fencing_token,
                    Instant::now() - sent,
                );
            }
        }
        Ok(outcomes)
    }

    /// Applies a release and checks that it left every lease of another owner as it was.
    fn apply_release(
        &self,
        lease_names: &[String],
        owner: &str,
    ) -> StorageResult<Vec<ReleaseOutcome>> {
        let before: Vec<Option<Lease>> = lease_names.iter().map(|name| self.lease(name)).collect();
        let released = at_once(self.storage.release_leases(lease_names, owner));
        for (name, before) in lease_names.iter().zip(before) {
            let Some(before) = before.filter(|lease| lease.owner != owner) else {
                continue;
            };
            if self.lease(name).as_ref() != Some(&before) {
                self.world.violation(format!(
                    "{owner} released {name:?}, held by {}, and changed it",
                    before.owner
                ));
            }
        }
        released
    }

    /// The answer as the broken storage of the checker's own test gives it: every
    /// requester leads.
    fn as_told(&self, response: LeaseResponse, owner: &str) -> LeaseResponse {
        if !self.world.grants_everyone {
            return response;
        }
        LeaseResponse {
            status: LeaseStatus::Leader,
            current_owner: owner.to_owned(),
            ..response
        }
    }
}

#[async_trait]
impl Decorator for Link {
    type Inner = MemoryEventStorage;

    fn inner(&self) -> &MemoryEventStorage {
        &self.storage
    }

    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        let owner = request.owner.clone();
        let what = format!("request {}", request.lease_name);
        let sent = Instant::now();
        let mut outcomes = self
            .faulty(Call::Request, &what, move |link| {
                link.apply_requests(vec![request], sent)
            })
            .await?;
        let outcome = outcomes.pop().expect("one answer per request");
        Ok(self.as_told(outcome.response, &owner))
    }

    async fn request_leases(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseResponse>> {
        let outcomes = Decorator::request_leases_with_outcome(self, requests).await?;
        Ok(outcomes
            .into_iter()
            .map(|outcome| outcome.response)
            .collect())
    }

    async fn request_leases_with_outcome(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseOutcome>> {
        let owners: Vec<String> = requests.iter().map(|r| r.owner.clone()).collect();
        let what = format!("request {} leases", requests.len());
        let sent = Instant::now();
        let outcomes = self
            .faulty(Call::Request, &what, move |link| {
                link.apply_requests(requests, sent)
            })
            .await?;
        Ok(outcomes
            .into_iter()
            .zip(&owners)
            .map(|(outcome, owner)| LeaseOutcome {
                response: self.as_told(outcome.response, owner),
                ..outcome
            })
            .collect())
    }

    async fn release_lease(&self, lease_name: &str, owner: &str) -> StorageResult<()> {
        let names = vec![lease_name.to_owned()];
        self.world.releasing(owner, &names);
        let owner = owner.to_owned();
        self.faulty(
            Call::Release,
            &format!("release {lease_name}"),
            move |link| link.apply_release(&names, &owner),
        )
        .await
        .map(drop)
    }

    async fn release_leases(
        &self,
        lease_names: &[String],
        owner: &str,
    ) -> StorageResult<Vec<ReleaseOutcome>> {
        let what = format!("release {} leases", lease_names.len());
        self.world.releasing(owner, lease_names);
        let (names, owner) = (lease_names.to_vec(), owner.to_owned());
        self.faulty(Call::Release, &what, move |link| {
            link.apply_release(&names, &owner)
        })
        .await
    }

    async fn append_fenced(
        &self,
        fence: &Fence,
        criteria: AppendCriteria,
        stream: &EventStreamId,
        events: Vec<EventToStore>,
    ) -> StorageResult<Vec<StoredEvent>> {
        let what = format!("fenced write under {} {}", fence.lease_name, fence.token);
        let (fence, stream) = (fence.clone(), stream.clone());
        self.faulty(Call::Other, &what, move |link| {
            let lease = link.lease(&fence.lease_name);
            let now = at_once(link.storage.storage_time())?;
            let written = at_once(
                link.storage
                    .append_fenced(&fence, criteria, &stream, events),
            );
            link.world.fenced_write(&fence, lease, now, written.is_ok());
            written
        })
        .await
    }

    async fn list_leases(&self, selection: LeaseSelection) -> StorageResult<Vec<Lease>> {
        let what = format!("read of {selection:?}");
        self.faulty(Call::Other, &what, move |link| {
            at_once(link.storage.list_leases(selection))
        })
        .await
    }

    async fn bookmark_fenced(
        &self,
        fence: &Fence,
        reader: &str,
        reference: &EventReference,
        tags: Tags,
    ) -> StorageResult<()> {
        let what = format!("fenced bookmark under {} {}", fence.lease_name, fence.token);
        let (fence, reader, reference) = (fence.clone(), reader.to_owned(), *reference);
        self.faulty(Call::Other, &what, move |link| {
            let lease = link.lease(&fence.lease_name);
            let now = at_once(link.storage.storage_time())?;
            let written = at_once(
                link.storage
                    .bookmark_fenced(&fence, &reader, &reference, tags),
            );
            link.world.fenced_write(&fence, lease, now, written.is_ok());
            written
        })
        .await
    }
}

/// A fresh link of `member` to `storage`, as the elector of that member uses it.
pub(crate) fn link(
    storage: &MemoryEventStorage,
    member: &str,
    world: &Arc<World>,
) -> Arc<dyn EventStorage> {
    Arc::new(Link {
        storage: storage.clone(),
        member: member.to_owned(),
        world: world.clone(),
    })
}
