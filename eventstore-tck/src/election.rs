//! Scenarios: leader election with [`LeaderElector`] and leader-elected projectors.
//!
//! Several instances, each on its own handle of one storage as separate processes would be,
//! elect a leader; the leader projects and bookmarks; it then hands over (planned release,
//! step-down by priority) or dies (stops renewing), and a standby resumes from the bookmark
//! with nothing lost. A zombie's fenced writes are refused, and the elector demotes itself by
//! its deadline while the storage hangs.
//!
//! Run on a backend without [`Capability::Lease`] (reported as ignored there unless run with
//! `--include-ignored`), each scenario proves instead that the elector
//! refuses to start with `Unsupported`; without [`Capability::FencedWrites`] the fenced
//! scenario proves that both fenced writes refuse with `Unsupported`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use eventstore::elector::{LeaderElector, Leadership, LeadershipWatch};
use eventstore::projector::{
    BookmarkReading, ElectedProjector, Projection, ProjectionError, Projector, ProjectorError,
    ProjectorRun,
};
use eventstore_api::{
    AppendCriteria, Capability, Direction, EventFilter, EventId, EventReference, EventStorage,
    EventStorageError, EventStreamId, EventToStore, Fence, FencingToken, Lease, LeaseRequest,
    Limit, StoredEvent, Tags,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::support::Answer as _;
use crate::support::{self, DEADLINE};
use crate::wrappers::{EventsOnly, Unreliable};
use crate::StorageFactory;

/// What every scenario of this module needs, unless it declares its own.
pub(crate) const NEEDS: &[Capability] = &[Capability::Lease];

/// The ttl of the electors: short, so that a crash is taken over quickly.
const TTL: Duration = Duration::from_millis(500);

/// The ttl where a scenario measures that a handover took less than a ttl.
const HANDOVER_TTL: Duration = Duration::from_secs(3);

/// The ttl where a scenario expects a handover to give the next token: long enough that a
/// stall of the machine does not lapse a tenure and start another before the handover is
/// seen. A step-down needs no expiry, so that scenario is no slower for it; a crash is taken
/// over once this ttl has passed.
const NEXT_TOKEN_TTL: Duration = Duration::from_secs(3);

/// The ttl of the elector whose storage hangs.
const HANG_TTL: Duration = Duration::from_millis(600);

/// The lease every scenario elects on.
const LEASE: &str = "projector";

/// The bookmark reader of the projection.
const READER: &str = "projector-reader";

/// Small batches, so that every run bookmarks several times.
const BATCH_SIZE: u64 = 4;

fn stream() -> EventStreamId {
    EventStreamId::for_context("election")
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

/// What the scenario below needs, instead of the module's [`NEEDS`].
pub(crate) const NEEDS_ELECTOR_REFUSES_A_STORAGE_WITHOUT_LEASES: &[Capability] = &[];

/// An elector refuses to start on a storage without [`Capability::Lease`], with an
/// `Unsupported` error that names the capability.
pub async fn elector_refuses_a_storage_without_leases<F: StorageFactory>(factory: &F) {
    let storage: Arc<dyn EventStorage> = Arc::new(factory.create().await);
    assert_elector_refused(Arc::new(EventsOnly::new(storage.clone()))).await;
    if !storage.supports(Capability::Lease) {
        assert_elector_refused(storage).await;
    }
}

/// Of three instances exactly one leads; the two others stand by naming it and its token.
pub async fn one_of_three_instances_leads_and_the_others_stand_by<F: StorageFactory>(factory: &F) {
    let Some(handles) = lease_handles(factory, 3).await else {
        return;
    };
    let electors: Vec<LeaderElector> = handles
        .iter()
        .enumerate()
        .map(|(i, storage)| start_elector(storage, &format!("node-{i}"), 0, TTL))
        .collect();
    support::eventually("one leader and two standbys naming it", || async {
        let leaders: Vec<&LeaderElector> = electors.iter().filter(|e| e.is_leader()).collect();
        let [leader] = leaders[..] else {
            return false;
        };
        let expected = Leadership::Standby {
            holder: leader.owner().to_owned(),
            token: leader.token().expect("leads"),
        };
        electors
            .iter()
            .filter(|e| e.owner() != leader.owner())
            .all(|e| e.leadership() == expected)
    })
    .await;
    for elector in electors {
        elector.shutdown().await.or_rule("shutdown", "an elector's shutdown releases its lease: release_lease answers on a storage with Capability::Lease");
    }
}

/// A graceful shutdown releases the lease: it is expired on the storage's clock at once, and
/// the next request by anyone acquires it with the next token.
pub async fn graceful_shutdown_releases_the_lease<F: StorageFactory>(factory: &F) {
    let Some(handles) = lease_handles(factory, 1).await else {
        return;
    };
    let storage = &handles[0];
    let elector = start_elector(storage, "node-0", 0, support::LONG_TTL);
    let token = wait_for_leader(&elector.watch()).await;
    elector.shutdown().await.or_rule("shutdown", "an elector's shutdown releases its lease: release_lease answers on a storage with Capability::Lease");

    let now = storage.storage_time().await.or_rule(
        "storage_time",
        "storage_time answers on a storage with Capability::Lease",
    );
    let lease = lease_named(storage, LEASE).await;
    assert!(
        lease.is_expired_at(now),
        "released on shutdown, so expired at {now}: {lease:?}"
    );
    let response = storage
        .request_lease(LeaseRequest::new(LEASE, "node-1", 0, support::LONG_TTL))
        .await
        .or_rule(
            "request_lease",
            "request_lease of a valid request answers on a storage with Capability::Lease",
        );
    assert_eq!(
        (response.current_owner.as_str(), response.fencing_token),
        ("node-1", token.next()),
        "the released lease is acquired at once: {response:?}"
    );
}

/// The leader projects and bookmarks, then shuts down gracefully; a standby takes over well
/// within a ttl, resumes from the bookmark (projecting only what came after it), and the
/// projection ends up with every event.
pub async fn planned_release_hands_over_and_the_projection_misses_nothing<F: StorageFactory>(
    factory: &F,
) {
    let Some(mut started) = ThreeInstances::start(factory, HANDOVER_TTL).await else {
        return;
    };
    let storage = &started.storage;

    let leaver = started.instances.remove(started.leader);
    let released_at = Instant::now();
    leaver.stop_gracefully().await;
    let second = wait_for_the_leader(&started.instances).await;
    let took = released_at.elapsed();
    assert!(
        took < HANDOVER_TTL,
        "a planned handover takes one request interval, not a ttl: took {took:?}"
    );
    let second_token = started.instances[second].watch.token().expect("leads");
    assert_eq!(second_token, started.token.next(), "the next tenure");

    let later = append_numbers(storage, 10..20).await;
    started.appended.extend(&later);
    started
        .projected
        .wait_for_all(storage, &started.appended)
        .await;
    assert_eq!(
        started.projected.ids_by(started.instances[second].owner()),
        later,
        "the new leader resumed from the bookmark and projected only what came after it"
    );
    for instance in started.instances {
        instance.stop_gracefully().await;
    }
}

/// The leader projects, then dies without releasing; a standby takes over once the lease has
/// expired, with the next token, resumes from the bookmark, and no event is lost.
pub async fn crashed_leader_is_taken_over_and_the_projection_misses_nothing<F: StorageFactory>(
    factory: &F,
) {
    let Some(mut started) = ThreeInstances::start(factory, NEXT_TOKEN_TTL).await else {
        return;
    };
    let storage = &started.storage;

    let crashed = started.instances.remove(started.leader);
    crashed.crash();
    let during_outage = append_numbers(storage, 10..15).await;
    started.appended.extend(&during_outage);

    let second = wait_for_the_leader(&started.instances).await;
    assert_eq!(
        started.instances[second].watch.token(),
        Some(started.token.next()),
        "the takeover has the next token"
    );
    let later = append_numbers(storage, 15..20).await;
    started.appended.extend(&later);
    started
        .projected
        .wait_for_all(storage, &started.appended)
        .await;
    let by_second = started.projected.ids_by(started.instances[second].owner());
    assert!(
        !by_second.contains(&started.appended[0]),
        "the new leader resumed from the bookmark, not from the start: {by_second:?}"
    );
    for instance in started.instances {
        instance.stop_gracefully().await;
    }
}

/// What the scenario below needs, instead of the module's [`NEEDS`].
pub(crate) const NEEDS_ZOMBIE_FENCED_APPEND_AND_BOOKMARK_ARE_REFUSED: &[Capability] =
    &[Capability::Lease, Capability::FencedWrites];

/// After a takeover, a zombie (an old leader still holding its old token) is refused by the
/// fence: its append stores nothing, its bookmark stays where the new leader put it, and a
/// projector run under the old fence cannot move the bookmark backwards.
pub async fn zombie_fenced_append_and_bookmark_are_refused<F: StorageFactory>(factory: &F) {
    let Some(handles) = lease_handles(factory, 2).await else {
        return;
    };
    let storage = &handles[0];
    if !storage.supports(Capability::FencedWrites) {
        assert_fenced_writes_unsupported(storage).await;
        return;
    }
    let projected = Projected::default();
    let old = Instance::start(&handles[0], 0, 0, TTL, &projected);
    let appended = append_numbers(storage, 0..8).await;
    projected.wait_for_all(storage, &appended).await;
    // The token it holds as it crashes, read just before: a stall of the machine while it
    // projected may have lapsed its first tenure and started another.
    let old_token = wait_for_leader(&old.watch).await;
    let zombie_fence = Fence::new(LEASE, old_token);
    old.crash();

    let new = Instance::start(&handles[1], 1, 0, TTL, &projected);
    let new_token = wait_for_leader(&new.watch).await;
    assert_eq!(
        new_token,
        old_token.next(),
        "token rule: the instance that takes over leads with the next token"
    );
    let later = append_numbers(storage, 8..12).await;
    let mut all = appended.clone();
    all.extend(&later);
    projected.wait_for_all(storage, &all).await;
    let bookmark = storage.get_bookmark(READER).await.or_rule(
        "get_bookmark",
        "get_bookmark of a valid reader answers on an open storage",
    );
    let head = storage
        .head(&stream())
        .await
        .or_rule("head", "head of a valid stream answers on an open storage");
    assert_eq!(bookmark, head, "the new leader bookmarked the stream's end");

    let refused = storage
        .append_fenced(
            &zombie_fence,
            AppendCriteria::none(),
            &stream(),
            vec![number(99)],
        )
        .await;
    assert_fenced(&refused, old_token, new_token, "append_fenced");
    assert_eq!(
        storage
            .head(&stream())
            .await
            .or_rule("head", "head of a valid stream answers on an open storage"),
        head,
        "a refused append stores nothing"
    );

    let early = first_reference(storage).await;
    let refused = storage
        .bookmark_fenced(&zombie_fence, READER, &early, Tags::none())
        .await;
    assert_fenced(&refused, old_token, new_token, "bookmark_fenced");

    let mut zombie = Projector::builder(handles[0].clone(), Recorder::new("zombie", &projected))
        .stream(stream())
        .bookmark(READER)
        .batch_size(BATCH_SIZE)
        .bookmark_reading(BookmarkReading::OnRequest)
        .fence(zombie_fence)
        .build()
        .expect("projector");
    let error = zombie.run().await.expect_err(
        "fence rule: a projector under a stale token must stop with its bookmark refused as \
             Fenced",
    );
    assert!(
        error.is_fenced(),
        "fence rule: the zombie projector's bookmark must be refused as Fenced, got {error}"
    );
    assert_eq!(
        storage.get_bookmark(READER).await.or_rule(
            "get_bookmark",
            "get_bookmark of a valid reader answers on an open storage"
        ),
        bookmark,
        "the bookmark stays where the current leader put it"
    );

    // The current leader's fence still passes.
    let current = Fence::new(LEASE, new_token);
    storage
        .bookmark_fenced(&current, "another-reader", &early, Tags::none())
        .await
        .or_rule(
            "the live holder's fenced bookmark",
            "a fenced write passes while its lease is live with its token as the current one",
        );
    new.stop_gracefully().await;
}

/// What the scenario below needs, instead of the module's [`NEEDS`].
pub(crate) const NEEDS_FENCED_WRITES_WITH_AN_INVALID_FENCE_ARE_INVALID_INPUT_AND_CHANGE_NOTHING:
    &[Capability] = &[Capability::Lease, Capability::FencedWrites];

/// A fence whose lease name is not a valid lease name (blank, NUL, over-long) is refused with
/// `InvalidInput` by both fenced writes, and nothing is written: invalid input is refused the
/// same way everywhere, never mistaken for a stale token.
pub async fn fenced_writes_with_an_invalid_fence_are_invalid_input_and_change_nothing<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    let stored = storage
        .append(AppendCriteria::none(), &stream(), vec![number(1)])
        .await
        .or_rule("append", "an unconditional append of valid events succeeds");
    let reference = support::only(
        stored,
        "an append of one event",
        "an append answers one stored event per event sent",
    )
    .reference;
    if !storage.supports(Capability::FencedWrites) {
        let fence = Fence::new(LEASE, FencingToken(1));
        let refused = storage
            .append_fenced(&fence, AppendCriteria::none(), &stream(), vec![number(2)])
            .await;
        support::assert_unsupported(refused, "append_fenced");
        let refused = storage
            .bookmark_fenced(&fence, READER, &reference, Tags::none())
            .await;
        support::assert_unsupported(refused, "bookmark_fenced");
        return;
    }
    for lease_name in [
        String::new(),
        " ".to_owned(),
        "lease\0".to_owned(),
        "l".repeat(513),
    ] {
        let fence = Fence::new(lease_name.clone(), FencingToken(1));
        let refused = storage
            .append_fenced(&fence, AppendCriteria::none(), &stream(), vec![number(2)])
            .await;
        support::assert_invalid_input(
            refused,
            &format!("append_fenced with lease {lease_name:?}"),
            "validate_fence",
        );
        let refused = storage
            .bookmark_fenced(&fence, READER, &reference, Tags::none())
            .await;
        support::assert_invalid_input(
            refused,
            &format!("bookmark_fenced with lease {lease_name:?}"),
            "validate_fence",
        );
    }
    assert_eq!(
        storage
            .head(&stream())
            .await
            .or_rule("head", "head of a valid stream answers on an open storage"),
        Some(reference),
        "refused fenced appends store nothing"
    );
    assert_eq!(
        storage.get_bookmark(READER).await.or_rule(
            "get_bookmark",
            "get_bookmark of a valid reader answers on an open storage"
        ),
        None,
        "refused fenced bookmarks place nothing"
    );
}

/// A leader asked to step down by a higher-priority instance finishes its batch, releases and
/// stands by; the higher-priority instance leads with the next token and, with events
/// arriving throughout, the projection loses none.
pub async fn higher_priority_instance_takes_over_by_step_down_with_no_event_lost<
    F: StorageFactory,
>(
    factory: &F,
) {
    let Some(handles) = lease_handles(factory, 2).await else {
        return;
    };
    let storage = &handles[0];
    let projected = Projected::default();
    let low = Instance::start(&handles[0], 0, 0, NEXT_TOKEN_TTL, &projected);
    let low_token = wait_for_leader(&low.watch).await;

    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let storage = storage.clone();
        let producing = producing.clone();
        tokio::spawn(async move {
            let mut appended = Vec::new();
            let mut n = 0;
            while producing.load(Ordering::SeqCst) {
                appended.extend(append_numbers(&storage, n..n + 2).await);
                n += 2;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            appended
        })
    };
    support::eventually("the low-priority leader to project", || async {
        !projected.ids_by(low.owner()).is_empty()
    })
    .await;

    let high = Instance::start(&handles[1], 1, 10, NEXT_TOKEN_TTL, &projected);
    let high_token = wait_for_leader(&high.watch).await;
    assert_eq!(high_token, low_token.next(), "the next tenure");
    let expected = Leadership::Standby {
        holder: high.owner().to_owned(),
        token: high_token,
    };
    support::eventually("the stepped-down instance to stand by", || async {
        low.watch.current() == expected
    })
    .await;
    support::eventually("the new leader to project", || async {
        !projected.ids_by(high.owner()).is_empty()
    })
    .await;

    producing.store(false, Ordering::SeqCst);
    let appended = producer.await.expect("producer");
    projected.wait_for_all(storage, &appended).await;
    high.stop_gracefully().await;
    low.stop_gracefully().await;
}

/// While every storage call hangs, the elector demotes itself by the send time of its last
/// confirmed request plus the ttl, with its request still outstanding, and `is_leader` is
/// false from then on; once the storage answers again it leads again.
pub async fn elector_demotes_by_its_deadline_while_the_storage_hangs<F: StorageFactory>(
    factory: &F,
) {
    let storage = Arc::new(Unreliable::new(factory.create().await));
    if !storage.supports(Capability::Lease) {
        assert_elector_refused(storage).await;
        return;
    }
    // A long interval leaves a wide gap between the deadline of the last confirmed request
    // and the timeout of the hung one, so the demotion is seen while that request hangs.
    let elector = LeaderElector::builder(storage.clone(), LEASE)
        .owner("node-0")
        .ttl(HANG_TTL)
        .request_interval(HANG_TTL * 2 / 3)
        .start()
        .or_rule(
            "start",
            "an elector starts on a storage with Capability::Lease, with valid settings",
        );
    let watch = elector.watch();
    wait_for_leader(&watch).await;
    let mut published = watch.subscribe();

    storage.hang(true);
    // Every request confirmed so far was sent before this instant.
    let hung_at = Instant::now();
    // The published value, not `current()`, which shows a lapsed tenure as `Unknown` itself;
    // the hung request is dropped before its timeout would publish anything.
    let hanging_when_demoted = support::within(
        support::DEADLINE,
        "the elector to publish its demotion",
        async {
            drop(
                published
                    .wait_for(|leadership| *leadership == Leadership::Unknown)
                    .await
                    .expect("the elector runs"),
            );
            storage.hung_calls()
        },
    )
    .await;
    assert!(
        hanging_when_demoted > 0,
        "the demotion came while a request still hung"
    );
    tokio::time::sleep_until((hung_at + HANG_TTL).into()).await;
    assert!(
        !watch.is_leader() && watch.token().is_none() && watch.fence().is_none(),
        "a ttl after the hang began the instance cannot be leading: {}",
        watch.current()
    );

    storage.hang(false);
    wait_for_leader(&watch).await;
    elector.shutdown().await.or_rule("shutdown", "an elector's shutdown releases its lease: release_lease answers on a storage with Capability::Lease");
}

// ---------------------------------------------------------------------------------------------
// Instances: an elector with a leader-elected projector, as one process would run them
// ---------------------------------------------------------------------------------------------

/// One instance of the projecting service.
struct Instance {
    elector: LeaderElector,
    watch: LeadershipWatch,
    stop: oneshot::Sender<()>,
    work: JoinHandle<Result<ProjectorRun, ProjectorError>>,
}

impl Instance {
    fn start(
        storage: &Arc<dyn EventStorage>,
        index: usize,
        priority: i64,
        ttl: Duration,
        projected: &Projected,
    ) -> Instance {
        let owner = format!("node-{index}");
        let elector = start_elector(storage, &owner, priority, ttl);
        let watch = elector.watch();
        let projector = Projector::builder(storage.clone(), Recorder::new(&owner, projected))
            .stream(stream())
            .bookmark(READER)
            .batch_size(BATCH_SIZE)
            .build()
            .expect("projector");
        let mut elected = ElectedProjector::new(projector, watch.clone())
            .poll_interval(Duration::from_millis(10));
        let (stop, stopped) = oneshot::channel();
        let work = tokio::spawn(async move {
            elected
                .run_until(async move {
                    let _ = stopped.await;
                })
                .await
        });
        Instance {
            elector,
            watch,
            stop,
            work,
        }
    }

    fn owner(&self) -> &str {
        self.elector.owner()
    }

    /// Stops the work, then shuts the elector down, which releases the lease.
    async fn stop_gracefully(self) {
        let _ = self.stop.send(());
        self.work
            .await
            .expect("the projector task")
            .unwrap_or_else(|error| {
                panic!(
                    "a projector runs without error while its storage answers every call: {error}"
                )
            });
        self.elector.shutdown().await.or_rule("shutdown", "an elector's shutdown releases its lease: release_lease answers on a storage with Capability::Lease");
    }

    /// Stops everything at once without releasing, as a dying process would.
    fn crash(self) {
        self.work.abort();
        self.elector.abort();
    }
}

/// Three instances on three handles of one fresh storage, started with `ttl`, once the one
/// that leads has projected a first ten events.
struct ThreeInstances {
    /// The first handle, for appending and checking.
    storage: Arc<dyn EventStorage>,
    projected: Projected,
    instances: Vec<Instance>,
    /// The ids of the events appended so far, in order.
    appended: Vec<EventId>,
    /// The index of the instance that leads.
    leader: usize,
    /// The leader's token.
    token: FencingToken,
}

impl ThreeInstances {
    /// `None` (having proved the elector refuses it) when the storage has no leases.
    async fn start<F: StorageFactory>(factory: &F, ttl: Duration) -> Option<ThreeInstances> {
        let handles = lease_handles(factory, 3).await?;
        let projected = Projected::default();
        let instances: Vec<Instance> = handles
            .iter()
            .enumerate()
            .map(|(i, storage)| Instance::start(storage, i, 0, ttl, &projected))
            .collect();
        let storage = Arc::clone(&handles[0]);
        let appended = append_numbers(&storage, 0..10).await;
        let leader = wait_for_the_leader(&instances).await;
        projected.wait_for_all(&storage, &appended).await;
        let token = instances[leader].watch.token().expect("leads");
        Some(ThreeInstances {
            storage,
            projected,
            instances,
            appended,
            leader,
            token,
        })
    }
}

fn start_elector(
    storage: &Arc<dyn EventStorage>,
    owner: &str,
    priority: i64,
    ttl: Duration,
) -> LeaderElector {
    LeaderElector::builder(storage.clone(), LEASE)
        .owner(owner)
        .priority(priority)
        .ttl(ttl)
        .request_interval((ttl / 3).min(Duration::from_millis(100)))
        .start()
        .or_rule(
            "start",
            "an elector starts on a storage with Capability::Lease, with valid settings",
        )
}

/// `count` handles of one fresh storage, or `None` (having proved the elector refuses it)
/// when the storage has no leases.
async fn lease_handles<F: StorageFactory>(
    factory: &F,
    count: usize,
) -> Option<Vec<Arc<dyn EventStorage>>> {
    let first = factory.create().await;
    if !first.supports(Capability::Lease) {
        assert_elector_refused(Arc::new(first)).await;
        return None;
    }
    let mut handles = Vec::with_capacity(count);
    for _ in 1..count {
        handles.push(Arc::new(factory.another_handle(&first).await) as Arc<dyn EventStorage>);
    }
    handles.insert(0, Arc::new(first));
    Some(handles)
}

async fn wait_for_leader(watch: &LeadershipWatch) -> FencingToken {
    let mut watch = watch.clone();
    tokio::time::timeout(DEADLINE, watch.wait_for_leadership())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} did not lead within {DEADLINE:?}: a lease nobody renews is free once expired \
                 ({}), and an elector requests it at its interval",
                watch.owner(),
                support::EXPIRY_RULE
            )
        })
        .expect("the elector runs")
}

