//! Scenarios: partitioned work with [`PartitionElector`] and [`PartitionedProjector`].
//!
//! Several members, each on its own handle of one storage as separate processes would be,
//! share the partitions of a group: balanced after joins and leaves, never one partition in
//! two members' hands at one instant, a crashed member's partitions held again within a ttl
//! and an interval, a paused member's fenced writes refused, and partitioned projectors that
//! lose no event across all of it.
//!
//! Run on a backend without [`Capability::Lease`] (reported as ignored there unless run with
//! `--include-ignored`), each scenario proves instead that the elector refuses to start with
//! `Unsupported`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use eventstore::partitions::{
    seat_lease_name, GroupStatus, PartitionElector, PartitionWatch, FREE_SEATS, MAX_PARTITIONS,
};
use eventstore::projector::{PartitionedProjector, Projection, ProjectionError, Projector};
use eventstore_api::EventStorageExt;
use eventstore_api::{
    AppendCriteria, Capability, EventId, EventReference, EventStorage, EventStorageError,
    EventStreamId, EventToStore, Fence, StoredEvent,
};
use tokio::task::JoinHandle;

use crate::support::Answer as _;
use crate::support::{self, DEADLINE};
use crate::wrappers::{EventsOnly, Unreliable};
use crate::StorageFactory;

/// What every scenario of this module needs, unless it declares its own.
pub(crate) const NEEDS: &[Capability] = &[Capability::Lease];

/// The group every scenario shares out.
const GROUP: &str = "tck-orders";

/// Partitions of the group: 12 share evenly over 3 and 4 members.
const PARTITIONS: u32 = 12;

/// The ttl of the members: short, so that a crash is taken over quickly.
const TTL: Duration = Duration::from_millis(600);

/// Their request interval (the default, a third of the ttl).
const INTERVAL: Duration = Duration::from_millis(200);

/// Room for scheduling on a busy machine beyond the bounds the elector promises: a crash's
/// takeover, 0.6–0.8 s on an idle machine, took 2 s with the machine's cores shared twice over.
const SLACK: Duration = Duration::from_secs(2);

/// A ttl long enough that a handover measured against it cannot be an expiry.
const LONG_TTL: Duration = Duration::from_secs(6);

/// Its request interval (the default, a third of the ttl).
const LONG_INTERVAL: Duration = Duration::from_secs(2);

/// The request interval of members whose storage pushes lease changes, in the scenario that
/// tells pushed from polled: polling alone, a join would take about an interval, far beyond
/// [`PUSHED_JOIN`].
const PUSHED_INTERVAL: Duration = Duration::from_secs(12);

/// How soon a join settles when lease changes are pushed: about 0.1 s on an idle machine,
/// 1.6 s with its cores shared twice over.
const PUSHED_JOIN: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

/// What the scenario below needs, instead of the module's [`NEEDS`].
pub(crate) const NEEDS_PARTITION_ELECTOR_REFUSES_BAD_SETTINGS_AND_STORAGES_WITHOUT_LEASES:
    &[Capability] = &[];

/// The elector refuses a storage without leases (`Unsupported`) and, with `InvalidInput`
/// naming the value, a partition count of 0 or above the limit, a group holding a `/`, and a
/// request interval not shorter than the ttl.
pub async fn partition_elector_refuses_bad_settings_and_storages_without_leases<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage: Arc<dyn EventStorage> = Arc::new(factory.create().await);
    assert_refused(Arc::new(EventsOnly::new(storage.clone())));
    if !storage.supports(Capability::Lease) {
        assert_refused(storage);
        return;
    }
    let cases = [
        (0, GROUP, TTL / 3, "partition count"),
        (MAX_PARTITIONS + 1, GROUP, TTL / 3, "partition count"),
        (PARTITIONS, "a/b", TTL / 3, "partition group"),
        (PARTITIONS, " ", TTL / 3, "partition group"),
        (PARTITIONS, GROUP, TTL, "request interval"),
    ];
    for (partitions, group, interval, field) in cases {
        let started = PartitionElector::builder(storage.clone(), group, partitions)
            .ttl(TTL)
            .request_interval(interval)
            .start();
        match started {
            Err(EventStorageError::InvalidInput { field: named, .. }) => assert_eq!(
                named, field,
                "{partitions} partitions of {group:?}, interval {interval:?}: the error names {field}"
            ),
            Err(other) => panic!("{partitions} partitions of {group:?}: expected InvalidInput naming {field}, got {other}"),
            Ok(_) => panic!("{partitions} partitions of {group:?}, interval {interval:?}: expected InvalidInput naming {field}, it started"),
        }
    }
    let leases = storage.get_leases().await.or_rule(
        "get_leases",
        "get_leases answers on a storage with Capability::Lease",
    );
    assert!(
        leases.is_empty(),
        "a refused start changes nothing: {leases:?}"
    );
}

