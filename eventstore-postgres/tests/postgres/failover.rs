//! Fencing tokens across a failover: a primary and a streaming replica of the test's own, the
//! primary crashed (`-m immediate`) while leases change hands and fenced writes go in, the
//! replica promoted. The asynchronous replica is cut off first, so that the old primary grants
//! tokens it never receives: without the timeline in the tokens' high bits, the promoted server
//! would grant those tokens again. Every token granted after the promotion is larger than every token
//! granted before it, including grants the replica never received; an old holder's fenced
//! write is refused; an elector leads on the promoted server within a ttl and an interval.
//! With synchronous replication, nothing acknowledged is lost.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventstore::elector::LeaderElector;
use eventstore::{
    AppendCriteria, EventId, EventStorage, EventStorageError, EventStreamId, EventToStore, Fence,
    FencingToken, LeaseRequest, LeaseStatus,
};
use eventstore_postgres::{DatabaseInitMode, PostgresEventStorage};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::common;
use crate::throwaway_cluster::ThrowawayCluster;

const PREFIX: &str = "failover_";
const LEASES: [&str; 4] = ["l0", "l1", "l2", "l3"];
const TTL: Duration = Duration::from_millis(800);
/// Where the timeline sits in a token: every token of timeline 2 is at least this.
const SECOND_TIMELINE: u64 = 1 << 40;

async fn storage_on(cluster: &ThrowawayCluster) -> Arc<dyn EventStorage> {
    let storage = PostgresEventStorage::builder()
        .url(cluster.url())
        .prefix(PREFIX)
        .init_mode(DatabaseInitMode::Ensure)
        .max_connections(3)
        .acquire_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("a storage on the throwaway cluster");
    Arc::new(storage)
}

async fn admin(cluster: &ThrowawayCluster) -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .connect(&cluster.url())
        .await
        .expect("an admin connection")
}

/// Waits until the primary streams to one replica, in `sync_state` ("async" or "sync").
async fn replica_streaming(primary: &PgPool, sync_state: &str) {
    common::eventually(
        &format!("the replica to stream ({sync_state})"),
        Duration::from_secs(30),
        || async {
            let states: Vec<String> = sqlx::query_scalar(
                "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'",
            )
            .fetch_all(primary)
            .await
            .ok()?;
            (states == [sync_state]).then_some(())
        },
    )
    .await
}

/// What the writers had acknowledged when the primary went down.
#[derive(Default)]
struct Acknowledged {
    /// Every token a request answered with, by lease.
    tokens: Mutex<BTreeMap<String, Vec<FencingToken>>>,
    /// Every event a fenced append acknowledged.
    events: Mutex<Vec<EventId>>,
}

impl Acknowledged {
    fn max_token(&self) -> FencingToken {
        let tokens = self.tokens.lock().unwrap();
        tokens.values().flatten().copied().max().unwrap_or_default()
    }
}

/// Hands the leases from owner to owner (acquire, append fenced, release) until the storage
/// fails, recording what it acknowledged.
async fn hand_leases_around(
    storage: Arc<dyn EventStorage>,
    acknowledged: Arc<Acknowledged>,
    stop: Arc<AtomicBool>,
    writer: usize,
) {
    let stream = EventStreamId::new("failover", format!("writer-{writer}"));
    let mut round = 0u64;
    while !stop.load(Ordering::SeqCst) {
        round += 1;
        let lease = LEASES[(round as usize + writer) % LEASES.len()];
        let owner = format!("w{writer}-{round}");
        let Ok(answer) = storage
            .request_lease(LeaseRequest::new(lease, &owner, 0, TTL))
            .await
        else {
            return;
        };
        acknowledged
            .tokens
            .lock()
            .unwrap()
            .entry(lease.to_owned())
            .or_default()
            .push(answer.fencing_token);
        if answer.status != LeaseStatus::Standby {
            let fence = Fence::new(lease, answer.fencing_token);
            let event = EventToStore::new("Written", serde_json::json!({ "round": round }));
            match storage
                .append_fenced(&fence, AppendCriteria::none(), &stream, vec![event])
                .await
            {
                Ok(stored) => acknowledged
                    .events
                    .lock()
                    .unwrap()
                    .extend(stored.iter().map(|e| e.reference.id)),
                Err(EventStorageError::Fenced { .. }) => {}
                Err(_) => return,
            }
            if storage.release_lease(lease, &owner).await.is_err() {
                return;
            }
        }
    }
}

