//! Scenarios: handovers pushed by lease changes, and waits with a bound.
//!
//! Electors run with a 30 s ttl and their default request interval (10 s), so anything that
//! happens within a second or two was pushed, not polled: a release wakes the waiting standby,
//! a higher-priority instance takes over by a step-down the holder hears of at once, the
//! token rises by exactly one on a planned handover, and a lease is never left free after a
//! step-down whose preferred successor never asks.
//!
//! Run on a backend without [`Capability::LeaseChanges`] (reported as ignored there unless run
//! with `--include-ignored`), each scenario proves instead that `subscribe_lease_changes`
//! answers `Unsupported`.

use std::sync::Arc;
use std::time::Duration;

use eventstore::elector::{LeaderElector, Leadership, LeadershipWaitError, LeadershipWatch};
use eventstore_api::EventStorageExt;
use eventstore_api::{
    Capability, EventStorage, FencingToken, LeaseRequest, LeaseScope, LeaseStatus,
};
use tokio::task::JoinHandle;

use crate::support;
use crate::support::Answer as _;
use crate::StorageFactory;

/// What every scenario of this module needs, unless it declares its own.
pub(crate) const NEEDS: &[Capability] = &[Capability::Lease, Capability::LeaseChanges];

/// A ttl whose default request interval (a third) is far longer than any pushed handover.
const TTL: Duration = Duration::from_secs(30);

/// How soon a pushed handover must be done: well under the 10 s a poll would take.
const PUSHED: Duration = Duration::from_secs(3);

/// The lease every scenario elects on.
const LEASE: &str = "handover";

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

/// When the leader shuts down, the waiting standby hears of the release and leads within
/// moments, with the next token.
pub async fn released_lease_is_led_by_the_waiting_standby_at_once<F: StorageFactory>(factory: &F) {
    let Some(handles) = pushing_handles(factory, 2).await else {
        return;
    };
    let first = start(&handles[0], "node-a", 0);
    let token = support::within(PUSHED, "node-a leads", wait_for_leadership(&first)).await;
    let second = start(&handles[1], "node-b", 0);
    wait_for_standby(&second.watch()).await;

    first
        .shutdown()
        .await
        .or_rule("shutdown", "an elector's shutdown releases its lease: release_lease answers on a storage with Capability::Lease");
    let taken = support::within(
        PUSHED,
        "the standby leads after the release, without waiting for its next poll",
        wait_for_leadership(&second),
    )
    .await;
    assert_eq!(taken, token.next(), "the standby leads with the next token");
    second.shutdown().await.or_rule("shutdown", "an elector's shutdown releases its lease: release_lease answers on a storage with Capability::Lease");
}

/// A higher-priority instance that starts takes over at once: the holder hears of the
/// step-down request when it is made, finishes (acknowledges), releases, and the new instance
/// leads with the very next token, although a third standby, of lower priority than both,
/// waits too and hears of the release as well.
pub async fn higher_priority_instance_leads_at_once_with_the_next_token<F: StorageFactory>(
    factory: &F,
) {
    let Some(handles) = pushing_handles(factory, 3).await else {
        return;
    };
    let holder = start(&handles[0], "node-a", 5);
    let _holder_work = acknowledge_step_downs(holder.watch());
    let token = support::within(PUSHED, "node-a leads", wait_for_leadership(&holder)).await;
    let standby = start(&handles[1], "node-b", 0);
    let _standby_work = acknowledge_step_downs(standby.watch());
    wait_for_standby(&standby.watch()).await;

    let preferred = start(&handles[2], "node-c", 10);
    let taken = support::within(
        PUSHED,
        "the higher-priority instance leads without waiting for a poll",
        wait_for_leadership(&preferred),
    )
    .await;
    assert_eq!(
        taken,
        token.next(),
        "a planned handover goes straight to the preferred contender: no tenure in between"
    );
    for elector in [preferred, standby, holder] {
        elector.shutdown().await.or_rule("shutdown", "an elector's shutdown releases its lease: release_lease answers on a storage with Capability::Lease");
    }
}

