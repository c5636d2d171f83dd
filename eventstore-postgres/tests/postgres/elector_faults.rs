//! Leader electors on PostgreSQL when the push channel fails: killed listener connections and
//! a server crash cost pushed notices, never safety. The electors keep working by polling
//! (never two leaders at one instant on the caller's clock, fencing tokens never go down),
//! and once the listeners are back a release is pushed again: the standby takes over well
//! before it would have polled.

use std::sync::Arc;
use std::time::{Duration, Instant};

use eventstore::elector::{LeaderElector, Leadership, LeadershipWatch};
use eventstore::EventStorageExt;
use eventstore::{
    EventStorage, FencingToken, LeaseChange, LeaseChangeKind, LeaseNotice, LeaseScope,
};
use eventstore_postgres::PostgresEventStorage;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::common;
use crate::lease_changes::listener_pids;
use crate::throwaway_cluster::ThrowawayCluster;

const LEASE: &str = "projector";
const TTL: Duration = Duration::from_secs(6);
/// The electors' request interval: the default, a third of the ttl.
const INTERVAL: Duration = Duration::from_secs(2);
/// The soonest an elector polls again after a request: each wait is shortened by up to a
/// fifth of the interval.
const EARLIEST_POLL: Duration = Duration::from_millis(1600);
/// How soon the standby must lead after the leader starts shutting down: a push does it in
/// milliseconds, a poll could not before [`EARLIEST_POLL`].
const PUSHED_HANDOVER: Duration = Duration::from_secs(1);
/// The longest a first election, or listeners coming back, may take.
const SETTLE: Duration = Duration::from_secs(10);
const SAMPLE_EVERY: Duration = Duration::from_millis(2);
const KILL_EVERY: Duration = Duration::from_millis(50);
const KILLING: Duration = Duration::from_secs(1);

fn start_electors(storages: &[Arc<dyn EventStorage>]) -> Vec<LeaderElector> {
    storages
        .iter()
        .zip(["a", "b"])
        .map(|(storage, owner)| {
            LeaderElector::builder(Arc::clone(storage), LEASE)
                .owner(owner)
                .ttl(TTL)
                .start()
                .expect("starting an elector")
        })
        .collect()
}

/// Waits until exactly one elector leads and the other stands by; returns the leader's index.
async fn leader_and_standby(electors: &[LeaderElector], within: Duration) -> usize {
    common::eventually(
        "one elector to lead and the other to stand by",
        within,
        || async {
            let leading: Vec<usize> = (0..electors.len())
                .filter(|&i| electors[i].is_leader())
                .collect();
            match leading[..] {
                [leader]
                    if matches!(
                        electors[1 - leader].leadership(),
                        Leadership::Standby { .. }
                    ) =>
                {
                    Some(leader)
                }
                _ => None,
            }
        },
    )
    .await
}

/// Waits until `prefix` has a listener connection per storage, none of them `killed`.
async fn listeners_back(admin: &PgPool, prefix: &str, storages: usize, killed: &[i32]) {
    common::eventually(
        "every storage's listener to listen again",
        SETTLE,
        || async {
            // A server that just restarted may still drop a connection: ask again.
            let pids = listener_pids(admin, prefix).await.ok()?;
            (pids.len() == storages && pids.iter().all(|pid| !killed.contains(pid))).then_some(())
        },
    )
    .await
}

/// Terminates every listener connection of `prefix`; returns the pids terminated.
async fn kill_listeners(admin: &PgPool, prefix: &str) -> Vec<i32> {
    let mut killed = Vec::new();
    for pid in listener_pids(admin, prefix).await.unwrap() {
        let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(admin)
            .await
            .unwrap();
        if terminated {
            killed.push(pid);
        }
    }
    killed
}

/// What a [`Sampler`] saw.
#[derive(Debug, Default)]
pub(crate) struct Samples {
    pub(crate) count: u64,
    /// Samples in which nobody led.
    pub(crate) leaderless: u64,
    /// Each tenure seen, in order: its owner and token.
    pub(crate) tenures: Vec<(String, FencingToken)>,
}

