//! A partition elector whose storage misbehaves: a panic in a storage call still publishes
//! that it stopped, a lapse in the middle of a handover leaves the loop idle, not spinning on
//! a drain deadline that no longer belongs to anything, a shutdown that cuts a handover's
//! release short still releases the partition, and so does a shutdown after a lapse or after
//! the loop died; a watcher that saw the partitions lapse unpublished hears of their renewal.

use std::sync::Arc;
use std::time::Duration;

use eventstore::{EventStorage, PartitionElector};
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::support::{eventually, DEADLINE};
use eventstore_tck::wrappers::Unreliable;

#[tokio::test]
async fn a_partition_elector_whose_storage_panics_says_it_stopped() {
    let storage = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    let shared: Arc<dyn EventStorage> = storage.clone();
    let elector = PartitionElector::builder(shared, "numbers", 2)
        .ttl(Duration::from_secs(1))
        .start()
        .unwrap();
    let mut watch = elector.watch();
    eventually("the only member to hold both partitions", || async {
        watch.held().len() == 2
    })
    .await;
    storage.panic(true);
    let stopped =
        tokio::time::timeout(DEADLINE, async { while watch.changed().await.is_ok() {} }).await;
    assert!(stopped.is_ok(), "watchers hear that the elector stopped");
    assert!(watch.is_stopped());
    assert!(watch.held().is_empty());
    elector.abort();
}

/// The loop died (a panic in the storage it called) holding partitions it released nothing
/// of: the shutdown releases the membership and every partition itself, so that another
/// member need not wait out the ttl.
#[tokio::test]
async fn a_shutdown_after_the_loop_died_releases_every_partition() {
    let inner = MemoryEventStorage::new();
    let storage = Arc::new(Unreliable::new(inner.clone()));
    let shared: Arc<dyn EventStorage> = storage.clone();
    let elector = PartitionElector::builder(shared, "numbers", 3)
        .owner("dying")
        .ttl(Duration::from_secs(60))
        .start()
        .unwrap();
    let mut watch = elector.watch();
    eventually("the only member to hold every partition", || async {
        watch.held().len() == 3
    })
    .await;
    storage.panic(true);
    let stopped =
        tokio::time::timeout(DEADLINE, async { while watch.changed().await.is_ok() {} }).await;
    assert!(stopped.is_ok(), "watchers hear that the elector stopped");
    storage.panic(false);
    elector.shutdown().await.expect("the shutdown's release");
    let now = inner.storage_time().await.unwrap();
    let held: Vec<_> = inner
        .get_leases()
        .await
        .unwrap()
        .into_iter()
        .filter(|lease| lease.owner == "dying" && !lease.is_expired_at(now))
        .collect();
    assert!(held.is_empty(), "still held after the shutdown: {held:?}");
}

/// A member that lapsed while handing a partition over is still the partition's holder in
/// the storage once the storage is back. A shutdown before its next round releases that
/// partition too (the last read of the group recorded it): the member it moves to takes it at
/// once, not after the lease's ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_right_after_a_lapse_releases_the_partition_it_was_handing_over() {
    let inner = MemoryEventStorage::new();
    let storage = Arc::new(Unreliable::new(inner.clone()));
    // Deadline 4 s after a confirmed renewal, expiry in the storage 10 s after it; renewals
    // every 3 s, so no round runs between the storage's recovery and the shutdown.
    let ttl = Duration::from_secs(10);
    let shared: Arc<dyn EventStorage> = storage.clone();
    let leaving = PartitionElector::builder(shared, "orders", 2)
        .owner("pod-a")
        .ttl(ttl)
        .safety_margin(Duration::from_secs(6))
        .request_interval(Duration::from_secs(3))
        .drain_timeout(Duration::from_secs(9))
        .start()
        .unwrap();
    let leaving_watch = leaving.watch();
    eventually("pod-a to hold both partitions", || async {
        leaving_watch.held().len() == 2
    })
    .await;
    let staying = PartitionElector::builder(Arc::new(inner.clone()), "orders", 2)
        .owner("pod-b")
        .ttl(ttl)
        .request_interval(Duration::from_millis(500))
        .start()
        .unwrap();
    let staying_watch = staying.watch();
    eventually("pod-a to be asked to hand one partition over", || async {
        leaving_watch.handing_over().len() == 1
    })
    .await;

    storage.fail(true);
    eventually("pod-a to lapse", || async {
        leaving_watch.held().is_empty() && leaving_watch.handing_over().is_empty()
    })
    .await;
    storage.fail(false);
    leaving.shutdown().await.unwrap();
    let left = std::time::Instant::now();

    // Within 3 s: well before the 6 s left of the lease's ttl.
    eventually("pod-b to hold both partitions", || async {
        staying_watch.held().len() == 2
    })
    .await;
    assert!(
        left.elapsed() < Duration::from_secs(3),
        "pod-b took both partitions only {:?} after pod-a left",
        left.elapsed()
    );
    staying.shutdown().await.unwrap();
}

