//! Leases at fleet scale: 100,000 leases, 10 instances each asking for 40,000 of them (4
//! contenders per lease) in batches of 1,000, all instances at once; and a small deployment,
//! one instance with 1,000 leases.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p eventstore-postgres --bench fleet
//! ```
//!
//! Beside every steady round runs the floor: the same row writes done with the fewest
//! statements, per batch one `UPDATE … WHERE lease_name = ANY($1) AND owner = $2` for the
//! rows the instance holds and one `INSERT … SELECT FROM unnest($1) ON CONFLICT … DO UPDATE`
//! for its contender rows, in one transaction, on copies of the lease tables. The floor
//! decides nothing (no expiry, no step-down, no tokens, no notifications): it is the least
//! the writes can cost. The run leaves its tables behind under a fresh `fleet…_` prefix.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use eventstore::{EventStorage, LeaseRequest, LeaseStatus};
use eventstore_postgres::PostgresEventStorage;
use sqlx::postgres::types::PgInterval;
use sqlx::PgPool;

const LEASES: usize = 100_000;
const INSTANCES: usize = 10;
/// Each instance asks for the leases whose number modulo `INSTANCES` is one of this many
/// residues from its own: every lease gets this many contenders.
const CONTENDERS: usize = 4;
const BATCH: usize = 1_000;
const STEADY_ROUNDS: usize = 3;
const TTL: Duration = Duration::from_secs(30);

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    if !std::env::args().any(|arg| arg == "--bench") {
        return; // `cargo test` builds benches and runs them without --bench.
    }
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let prefix = format!("fleet{:08x}_", rand::random::<u32>());
    let storage = PostgresEventStorage::builder()
        .url(&url)
        .prefix(&prefix)
        .max_connections(INSTANCES as u32 + 2)
        .build()
        .await
        .expect("a storage on DATABASE_URL");
    let pool = storage.pool().clone();
    println!("# Leases at fleet scale on PostgreSQL (prefix {prefix})\n");
    fleet(&storage, &pool, &prefix).await;
    small_deployment(&storage, &pool, &prefix).await;
    storage.close().await.unwrap();
}

/// The batches of instance `instance`: its 40,000 lease names in batches of 1,000. Made
/// once, before anything is timed (see [`fleet`]), so no timed batch builds names.
fn batches_of(instance: usize) -> &'static [Vec<String>] {
    static BATCHES: OnceLock<Vec<Vec<Vec<String>>>> = OnceLock::new();
    let all = BATCHES.get_or_init(|| {
        (0..INSTANCES)
            .map(|instance| {
                let names: Vec<String> = (0..LEASES)
                    .filter(|n| (n % INSTANCES + INSTANCES - instance) % INSTANCES < CONTENDERS)
                    .map(|n| format!("lease-{n:06}"))
                    .collect();
                names.chunks(BATCH).map(<[String]>::to_vec).collect()
            })
            .collect()
    });
    &all[instance]
}

fn owner(instance: usize) -> String {
    format!("node-{instance:02}")
}

/// What one round of all instances at once took: the round and each batch.
struct Round {
    took: Duration,
    batches: Vec<Duration>,
}

impl Round {
    fn requests_per_second(&self) -> f64 {
        (self.batches.len() * BATCH) as f64 / self.took.as_secs_f64()
    }

    fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.batches.clone();
        sorted.sort();
        sorted[((sorted.len() - 1) as f64 * p).round() as usize]
    }

    fn row(&self, what: &str, floor: Option<&Round>) {
        let ratio = floor.map_or("".to_owned(), |floor| {
            format!(
                "{:.2}×",
                self.requests_per_second() / floor.requests_per_second()
            )
        });
        println!(
            "| {what} | {:.0} | {:.2} s | {:.1} ms | {:.1} ms | {ratio} |",
            self.requests_per_second(),
            self.took.as_secs_f64(),
            self.percentile(0.5).as_secs_f64() * 1e3,
            self.percentile(0.99).as_secs_f64() * 1e3,
        );
    }
}

