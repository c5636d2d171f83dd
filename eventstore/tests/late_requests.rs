//! Electors shut down while a lease request is on its way: a request already sent reaches the
//! storage whether or not its caller still waits (a server runs what it received). The
//! shutdown's release must not overtake it, or the late request takes back what was released
//! and the lease stays with an elector that has stopped until its ttl runs out. And a step-down
//! acknowledged while a renewal is on its way, whose answer says nobody asks any more, hands
//! nothing over.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use eventstore::decorator::Decorator;
use eventstore::elector::{LeaderElector, Leadership};
use eventstore::partitions::PartitionElector;
use eventstore::{
    Capability, EventStorage, FencingToken, Lease, LeaseRequest, LeaseResponse, LeaseSelection,
    ReleaseOutcome, StorageResult,
};
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::support::{eventually, DEADLINE};

const TTL: Duration = Duration::from_secs(3);

/// How late a request arrives once the delay is on: long enough that a shutdown's release
/// sent meanwhile would arrive first.
const LATE: Duration = Duration::from_millis(300);

/// A storage whose lease requests, once [`LateRequests::delay`] is on, arrive late: each is
/// sent on a task of its own that carries on when its caller gives up waiting. Releases and
/// everything else arrive at once. It offers leases and nothing pushed.
#[derive(Debug)]
struct LateRequests {
    inner: Arc<MemoryEventStorage>,
    delay_millis: AtomicU64,
    /// How long a read of the leases takes, on the caller's task.
    read_delay_millis: AtomicU64,
    /// How long a release takes, on the caller's task.
    release_delay_millis: AtomicU64,
    /// Reads of the leases begun and not yet answered.
    reads_under_way: AtomicUsize,
    on_their_way: Arc<AtomicUsize>,
    arrived: Arc<AtomicUsize>,
}

impl LateRequests {
    fn new() -> Self {
        LateRequests {
            inner: Arc::new(MemoryEventStorage::new()),
            delay_millis: AtomicU64::new(0),
            read_delay_millis: AtomicU64::new(0),
            release_delay_millis: AtomicU64::new(0),
            reads_under_way: AtomicUsize::new(0),
            on_their_way: Arc::new(AtomicUsize::new(0)),
            arrived: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn delay(&self, delay: Duration) {
        let millis = u64::try_from(delay.as_millis()).expect("a short delay");
        self.delay_millis.store(millis, Ordering::SeqCst);
    }

    /// Requests sent and not yet arrived.
    fn on_their_way(&self) -> usize {
        self.on_their_way.load(Ordering::SeqCst)
    }

    /// Requests that have arrived so far.
    fn arrived(&self) -> usize {
        self.arrived.load(Ordering::SeqCst)
    }

    /// Sends `call` to the inner storage after the delay, on a task that outlives its caller.
    async fn late<T: Send + 'static>(
        &self,
        call: impl FnOnce(Arc<MemoryEventStorage>) -> futures_util::future::BoxFuture<'static, T>
            + Send
            + 'static,
    ) -> T {
        let delay = Duration::from_millis(self.delay_millis.load(Ordering::SeqCst));
        let inner = Arc::clone(&self.inner);
        let on_their_way = Arc::clone(&self.on_their_way);
        let arrived = Arc::clone(&self.arrived);
        on_their_way.fetch_add(1, Ordering::SeqCst);
        let sent = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let answer = call(inner).await;
            arrived.fetch_add(1, Ordering::SeqCst);
            on_their_way.fetch_sub(1, Ordering::SeqCst);
            answer
        });
        sent.await.expect("the request's task")
    }

    /// Waits the read delay, counted as a read under way meanwhile.
    async fn read_late(&self) {
        let delay = self.read_delay_millis.load(Ordering::SeqCst);
        if delay > 0 {
            self.reads_under_way.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(delay)).await;
            self.reads_under_way.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The leases held when asked: not expired on the storage's clock.
    async fn held(&self) -> Vec<Lease> {
        let now = self.inner.storage_time().await.unwrap();
        let leases = self.inner.get_leases().await.unwrap();
        leases
            .into_iter()
            .filter(|lease| !lease.is_expired_at(now))
            .collect()
    }
}

#[async_trait]
impl Decorator for LateRequests {
    type Inner = MemoryEventStorage;