/// Three members share twelve partitions four each; a fourth joins and each holds three,
/// with no more than ⌈M/N⌉ + 1 partitions moved; one shuts down and the other three take its
/// partitions at once, four each again. The storage shows the group balanced too
/// ([`GroupStatus`]), with three live members each time.
pub async fn partitions_are_balanced_after_a_join_and_a_leave<F: StorageFactory>(factory: &F) {
    let Some(handles) = lease_handles(factory, 4).await else {
        return;
    };
    let mut members: Vec<Member> = (0..3)
        .map(|i| Member::start(&handles[i], i, LONG_TTL, LONG_INTERVAL))
        .collect();
    let before = wait_balanced(&members, "three members").await;
    assert_status_balanced(&handles[0], 3).await;

    members.push(Member::start(&handles[3], 3, LONG_TTL, LONG_INTERVAL));
    let after = wait_balanced(&members, "a fourth member joined").await;
    let moved = moved(&before, &after);
    let limit = PARTITIONS.div_ceil(4) as usize + 1;
    assert!(
        moved <= limit,
        "a join moved {moved} partitions, more than ⌈M/N⌉ + 1 = {limit}: {before:?} → {after:?}"
    );
    assert!(
        owners_of(&after).contains("member-3"),
        "the joiner holds its share: {after:?}"
    );

    let leaving = members.remove(1);
    let started = Instant::now();
    leaving.shutdown().await;
    let settled = wait_balanced(&members, "member-1 shut down").await;
    assert_status_balanced(&handles[0], 3).await;
    assert!(
        !owners_of(&settled).contains("member-1"),
        "the leaver holds nothing: {settled:?}"
    );
    let took = started.elapsed();
    // Released, not expired: an expiry would take the whole ttl.
    assert!(
        took < 2 * LONG_INTERVAL + SLACK && took < LONG_TTL,
        "a graceful leave settled in {took:?}, beyond two intervals"
    );
    for member in members {
        member.shutdown().await;
    }
}