/// Runs `batch(instance, batch number)` for every batch of every instance, the instances at
/// once and each instance's batches one after another.
async fn all_at_once<F, Fut>(batch: F) -> Round
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let batch = Arc::new(batch);
    let started = Instant::now();
    let tasks: Vec<_> = (0..INSTANCES)
        .map(|instance| {
            let batch = Arc::clone(&batch);
            tokio::spawn(async move {
                let mut took = Vec::new();
                for number in 0..batches_of(instance).len() {
                    let start = Instant::now();
                    batch(instance, number).await;
                    took.push(start.elapsed());
                }
                took
            })
        })
        .collect();
    let mut batches = Vec::new();
    for task in tasks {
        batches.extend(task.await.unwrap());
    }
    Round {
        took: started.elapsed(),
        batches,
    }
}

/// One round of every instance's batches through `request_leases`; returns, per instance and
/// batch, the names it stands by for (those it does not hold).
async fn our_round(storage: &PostgresEventStorage) -> (Round, Arc<Vec<Vec<Vec<String>>>>) {
    let held = Arc::new(std::sync::Mutex::new(vec![
        vec![
            Vec::new();
            LEASES * CONTENDERS
                / INSTANCES
                / BATCH
        ];
        INSTANCES
    ]));
    let round = {
        let (storage, held) = (storage.clone(), Arc::clone(&held));
        all_at_once(move |instance, number| {
            let (storage, held) = (storage.clone(), Arc::clone(&held));
            async move {
                let names = &batches_of(instance)[number];
                let requests: Vec<LeaseRequest> = names
                    .iter()
                    .map(|name| LeaseRequest::new(name.clone(), owner(instance), 0, TTL))
                    .collect();
                let answers = storage.request_leases(requests).await.unwrap();
                let standby: Vec<String> = names
                    .iter()
                    .zip(&answers)
                    .filter(|(_, answer)| answer.status == LeaseStatus::Standby)
                    .map(|(name, _)| name.clone())
                    .collect();
                held.lock().unwrap()[instance][number] = standby;
            }
        })
        .await
    };
    let held = std::mem::take(&mut *held.lock().unwrap());
    (round, Arc::new(held))
}

fn interval(ttl: Duration) -> PgInterval {
    PgInterval {
        months: 0,
        days: 0,
        microseconds: ttl.as_micros() as i64,
    }
}

/// One batch of the floor: the holder's rows renewed in one `UPDATE`, the contender rows
/// refreshed in one upsert, one transaction.
async fn floor_batch(
    pool: &PgPool,
    prefix: &str,
    owner: &str,
    names: &[String],
    standby: &[String],
) {
    let mut transaction = pool.begin().await.unwrap();
    sqlx::query(&format!(
        "UPDATE {prefix}floor_leases SET heartbeat_at = now(), ttl = $3 \
         WHERE lease_name = ANY($1) AND owner = $2"
    ))
    .bind(names)
    .bind(owner)
    .bind(interval(TTL))
    .execute(&mut *transaction)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {prefix}floor_contenders AS c (lease_name, owner, priority, heartbeat_at, ttl) \
         SELECT n, $2, 0, now(), $3 FROM unnest($1::text[]) AS n \
         ON CONFLICT (lease_name, owner) DO UPDATE \
         SET heartbeat_at = excluded.heartbeat_at, ttl = excluded.ttl"
    ))
    .bind(standby)
    .bind(owner)
    .bind(interval(TTL))
    .execute(&mut *transaction)
    .await
    .unwrap();
    transaction.commit().await.unwrap();
}

async fn floor_round(pool: &PgPool, prefix: &str, standby: &Arc<Vec<Vec<Vec<String>>>>) -> Round {
    let (pool, prefix, held) = (pool.clone(), prefix.to_owned(), Arc::clone(standby));
    all_at_once(move |instance, number| {
        let (pool, prefix, held) = (pool.clone(), prefix.clone(), Arc::clone(&held));
        async move {
            let names = &batches_of(instance)[number];
            let standby = &held[instance][number];
            floor_batch(&pool, &prefix, &owner(instance), names, standby).await;
        }
    })
    .await
}

