//! Contention between storages with separate pools, as between processes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventstore::{
    AppendCriteria, EventFilter, EventStorage, EventStorageError, EventStreamId, EventToStore,
    FencingToken, LeaseRequest, LeaseStatus,
};
use eventstore_postgres::PostgresEventStorage;
use eventstore_tck::history::{CheckOptions, History, Recorder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::sync::Barrier;

use crate::common;

/// How far apart the server's judgement of expiry and the recorded instants may be.
const TOLERANCE_MS: u64 = 5;

async fn two_pools() -> Option<[Arc<PostgresEventStorage>; 2]> {
    common::try_pool().await?;
    let prefix = common::unique_prefix();
    Some([
        Arc::new(common::storage_on(&prefix).await),
        Arc::new(common::storage_on(&prefix).await),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn separate_pools_elect_exactly_one_leader_per_tenure() {
    const CONTENDERS: usize = 8;
    let Some(storages) = two_pools().await else {
        return;
    };
    for round in 1..=5u64 {
        let barrier = Arc::new(Barrier::new(CONTENDERS));
        let tasks: Vec<_> = (0..CONTENDERS)
            .map(|n| {
                let storage = Arc::clone(&storages[n % 2]);
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    let owner = format!("node-{n}");
                    barrier.wait().await;
                    let response = storage
                        .request_lease(LeaseRequest::new(
                            "orders",
                            &owner,
                            0,
                            Duration::from_secs(60),
                        ))
                        .await
                        .expect("request_lease");
                    (owner, response)
                })
            })
            .collect();
        let mut leaders = Vec::new();
        let mut answers = Vec::new();
        for task in tasks {
            let (owner, response) = task.await.unwrap();
            if response.status == LeaseStatus::Leader {
                leaders.push(owner.clone());
            }
            answers.push((owner, response));
        }
        assert_eq!(leaders.len(), 1, "round {round}: {answers:?}");
        for (_, response) in &answers {
            assert_eq!(
                response.fencing_token,
                FencingToken(round),
                "round {round}: {answers:?}"
            );
            assert_eq!(
                response.current_owner, leaders[0],
                "round {round}: {answers:?}"
            );
        }
        storages[0]
            .release_lease("orders", &leaders[0])
            .await
            .unwrap();
    }
    for storage in storages {
        storage.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_batches_in_opposite_orders_never_deadlock() {
    let Some(storages) = two_pools().await else {
        return;
    };
    let names: Vec<String> = (0..20).map(|n| format!("partition-{n:02}")).collect();
    let tasks: Vec<_> = (0..6)
        .map(|n| {
            let storage = Arc::clone(&storages[n % 2]);
            let mut names = names.clone();
            if n % 2 == 1 {
                names.reverse();
            }
            tokio::spawn(async move {
                for _ in 0..10 {
                    let requests = names
                        .iter()
                        .map(|name| {
                            LeaseRequest::new(name, format!("node-{n}"), 0, Duration::from_secs(60))
                        })
                        .collect();
                    let responses = storage.request_leases(requests).await.expect("a batch");
                    assert_eq!(responses.len(), 20);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let leases = storages[0].get_leases().await.unwrap();
    assert_eq!(leases.len(), 20);
    assert!(
        leases
            .iter()
            .all(|lease| lease.fencing_token == FencingToken(1)),
        "{leases:?}"
    );
    for storage in storages {
        storage.close().await.unwrap();
    }
}

/// Six instances on two pools send batches for the same twelve leases, each request at a
/// random priority and now and then with a ttl that lapses before the next batch, and release
/// a lease they lead now and then: plain renewals and refreshes (no lease lock) run beside
/// takeovers, step-downs and registrations (under the locks). No batch fails (no deadlock
/// reaches a caller), every answer names one holder per lease and token, and the recorded
/// history of every lease is linearizable against the lease rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mixed_batches_never_deadlock_and_name_one_holder_per_tenure() {
    let Some(storages) = two_pools().await else {
        return;
    };
    let history = History::new();
    let recorders = storages
        .clone()
        .map(|storage| Arc::new(Recorder::with_history(storage, history.clone())));
    let names: Vec<String> = (0..12).map(|n| format!("partition-{n:02}")).collect();
    let seed: u64 = rand::random();
    println!("seed {seed}");
    let tasks: Vec<_> = (0..6u64)
        .map(|n| {
            let storage = Arc::clone(&recorders[n as usize % 2]);
            let names = names.clone();
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed.wrapping_add(n));
                let owner = format!("node-{n}");
                let mut answered = Vec::new();
                for _ in 0..15 {
                    let requests = names
                        .iter()
                        .map(|name| {
                            let ttl = if rng.gen_bool(0.2) {
                                Duration::from_millis(20)
                            } else {
                                Duration::from_secs(60)
                            };
                            LeaseRequest::new(name, &owner, rng.gen_range(0..2), ttl)
                        })
                        .collect();
                    let responses = storage.request_leases(requests).await.expect("a batch");
                    let led = names
                        .iter()
                        .zip(&responses)
                        .filter(|(_, response)| response.status.is_leader())
                        .map(|(name, _)| name.clone())
                        .collect::<Vec<_>>();
                    for (name, response) in names.iter().zip(responses) {
                        answered.push((
                            name.clone(),
                            response.fencing_token,
                            response.current_owner,
                        ));
                    }
                    if let Some(name) = led.first().filter(|_| rng.gen_bool(0.3)) {
                        storage
                            .release_lease(name, &owner)
                            .await
                            .expect("a release");
                    }
                    tokio::time::sleep(Duration::from_millis(rng.gen_range(0..25))).await;
                }
                answered
            })
        })
        .collect();
    let mut holders: HashMap<(String, FencingToken), String> = HashMap::new();
    for task in tasks {
        for (name, token, owner) in task.await.unwrap() {
            let holder = holders
                .entry((name.clone(), token))
                .or_insert(owner.clone());
            assert_eq!(*holder, owner, "{name} under token {token} (seed {seed})");
        }
    }
    let tenures = holders.len();
    assert!(
        tenures > names.len(),
        "leases changed hands ({tenures} tenures of {} leases, seed {seed})",
        names.len()
    );
    // The server judges expiry by `now()` at its transaction's start, which may precede the
    // moment a request waiting on a lease lock takes effect.
    let checked = CheckOptions::new()
        .tolerance(Duration::from_millis(TOLERANCE_MS))
        .check(&history);
    match checked {
        Ok(summary) => println!("linearizable: {summary:?}"),
        Err(failure) => panic!("{failure}(seed {seed})"),
    }
    for storage in storages {
        storage.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conditional_appends_from_separate_pools_have_one_winner_per_boundary() {
    let Some(storages) = two_pools().await else {
        return;
    };
    let stream = EventStreamId::for_context("accounts");
    for round in 0..10 {
        let head = storages[0].head(&stream).await.unwrap();
        let barrier = Arc::new(Barrier::new(6));
        let tasks: Vec<_> = (0..6)
            .map(|n| {
                let storage = Arc::clone(&storages[n % 2]);
                let stream = stream.clone();
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    storage
                        .append(
                            AppendCriteria::of(EventFilter::match_all(), head),
                            &stream,
                            vec![EventToStore::new(
                                "Debited",
                                json!({"round": round, "by": n}),
                            )],
                        )
                        .await
                })
            })
            .collect();
        let mut winners = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(stored) => {
                    assert_eq!(stored.len(), 1);
                    winners += 1;
                }
                Err(EventStorageError::OptimisticLock { .. }) => {}
                Err(other) => panic!("round {round}: {other}"),
            }
        }
        assert_eq!(winners, 1, "round {round}");
    }
    for storage in storages {
        storage.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_conditional_append_never_misses_a_racing_unconditional_one() {
    const WINS_EACH: usize = 5;
    let Some(storages) = two_pools().await else {
        return;
    };
    let stream = EventStreamId::for_context("ledger");
    let stop = Arc::new(AtomicBool::new(false));
    let plain: Vec<_> = (0..3)
        .map(|n| {
            let (storage, stream, stop) =
                (Arc::clone(&storages[0]), stream.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut written = 0;
                while !stop.load(Ordering::Relaxed) {
                    let event = EventToStore::new("Plain", json!({"writer": n, "i": written}));
                    storage
                        .append(AppendCriteria::none(), &stream, vec![event])
                        .await
                        .unwrap();
                    written += 1;
                }
                written
            })
        })
        .collect();
    let guarded: Vec<_> = (0..3)
        .map(|n| {
            let (storage, stream) = (Arc::clone(&storages[1]), stream.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                let mut won = Vec::new();
                while won.len() < WINS_EACH {
                    assert!(
                        started.elapsed() < Duration::from_secs(30),
                        "too few conditional appends won"
                    );
                    let last = storage.head(&stream).await.unwrap();
                    let event =
                        EventToStore::new("Guarded", json!({"writer": n, "won": won.len()}));
                    let criteria = AppendCriteria::of(EventFilter::match_all(), last);
                    match storage.append(criteria, &stream, vec![event]).await {
                        Ok(stored) => won.push((last, stored[0].reference)),
                        Err(EventStorageError::OptimisticLock { .. }) => {}
                        Err(other) => panic!("{other}"),
                    }
                }
                won
            })
        })
        .collect();
    let mut won = Vec::new();
    for task in guarded {
        won.extend(task.await.unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    let mut plain_count = 0;
    for task in plain {
        plain_count += task.await.unwrap();
    }
    assert!(plain_count > 0);

    let everything = storages[0]
        .query(
            &EventFilter::match_all(),
            &stream,
            None,
            eventstore::Limit::none(),
            eventstore::Direction::Forward,
        )
        .await
        .unwrap();
    assert_eq!(everything.len(), plain_count + won.len());
    for (expected_last, reference) in won {
        let index = everything
            .iter()
            .position(|e| e.reference == reference)
            .unwrap();
        let predecessor = index.checked_sub(1).map(|i| everything[i].reference);
        assert_eq!(
            predecessor, expected_last,
            "a conditional append succeeded although an event lies between its expected last and it"
        );
    }
    for storage in storages {
        storage.close().await.unwrap();
    }
}