/// Members announce themselves by holding a seat of the group, and a member takes one of the
/// lowest seats nobody holds: four members started at once each hold a seat of their own,
/// and members replaced again and again under new owner ids (by shutdowns and by crashes)
/// take the same seats again. Lease rows are never deleted, so a lease per member ever
/// started would grow the group's leases, and every member's reading of them, without end.
pub async fn members_that_come_and_go_take_the_same_seats_again<F: StorageFactory>(factory: &F) {
    let Some(handles) = lease_handles(factory, 4).await else {
        return;
    };
    let mut members: Vec<Member> = (0..4)
        .map(|i| Member::start(&handles[i], i, TTL, INTERVAL))
        .collect();
    wait_balanced(&members, "four members started at once").await;
    let storage = &handles[0];
    support::eventually(
        "each of the four members to hold a seat of its own",
        || async {
            let status = GroupStatus::read(storage.as_ref(), GROUP)
                .await
                .unwrap_or_else(|error| {
                    panic!(
                        "GroupStatus::read answers while the storage answers get_leases: {error}"
                    )
                });
            let seated: BTreeSet<&String> = status.seats.values().collect();
            seated.len() == 4
        },
    )
    .await;

    // Two at a time from here on, replaced ten times: a shutdown, then a crash, in turn.
    for member in members.drain(2..) {
        member.shutdown().await;
    }
    for round in 0..10 {
        let leaving = members.remove(0);
        if round % 2 == 0 {
            leaving.shutdown().await;
        } else {
            leaving.crash();
        }
        let index = 4 + round;
        members.push(Member::start(&handles[index % 4], index, TTL, INTERVAL));
        wait_balanced(&members, &format!("member-{index} replaced a member")).await;
    }
    for member in members {
        member.shutdown().await;
    }

    // Lease rows stay once written: the group's rows are every seat any member ever took.
    let prefix = format!("{GROUP}/");
    let leases = storage.get_leases_with_prefix(&prefix).await.or_rule(
        "get_leases",
        "get_leases answers on a storage with Capability::Lease",
    );
    let announcements: Vec<&str> = leases
        .iter()
        .map(|lease| lease.lease_name.as_str())
        .filter(|name| !name[prefix.len()..].chars().all(|c| c.is_ascii_digit()))
        .collect();
    // Four members at once at most, plus the seats a joiner picks from.
    let most = 4 + FREE_SEATS as u32;
    let lowest_seats: Vec<String> = (0..most).map(|seat| seat_lease_name(GROUP, seat)).collect();
    assert!(
        announcements
            .iter()
            .all(|name| lowest_seats.iter().any(|seat| seat == name)),
        "14 members came and went, and announced themselves with other leases than the \
         {most} lowest seats: {announcements:?}"
    );
}

/// A joining member gets its share within two request intervals; with pushed lease changes
/// within a fraction of one, as the holders hear of the join at once.
pub async fn a_join_settles_within_two_intervals_or_at_once_when_pushed<F: StorageFactory>(
    factory: &F,
) {
    let Some(handles) = lease_handles(factory, 3).await else {
        return;
    };
    // By polling alone the holders hear of the join only at their next renewal, anywhere up
    // to an interval later, and the joiner of their release at its own; pushed, at once. So
    // where changes are pushed the interval is long, and a join that waited for renewals
    // would miss the bound by seconds.
    let pushed = support::lease_changes_supported(handles[0].as_ref()).await;
    let (interval, bound) = if pushed {
        (PUSHED_INTERVAL, PUSHED_JOIN)
    } else {
        (LONG_INTERVAL, 2 * LONG_INTERVAL + SLACK)
    };
    let ttl = 3 * interval;
    let mut members: Vec<Member> = (0..2)
        .map(|i| Member::start(&handles[i], i, ttl, interval))
        .collect();
    wait_balanced(&members, "two members").await;
    let joined = Instant::now();
    members.push(Member::start(&handles[2], 2, ttl, interval));
    wait_balanced(&members, "a third member joined").await;
    let took = joined.elapsed();
    assert!(
        took < bound,
        "the join settled in {took:?}, beyond {bound:?} (pushed lease changes: {pushed})"
    );
    for member in members {
        member.shutdown().await;
    }
}

/// Sampled on the caller's clock while members join, leave and crash, no partition is ever
/// held by two members at one instant.
pub async fn no_partition_is_held_by_two_members_at_one_instant<F: StorageFactory>(factory: &F) {
    let Some(handles) = lease_handles(factory, 5).await else {
        return;
    };
    let watches: Arc<Mutex<Vec<PartitionWatch>>> = Arc::default();
    let mut members = Vec::new();
    for (i, handle) in handles.iter().enumerate().take(3) {
        let member = Member::start(handle, i, TTL, INTERVAL);
        watches.lock().expect("watches").push(member.watch.clone());
        members.push(member);
    }
    let sampler = Sampler::start(Arc::clone(&watches));
    wait_balanced(&members, "three members").await;
    for (i, handle) in handles.iter().enumerate().skip(3) {
        let member = Member::start(handle, i, TTL, INTERVAL);
        watches.lock().expect("watches").push(member.watch.clone());
        members.push(member);
        wait_balanced(&members, &format!("member-{i} joined")).await;
    }
    members.remove(0).shutdown().await;
    wait_balanced(&members, "member-0 shut down").await;
    members.remove(0).crash();
    wait_balanced(&members, "member-1 crashed").await;
    let samples = sampler.stop().await;
    assert!(samples > 100, "the sampler ran ({samples} samples)");
    for member in members {
        member.shutdown().await;
    }
}