/// Copies of the lease tables, rows included, for the floor to write.
async fn copy_tables(pool: &PgPool, prefix: &str) {
    for (table, copy) in [
        ("leases", "floor_leases"),
        ("lease_contenders", "floor_contenders"),
    ] {
        sqlx::query(&format!(
            "CREATE TABLE {prefix}{copy} (LIKE {prefix}{table} INCLUDING ALL) \
             WITH (fillfactor = 50)"
        ))
        .execute(pool)
        .await
        .unwrap();
        sqlx::query(&format!(
            "INSERT INTO {prefix}{copy} SELECT * FROM {prefix}{table}"
        ))
        .execute(pool)
        .await
        .unwrap();
        sqlx::query(&format!("VACUUM ANALYZE {prefix}{copy}"))
            .execute(pool)
            .await
            .unwrap();
    }
}

async fn fleet(storage: &PostgresEventStorage, pool: &PgPool, prefix: &str) {
    println!(
        "## {LEASES} leases, {INSTANCES} instances × {} requests ({CONTENDERS} contenders per \
         lease), batches of {BATCH}, all instances at once, ttl {TTL:?}\n",
        LEASES * CONTENDERS / INSTANCES
    );
    println!("| round | requests/s | round time | batch p50 | batch p99 | / floor |");
    println!("|---|---:|---:|---:|---:|---:|");
    batches_of(0); // every name made before the first timed batch
    let (first, standby) = our_round(storage).await;
    first.row("first: every lease acquired", None);
    copy_tables(pool, prefix).await;
    // As autovacuum leaves a lease table that has run for a while, and as the floor's copies
    // are: vacuumed, with statistics.
    for table in ["leases", "lease_contenders"] {
        sqlx::query(&format!("VACUUM ANALYZE {prefix}{table}"))
            .execute(pool)
            .await
            .unwrap();
    }
    for round in 1..=STEADY_ROUNDS {
        let floor = floor_round(pool, prefix, &standby).await;
        let (ours, _) = our_round(storage).await;
        ours.row(&format!("steady {round}: `request_leases`"), Some(&floor));
        floor.row(&format!("steady {round}: floor"), None);
    }
    println!();
}

async fn small_deployment(storage: &PostgresEventStorage, pool: &PgPool, prefix: &str) {
    const SAMPLES: usize = 21;
    let names: Vec<String> = (0..BATCH).map(|n| format!("small-{n:04}")).collect();
    let requests: Vec<LeaseRequest> = names
        .iter()
        .map(|name| LeaseRequest::new(name.clone(), "solo", 0, TTL))
        .collect();
    storage.request_leases(requests.clone()).await.unwrap();
    sqlx::query(&format!(
        "INSERT INTO {prefix}floor_leases SELECT * FROM {prefix}leases \
         WHERE lease_name LIKE 'small-%'"
    ))
    .execute(pool)
    .await
    .unwrap();
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        let start = Instant::now();
        floor_batch(pool, prefix, "solo", &names, &[]).await;
        floor.push(start.elapsed());
        let start = Instant::now();
        storage.request_leases(requests.clone()).await.unwrap();
        ours.push(start.elapsed());
    }
    ours.sort();
    floor.sort();
    let (ours, floor) = (ours[SAMPLES / 2], floor[SAMPLES / 2]);
    println!("## A small deployment: one instance renewing {BATCH} leases in one batch\n");
    println!("| what | batch p50 | speed / floor |");
    println!("|---|---:|---:|");
    println!(
        "| `request_leases` | {:.1} ms | {:.2}× |",
        ours.as_secs_f64() * 1e3,
        floor.as_secs_f64() / ours.as_secs_f64()
    );
    println!("| floor | {:.1} ms | 1.00× |\n", floor.as_secs_f64() * 1e3);
}