/// An instance that stepped down does not leave the lease free for a ttl when the
/// higher-priority contender never asks for it: it leads again after the handover grace.
pub async fn stepped_down_holder_leads_again_when_the_preferred_contender_never_asks<
    F: StorageFactory,
>(
    factory: &F,
) {
    let Some(handles) = pushing_handles(factory, 1).await else {
        return;
    };
    let storage = &handles[0];
    let holder = start(storage, "node-a", 0);
    let _work = acknowledge_step_downs(holder.watch());
    let token = support::within(PUSHED, "node-a leads", wait_for_leadership(&holder)).await;

    // A contender that registers once with a higher priority, then is never heard of again.
    let ghost = storage
        .request_lease(LeaseRequest::new(LEASE, "ghost", 10, TTL))
        .await
        .or_rule(
            "request_lease of the ghost",
            "request_lease of a valid request answers on a storage with Capability::Lease",
        );
    assert_eq!(
        ghost.status,
        LeaseStatus::Standby,
        "node-a still holds the lease"
    );

    let mut watch = holder.watch();
    support::within(
        PUSHED,
        "node-a hears of the step-down request and hands over",
        async {
            // A watch keeps the latest value only: a slow poll may see the next tenure instead.
            loop {
                let current = watch.current();
                let led_again = current.token().is_some_and(|now| now > token);
                if matches!(current, Leadership::SteppedDown { .. }) || led_again {
                    break;
                }
                watch.changed().await.expect("the elector runs");
            }
        },
    )
    .await;
    let again = support::within(
        PUSHED,
        "node-a leads again once the preferred contender has not asked within the grace",
        wait_for_leadership(&holder),
    )
    .await;
    assert!(again > token, "a new tenure gets a new token");
    holder.shutdown().await.or_rule("shutdown", "an elector's shutdown releases its lease: release_lease answers on a storage with Capability::Lease");
}

/// Raising a standby's priority while it runs is applied by a request sent at once: the
/// holder is asked to step down and the raised instance leads.
pub async fn raised_priority_is_applied_at_once<F: StorageFactory>(factory: &F) {
    let Some(handles) = pushing_handles(factory, 2).await else {
        return;
    };
    let holder = start(&handles[0], "node-a", 0);
    let _work = acknowledge_step_downs(holder.watch());
    let token = support::within(PUSHED, "node-a leads", wait_for_leadership(&holder)).await;
    let raised = start(&handles[1], "node-b", 0);
    wait_for_standby(&raised.watch()).await;

    raised.set_priority(10);
    assert_eq!(
        raised.priority(),
        10,
        "priority rule: the elector reports the raised priority"
    );
    let taken = support::within(
        PUSHED,
        "the instance whose priority was raised leads without waiting for a poll",
        wait_for_leadership(&raised),
    )
    .await;
    assert_eq!(taken, token.next(), "the handover takes exactly one token");
    raised.shutdown().await.or_rule("shutdown", "an elector's shutdown releases its lease: release_lease answers on a storage with Capability::Lease");
    holder.shutdown().await.or_rule("shutdown", "an elector's shutdown releases its lease: release_lease answers on a storage with Capability::Lease");
}

/// What the scenario below needs, instead of the module's [`NEEDS`].
pub(crate) const NEEDS_WAITING_FOR_LEADERSHIP_WITHIN_A_BOUND_ANSWERS_THE_TOKEN_OR_A_TIMEOUT:
    &[Capability] = &[Capability::Lease];

/// Waiting for leadership with a bound answers the token when leading, a timeout naming the
/// lease when another instance leads, and `Stopped` once the elector stops.
pub async fn waiting_for_leadership_within_a_bound_answers_the_token_or_a_timeout<
    F: StorageFactory,