impl Samples {
    fn take(&mut self, watches: &[LeadershipWatch]) {
        self.count += 1;
        let leaders: Vec<(String, FencingToken)> = watches
            .iter()
            .filter_map(|watch| Some((watch.owner().to_owned(), watch.token()?)))
            .collect();
        assert!(
            leaders.len() <= 1,
            "two leaders at one instant: {leaders:?}"
        );
        let Some(leader) = leaders.into_iter().next() else {
            self.leaderless += 1;
            return;
        };
        match self.tenures.last() {
            Some(last) if *last == leader => {}
            Some(last) => {
                assert!(
                    leader.1 > last.1,
                    "a new tenure {leader:?} without a higher token than {last:?}"
                );
                self.tenures.push(leader);
            }
            None => self.tenures.push(leader),
        }
    }
}

/// Samples the electors' leadership every few milliseconds on the caller's clock, on a task
/// of its own so that it goes on while the test waits for a server.
pub(crate) struct Sampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Samples>,
}

impl Sampler {
    pub(crate) fn start(electors: &[LeaderElector]) -> Self {
        let watches: Vec<LeadershipWatch> = electors.iter().map(LeaderElector::watch).collect();
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut samples = Samples::default();
            loop {
                samples.take(&watches);
                tokio::select! {
                    _ = &mut stopped => return samples,
                    () = tokio::time::sleep(SAMPLE_EVERY) => {}
                }
            }
        });
        Sampler { stop, task }
    }

    /// What was seen; panics as the sampler did if a sample broke a rule.
    pub(crate) async fn stop(self) -> Samples {
        let _ = self.stop.send(());
        match self.task.await {
            Ok(samples) => samples,
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }
}

/// Shuts the leader down and checks that the standby took over by push; returns how long
/// that took.
///
/// The standby is first made to ask (a new priority is sent at once) and the test waits to
/// hear of that request, pushed: its next poll is then at least [`EARLIEST_POLL`] away, so
/// leading before that proves the release reached it as a push.
async fn hand_over_by_push(
    mut electors: Vec<LeaderElector>,
    leader: usize,
    storages: &[Arc<dyn EventStorage>],
) -> Duration {
    let leader = electors.swap_remove(leader);
    let standby = electors.pop().expect("two electors");
    let standby_storage = if leader.owner() == "a" {
        &storages[1]
    } else {
        &storages[0]
    };
    let old_token = leader.token().expect("the leader leads");
    let mut changes = standby_storage
        .subscribe_lease_changes(LeaseScope::lease(LEASE))
        .await
        .unwrap();

    let asked = Instant::now();
    standby.set_priority(-1);
    let heard = tokio::time::timeout(EARLIEST_POLL - PUSHED_HANDOVER, async {
        while let Some(notice) = changes.next().await {
            if let LeaseNotice::Changed(LeaseChange {
                kind:
                    LeaseChangeKind::ContenderJoined {
                        owner,
                        priority: -1,
                    },
                ..
            }) = notice
            {
                if owner == standby.owner() {
                    return;
                }
            }
        }
        panic!("the subscription ended");
    })
    .await;
    assert!(heard.is_ok(), "the standby's new priority was not pushed");

    let shutting_down = Instant::now();
    leader.shutdown().await.expect("the leader releases");
    let new_token = standby
        .watch()
        .wait_for_leadership_within(PUSHED_HANDOVER)
        .await
        .expect("the standby leads within a second of the leader's shutdown");
    let took = shutting_down.elapsed();
    assert!(
        asked.elapsed() < EARLIEST_POLL,
        "the standby led {:?} after it last asked: it may have polled",
        asked.elapsed()
    );
    assert!(new_token > old_token, "{new_token} after {old_token}");
    standby.shutdown().await.expect("the new leader releases");
    took
}