/// The index of the one instance that leads, once exactly one does.
async fn wait_for_the_leader(instances: &[Instance]) -> usize {
    let one_leader = || {
        let leaders: Vec<usize> = (0..instances.len())
            .filter(|&i| instances[i].watch.is_leader())
            .collect();
        (leaders.len() == 1).then(|| leaders[0])
    };
    support::eventually("exactly one leader", || async { one_leader().is_some() }).await;
    one_leader().expect("one leader")
}

// ---------------------------------------------------------------------------------------------
// The projection: records which instance projected which event
// ---------------------------------------------------------------------------------------------

/// Every event id committed by any instance's projection, with the instance's owner.
#[derive(Debug, Clone, Default)]
struct Projected(Arc<Mutex<Vec<(String, EventId)>>>);

impl Projected {
    fn commit(&self, owner: &str, ids: &mut Vec<EventId>) {
        let mut all = self.0.lock().expect("projected");
        all.extend(ids.drain(..).map(|id| (owner.to_owned(), id)));
    }

    fn ids(&self) -> HashSet<EventId> {
        self.0
            .lock()
            .expect("projected")
            .iter()
            .map(|(_, id)| *id)
            .collect()
    }

    fn ids_by(&self, owner: &str) -> Vec<EventId> {
        let all = self.0.lock().expect("projected");
        all.iter()
            .filter(|(by, _)| by == owner)
            .map(|(_, id)| *id)
            .collect()
    }