/// A member that crashes keeps its partitions only until their leases expire: the others
/// hold every partition again within a ttl and a request interval.
pub async fn a_crashed_members_partitions_are_held_again_within_ttl_and_interval<
    F: StorageFactory,
>(
    factory: &F,
) {
    let Some(handles) = lease_handles(factory, 3).await else {
        return;
    };
    let mut members: Vec<Member> = (0..3)
        .map(|i| Member::start(&handles[i], i, TTL, INTERVAL))
        .collect();
    wait_balanced(&members, "three members").await;
    let crashed = members.remove(2);
    let lost = crashed.watch.held().len();
    let started = Instant::now();
    crashed.crash();
    let settled = wait_balanced(&members, "member-2 crashed").await;
    let took = started.elapsed();
    assert!(lost > 0, "the crashed member held partitions");
    assert_eq!(settled.len(), PARTITIONS as usize, "every partition held");
    assert!(
        took < TTL + INTERVAL + SLACK,
        "held again in {took:?}, beyond ttl {TTL:?} + interval {INTERVAL:?}"
    );
    for member in members {
        member.shutdown().await;
    }
}

/// What the scenario below needs, instead of the module's [`NEEDS`].
pub(crate) const NEEDS_A_ZOMBIE_MEMBERS_FENCED_WRITES_ARE_REFUSED: &[Capability] =
    &[Capability::Lease, Capability::FencedWrites];

/// A member paused past its ttl (a zombie) still has its fences; once another member holds
/// the partition, the zombie's fenced append and bookmark are refused and change nothing.
pub async fn a_zombie_members_fenced_writes_are_refused<F: StorageFactory>(factory: &F) {
    let Some(handles) = lease_handles(factory, 2).await else {
        return;
    };
    let storage = &handles[0];
    if !storage.supports(Capability::FencedWrites) {
        return support::assert_unsupported(
            storage
                .append_fenced(
                    &Fence::new("x", Default::default()),
                    AppendCriteria::none(),
                    &partition_stream(0),
                    vec![event(0)],
                )
                .await,
            "append_fenced without FencedWrites",
        );
    }
    let zombie = Member::start(&handles[0], 0, TTL, INTERVAL);
    wait_balanced(std::slice::from_ref(&zombie), "one member").await;
    let (partition, zombie_fence) = zombie.watch.held().into_iter().next().expect("held");
    zombie.crash();
    let survivor = Member::start(&handles[1], 1, TTL, INTERVAL);
    let held = wait_balanced(
        std::slice::from_ref(&survivor),
        "the zombie's partitions taken",
    )
    .await;
    let (_, current) = &held[&partition];
    assert!(
        current.token > zombie_fence.token,
        "the survivor holds partition {partition} with a newer token: {current:?} after {zombie_fence:?}"
    );

    let stream = partition_stream(partition);
    let head = storage
        .head(&stream)
        .await
        .or_rule("head", "head of a valid stream answers on an open storage");
    let refused = storage
        .append_fenced(
            &zombie_fence,
            AppendCriteria::none(),
            &stream,
            vec![event(1)],
        )
        .await;
    assert!(
        matches!(refused, Err(EventStorageError::Fenced { .. })),
        "the zombie's append is refused as Fenced: {refused:?}"
    );
    assert_eq!(
        storage
            .head(&stream)
            .await
            .or_rule("head", "head of a valid stream answers on an open storage"),
        head,
        "nothing appended"
    );
    let written = storage
        .append_fenced(current, AppendCriteria::none(), &stream, vec![event(2)])
        .await
        .or_rule(
            "the holder's fenced append",
            "a fenced write passes while its lease is live with its token as the current one",
        );
    let written = support::only(
        written,
        "a fenced append of one event",
        "an append answers one stored event per event sent",
    );
    let refused = storage
        .bookmark_fenced(
            &zombie_fence,
            "tck-zombie",
            &written.reference,
            Default::default(),
        )
        .await;
    assert!(
        matches!(refused, Err(EventStorageError::Fenced { .. })),
        "the zombie's bookmark is refused as Fenced: {refused:?}"
    );
    assert_eq!(
        storage.get_bookmark("tck-zombie").await.or_rule(
            "get_bookmark",
            "get_bookmark of a valid reader answers on an open storage"
        ),
        None,
        "no bookmark placed"
    );
    survivor.shutdown().await;
}