#[tokio::test]
async fn electors_keep_leading_while_the_listener_is_killed_and_hand_over_by_push_again() {
    let Some(admin) = common::try_pool().await else {
        return;
    };
    let prefix = common::unique_prefix();
    // Two processes: each a storage with its own pool and listener.
    let mut storages: Vec<Arc<dyn EventStorage>> = Vec::new();
    for _ in 0..2 {
        storages.push(Arc::new(common::storage_on(&prefix).await));
    }
    let electors = start_electors(&storages);
    let leader = leader_and_standby(&electors, SETTLE).await;
    let tenure = (
        electors[leader].owner().to_owned(),
        electors[leader].token().expect("the leader's token"),
    );
    let sampler = Sampler::start(&electors);

    // Kill every listener again and again, so that notices are lost and each listener
    // reconnects, says it missed some, and is killed again.
    let mut killed = Vec::new();
    let mut rounds = 0;
    let killing = Instant::now();
    while killing.elapsed() < KILLING {
        killed.extend(kill_listeners(&admin, &prefix).await);
        rounds += 1;
        tokio::time::sleep(KILL_EVERY).await;
    }
    assert!(killed.len() >= 2, "too few listeners killed: {killed:?}");
    let back = Instant::now();
    listeners_back(&admin, &prefix, 2, &killed).await;
    let back = back.elapsed();
    let samples = sampler.stop().await;
    assert_eq!(samples.leaderless, 0, "the leader stopped leading");
    assert_eq!(
        samples.tenures,
        std::slice::from_ref(&tenure),
        "the leader and its token changed"
    );

    let handover = hand_over_by_push(electors, leader, &storages).await;
    eprintln!(
        "killed {} listener connections in {rounds} rounds over {KILLING:?}; listeners back \
         {back:?} later; {} samples, {} led throughout with {}; pushed handover in {handover:?}",
        killed.len(),
        samples.count,
        tenure.0,
        tenure.1,
    );
    for storage in storages {
        storage.close().await.unwrap();
    }
}

/// A storage on the throwaway cluster; a request fails within a second while it is down.
async fn storage_on_cluster(cluster: &ThrowawayCluster) -> Arc<dyn EventStorage> {
    let storage = PostgresEventStorage::builder()
        .url(cluster.url())
        .prefix("electors_")
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("a storage on the throwaway cluster");
    Arc::new(storage)
}

// Two workers: the cluster is stopped and started with blocking commands, and the electors
// and the sampler must run meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn electors_resume_after_a_server_restart_and_hand_over_by_push_again() {
    let Some(cluster) = ThrowawayCluster::start_or_skip() else {
        return;
    };
    let mut storages = Vec::new();
    for _ in 0..2 {
        storages.push(storage_on_cluster(&cluster).await);
    }
    let electors = start_electors(&storages);
    leader_and_standby(&electors, SETTLE).await;
    let sampler = Sampler::start(&electors);

    let crashed = Instant::now();
    tokio::task::block_in_place(|| cluster.crash()).expect("crashing the cluster");
    // Down until nobody leads: the leader's requests fail, and its deadline passes by a ttl
    // after its last confirmed one at the latest.
    common::eventually(
        "no elector to lead while the server is down",
        TTL,
        || async { electors.iter().all(|e| !e.is_leader()).then_some(()) },
    )
    .await;
    let down = crashed.elapsed();
    tokio::task::block_in_place(|| cluster.pg_ctl_start()).expect("starting the cluster again");
    let restarted = Instant::now();

    // Polling alone brings a leader back: the listeners may still be reconnecting.
    let leader = leader_and_standby(&electors, TTL + INTERVAL).await;
    let resumed = restarted.elapsed();
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&cluster.url())
        .await
        .expect("an admin connection to the restarted cluster");
    listeners_back(&admin, "electors_", 2, &[]).await;
    let listening = restarted.elapsed();
    let samples = sampler.stop().await;
    assert!(samples.leaderless > 0, "the outage went unnoticed");

    let handover = hand_over_by_push(electors, leader, &storages).await;
    eprintln!(
        "down {down:?} until nobody led; a leader {resumed:?} and both listeners {listening:?} \
         after the restart; {} samples, {} without a leader, tenures {:?}; pushed handover in \
         {handover:?}",
        samples.count, samples.leaderless, samples.tenures,
    );
    for storage in storages {
        storage.close().await.unwrap();
    }
    admin.close().await;
}