    /// Waits until every event of `appended` is projected and the bookmark is at the last.
    async fn wait_for_all(&self, storage: &Arc<dyn EventStorage>, appended: &[EventId]) {
        let last = *appended.last().expect("events appended");
        support::eventually(
            "every event projected and the bookmark at the last",
            || async {
                let ids = self.ids();
                let bookmark = storage.get_bookmark(READER).await.or_rule(
                    "get_bookmark",
                    "get_bookmark of a valid reader answers on an open storage",
                );
                appended.iter().all(|id| ids.contains(id)) && bookmark.is_some_and(|b| b.id == last)
            },
        )
        .await;
    }
}

/// Commits the ids of each batch into [`Projected`] in `after_batch`, as a projection
/// committing to its own store would.
#[derive(Debug)]
struct Recorder {
    owner: String,
    pending: Vec<EventId>,
    projected: Projected,
}

impl Recorder {
    fn new(owner: &str, projected: &Projected) -> Recorder {
        Recorder {
            owner: owner.to_owned(),
            pending: Vec::new(),
            projected: projected.clone(),
        }
    }
}

#[async_trait]
impl Projection for Recorder {
    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
        self.pending.push(event.reference.id);
        Ok(())
    }

    async fn after_batch(&mut self, _last: &EventReference) -> Result<(), ProjectionError> {
        self.projected.commit(&self.owner, &mut self.pending);
        Ok(())
    }

    async fn cancel_batch(&mut self) {
        self.pending.clear();
    }
}