/// Partitioned projectors on three members, then a fourth joining, one shutting down and one
/// crashing: every event of every partition is projected, each partition's bookmark ends at
/// its stream's end, and every bookmark write passed its partition's fence.
pub async fn partitioned_projectors_lose_no_event_across_joins_leaves_and_crashes<
    F: StorageFactory,
>(
    factory: &F,
) {
    let Some(handles) = lease_handles(factory, 4).await else {
        return;
    };
    let storage = handles[0].clone();
    let projected = Projected::default();
    let mut workers: Vec<Worker> = (0..3)
        .map(|i| Worker::start(&handles[i], i, &projected))
        .collect();
    let mut appended = append_round(&storage, 0).await;
    projected.wait_for(&appended).await;

    workers.push(Worker::start(&handles[3], 3, &projected));
    appended.extend(append_round(&storage, 1).await);
    projected.wait_for(&appended).await;

    workers.remove(0).shutdown().await;
    appended.extend(append_round(&storage, 2).await);
    projected.wait_for(&appended).await;

    workers.remove(0).crash();
    appended.extend(append_round(&storage, 3).await);
    projected.wait_for(&appended).await;

    for partition in 0..PARTITIONS {
        let head = storage
            .head(&partition_stream(partition))
            .await
            .or_rule("head", "head of a valid stream answers on an open storage");
        let reader = reader(partition);
        support::eventually(
            &format!("bookmark {reader} at its stream's end"),
            || async {
                storage.get_bookmark(&reader).await.or_rule(
                    "get_bookmark",
                    "get_bookmark of a valid reader answers on an open storage",
                ) == head
            },
        )
        .await;
    }
    for worker in workers {
        worker.shutdown().await;
    }
}

/// While the storage hangs, a member gives up every partition by the deadline of its last
/// confirmed batch (its send time plus the ttl minus the margin), even with requests still
/// hanging, and holds its share again once the storage answers.
pub async fn a_member_gives_up_its_partitions_by_the_deadline_while_the_storage_hangs<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = Arc::new(Unreliable::new(factory.create().await));
    if !storage.supports(Capability::Lease) {
        assert_refused(storage);
        return;
    }
    let handle: Arc<dyn EventStorage> = storage.clone();
    let member = Member::start(&handle, 0, TTL, INTERVAL);
    wait_balanced(std::slice::from_ref(&member), "one member").await;

    storage.hang(true);
    // Every batch confirmed so far was sent before this instant.
    let hung_at = Instant::now();
    support::eventually("the member to give its partitions up", || async {
        member.watch.held().is_empty()
    })
    .await;
    assert!(
        storage.hung_calls() > 0,
        "the partitions lapsed while a request still hung"
    );
    tokio::time::sleep_until((hung_at + TTL).into()).await;
    assert!(
        member.watch.held().is_empty() && member.watch.handing_over().is_empty(),
        "a ttl after the hang began the member holds nothing"
    );

    storage.hang(false);
    wait_balanced(std::slice::from_ref(&member), "the storage answers again").await;
    member.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Members
// ---------------------------------------------------------------------------------------------

/// One member: an elector and a task that hands partitions over as soon as asked (it has no
/// work in hand).
struct Member {
    elector: PartitionElector,
    watch: PartitionWatch,
    releaser: JoinHandle<()>,
}

impl Member {
    fn start(
        storage: &Arc<dyn EventStorage>,
        index: usize,
        ttl: Duration,
        interval: Duration,
    ) -> Member {
        Member::with_releaser(storage, index, ttl, interval, true)
    }