/// The CPU time the calling thread has used so far, from `/proc/thread-self/stat`.
#[cfg(target_os = "linux")]
fn thread_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    // The fields after the command's closing parenthesis start at the third; utime and
    // stime are the fourteenth and fifteenth.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// On a single-threaded runtime every task runs on the test's thread, so its CPU time shows
/// whether the elector's loop idles while its storage is away.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "current_thread")]
async fn a_lapse_during_a_handover_leaves_the_loop_idle() {
    let inner = MemoryEventStorage::new();
    let storage = Arc::new(Unreliable::new(inner.clone()));
    let shared: Arc<dyn EventStorage> = storage.clone();
    // The deadline (a round's send plus 600 ms) passes before the drain timeout (900 ms), so
    // the handover is still draining when everything lapses.
    let first = PartitionElector::builder(shared, "numbers", 2)
        .owner("node-a")
        .ttl(Duration::from_secs(1))
        .request_interval(Duration::from_millis(300))
        .safety_margin(Duration::from_millis(400))
        .drain_timeout(Duration::from_millis(900))
        .start()
        .unwrap();
    let watch = first.watch();
    eventually("node-a to hold both partitions", || async {
        watch.held().len() == 2
    })
    .await;
    let second = PartitionElector::builder(Arc::new(inner), "numbers", 2)
        .owner("node-b")
        .ttl(Duration::from_secs(1))
        .start()
        .unwrap();
    // The work never acknowledges: the handover drains until its timeout.
    eventually("node-a to be asked to hand a partition over", || async {
        !watch.handing_over().is_empty()
    })
    .await;
    storage.fail(true);
    eventually("node-a's partitions to lapse", || async {
        watch.held().is_empty() && watch.handing_over().is_empty()
    })
    .await;
    // Past the drain timeout of the handover that lapsed.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let before = thread_cpu_ticks();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let used = thread_cpu_ticks() - before;
    // A second at full speed is 100 ticks; an idle loop with failing rounds every 300 ms is
    // a few at most.
    assert!(
        used < 30,
        "the loop used {used} ticks of CPU in a second while its storage failed"
    );

    storage.fail(false);
    eventually("node-a to hold a partition again", || async {
        !watch.held().is_empty()
    })
    .await;
    second.shutdown().await.unwrap();
    first.shutdown().await.unwrap();
}

/// A member that leaves after another member's first round, but before that member's
/// subscription to pushed changes is live, is noticed all the same: the late subscription
/// counts as a missed notice, so the member that stays looks at the group again within the
/// handover grace and takes the partitions left behind, not at its next renewal a minute later.
#[tokio::test]
async fn a_leave_before_the_subscription_is_live_is_not_left_to_the_next_renewal() {
    let storage = Arc::new(Unreliable::new(MemoryEventStorage::new()));
    let ttl = Duration::from_secs(180);
    let interval = Duration::from_secs(60);
    let start = |handle: Arc<dyn EventStorage>, owner: &str| {
        PartitionElector::builder(handle, "orders", 2)
            .owner(owner)
            .ttl(ttl)
            .request_interval(interval)
            .drain_timeout(Duration::from_millis(100))
            .start()
            .unwrap()
    };
    let leaving = start(Arc::new(storage.inner().clone()), "pod-a");
    let leaving_watch = leaving.watch();
    eventually("the first member to hold both partitions", || async {
        leaving_watch.held().len() == 2
    })
    .await;

    storage.hold_subscriptions(true);
    let staying = start(storage.clone(), "pod-b");
    let staying_watch = staying.watch();
    eventually("the two members to share the partitions", || async {
        staying_watch.held().len() == 1 && leaving_watch.held().len() == 1
    })
    .await;
    // Members look again every few milliseconds while partitions move, doubling the wait,
    // and stop once a look finds the group at its assignment. A leave during those looks
    // would be seen without any push; this waits them out, so that only the push, or the
    // renewal a minute later, can tell the staying member. (Too short a wait could only
    // let the test pass without the push, never fail it.)
    tokio::time::sleep(Duration::from_secs(3)).await;

    leaving.shutdown().await.unwrap();
    storage.hold_subscriptions(false);
    eventually(
        "the staying member to take the partition left behind",
        || async { staying_watch.held().len() == 2 },
    )
    .await;
    staying.shutdown().await.unwrap();
}