    fn inner(&self) -> &MemoryEventStorage {
        &self.inner
    }

    fn name(&self) -> &str {
        "late-requests"
    }

    fn supports(&self, capability: Capability) -> bool {
        capability == Capability::Lease
    }

    async fn request_lease(&self, request: LeaseRequest) -> StorageResult<LeaseResponse> {
        self.late(|inner| Box::pin(async move { inner.request_lease(request).await }))
            .await
    }

    async fn request_leases(
        &self,
        requests: Vec<LeaseRequest>,
    ) -> StorageResult<Vec<LeaseResponse>> {
        self.late(|inner| Box::pin(async move { inner.request_leases(requests).await }))
            .await
    }

    async fn release_leases(
        &self,
        lease_names: &[String],
        owner: &str,
    ) -> StorageResult<Vec<ReleaseOutcome>> {
        let delay = self.release_delay_millis.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        self.inner.release_leases(lease_names, owner).await
    }

    async fn get_leases(&self) -> StorageResult<Vec<Lease>> {
        self.read_late().await;
        self.inner.get_leases().await
    }

    async fn list_leases(&self, selection: LeaseSelection) -> StorageResult<Vec<Lease>> {
        self.read_late().await;
        self.inner.list_leases(selection).await
    }
}

/// Waits until a request is on its way, then shuts down with `shutdown`; once the request
/// has arrived, nothing may be held.
async fn shut_down_while_a_request_is_on_its_way<F>(storage: &LateRequests, shutdown: F)
where
    F: std::future::Future<Output = StorageResult<()>>,
{
    storage.delay(LATE);
    eventually("a request on its way", || async {
        storage.on_their_way() > 0
    })
    .await;
    shutdown.await.expect("the shutdown's release");
    eventually("the late request to arrive", || async {
        storage.on_their_way() == 0
    })
    .await;
    let held = storage.held().await;
    assert!(
        held.is_empty(),
        "held after the shutdown, once the request on its way arrived: {held:?}"
    );
}

/// Owner `a`'s elector of the lease `jobs` on `storage`, asking every 200 ms.
fn elector_a(storage: &Arc<LateRequests>) -> LeaderElector {
    LeaderElector::builder(storage.clone(), "jobs")
        .owner("a")
        .ttl(TTL)
        .request_interval(Duration::from_millis(200))
        .start()
        .unwrap()
}

#[tokio::test]
async fn a_leader_shut_down_while_its_renewal_is_on_its_way_leaves_the_lease_released() {
    let storage = Arc::new(LateRequests::new());
    let elector = elector_a(&storage);
    tokio::time::timeout(DEADLINE, elector.watch().wait_for_leadership())
        .await
        .expect("leads in time")
        .expect("the elector runs");
    shut_down_while_a_request_is_on_its_way(&storage, elector.shutdown()).await;
}

/// Member `a` of group `work` with `partitions` partitions, once it holds them all.
async fn member_holding_every_partition(
    storage: &Arc<LateRequests>,
    partitions: u32,
    ttl: Duration,
    interval_millis: u64,
) -> PartitionElector {
    let member = PartitionElector::builder(storage.clone(), "work", partitions)
        .owner("a")
        .ttl(ttl)
        .request_interval(Duration::from_millis(interval_millis))
        .start()
        .expect("timings the builder accepts");
    let watch = member.watch();
    eventually("the member to hold every partition", || async {
        watch.held().len() == partitions as usize
    })
    .await;
    member
}

#[tokio::test]
async fn a_member_shut_down_while_its_round_is_on_its_way_leaves_every_lease_released() {
    let storage = Arc::new(LateRequests::new());
    let member = member_holding_every_partition(&storage, 4, TTL, 200).await;
    shut_down_while_a_request_is_on_its_way(&storage, member.shutdown()).await;
}