    /// A member whose handovers its own work acknowledges when `release_at_once` is false.
    fn with_releaser(
        storage: &Arc<dyn EventStorage>,
        index: usize,
        ttl: Duration,
        interval: Duration,
        release_at_once: bool,
    ) -> Member {
        let elector = PartitionElector::builder(storage.clone(), GROUP, PARTITIONS)
            .owner(format!("member-{index}"))
            .ttl(ttl)
            .request_interval(interval)
            .start()
            .or_rule(
                "start",
                "an elector starts on a storage with Capability::Lease, with valid settings",
            );
        let watch = elector.watch();
        let mut handing_over = watch.clone();
        let releaser = tokio::spawn(async move {
            if !release_at_once {
                return;
            }
            loop {
                for partition in handing_over.handing_over().into_keys() {
                    handing_over.hand_over(partition);
                }
                if handing_over.changed().await.is_err() {
                    return;
                }
            }
        });
        Member {
            elector,
            watch,
            releaser,
        }
    }

    /// Shuts the member down. A release that outlasts a ttl on a loaded machine is given up
    /// (`Timeout`; the leases then lapse), which no scenario here is about; any other error
    /// fails it.
    async fn shutdown(self) {
        match self.elector.shutdown().await {
            Ok(()) | Err(EventStorageError::Timeout { .. }) => {}
            Err(error) => panic!("shutdown releases: {error}"),
        }
        self.releaser.abort();
    }

    fn crash(self) {
        self.elector.abort();
        self.releaser.abort();
    }
}

/// Who holds what: partition → (owner, fence).
type Holders = BTreeMap<u32, (String, Fence)>;

/// The holders once every partition is held by exactly one member and the members hold
/// ⌊M/N⌋ or ⌈M/N⌉ each.
async fn wait_balanced(members: &[Member], after: &str) -> Holders {
    let floor = PARTITIONS as usize / members.len();
    let ceil = (PARTITIONS as usize).div_ceil(members.len());
    let started = Instant::now();
    loop {
        let mut holders = Holders::new();
        let mut counts = Vec::new();
        let mut doubly = false;
        for member in members {
            let held = member.watch.held();
            counts.push(held.len());
            for (partition, fence) in held {
                doubly |= holders
                    .insert(partition, (member.watch.owner().to_owned(), fence))
                    .is_some();
            }
        }
        let balanced = counts.iter().all(|c| *c == floor || *c == ceil);
        if !doubly && balanced && holders.len() == PARTITIONS as usize {
            return holders;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "after {after}: not balanced within {DEADLINE:?} ({floor} or {ceil} each, \
             no partition twice): held {counts:?}, {holders:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn moved(before: &Holders, after: &Holders) -> usize {
    before
        .iter()
        .filter(|(partition, (owner, _))| after.get(partition).map(|(o, _)| o) != Some(owner))
        .count()
}

/// Waits until the group as the storage shows it ([`GroupStatus`]) has `members` live members
/// and is balanced: what an operator's view and a health check read.
async fn assert_status_balanced(storage: &Arc<dyn EventStorage>, members: usize) {
    support::eventually("the storage to show the group balanced", || async {
        let status = GroupStatus::read(storage.as_ref(), GROUP)
            .await
            .unwrap_or_else(|error| {
                panic!("GroupStatus::read answers while the storage answers get_leases: {error}")
            });
        status.members.len() == members
            && status.partitions() == Some(PARTITIONS)
            && status.unheld().is_empty()
            && status.is_balanced()
    })
    .await;
}

fn owners_of(holders: &Holders) -> BTreeSet<&str> {
    holders.values().map(|(owner, _)| owner.as_str()).collect()
}

/// Samples every member's holdings until stopped and panics at two holders of one partition.
struct Sampler {
    stop: Arc<AtomicBool>,
    task: JoinHandle<usize>,
}

impl Sampler {
    fn start(watches: Arc<Mutex<Vec<PartitionWatch>>>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let mut samples = 0;
            while !stopping.load(Ordering::SeqCst) {
                let watches = watches.lock().expect("watches").clone();
                assert_one_holder_each(&watches);
                samples += 1;
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            samples
        });
        Sampler { stop, task }
    }

    async fn stop(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.task
            .await
            .expect("no partition had two holders at one instant")
    }
}

/// Reads every watch, then again in reverse order, and fails on a partition two members
/// showed at one instant (see [`double_holder`]).
fn assert_one_holder_each(watches: &[PartitionWatch]) {
    let first: Vec<BTreeMap<u32, Fence>> = watches.iter().map(holding).collect();
    let mut second: Vec<BTreeMap<u32, Fence>> = watches.iter().rev().map(holding).collect();
    second.reverse();
    let reads: Vec<MemberReads<'_>> = watches
        .iter()
        .zip(first.iter().zip(&second))
        .map(|(watch, (first, second))| MemberReads {
            owner: watch.owner(),
            first,
            second,
        })
        .collect();
    if let Some(double) = double_holder(&reads) {
        panic!("{double}");
    }
}

/// The partitions a member holds: those it works on and those it is handing over, whose
/// work may still be finishing. The elector stops showing a handover before it releases it,
/// so another member holding that partition while it is shown holds it beside this one.
fn holding(watch: &PartitionWatch) -> BTreeMap<u32, Fence> {
    let mut holding = watch.handing_over();
    holding.extend(watch.held());
    holding
}

/// What one member's watch showed in the first and in the second read of a sample.
struct MemberReads<'a> {
    owner: &'a str,
    first: &'a BTreeMap<u32, Fence>,
    second: &'a BTreeMap<u32, Fence>,
}