/// A member that lapses while handing a partition over may still be recorded as its holder
/// once it is back; the partition is no longer its target, so it releases it at its next
/// round and the new target member takes it at once, instead of waiting for its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_handed_over_when_its_member_lapsed_is_released_once_it_is_back() {
    let inner = MemoryEventStorage::new();
    let storage = Arc::new(Unreliable::new(inner.clone()));
    // The deadline comes 4 s after a confirmed renewal, the storage's expiry 10 s after it:
    // a lapse leaves the partitions recorded as held for 6 s more. The handover waits for
    // its work (9 s at most), which never acknowledges here.
    let ttl = Duration::from_secs(10);
    let start = |handle: Arc<dyn EventStorage>, owner: &str| {
        PartitionElector::builder(handle, "orders", 2)
            .owner(owner)
            .ttl(ttl)
            .safety_margin(Duration::from_secs(6))
            .request_interval(Duration::from_millis(500))
            .drain_timeout(Duration::from_secs(9))
            .start()
            .unwrap()
    };
    let lapsing = start(storage.clone(), "pod-a");
    let lapsing_watch = lapsing.watch();
    eventually("the first member to hold both partitions", || async {
        lapsing_watch.held().len() == 2
    })
    .await;
    let joining = start(Arc::new(inner.clone()), "pod-b");
    let joining_watch = joining.watch();
    eventually("the first member to hand one partition over", || async {
        lapsing_watch.handing_over().len() == 1
    })
    .await;

    storage.fail(true);
    eventually("the first member to lapse", || async {
        lapsing_watch.held().is_empty() && lapsing_watch.handing_over().is_empty()
    })
    .await;
    storage.fail(false);
    let recovered = std::time::Instant::now();

    // Without the release, the new member would wait for the storage's expiry, 6 s on.
    let within = Duration::from_secs(4);
    while !(joining_watch.held().len() == 1 && lapsing_watch.held().len() == 1) {
        assert!(
            recovered.elapsed() < within,
            "the members share the partitions within {within:?} of the recovery: {:?} and {:?}",
            lapsing_watch.held(),
            joining_watch.held()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    joining.shutdown().await.unwrap();
    lapsing.shutdown().await.unwrap();
}

/// A shutdown while a handover's release is on its way (a slow storage) releases that
/// partition too: its next holder leads at once, not after the ttl.
#[tokio::test(flavor = "current_thread")]
async fn a_shutdown_during_a_handovers_release_releases_the_partition() {
    let inner = MemoryEventStorage::new();
    let storage = Arc::new(Unreliable::new(inner.clone()));
    let ttl = Duration::from_secs(30);
    let leaving = PartitionElector::builder(storage.clone() as Arc<dyn EventStorage>, "orders", 2)
        .owner("pod-a")
        .ttl(ttl)
        .drain_timeout(Duration::from_secs(20))
        .start()
        .unwrap();
    let watch = leaving.watch();
    eventually("the first member to hold both partitions", || async {
        watch.held().len() == 2
    })
    .await;
    let joining = PartitionElector::builder(Arc::new(inner.clone()), "orders", 2)
        .owner("pod-b")
        .ttl(ttl)
        .start()
        .unwrap();
    eventually("the first member to hand one partition over", || async {
        !watch.handing_over().is_empty()
    })
    .await;
    let moving = *watch.handing_over().keys().next().unwrap();

    // The work lets go of the partition; its release then hangs in the storage.
    storage.hang(true);
    watch.hand_over(moving);
    eventually("the release to be on its way", || async {
        storage.hung_calls() == 1
    })
    .await;
    storage.hang(false);
    tokio::time::timeout(DEADLINE, leaving.shutdown())
        .await
        .expect("shuts down in time")
        .unwrap();

    let lease = format!("orders/{moving}");
    let now = inner.storage_time().await.unwrap();
    let still_held =
        inner.get_leases().await.unwrap().into_iter().find(|held| {
            held.lease_name == lease && held.owner == "pod-a" && !held.is_expired_at(now)
        });
    assert!(
        still_held.is_none(),
        "pod-a still holds {lease} until its ttl: {still_held:?}"
    );
    joining.shutdown().await.unwrap();
}

/// A pause of the process (here the test's only runtime thread, blocked) that outlasts the
/// local deadline but not the storage's ttl: `held()` turns empty with nothing published, and
/// the next renewal confirms the same partitions and tokens. A work loop that saw nothing held
/// and waits for a change is woken by that renewal, or the member would keep renewing
/// partitions nobody works on.
#[tokio::test]
async fn a_watcher_hears_of_partitions_renewed_after_a_lapse_nothing_published() {
    let storage = Arc::new(MemoryEventStorage::new());
    let elector = PartitionElector::builder(storage.clone(), "orders", 1)
        .owner("a")
        .ttl(Duration::from_secs(2))
        .request_interval(Duration::from_millis(100))
        // The local deadline is 300 ms after a request's send; the storage keeps 2 s.
        .safety_margin(Duration::from_millis(1_700))
        .start()
        .unwrap();
    let mut watch = elector.watch();
    eventually("the only member to hold the partition", || async {
        !watch.held().is_empty()
    })
    .await;
    let fence = watch.held()[&0].clone();

    std::thread::sleep(Duration::from_millis(600));
    assert!(
        watch.held().is_empty(),
        "the local deadline lapsed during the pause"
    );

    let woken = tokio::time::timeout(DEADLINE, async {
        while watch.held().get(&0) != Some(&fence) {
            watch.changed().await.expect("the elector runs");
        }
    })
    .await;
    assert!(
        woken.is_ok(),
        "the renewal of the same partitions woke nobody (held now: {:?})",
        watch.held()
    );
    elector.shutdown().await.unwrap();
}