>(
    factory: &F,
) {
    let storage = factory.create().await;
    if !storage.supports(Capability::Lease) {
        return;
    }
    let storage: Arc<dyn EventStorage> = Arc::new(storage);
    let leader = start(&storage, "node-a", 0);
    let token = leader
        .watch()
        .wait_for_leadership_within(support::DEADLINE)
        .await
        .expect("the only instance leads within the bound");
    assert_eq!(
        Some(token),
        leader.token(),
        "leadership rule: the token waited for is the one the elector leads with"
    );

    let standby = start(&storage, "node-b", 0);
    wait_for_standby(&standby.watch()).await;
    let bound = Duration::from_millis(50);
    match standby.watch().wait_for_leadership_within(bound).await {
        Err(LeadershipWaitError::TimedOut {
            lease_name, after, ..
        }) => {
            assert_eq!(
                (lease_name.as_str(), after),
                (LEASE, bound),
                "leadership rule: a timed-out wait names the lease and the bound waited"
            );
        }
        other => panic!("a standby's bounded wait must time out, got {other:?}"),
    }

    let mut stopped = standby.watch();
    standby.shutdown().await.or_rule("shutdown", "an elector's shutdown releases its lease: release_lease answers on a storage with Capability::Lease");
    let result = stopped.wait_for_leadership_within(support::DEADLINE).await;
    assert!(
        matches!(result, Err(LeadershipWaitError::Stopped { .. })),
        "waiting on a stopped elector answers Stopped, got {result:?}"
    );
    leader.shutdown().await.or_rule("shutdown", "an elector's shutdown releases its lease: release_lease answers on a storage with Capability::Lease");
}

// ---------------------------------------------------------------------------------------------
// What the scenarios share
// ---------------------------------------------------------------------------------------------

/// `count` handles of one fresh storage that pushes lease changes, or `None` (having proved
/// that the storage refuses to) when it does not.
async fn pushing_handles<F: StorageFactory>(
    factory: &F,
    count: usize,
) -> Option<Vec<Arc<dyn EventStorage>>> {
    let first = factory.create().await;
    if !support::lease_changes_supported(&first).await {
        return None;
    }
    let mut handles: Vec<Arc<dyn EventStorage>> = Vec::with_capacity(count);
    for _ in 1..count {
        handles.push(Arc::new(factory.another_handle(&first).await));
    }
    handles.insert(0, Arc::new(first));
    // An elector subscribes in the background, never holding its requests up: on a storage
    // whose listener connects only then, an elector may stand by before its subscription
    // hears anything, and miss the change a scenario waits for. A subscription of each handle
    // first, which returns once the handle's storage listens, rules that race out.
    for handle in &handles {
        handle
            .subscribe_lease_changes(LeaseScope::lease(LEASE))
            .await
            .or_rule(
                "subscribe_lease_changes",
                "subscribe_lease_changes answers on a storage with Capability::LeaseChanges",
            );
    }
    Some(handles)
}

/// An elector with the default request interval (a third of [`TTL`]).
fn start(storage: &Arc<dyn EventStorage>, owner: &str, priority: i64) -> LeaderElector {
    LeaderElector::builder(storage.clone(), LEASE)
        .owner(owner)
        .priority(priority)
        .ttl(TTL)
        .start()
        .or_rule(
            "start",
            "an elector starts on a storage with Capability::Lease, with valid settings",
        )
}

async fn wait_for_leadership(elector: &LeaderElector) -> FencingToken {
    elector
        .watch()
        .wait_for_leadership()
        .await
        .expect("the elector runs")
}

async fn wait_for_standby(watch: &LeadershipWatch) {
    let mut watch = watch.clone();
    support::within(support::DEADLINE, "the instance stands by", async {
        while !matches!(watch.current(), Leadership::Standby { .. }) {
            watch.changed().await.expect("the elector runs");
        }
    })
    .await;
}

/// The guarded work of an instance that can always stop at once: it acknowledges every
/// step-down request as soon as it is published. Dropping the handle stops it.
fn acknowledge_step_downs(watch: LeadershipWatch) -> AbortOnDrop {
    let mut watch = watch;
    AbortOnDrop(tokio::spawn(async move {
        loop {
            if let Leadership::StepDownRequested { token } = watch.current() {
                watch.acknowledge_step_down(token);
            }
            if watch.changed().await.is_err() {
                return;
            }
        }
    }))
}

/// A task that ends with the scenario.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