/// A partition two members held at one instant, from reads taken in member order and then in
/// reverse order, if any.
///
/// A member that shows a partition with one token in both its reads held it all the while
/// between them, and both reads of every later member fall in between: a later member that
/// shows the partition in either read held it at the same instant. (An earlier member's
/// reads bracket this member's, and the same holds the other way round.)
fn double_holder(reads: &[MemberReads<'_>]) -> Option<String> {
    for (i, member) in reads.iter().enumerate() {
        for (partition, fence) in member.first {
            if member.second.get(partition) != Some(fence) {
                continue;
            }
            for later in &reads[i + 1..] {
                let shown = later.first.get(partition).or(later.second.get(partition));
                if let Some(other) = shown {
                    return Some(format!(
                        "partition {partition} held by {} ({fence:?}) and {} ({other:?}) at one instant",
                        member.owner, later.owner
                    ));
                }
            }
        }
    }
    None
}

async fn lease_handles<F: StorageFactory>(
    factory: &F,
    count: usize,
) -> Option<Vec<Arc<dyn EventStorage>>> {
    let first = factory.create().await;
    if !first.supports(Capability::Lease) {
        assert_refused(Arc::new(first));
        return None;
    }
    let mut handles = Vec::with_capacity(count);
    for _ in 1..count {
        handles.push(Arc::new(factory.another_handle(&first).await) as Arc<dyn EventStorage>);
    }
    handles.insert(0, Arc::new(first));
    Some(handles)
}

fn assert_refused(storage: Arc<dyn EventStorage>) {
    match PartitionElector::builder(storage, GROUP, PARTITIONS).start() {
        Err(EventStorageError::Unsupported { .. }) => {}
        Err(other) => panic!("expected Unsupported without Capability::Lease, got {other}"),
        Ok(_) => panic!("a partition elector started on a storage without Capability::Lease"),
    }
}

// ---------------------------------------------------------------------------------------------
// Partitioned projection
// ---------------------------------------------------------------------------------------------

fn partition_stream(partition: u32) -> EventStreamId {
    EventStreamId::new("tck-partitioned", partition.to_string())
}

fn reader(partition: u32) -> String {
    format!("tck-partition-{partition}")
}

fn event(n: u64) -> EventToStore {
    EventToStore::new("Numbered", serde_json::json!({ "n": n }))
}

/// Three events into every partition's stream.
async fn append_round(storage: &Arc<dyn EventStorage>, round: u64) -> Vec<EventId> {
    let mut ids = Vec::new();
    for partition in 0..PARTITIONS {
        let events = (0..3).map(|i| event(round * 100 + i)).collect();
        let stored = storage
            .append(AppendCriteria::none(), &partition_stream(partition), events)
            .await
            .or_rule("append", "an unconditional append of valid events succeeds");
        ids.extend(stored.into_iter().map(|event| event.reference.id));
    }
    ids
}

/// Every event any member projected, committed batch by batch.
#[derive(Clone, Default)]
struct Projected(Arc<Mutex<HashSet<EventId>>>);

impl Projected {
    async fn wait_for(&self, ids: &[EventId]) {
        support::eventually(&format!("{} events projected", ids.len()), || async {
            let projected = self.0.lock().expect("projected");
            ids.iter().all(|id| projected.contains(id))
        })
        .await;
    }
}

struct Recorder {
    pending: Vec<EventId>,
    projected: Projected,
}

#[async_trait]
impl Projection for Recorder {
    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
        self.pending.push(event.reference.id);
        Ok(())
    }

    async fn after_batch(&mut self, _last: &EventReference) -> Result<(), ProjectionError> {
        let mut projected = self.projected.0.lock().expect("projected");
        projected.extend(self.pending.drain(..));
        Ok(())
    }

    async fn cancel_batch(&mut self) {
        self.pending.clear();
    }
}

