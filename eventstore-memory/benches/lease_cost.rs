//! The cost of a lease renewal and of a standby request on the memory backend, with 1, 100
//! and 10,000 leases in the storage and 1 and 100 contenders on the lease requested.
//!
//! Run: `cargo bench -p eventstore-memory --bench lease_cost`
//!
//! Every configuration is measured in each of several interleaved rounds, so that noise from
//! other work on the machine falls on all of them alike; the median round is reported.

use std::time::{Duration, Instant};

use eventstore_api::{EventStorage, LeaseRequest, LeaseStatus};
use eventstore_memory::MemoryEventStorage;

const TTL: Duration = Duration::from_secs(3600);
const ROUNDS: usize = 7;
const OPS_PER_ROUND: u32 = 20_000;
const LEASE: &str = "target";

struct Setup {
    leases: usize,
    contenders: usize,
    storage: MemoryEventStorage,
}

async fn setup(leases: usize, contenders: usize) -> Setup {
    let storage = MemoryEventStorage::new();
    for i in 1..leases {
        let request = LeaseRequest::new(format!("other-{i}"), "someone", 0, TTL);
        storage.request_lease(request).await.unwrap();
    }
    // The holder has the highest priority, so its renewals are plain `Leader` answers.
    let holder = LeaseRequest::new(LEASE, "holder", 1_000, TTL);
    assert_eq!(
        storage.request_lease(holder).await.unwrap().status,
        LeaseStatus::Leader
    );
    for i in 1..contenders {
        let request = LeaseRequest::new(LEASE, format!("standby-{i}"), 0, TTL);
        storage.request_lease(request).await.unwrap();
    }
    Setup {
        leases,
        contenders,
        storage,
    }
}

async fn time_requests(storage: &MemoryEventStorage, owner: &str, expected: LeaseStatus) -> f64 {
    let request = LeaseRequest::new(LEASE, owner, if owner == "holder" { 1_000 } else { 0 }, TTL);
    let start = Instant::now();
    for _ in 0..OPS_PER_ROUND {
        let response = storage.request_lease(request.clone()).await.unwrap();
        debug_assert_eq!(response.status, expected);
    }
    start.elapsed().as_nanos() as f64 / f64::from(OPS_PER_ROUND)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut setups = Vec::new();
    for leases in [1, 100, 10_000] {
        for contenders in [1, 100] {
            setups.push(setup(leases, contenders).await);
        }
    }
    let mut renewals = vec![Vec::new(); setups.len()];
    let mut standbys = vec![Vec::new(); setups.len()];
    for _ in 0..ROUNDS {
        for (i, setup) in setups.iter().enumerate() {
            renewals[i].push(time_requests(&setup.storage, "holder", LeaseStatus::Leader).await);
            // A standby that is one of the contenders when there are several, else a newcomer.
            let standby = if setup.contenders > 1 {
                "standby-1"
            } else {
                "newcomer"
            };
            standbys[i].push(time_requests(&setup.storage, standby, LeaseStatus::Standby).await);
        }
    }
    let baseline_renewal = median(renewals[0].clone());
    let baseline_standby = median(standbys[0].clone());
    println!("| leases in storage | contenders on the lease | renewal ns/op | vs 1 lease, 1 contender | standby ns/op | vs 1 lease, 1 contender |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for (i, setup) in setups.iter().enumerate() {
        let renewal = median(renewals[i].clone());
        let standby = median(standbys[i].clone());
        println!(
            "| {} | {} | {:.0} | {:.2}x | {:.0} | {:.2}x |",
            setup.leases,
            setup.contenders,
            renewal,
            renewal / baseline_renewal,
            standby,
            standby / baseline_standby
        );
    }
}
