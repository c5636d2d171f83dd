//! The leader elector on the in-memory backend: starting checks, who leads, hand-overs,
//! step-downs, and self-demotion by the deadline while the storage hangs.

use std::sync::Arc;
use std::time::Duration;

use eventstore::elector::{LeaderElector, Leadership};
use eventstore::{EventStorage, EventStorageError, Fence, FencingToken, LeaseRequest};
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::support::{eventually, DEADLINE};
use eventstore_tck::wrappers::{EventsOnly, Unreliable};

/// Long enough that no stall of a loaded machine lets a tenure lapse between renewals.
const TTL: Duration = Duration::from_secs(3);

/// For the tests that wait for a deadline to pass.
const SHORT_TTL: Duration = Duration::from_millis(300);

fn elector<S: EventStorage + 'static>(
    storage: &Arc<S>,
    owner: &str,
    priority: i64,
) -> LeaderElector {
    LeaderElector::builder(storage.clone(), "jobs")
        .owner(owner)
        .priority(priority)
        .ttl(TTL)
        .start()
        .unwrap()
}

async fn leads(elector: &LeaderElector) -> FencingToken {
    let mut watch = elector.watch();
    tokio::time::timeout(DEADLINE, watch.wait_for_leadership())
        .await
        .expect("leads in time")
        .expect("the elector runs")
}