/// A member running a partitioned projector.
struct Worker {
    member: Member,
    task: JoinHandle<()>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Worker {
    fn start(storage: &Arc<dyn EventStorage>, index: usize, projected: &Projected) -> Worker {
        // The projector acknowledges handovers itself, between turns.
        let member = Member::with_releaser(storage, index, TTL, INTERVAL, false);
        let storage = storage.clone();
        let projected = projected.clone();
        let mut projector = PartitionedProjector::new(member.watch.clone(), move |partition| {
            let recorder = Recorder {
                pending: Vec::new(),
                projected: projected.clone(),
            };
            Projector::builder(storage.clone(), recorder)
                .stream(partition_stream(partition))
                .bookmark(reader(partition))
                .batch_size(2)
                .build()
        })
        .poll_interval(Duration::from_millis(20));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            projector
                .run_until(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap_or_else(|error| {
                panic!("a partitioned projector runs without error while its storage answers every call: {error}")
            });
        });
        Worker {
            member,
            task,
            stop: Some(stop),
        }
    }

    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        support::within(DEADLINE, "the projector stops", &mut self.task)
            .await
            .expect("the projector task");
        self.member.shutdown().await;
    }

    fn crash(self) {
        self.task.abort();
        self.member.crash();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventstore_api::FencingToken;

    fn held(partitions: &[(u32, u64)]) -> BTreeMap<u32, Fence> {
        partitions
            .iter()
            .map(|&(partition, token)| {
                (
                    partition,
                    Fence::new(format!("orders/{partition}"), FencingToken(token)),
                )
            })
            .collect()
    }

    #[test]
    fn a_member_seen_in_one_read_beside_a_steady_holder_is_a_double_holder() {
        let (steady, none) = (held(&[(3, 1)]), held(&[]));
        let (fading, arriving) = (held(&[(3, 2)]), held(&[(3, 2)]));
        for (first, second) in [(&fading, &none), (&none, &arriving)] {
            let reads = [
                MemberReads {
                    owner: "pod-a",
                    first: &steady,
                    second: &steady,
                },
                MemberReads {
                    owner: "pod-b",
                    first,
                    second,
                },
            ];
            let double = double_holder(&reads).expect("a double holder");
            assert!(double.contains("partition 3"), "{double}");
        }
    }

    #[test]
    fn a_handover_between_reads_is_no_double_holder() {
        let (before, after, none) = (held(&[(3, 1)]), held(&[(3, 2)]), held(&[]));
        // pod-a let partition 3 go before its second read; pod-b took it after its first.
        let reads = [
            MemberReads {
                owner: "pod-a",
                first: &before,
                second: &none,
            },
            MemberReads {
                owner: "pod-b",
                first: &none,
                second: &after,
            },
        ];
        assert_eq!(double_holder(&reads), None);
    }
}