/// A higher-priority contender asks the leader to step down; the work acknowledges while a
/// renewal is on its way, and the contender withdraws before that renewal arrives, so its
/// answer is a plain `Leader`. The storage no longer asks for a step-down, so the elector
/// hands nothing over: a release would only leave the lease to be taken again.
#[tokio::test]
async fn a_step_down_acknowledged_after_nobody_asks_for_it_any_more_hands_nothing_over() {
    let storage = Arc::new(LateRequests::new());
    // Requests are timed from their sending: an interval longer than the delay below leaves a
    // time with no request on its way after each answer.
    let elector = LeaderElector::builder(storage.clone(), "jobs")
        .owner("a")
        .ttl(TTL)
        .request_interval(Duration::from_millis(1_500))
        .start()
        .unwrap();
    let mut watch = elector.watch();
    let token = tokio::time::timeout(DEADLINE, watch.wait_for_leadership())
        .await
        .expect("leads in time")
        .expect("the elector runs");
    storage
        .inner
        .request_lease(LeaseRequest::new("jobs", "b", 10, TTL))
        .await
        .unwrap();
    eventually("the step-down request", || async {
        watch.current() == Leadership::StepDownRequested { token }
    })
    .await;

    // Long enough for the withdrawal to arrive first, short of the request's own timeout.
    storage.delay(Duration::from_secs(1));
    eventually("a renewal on its way", || async {
        storage.on_their_way() > 0
    })
    .await;
    storage.inner.release_lease("jobs", "b").await.unwrap();
    watch.acknowledge_step_down(token);
    eventually("the renewal to arrive", || async {
        storage.on_their_way() == 0
    })
    .await;
    storage.delay(Duration::ZERO);
    // The acknowledgement is taken before the next request: once that one has arrived, a
    // handover would have released the lease.
    let arrived = storage.arrived();
    eventually("the next renewal", || async { storage.arrived() > arrived }).await;
    let held: Vec<(String, FencingToken)> = storage
        .held()
        .await
        .into_iter()
        .map(|lease| (lease.owner, lease.fencing_token))
        .collect();
    assert_eq!(held, [("a".to_owned(), token)], "the lease was handed over");
    assert_eq!(watch.current(), Leadership::Leader { token });
    elector.shutdown().await.unwrap();
}

/// A member shut down while its round reads the group: the shutdown comes before the round's
/// batch is sent, so no batch may follow. One sent after the read (the read and the batch each
/// within its own timeout) would outlast the shutdown's wait for requests under way, arrive
/// after the releases, and take the partitions and the seat back for a member that has
/// stopped, until their ttl ran out.
#[tokio::test]
async fn a_member_shut_down_while_its_round_reads_sends_no_batch_after_its_releases() {
    let storage = Arc::new(LateRequests::new());
    let ttl = Duration::from_secs(1);
    let member = member_holding_every_partition(&storage, 4, ttl, 300).await;
    // Past the looks of the first rounds: the next round is a renewal.
    tokio::time::sleep(Duration::from_millis(700)).await;
    // Reads take 250 ms (within their 300 ms timeout), batches 850 ms to arrive (within
    // their 950 ms timeout): both within what the member itself allows them.
    storage.read_delay_millis.store(250, Ordering::SeqCst);
    storage.delay(Duration::from_millis(850));
    eventually("a round reading the group", || async {
        storage.reads_under_way.load(Ordering::SeqCst) > 0
    })
    .await;
    let arrived = storage.arrived();
    let began = std::time::Instant::now();
    member.shutdown().await.expect("the shutdown's releases");
    let shutdown_took = began.elapsed();
    eventually("every request on its way to arrive", || async {
        storage.on_their_way() == 0
    })
    .await;
    let sent_after_shutdown = storage.arrived() - arrived;
    let held: Vec<(String, String)> = storage
        .held()
        .await
        .into_iter()
        .map(|lease| (lease.lease_name, lease.owner))
        .collect();
    assert!(
        held.is_empty(),
        "held after the shutdown returned, by a batch the round sent after the shutdown \
         was asked for ({sent_after_shutdown} batch(es) arrived after it; the shutdown took \
         {shutdown_took:?}): {held:?}"
    );
}