struct Failover {
    acknowledged: Arc<Acknowledged>,
    promoted: Arc<dyn EventStorage>,
    promoted_admin: PgPool,
    elector_token: FencingToken,
    /// An elector started on the promoted server as soon as it took writes.
    new_elector: LeaderElector,
    promoted_at: Instant,
    /// Acknowledged grants whose token the promoted server never had.
    lost_grants: usize,
    _clusters: (ThrowawayCluster, ThrowawayCluster),
}

/// Runs writers and an elector on the primary, crashes it mid-write, promotes the replica.
async fn fail_over(synchronous: bool) -> Option<Failover> {
    let primary = ThrowawayCluster::start_or_skip()?;
    let replica =
        tokio::task::block_in_place(|| primary.start_replica()).expect("a streaming replica");
    let primary_admin = admin(&primary).await;
    if synchronous {
        sqlx::query("ALTER SYSTEM SET synchronous_standby_names = '*'")
            .execute(&primary_admin)
            .await
            .unwrap();
        sqlx::query("SELECT pg_reload_conf()")
            .execute(&primary_admin)
            .await
            .unwrap();
    }
    replica_streaming(&primary_admin, if synchronous { "sync" } else { "async" }).await;

    let storage = storage_on(&primary).await;
    let elector = LeaderElector::builder(Arc::clone(&storage), "elected")
        .owner("old-leader")
        .ttl(TTL)
        .start()
        .expect("an elector");
    let mut watch = elector.watch();
    let elector_token = tokio::time::timeout(Duration::from_secs(10), watch.wait_for_leadership())
        .await
        .expect("the elector leads on the primary")
        .expect("the elector runs");

    let acknowledged = Arc::new(Acknowledged::default());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|writer| {
            tokio::spawn(hand_leases_around(
                Arc::clone(&storage),
                Arc::clone(&acknowledged),
                Arc::clone(&stop),
                writer,
            ))
        })
        .collect();
    common::eventually("writes to go in", Duration::from_secs(10), || async {
        (acknowledged.events.lock().unwrap().len() >= 50).then_some(())
    })
    .await;
    if !synchronous {
        // The replica stops receiving, as a lagging one would: what the primary grants from
        // now on never reaches it.
        let replica_admin = admin(&replica).await;
        sqlx::query("ALTER SYSTEM SET primary_conninfo = ''")
            .execute(&replica_admin)
            .await
            .unwrap();
        sqlx::query("SELECT pg_reload_conf()")
            .execute(&replica_admin)
            .await
            .unwrap();
        common::eventually(
            "the replica to stop receiving",
            Duration::from_secs(10),
            || async {
                let receiving: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM pg_stat_wal_receiver")
                        .fetch_one(&replica_admin)
                        .await
                        .ok()?;
                (receiving == 0).then_some(())
            },
        )
        .await;
        replica_admin.close().await;
        let received = acknowledged.events.lock().unwrap().len();
        common::eventually(
            "writes the replica never sees",
            Duration::from_secs(10),
            || async { (acknowledged.events.lock().unwrap().len() >= received + 50).then_some(()) },
        )
        .await;
    }

    // Crash while the writers write: some grants never reach an asynchronous replica.
    tokio::task::block_in_place(|| primary.crash()).expect("crashing the primary");
    stop.store(true, Ordering::SeqCst);
    for writer in writers {
        writer.await.unwrap();
    }
    elector.abort();
    primary_admin.close().await;
    tokio::task::block_in_place(|| replica.promote()).expect("promoting the replica");
    let promoted_at = Instant::now();

    let promoted = storage_on(&replica).await;
    let new_elector = LeaderElector::builder(Arc::clone(&promoted), "elected")
        .owner("new-leader")
        .ttl(TTL)
        .start()
        .expect("an elector");
    let promoted_admin = admin(&replica).await;
    let kept: BTreeMap<String, FencingToken> = promoted
        .get_leases()
        .await
        .unwrap()
        .into_iter()
        .map(|lease| (lease.lease_name, lease.fencing_token))
        .collect();
    let lost_grants = acknowledged
        .tokens
        .lock()
        .unwrap()
        .iter()
        .map(|(lease, granted)| {
            let kept = kept.get(lease).copied().unwrap_or_default();
            granted.iter().filter(|token| **token > kept).count()
        })
        .sum();
    Some(Failover {
        acknowledged,
        promoted,
        promoted_admin,
        elector_token,
        new_elector,
        promoted_at,
        lost_grants,
        _clusters: (primary, replica),
    })
}