#[tokio::test]
async fn a_storage_without_leases_is_refused_at_start() {
    let storage = Arc::new(EventsOnly::new(MemoryEventStorage::new()));
    let error = LeaderElector::builder(storage, "jobs").start().unwrap_err();
    assert!(
        matches!(error, EventStorageError::Unsupported { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("Capability::Lease"), "{error}");
}

#[tokio::test]
async fn settings_that_would_lose_a_healthy_lease_are_refused() {
    let storage = Arc::new(MemoryEventStorage::new());
    let build = |interval: Duration, margin: Duration| {
        LeaderElector::builder(storage.clone(), "jobs")
            .ttl(Duration::from_secs(3))
            .request_interval(interval)
            .safety_margin(margin)
            .start()
    };
    let ms = Duration::from_millis;
    let error = build(ms(3000), ms(10)).unwrap_err();
    assert!(error.to_string().contains("request interval"), "{error}");
    assert!(
        error.to_string().contains("shorter than the ttl 3s"),
        "{error}"
    );
    assert!(build(ms(0), ms(10)).is_err());
    let error = build(ms(2000), ms(1000)).unwrap_err();
    assert!(error.to_string().contains("safety margin"), "{error}");
    assert!(build(ms(1000), ms(150)).is_ok());
    let error = build(ms(1000), ms(29)).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("at least a hundredth of the ttl (30ms)"),
        "{error}"
    );
    assert!(build(ms(1000), ms(30)).is_ok());

    let error = LeaderElector::builder(storage.clone(), " ")
        .start()
        .unwrap_err();
    assert!(error.to_string().contains("lease name"), "{error}");
    let error = LeaderElector::builder(storage.clone(), "jobs")
        .ttl(Duration::ZERO)
        .start()
        .unwrap_err();
    assert!(error.to_string().contains("ttl"), "{error}");
    assert!(
        storage.get_leases().await.unwrap().is_empty(),
        "nothing requested"
    );
}

#[tokio::test]
async fn the_only_contender_leads_with_the_first_token_and_its_fence() {
    let storage = Arc::new(MemoryEventStorage::new());
    let elector = elector(&storage, "a", 0);
    assert_eq!(leads(&elector).await, FencingToken(1));
    let watch = elector.watch();
    assert!(watch.is_leader());
    assert_eq!(watch.fence(), Some(Fence::new("jobs", FencingToken(1))));
    assert_eq!(
        elector.leadership(),
        Leadership::Leader {
            token: FencingToken(1)
        }
    );
    elector.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_other_contender_stands_by_naming_the_holder() {
    let storage = Arc::new(MemoryEventStorage::new());
    let a = elector(&storage, "a", 0);
    let token = leads(&a).await;
    let b = elector(&storage, "b", 0);
    eventually("b to stand by", || async {
        b.leadership()
            == Leadership::Standby {
                holder: "a".into(),
                token,
            }
    })
    .await;
    assert!(!b.is_leader());
    assert!(a.is_leader(), "equal priority never asks for a step-down");
    b.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_releases_so_a_standby_takes_over_well_within_the_ttl() {
    let storage = Arc::new(MemoryEventStorage::new());
    // Far longer than the polling deadline: b can only lead because a released.
    let ttl = Duration::from_secs(600);
    let start = |owner: &str| {
        LeaderElector::builder(storage.clone(), "jobs")
            .owner(owner)
            .ttl(ttl)
            .request_interval(Duration::from_millis(100))
            .start()
            .unwrap()
    };
    let a = start("a");
    assert_eq!(leads(&a).await, FencingToken(1));
    let b = start("b");
    eventually("b to stand by", || async {
        matches!(b.leadership(), Leadership::Standby { .. })
    })
    .await;

    a.shutdown().await.unwrap();
    assert_eq!(leads(&b).await, FencingToken(2));
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_aborted_leader_keeps_the_lease_until_its_ttl_then_is_replaced() {
    let storage = Arc::new(MemoryEventStorage::new());
    let a = elector(&storage, "a", 0);
    leads(&a).await;
    let watch = a.watch();
    a.abort();
    assert_eq!(watch.current(), Leadership::Stopped);
    assert!(!watch.is_leader());
    let now = storage.storage_time().await.unwrap();
    assert!(!storage.get_leases().await.unwrap()[0].is_expired_at(now));

    let b = elector(&storage, "b", 0);
    assert_eq!(leads(&b).await, FencingToken(2));
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_elector_whose_storage_panics_says_it_stopped() {
    let storage = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    let a = elector(&storage, "a", 0);
    leads(&a).await;
    let mut watch = a.watch();
    storage.panic(true);
    // The published value, not `current()`: only the loop itself can publish `Stopped`.
    let published = watch.subscribe();
    eventually("the panicked loop to publish that it stopped", || async {
        *published.borrow() == Leadership::Stopped
    })
    .await;
    let waited = tokio::time::timeout(DEADLINE, watch.wait_for_leadership()).await;
    assert_eq!(waited.expect("the wait ends"), None);
    assert!(!a.is_leader());
    storage.panic(false);
    a.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_higher_priority_contender_gets_the_lease_once_the_work_acknowledges() {
    let storage = Arc::new(MemoryEventStorage::new());
    let low = elector(&storage, "low", 0);
    let low_token = leads(&low).await;
    let high = elector(&storage, "high", 10);

    let watch = low.watch();
    eventually("a step-down request", || async {
        watch.current() == Leadership::StepDownRequested { token: low_token }
    })
    .await;
    assert!(low.is_leader(), "still leads until it acknowledges");
    assert!(!high.is_leader());

    watch.acknowledge_step_down(low_token);
    eventually("low to report its step-down", || async {
        low.leadership() == Leadership::SteppedDown { token: low_token }
    })
    .await;
    assert_eq!(leads(&high).await, low_token.next());
    eventually("low to stand by behind high", || async {
        low.leadership()
            == Leadership::Standby {
                holder: "high".into(),
                token: low_token.next(),
            }
    })
    .await;
    high.shutdown().await.unwrap();
    low.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_elector_demotes_by_its_deadline_while_a_request_hangs() {
    let storage = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    // A hung request gives up at its own send time + ttl - margin, a request interval after
    // the deadline of the tenure before it: 2 s here, which tells the two apart.
    let a = LeaderElector::builder(storage.clone(), "jobs")
        .owner("a")
        .ttl(TTL)
        .request_interval(Duration::from_secs(2))
        .start()
        .unwrap();
    let token = leads(&a).await;
    let mut published = a.watch().subscribe();
    storage.hang(true);

    // The published value, not `current()`, which shows a lapsed tenure as `Unknown` itself.
    let hanging_when_demoted = tokio::time::timeout(DEADLINE, async {
        drop(
            published
                .wait_for(|leadership| *leadership == Leadership::Unknown)
                .await
                .expect("the elector runs"),
        );
        storage.hung_calls()
    })
    .await
    .expect("demoted in time");
    assert_eq!(
        hanging_when_demoted, 1,
        "demoted by the deadline while the request still hung, not when it gave up"
    );
    assert!(!a.is_leader());
    assert_eq!(a.token(), None);

    storage.hang(false);
    let again = leads(&a).await;
    assert!(again >= token);
    a.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_failed_request_demotes_at_once() {
    let storage = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    // A deadline far beyond the polling deadline: only the failure itself can demote.
    let a = LeaderElector::builder(storage.clone(), "jobs")
        .owner("a")
        .ttl(Duration::from_secs(600))
        .request_interval(Duration::from_millis(20))
        .start()
        .unwrap();
    let token = leads(&a).await;
    storage.fail(true);

    let watch = a.watch();
    eventually("demotion after a failed renewal", || async {
        watch.current() == Leadership::Unknown
    })
    .await;
    assert!(!a.is_leader(), "a failed renewal is no evidence of leading");
    assert_eq!(a.token(), None);

    storage.fail(false);
    assert_eq!(
        leads(&a).await,
        token,
        "the live lease is renewed, not re-acquired"
    );
    a.shutdown().await.unwrap();
}

#[tokio::test]
async fn is_leader_turns_false_at_the_deadline_without_the_task() {
    let storage = Arc::new(MemoryEventStorage::new());
    let a = LeaderElector::builder(storage.clone(), "jobs")
        .owner("a")
        .ttl(SHORT_TTL)
        .start()
        .unwrap();
    let token = leads(&a).await;
    let watch = a.watch();
    // The test's runtime has one thread: blocking it for a ttl keeps the elector's task from
    // renewing or demoting, so only is_leader()'s own reading of the deadline can turn false.
    std::thread::sleep(SHORT_TTL);
    assert_eq!(
        *watch.subscribe().borrow(),
        Leadership::Leader { token },
        "the task did not run"
    );
    assert!(!watch.is_leader());
    assert_eq!(watch.fence(), None);
    drop(a);
}

/// A release that commits after a standby's first answer but before its subscription to
/// pushed changes is live reaches it all the same: the late subscription counts as a missed
/// notice, so the standby asks again within the handover grace, not at its next poll a minute
/// later.
#[tokio::test]
async fn a_release_before_the_subscription_is_live_is_not_left_to_the_next_poll() {
    let storage = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    storage.hold_subscriptions(true);
    let ttl = Duration::from_secs(180);
    storage
        .inner()
        .request_lease(LeaseRequest::new("jobs", "pod-a", 0, ttl))
        .await
        .unwrap();
    let standby = LeaderElector::builder(storage.clone(), "jobs")
        .owner("pod-b")
        .ttl(ttl)
        .request_interval(Duration::from_secs(60))
        .start()
        .unwrap();
    let watch = standby.watch();
    eventually("the standby's first answer", || {
        let current = watch.current();
        async move { matches!(current, Leadership::Standby { .. }) }
    })
    .await;

    storage
        .inner()
        .release_lease("jobs", "pod-a")
        .await
        .unwrap();
    storage.hold_subscriptions(false);

    let token = leads(&standby).await;
    assert_eq!(
        token,
        FencingToken(2),
        "the standby took the released lease"
    );
    standby.shutdown().await.unwrap();
}

/// A pause of the process (here the test's only runtime thread, blocked) that outlasts the
/// local deadline but not the storage's ttl: the tenure lapses with nothing published, and
/// the next renewal confirms the same token. A caller that began waiting for leadership when
/// its token turned `None` is woken by that renewal, or the lease would stay held by an
/// instance that does no work.
#[tokio::test]
async fn a_waiter_hears_of_a_tenure_renewed_after_a_lapse_nothing_published() {
    let storage = Arc::new(MemoryEventStorage::new());
    let a = LeaderElector::builder(storage.clone(), "jobs")
        .owner("a")
        .ttl(Duration::from_secs(2))
        .request_interval(Duration::from_millis(100))
        // The local deadline is 300 ms after a request's send; the storage keeps 2 s.
        .safety_margin(Duration::from_millis(1_700))
        .start()
        .unwrap();
    let token = leads(&a).await;
    let mut watch = a.watch();

    std::thread::sleep(Duration::from_millis(600));
    assert!(
        !watch.is_leader(),
        "the local deadline lapsed during the pause"
    );

    let waited = tokio::time::timeout(DEADLINE, watch.wait_for_leadership()).await;
    assert_eq!(
        waited,
        Ok(Some(token)),
        "the renewal of the same tenure wakes the waiter"
    );
    a.shutdown().await.unwrap();
}

/// Once the elector is gone, `changed` says so (after `Stopped` is seen), so that a work loop
/// following the leadership ends instead of waiting forever.
#[tokio::test]
async fn changed_reports_the_end_once_the_elector_is_gone() {
    let storage = Arc::new(MemoryEventStorage::new());
    let a = elector(&storage, "a", 0);
    leads(&a).await;
    let mut watch = a.watch();
    let mut late = a.watch();
    a.shutdown().await.unwrap();
    let ended =
        tokio::time::timeout(DEADLINE, async { while watch.changed().await.is_ok() {} }).await;
    assert!(ended.is_ok(), "changed() still waits after the shutdown");
    assert_eq!(watch.current(), Leadership::Stopped);
    // A watch taken before the end, and one taken after it, hear the same.
    assert!(late.changed().await.is_ok(), "Stopped is a change to see");
    assert!(late.changed().await.is_err());
    let mut after = late.clone();
    assert!(after.changed().await.is_err());
}

/// Every ttl the storage accepts (1 ms and up) starts with the default settings.
#[tokio::test]
async fn a_short_ttl_the_storage_accepts_starts_with_the_defaults() {
    let storage = Arc::new(MemoryEventStorage::new());
    for millis in [1, 5, 19] {
        let ttl = Duration::from_millis(millis);
        storage
            .request_lease(LeaseRequest::new("probe", "x", 0, ttl))
            .await
            .expect("the storage accepts the ttl");
        let started = LeaderElector::builder(storage.clone(), "jobs")
            .owner("a")
            .ttl(ttl)
            .start();
        match started {
            Ok(elector) => elector.shutdown().await.unwrap(),
            Err(error) => panic!("a ttl of {ttl:?} with the defaults refused: {error}"),
        }
    }
}

/// A subscription still on its way when the elector shuts down is ended with it: nothing
/// outlives the elector holding the storage.
#[tokio::test]
async fn a_shutdown_leaves_no_task_behind() {
    let storage = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    storage.hold_subscriptions(true);
    let a = elector(&storage, "a", 0);
    leads(&a).await;
    a.shutdown().await.unwrap();
    eventually(
        "every handle the elector took on the storage to be dropped",
        || async { Arc::strong_count(&storage) == 1 },
    )
    .await;
}

/// When the loop died (a panic in the storage it called) it released nothing: the shutdown
/// releases the lease itself, so the next contender need not wait out the ttl.
#[tokio::test]
async fn a_shutdown_after_the_loop_died_releases_the_lease() {
    let storage = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    let a = elector(&storage, "a", 0);
    leads(&a).await;
    let published = a.watch().subscribe();
    storage.panic(true);
    eventually("the loop to die", || async {
        *published.borrow() == Leadership::Stopped
    })
    .await;
    storage.panic(false);
    a.shutdown().await.expect("the shutdown's release");
    let now = storage.storage_time().await.unwrap();
    let held: Vec<_> = storage
        .get_leases()
        .await
        .unwrap()
        .into_iter()
        .filter(|lease| !lease.is_expired_at(now))
        .collect();
    assert!(held.is_empty(), "still held after the shutdown: {held:?}");
}