fn number(n: u64) -> EventToStore {
    EventToStore::new("Numbered", serde_json::json!({ "n": n }))
}

async fn append_numbers(
    storage: &Arc<dyn EventStorage>,
    numbers: std::ops::Range<u64>,
) -> Vec<EventId> {
    let events = numbers.map(number).collect();
    storage
        .append(AppendCriteria::none(), &stream(), events)
        .await
        .or_rule("append", "an unconditional append of valid events succeeds")
        .into_iter()
        .map(|event| event.reference.id)
        .collect()
}

async fn first_reference(storage: &Arc<dyn EventStorage>) -> EventReference {
    let first = storage
        .query(
            &EventFilter::match_all(),
            &stream(),
            None,
            Limit::to(1),
            Direction::Forward,
        )
        .await
        .or_rule("query", "a query of valid input answers on an open storage");
    support::only(
        first,
        "a query of the first event of a stream with events",
        "a query answers the matching events, up to its limit (here 1)",
    )
    .reference
}

async fn lease_named(storage: &Arc<dyn EventStorage>, name: &str) -> Lease {
    storage
        .get_leases()
        .await
        .or_rule(
            "get_leases",
            "get_leases answers on a storage with Capability::Lease",
        )
        .into_iter()
        .find(|lease| lease.lease_name == name)
        .unwrap_or_else(|| panic!("no lease named {name}"))
}