/// The checks every failover passes, synchronous or not.
async fn assert_tokens_rise_fences_hold_and_electors_resume(failover: &Failover) {
    let before = failover
        .acknowledged
        .max_token()
        .max(failover.elector_token);
    assert!(
        before.0 < SECOND_TIMELINE,
        "the primary granted timeline-1 tokens: {before}"
    );

    // Every lease taken on the promoted server: after the replicated tenures expire.
    let mut after = BTreeMap::new();
    for lease in LEASES {
        let token = common::eventually(
            &format!("lease {lease} acquired on the promoted server"),
            Duration::from_secs(10),
            || async {
                let answer = failover
                    .promoted
                    .request_lease(LeaseRequest::new(lease, "new-holder", 0, TTL))
                    .await
                    .ok()?;
                (answer.status != LeaseStatus::Standby).then_some(answer.fencing_token)
            },
        )
        .await;
        assert!(
            token > before && token.0 > SECOND_TIMELINE,
            "{lease}: a token granted after the promotion ({token}) exceeds every token granted \
             before it ({before}), whatever the replica received"
        );
        after.insert(lease, token);
    }

    // An old holder's fence, at the highest token the old primary acknowledged, is refused.
    let tokens = failover.acknowledged.tokens.lock().unwrap().clone();
    for (lease, granted) in &tokens {
        let stale = Fence::new(lease.as_str(), *granted.iter().max().unwrap());
        let refused = failover
            .promoted
            .append_fenced(
                &stale,
                AppendCriteria::none(),
                &EventStreamId::new("failover", "zombie"),
                vec![EventToStore::new("Zombie", serde_json::json!({}))],
            )
            .await;
        assert!(
            matches!(refused, Err(EventStorageError::Fenced { .. })),
            "{lease}: the old holder's fence {stale:?} is refused after the failover: {refused:?}"
        );
    }

    // The elector started on the promoted server leads within a ttl and an interval of the
    // promotion, above the old token.
    let mut watch = failover.new_elector.watch();
    let token = tokio::time::timeout(TTL * 3, watch.wait_for_leadership())
        .await
        .expect("leading on the promoted server within the bound")
        .expect("the elector runs");
    let took = failover.promoted_at.elapsed();
    assert!(
        took <= TTL + TTL / 3 + Duration::from_millis(500),
        "the elector led {took:?} after the promotion"
    );
    assert!(
        token > failover.elector_token,
        "{token} > {}",
        failover.elector_token
    );
    eprintln!(
        "failover: highest token before {before}, after {after:?}; {} acknowledged grants the \
         promoted server never had; elector led {took:?} after the promotion with token {token}",
        failover.lost_grants
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_to_an_asynchronous_replica_every_token_exceeds_those_before() {
    let Some(failover) = fail_over(false).await else {
        return;
    };
    assert!(
        failover.lost_grants > 0,
        "grants the replica never received: without them this proves nothing"
    );
    assert_tokens_rise_fences_hold_and_electors_resume(&failover).await;
    failover.new_elector.shutdown().await.unwrap();
    failover.promoted.close().await.unwrap();
    failover.promoted_admin.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_to_a_synchronous_replica_nothing_acknowledged_is_lost() {
    let Some(failover) = fail_over(true).await else {
        return;
    };
    let events = failover.acknowledged.events.lock().unwrap().clone();
    for id in &events {
        let stored = failover
            .promoted
            .get_event_by_id(*id)
            .await
            .expect("get_event_by_id");
        assert!(
            stored.is_some(),
            "event {id}, acknowledged by the old primary, is on the synchronous replica"
        );
    }
    let leases = failover.promoted.get_leases().await.unwrap();
    let tokens = failover.acknowledged.tokens.lock().unwrap().clone();
    for (lease, granted) in &tokens {
        let kept = leases
            .iter()
            .find(|l| &l.lease_name == lease)
            .map(|l| l.fencing_token)
            .unwrap_or_default();
        let highest = *granted.iter().max().unwrap();
        assert!(
            kept >= highest,
            "{lease}: the synchronous replica has token {kept}, at least the acknowledged {highest}"
        );
    }
    eprintln!(
        "synchronous failover: {} acknowledged events all kept",
        events.len()
    );
    assert_tokens_rise_fences_hold_and_electors_resume(&failover).await;
    failover.new_elector.shutdown().await.unwrap();
    failover.promoted.close().await.unwrap();
    failover.promoted_admin.close().await;
}