/// Timings the builder accepts (a request interval of 0.8 ttl leaves the default safety
/// margin room), and a storage whose lease requests are answered at once but whose reads of
/// the group hang. A round that gave its read up only after a request interval sent the
/// renewal up to two intervals after the last one, past the deadline and the leases' ttl: the
/// member lost every partition while its every lease request was answered at once.
#[tokio::test]
async fn a_hung_read_of_the_group_does_not_cost_the_partitions_a_member_renews() {
    let storage = Arc::new(LateRequests::new());
    let ttl = Duration::from_secs(1);
    let member = member_holding_every_partition(&storage, 2, ttl, 800).await;
    let watch = member.watch();
    // Past the looks of the first rounds: rounds are renewals now.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(watch.held().len(), 2);
    // Every read of the group hangs from now on (each is given up after an interval).
    storage.read_delay_millis.store(60_000, Ordering::SeqCst);
    let began = std::time::Instant::now();
    let (mut lapsed_at, mut expired_at) = (None, None);
    while began.elapsed() < Duration::from_secs(3) {
        if lapsed_at.is_none() && watch.held().len() < 2 {
            lapsed_at = Some(began.elapsed());
        }
        let live_partitions = storage
            .held()
            .await
            .iter()
            .filter(|lease| !lease.lease_name.contains("seats"))
            .count();
        if expired_at.is_none() && live_partitions < 2 {
            expired_at = Some(began.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        (lapsed_at, expired_at),
        (None, None),
        "(when the member stopped counting its partitions, when their leases expired in the \
         storage) while every lease request was answered at once and only reads of the group \
         hung"
    );
    member.abort();
}

/// The same for a release: a member hands half its partitions over to a newcomer while every
/// release hangs, and lease requests and reads are answered at once. A release given up only
/// after a ttl held the round up past the deadline of the partitions the member keeps: it lost
/// them too, though nothing but the release hung; and a round that renewed, then hung in its
/// release of the handed-over partitions, lapsed at the deadline it had just renewed (the
/// wait watched the deadline as it was before the round).
#[tokio::test]
async fn a_hung_release_does_not_cost_the_partitions_a_member_keeps() {
    let storage = Arc::new(LateRequests::new());
    let ttl = Duration::from_secs(1);
    let member = member_holding_every_partition(&storage, 4, ttl, 800).await;
    let watch = member.watch();
    storage.release_delay_millis.store(60_000, Ordering::SeqCst);
    let newcomer = PartitionElector::builder(storage.clone(), "work", 4)
        .owner("b")
        .ttl(ttl)
        .request_interval(Duration::from_millis(800))
        .start()
        .expect("timings the builder accepts");
    eventually("the member to hand two partitions over", || async {
        watch.held().len() == 2 && watch.handing_over().is_empty()
    })
    .await;
    let kept: Vec<u32> = watch.held().into_keys().collect();
    let began = std::time::Instant::now();
    let mut lost_at = None;
    while began.elapsed() < Duration::from_secs(3) {
        let held: Vec<u32> = watch.held().into_keys().collect();
        if lost_at.is_none() && kept.iter().any(|partition| !held.contains(partition)) {
            lost_at = Some((began.elapsed(), held));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        lost_at, None,
        "(when, and what was still held) the member stopped counting on a partition it kept \
         {kept:?} while only its release of the others hung"
    );
    newcomer.abort();
    member.abort();
}

/// The leader's variant: timings the builder accepts (interval 0.8 ttl), and every request
/// answered 100 ms after it is sent, within what the timings leave (ttl - margin - interval =
/// 150 ms). Timed from the answer, requests went out interval + latency apart, and each answer
/// came after the deadline the one before confirmed: the only contender lost its leadership
/// again and again though every request it sent was answered `Leader`.
#[tokio::test]
async fn a_slow_but_answered_renewal_does_not_cost_the_leadership() {
    let storage = Arc::new(LateRequests::new());
    let elector = LeaderElector::builder(storage.clone(), "jobs")
        .owner("a")
        .ttl(Duration::from_secs(1))
        .request_interval(Duration::from_millis(800))
        .start()
        .expect("timings the builder accepts");
    let watch = elector.watch();
    tokio::time::timeout(DEADLINE, elector.watch().wait_for_leadership())
        .await
        .expect("leads in time")
        .expect("the elector runs");
    storage.delay(Duration::from_millis(100));
    let began = std::time::Instant::now();
    let mut lapses = 0;
    let mut leading = true;
    while began.elapsed() < Duration::from_secs(4) {
        let now_leading = watch.is_leader();
        if leading && !now_leading {
            lapses += 1;
        }
        leading = now_leading;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        lapses, 0,
        "times the only contender stopped leading in 4 s while each request was answered \
         within 100 ms"
    );
    elector.abort();
}