// ---------------------------------------------------------------------------------------------
// Assertions for refusals
// ---------------------------------------------------------------------------------------------

async fn assert_elector_refused(storage: Arc<dyn EventStorage>) {
    let refused = LeaderElector::builder(storage.clone(), LEASE).start();
    match refused {
        Err(EventStorageError::Unsupported { ref operation, .. }) => assert!(
            operation.contains("Capability::Lease"),
            "the error names the missing capability: {operation}"
        ),
        Err(other) => panic!("expected Unsupported, got {other}"),
        Ok(elector) => {
            elector.abort();
            panic!("an elector started on {} without leases", storage.name())
        }
    }
}

async fn assert_fenced_writes_unsupported(storage: &Arc<dyn EventStorage>) {
    let fence = Fence::new(LEASE, FencingToken(1));
    let appended = storage
        .append_fenced(&fence, AppendCriteria::none(), &stream(), vec![number(1)])
        .await;
    support::assert_unsupported(appended, "append_fenced without FencedWrites");
    let stored = append_numbers(storage, 0..1).await;
    let reference = first_reference(storage).await;
    assert_eq!(reference.id, stored[0], "only the unfenced append stored");
    let bookmarked = storage
        .bookmark_fenced(&fence, READER, &reference, Tags::none())
        .await;
    support::assert_unsupported(bookmarked, "bookmark_fenced without FencedWrites");
}

fn assert_fenced<T: std::fmt::Debug>(
    result: &Result<T, EventStorageError>,
    presented: FencingToken,
    current: FencingToken,
    operation: &str,
) {
    match result {
        Err(EventStorageError::Fenced {
            lease_name,
            presented: p,
            current: c,
            live,
            ..
        }) => {
            assert_eq!(lease_name, LEASE, "{operation}: the lease is named");
            assert_eq!(*p, presented, "{operation}: the presented token");
            assert_eq!(*c, Some(current), "{operation}: the current token");
            assert!(*live, "{operation}: the new leader's lease is live");
        }
        other => panic!("{operation} with a stale fence: expected Fenced, got {other:?}"),
    }
}
