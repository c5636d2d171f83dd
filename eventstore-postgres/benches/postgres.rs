//! Lease and event benchmarks against a real PostgreSQL server.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p eventstore-postgres --bench postgres
//! ```
//!
//! Every lease latency is printed beside the floor measured in the same run through the same
//! pool: a one-row `UPDATE … RETURNING` in autocommit, the least a durable write that answers
//! can cost. The run leaves its tables behind under a fresh `bench…_` prefix.
//!
//! `--only statements` compares renewals with prepared statements (the default) and without
//! (`prepared_statements(false)`, for a pooler in transaction mode), and through a PgBouncer
//! too when `PGBOUNCER_URL` names one (`postgres://…:6432/test?pgbouncer=true`).
//!
//! `--only conditions` times conditional appends to a stream of 100,000 events, each
//! condition a DCB tag or the stream's last event.
//!
//! `--only replay` (never part of a full run) writes a million events and replays them
//! through `query_stream`, reporting the process's peak resident memory; `--only indexes`
//! (neither) measures what each index of the events table costs appends in batches.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventstore::EventStorageExt;
use eventstore::{
    AppendCriteria, Direction, EventFilter, EventReference, EventStorage, EventStreamId,
    EventToStore, LeaseRequest, LeaseStatus, Limit, Tags,
};
use eventstore_postgres::PostgresEventStorage;
use serde_json::json;
use sqlx::PgPool;

const SAMPLES: usize = 2_000;
const TTL: Duration = Duration::from_secs(600);
const CLIENTS: usize = 8;
const SUSTAINED: Duration = Duration::from_secs(1);
/// Sustained runs alternate the floor and the measured operation this many times each; the
/// ratio reported is the median of each pair's, so that a change in the machine's load
/// falls on both sides of a pair and a noisy pair does not move the figure.
const ALTERNATIONS: usize = 9;

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("run with `cargo bench -p eventstore-postgres --bench postgres`");
        return;
    }
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let prefix = format!("bench{:08x}_", rand::random::<u32>());
    let storage = PostgresEventStorage::builder()
        .url(&url)
        .prefix(&prefix)
        .max_connections(CLIENTS as u32 + 2)
        .build()
        .await
        .expect("a storage on DATABASE_URL");
    let pool = storage.pool().clone();
    sqlx::query(&format!(
        "CREATE TABLE {prefix}floor (id integer PRIMARY KEY, n bigint NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {prefix}floor SELECT g, 0 FROM generate_series(0, {CLIENTS}) AS g"
    ))
    .execute(&pool)
    .await
    .unwrap();

    sqlx::query(&format!(
        "CREATE TABLE {prefix}append_floor (id bigserial PRIMARY KEY, n bigint NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();

    let only: Option<String> = std::env::args().skip_while(|a| a != "--only").nth(1);
    let runs = |part: &str| only.as_deref().is_none_or(|only| only == part);
    println!("# PostgreSQL benchmark (prefix {prefix}, {SAMPLES} samples per latency)\n");
    if runs("leases") {
        lease_latencies(&storage, &pool, &prefix).await;
        batch_renewal(&storage).await;
        sustained(&storage, &pool, &prefix).await;
    }
    if runs("events") {
        appends(&storage, &pool, &prefix).await;
        events(&storage).await;
    }
    if runs("conditions") {
        conditions(&storage, &pool, &prefix).await;
    }
    if runs("statements") {
        statement_modes(&storage, &url, &prefix).await;
    }
    // Only on request: it writes a million events first.
    if only.as_deref() == Some("replay") {
        replay(&storage, &pool, &prefix).await;
    }
    if only.as_deref() == Some("indexes") {
        index_costs(&url, &prefix).await;
    }
    storage.close().await.unwrap();
}

/// Gathers the statistics of the events table, as autovacuum would have by then.
async fn analyze_events(pool: &PgPool, prefix: &str) {
    sqlx::query(&format!("ANALYZE {prefix}events"))
        .execute(pool)
        .await
        .unwrap();
}

/// Events a replay reads through the streaming read.
const REPLAY_EVENTS: u64 = 1_000_000;

/// The process's resident memory now and at its peak, in MiB, from `/proc/self/status`.
fn resident_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |field: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

/// A projector's replay of a million events through `query_stream`: the events are written
/// by one `INSERT … SELECT` (as a long history would be there already), then streamed and
/// counted twice: as fast as the stream goes, and with a pause of [`PROJECTION_PAUSE`] after
/// every [`PROJECTION_BATCH`] events, as a projection that commits its batch to its own database
/// would. The process's peak resident memory is reported beside its memory before.
async fn replay(storage: &PostgresEventStorage, pool: &PgPool, prefix: &str) {
    for first in (0..REPLAY_EVENTS).step_by(100_000) {
        sqlx::query(&format!(
            "INSERT INTO {prefix}events (id, stream_context, stream_purpose, event_type, payload, tags) \
             SELECT gen_random_uuid(), 'replay', 'default', 'Measured', \
                    json_build_object('n', g, 'label', 'measurement ' || g), \
                    ARRAY['sensor:s-' || (g % 100)] \
             FROM generate_series($1::bigint, $1::bigint + 99999) AS g"
        ))
        .bind(first as i64)
        .execute(pool)
        .await
        .unwrap();
    }
    analyze_events(pool, prefix).await;
    let (before, _) = resident_mib();
    println!("## Replay through query_stream\n");
    println!("| consumer | events | events per second | resident before | peak resident |");
    println!("|---|---|---|---|---|");
    for (consumer, pause) in [
        ("takes each event at once", None),
        ("pauses 2 ms per 1,000 events", Some(PROJECTION_PAUSE)),
    ] {
        let (read, elapsed) = stream_replay(storage, pause).await;
        let (_, peak) = resident_mib();
        println!(
            "| {consumer} | {read} | {:.0} | {before:.1} MiB | {peak:.1} MiB |",
            read as f64 / elapsed.as_secs_f64()
        );
    }
    println!();
}

/// How many events a replaying projection takes before it commits them (pauses).
const PROJECTION_BATCH: u64 = 1_000;

/// How long a replaying projection waits after each [`PROJECTION_BATCH`] events.
const PROJECTION_PAUSE: Duration = Duration::from_millis(2);

/// Streams the replay's events, pausing for `pause` after every [`PROJECTION_BATCH`] of them: how
/// many were read, and how long it took.
async fn stream_replay(storage: &PostgresEventStorage, pause: Option<Duration>) -> (u64, Duration) {
    use futures_util::StreamExt;

    let start = Instant::now();
    let mut events = storage.query_stream(
        &EventFilter::match_all(),
        &EventStreamId::for_context("replay"),
        None,
        Limit::none(),
        Direction::Forward,
    );
    let mut read = 0_u64;
    while let Some(event) = events.next().await {
        read += event.unwrap().payload["n"].as_u64().map_or(0, |_| 1);
        if let Some(pause) = pause.filter(|_| read.is_multiple_of(PROJECTION_BATCH)) {
            tokio::time::sleep(pause).await;
        }
    }
    (read, start.elapsed())
}

/// Latency percentiles of `SAMPLES` runs of `op`, each run right after one of the floor, so
/// that both see the same load on a shared machine.
async fn beside_floor<F, Fut>(pool: &PgPool, prefix: &str, mut op: F) -> (Stats, Stats)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..SAMPLES / 10 {
        floor_update(pool, prefix, 0).await;
        op().await;
    }
    let mut floor = Vec::with_capacity(SAMPLES);
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let start = Instant::now();
        floor_update(pool, prefix, 0).await;
        floor.push(start.elapsed());
        let start = Instant::now();
        op().await;
        samples.push(start.elapsed());
    }
    (Stats::of(floor), Stats::of(samples))
}

#[derive(Clone, Copy)]
struct Stats {
    p50: Duration,
    p99: Duration,
}

impl Stats {
    fn of(mut samples: Vec<Duration>) -> Stats {
        samples.sort();
        Stats {
            p50: samples[samples.len() / 2],
            p99: samples[samples.len() * 99 / 100],
        }
    }
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

async fn floor_update(pool: &PgPool, prefix: &str, row: usize) {
    let _: i64 = sqlx::query_scalar(&format!(
        "UPDATE {prefix}floor SET n = n + 1 WHERE id = $1 RETURNING n"
    ))
    .bind(row as i32)
    .fetch_one(pool)
    .await
    .unwrap();
}

async fn lease_latencies(storage: &PostgresEventStorage, pool: &PgPool, prefix: &str) {
    for n in 0..100 {
        storage
            .request_lease(LeaseRequest::new(format!("other-{n}"), "x", 0, TTL))
            .await
            .unwrap();
    }
    storage
        .request_lease(LeaseRequest::new("held", "holder", 0, TTL))
        .await
        .unwrap();

    println!("## Lease latency (one client, each operation interleaved with the floor)\n");
    println!("| operation | p50 | p99 | floor p50 | floor p99 | p50 / floor p50 |");
    println!("|---|---|---|---|---|---|");
    let row = |name: &str, (floor, s): (Stats, Stats)| {
        println!(
            "| {name} | {} | {} | {} | {} | {:.2}× |",
            micros(s.p50),
            micros(s.p99),
            micros(floor.p50),
            micros(floor.p99),
            s.p50.as_secs_f64() / floor.p50.as_secs_f64()
        );
    };
    let renewal = beside_floor(pool, prefix, || async {
        let r = storage
            .request_lease(LeaseRequest::new("held", "holder", 0, TTL))
            .await
            .unwrap();
        assert_eq!(r.status, LeaseStatus::Leader);
    })
    .await;
    row("`request_lease`, renewal", renewal);
    let standby = beside_floor(pool, prefix, || async {
        let r = storage
            .request_lease(LeaseRequest::new("held", "standby", 0, TTL))
            .await
            .unwrap();
        assert_eq!(r.status, LeaseStatus::Standby);
    })
    .await;
    row("`request_lease`, standby", standby);
    // Acquiring a released lease (the next token) and releasing it again, each timed.
    let (mut floor, mut acquire, mut release) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..SAMPLES + SAMPLES / 10 {
        let start = Instant::now();
        floor_update(pool, prefix, 0).await;
        let floor_time = start.elapsed();
        let start = Instant::now();
        let r = storage
            .request_lease(LeaseRequest::new("handed", "a", 0, TTL))
            .await
            .unwrap();
        let acquire_time = start.elapsed();
        assert_eq!(r.status, LeaseStatus::Leader);
        let start = Instant::now();
        storage.release_lease("handed", "a").await.unwrap();
        if n >= SAMPLES / 10 {
            floor.push(floor_time);
            acquire.push(acquire_time);
            release.push(start.elapsed());
        }
    }
    let floor = Stats::of(floor);
    row(
        "`request_lease`, acquisition of a released lease",
        (floor, Stats::of(acquire)),
    );
    row("`release_lease` by the holder", (floor, Stats::of(release)));
    let get_leases = beside_floor(pool, prefix, || async {
        assert_eq!(storage.get_leases().await.unwrap().len(), 102);
    })
    .await;
    row("`get_leases` (102 leases)", get_leases);
    println!();
}

async fn batch_renewal(storage: &PostgresEventStorage) {
    let requests: Vec<LeaseRequest> = (0..1_000)
        .map(|n| LeaseRequest::new(format!("partition-{n:04}"), "node", 0, TTL))
        .collect();
    storage.request_leases(requests.clone()).await.unwrap();
    let mut batch = Vec::new();
    for _ in 0..10 {
        let start = Instant::now();
        let responses = storage.request_leases(requests.clone()).await.unwrap();
        batch.push(start.elapsed());
        assert!(responses.iter().all(|r| r.status == LeaseStatus::Leader));
    }
    batch.sort();
    let mut single = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        for request in &requests {
            storage.request_lease(request.clone()).await.unwrap();
        }
        single.push(start.elapsed());
    }
    single.sort();
    println!("## Renewing 1,000 leases (one client)\n");
    println!("| how | time (median) | per lease |");
    println!("|---|---|---|");
    println!(
        "| one `request_leases` batch | {:.1} ms | {:.1} µs |",
        batch[batch.len() / 2].as_secs_f64() * 1e3,
        batch[batch.len() / 2].as_secs_f64() * 1e3
    );
    println!(
        "| 1,000 `request_lease` calls | {:.1} ms | {:.1} µs |",
        single[single.len() / 2].as_secs_f64() * 1e3,
        single[single.len() / 2].as_secs_f64() * 1e3
    );
    println!(
        "\nThe batch is {:.1}× faster.\n",
        single[single.len() / 2].as_secs_f64() / batch[batch.len() / 2].as_secs_f64()
    );
}

/// What `CLIENTS` tasks sustained for `SUSTAINED`: operations per second, and the CPU time
/// each operation cost this process (the client) and the whole machine (client, server and
/// kernel), in microseconds, where the system says (Linux).
struct Sustained {
    per_second: f64,
    cpu_per_op: Option<(f64, f64)>,
}

/// CPU time used so far, in Linux's clock ticks of 10 ms (`USER_HZ`): by this process (user
/// and system), and by the whole machine (user, system and interrupts: neither idle, nor
/// waiting for I/O, nor taken by a hypervisor).
fn cpu_ticks() -> Option<(u64, u64)> {
    let own = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command's closing parenthesis; utime and stime are the 12th and
    // 13th of them.
    let own: Vec<u64> = own
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let machine = std::fs::read_to_string("/proc/stat").ok()?;
    let busy: u64 = machine
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(7) // user, nice, system, idle, iowait, irq, softirq
        .enumerate()
        .filter(|(state, _)| !matches!(state, 3 | 4)) // idle, iowait
        .map(|(_, ticks)| ticks.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    Some((own.iter().sum(), busy))
}

/// What `CLIENTS` tasks, each running `op` in a loop, sustain for `SUSTAINED`.
async fn per_second<F, Fut>(op: F) -> Sustained
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (op, count, stop) = (op.clone(), Arc::clone(&count), Arc::clone(&stop));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    op(client).await;
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let start = Instant::now();
    let cpu_before = cpu_ticks();
    tokio::time::sleep(SUSTAINED).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let operations = count.load(Ordering::Relaxed) as f64;
    let micros_per_op = |ticks: u64| ticks as f64 * 10_000.0 / operations;
    Sustained {
        per_second: operations / start.elapsed().as_secs_f64(),
        cpu_per_op: cpu_before.zip(cpu_ticks()).map(|(before, after)| {
            (
                micros_per_op(after.0 - before.0),
                micros_per_op(after.1 - before.1),
            )
        }),
    }
}

async fn sustained(storage: &PostgresEventStorage, pool: &PgPool, prefix: &str) {
    let floor_rate = || {
        let (pool, prefix) = (pool.clone(), prefix.to_owned());
        per_second(move |client| {
            let (pool, prefix) = (pool.clone(), prefix.clone());
            async move { floor_update(&pool, &prefix, client + 1).await }
        })
    };
    let renewal_rate = || {
        let storage = storage.clone();
        per_second(move |client| {
            let storage = storage.clone();
            async move {
                let request = LeaseRequest::new(format!("sustained-{client}"), "node", 0, TTL);
                storage.request_lease(request).await.unwrap();
            }
        })
    };
    let (mut floor, mut renewals) = (Vec::new(), Vec::new());
    for pair in 0..ALTERNATIONS {
        // Which side goes first alternates, so that neither always meets what the other
        // left behind (dirty pages, a checkpoint, autovacuum).
        if pair % 2 == 0 {
            floor.push(floor_rate().await);
            renewals.push(renewal_rate().await);
        } else {
            renewals.push(renewal_rate().await);
            floor.push(floor_rate().await);
        }
    }
    let mean =
        |runs: &[Sustained]| runs.iter().map(|run| run.per_second).sum::<f64>() / runs.len() as f64;
    let mut ratios: Vec<f64> = floor
        .iter()
        .zip(&renewals)
        .map(|(floor, renewals)| renewals.per_second / floor.per_second)
        .collect();
    ratios.sort_by(f64::total_cmp);
    let each: Vec<String> = ratios.iter().map(|ratio| format!("{ratio:.2}")).collect();
    let more_cpu = floor.iter().zip(&renewals).map(|(floor, renewals)| {
        let (floor, renewals) = (floor.cpu_per_op?, renewals.cpu_per_op?);
        Some((renewals.0 - floor.0, renewals.1 - floor.1))
    });
    println!("## Sustained, {CLIENTS} clients, each on its own lease or row\n");
    println!(
        "{ALTERNATIONS} alternations of {} s each; the ratios of the pairs, in order: {}\n",
        SUSTAINED.as_secs(),
        each.join(", ")
    );
    println!(
        "| what | per second (mean) | / floor (median of the pairs) | client CPU per op | \
         machine CPU per op |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| floor: one-row `UPDATE … RETURNING` commits | {:.0} | 1.00× | {} |",
        mean(&floor),
        cpu_cells(floor.iter().map(|run| run.cpu_per_op), "")
    );
    println!(
        "| `request_lease` renewals | {:.0} | {:.2}× | {} |",
        mean(&renewals),
        ratios[ratios.len() / 2],
        cpu_cells(renewals.iter().map(|run| run.cpu_per_op), "")
    );
    println!(
        "| renewal − floor (median of the pairs) | | | {} |\n",
        cpu_cells(more_cpu, "+")
    );
    println!(
        "CPU per op: medians over the {ALTERNATIONS} runs of each side, from this process's and \
         the machine's CPU time (`/proc`); with every core busy, the rates follow it.\n"
    );
}

/// The median of `values`.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Two table cells, client then machine, with the medians of the CPU per operation of
/// `runs` (each value prefixed by `sign` when not negative), or `n/a` where the system did
/// not say.
fn cpu_cells(runs: impl Iterator<Item = Option<(f64, f64)>>, sign: &str) -> String {
    let Some(runs) = runs.collect::<Option<Vec<(f64, f64)>>>() else {
        return "n/a | n/a".to_owned();
    };
    let cell = |micros: f64| {
        let sign = if micros < 0.0 { "" } else { sign };
        format!("{sign}{micros:.0} µs")
    };
    format!(
        "{} | {}",
        cell(median(runs.iter().map(|run| run.0).collect())),
        cell(median(runs.iter().map(|run| run.1).collect()))
    )
}

/// A typical event: a small payload and one tag out of fifty.
fn measured_event(n: usize) -> EventToStore {
    EventToStore::new(
        "Measured",
        json!({"n": n, "text": "an event of a typical size, with some words"}),
    )
    .with_tags(Tags::from_pairs([("sensor", format!("s-{}", n % 50))]))
}

/// The floor of an append: a one-row `INSERT … RETURNING` in autocommit.
async fn floor_insert(pool: &PgPool, prefix: &str, n: usize) {
    let _: i64 = sqlx::query_scalar(&format!(
        "INSERT INTO {prefix}append_floor (n) VALUES ($1) RETURNING id"
    ))
    .bind(n as i64)
    .fetch_one(pool)
    .await
    .unwrap();
}

/// Appends of one event: latency beside the floor, one client, then sustained with
/// `CLIENTS` clients each on a stream of its own, beside the floor's sustained inserts.
async fn appends(storage: &PostgresEventStorage, pool: &PgPool, prefix: &str) {
    let stream = EventStreamId::for_context("single");
    let n = std::cell::Cell::new(0);
    let (floor, append) = beside_floor_op(
        SAMPLES,
        || floor_insert(pool, prefix, n.get()),
        || {
            n.set(n.get() + 1);
            storage.append(
                AppendCriteria::none(),
                &stream,
                vec![measured_event(n.get())],
            )
        },
    )
    .await;
    let floor_rate = {
        let (pool, prefix) = (pool.clone(), prefix.to_owned());
        per_second(move |client| {
            let (pool, prefix) = (pool.clone(), prefix.clone());
            async move { floor_insert(&pool, &prefix, client).await }
        })
        .await
        .per_second
    };
    let append_rate = {
        let storage = storage.clone();
        per_second(move |client| {
            let storage = storage.clone();
            async move {
                let stream = EventStreamId::new("sustained", format!("client-{client}"));
                storage
                    .append(
                        AppendCriteria::none(),
                        &stream,
                        vec![measured_event(client)],
                    )
                    .await
                    .unwrap();
            }
        })
        .await
        .per_second
    };
    println!("## Appends of one event\n");
    println!("| what | p50 | p99 | per second | / floor |");
    println!("|---|---|---|---|---|");
    println!(
        "| floor: one-row `INSERT … RETURNING`, one client | {} | {} | {:.0} | 1.00× |",
        micros(floor.p50),
        micros(floor.p99),
        1.0 / floor.p50.as_secs_f64()
    );
    println!(
        "| `append`, one client | {} | {} | {:.0} | {:.2}× |",
        micros(append.p50),
        micros(append.p99),
        1.0 / append.p50.as_secs_f64(),
        append.p50.as_secs_f64() / floor.p50.as_secs_f64()
    );
    println!("| floor, {CLIENTS} clients | | | {floor_rate:.0} | 1.00× |");
    println!(
        "| `append`, {CLIENTS} clients, a stream each | | | {append_rate:.0} | {:.2}× |\n",
        append_rate / floor_rate
    );
}

/// Latency percentiles of `samples` runs of `floor` and `op`, interleaved, after a tenth as
/// many to warm up.
async fn beside_floor_op<F, FFut, O, OFut, T>(
    samples: usize,
    mut floor: F,
    mut op: O,
) -> (Stats, Stats)
where
    F: FnMut() -> FFut,
    FFut: std::future::Future<Output = ()>,
    O: FnMut() -> OFut,
    OFut: std::future::Future<Output = Result<T, eventstore::EventStorageError>>,
{
    for _ in 0..samples / 10 {
        floor().await;
        op().await.unwrap();
    }
    let mut floor_times = Vec::with_capacity(samples);
    let mut op_times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        floor().await;
        floor_times.push(start.elapsed());
        let start = Instant::now();
        op().await.unwrap();
        op_times.push(start.elapsed());
    }
    (Stats::of(floor_times), Stats::of(op_times))
}

/// Events of the stream the conditional appends are checked against, each with an order of
/// its own, as a DCB tag names one entity.
const ORDERS: usize = 100_000;

/// Conditional appends that each take fewer samples: a condition that reads the stream
/// costs tens of milliseconds.
const CONDITION_SAMPLES: usize = 200;

/// Conditional appends of one event to a stream of `ORDERS` events, beside the floor: a new
/// order (no event may carry its tag), an old order with nothing since its one event (the
/// expected one, far behind the head), and the stream's expected last event.
async fn conditions(storage: &PostgresEventStorage, pool: &PgPool, prefix: &str) {
    let stream = EventStreamId::for_context("orders");
    let placed = |order: String| {
        EventToStore::new("Placed", json!({ "order": order }))
            .with_tags(Tags::from_pairs([("order", order)]))
    };
    for first in (0..ORDERS).step_by(1_000) {
        let batch = (first..first + 1_000)
            .map(|n| placed(format!("o-{n}")))
            .collect();
        storage
            .append(AppendCriteria::none(), &stream, batch)
            .await
            .unwrap();
    }
    analyze_events(pool, prefix).await;
    let order = |name: String| EventFilter::for_tags(Tags::from_pairs([("order", name)]));
    // The first orders' events: each order's only event, far behind the stream's head.
    let first: Vec<EventReference> = storage
        .query(
            &EventFilter::match_all(),
            &stream,
            None,
            Limit::to(2 * CONDITION_SAMPLES as u64),
            Direction::Forward,
        )
        .await
        .unwrap()
        .iter()
        .map(|event| event.reference)
        .collect();
    let n = std::cell::Cell::new(0);
    let next = || {
        n.set(n.get() + 1);
        n.get()
    };
    let new_order = beside_floor_op(
        CONDITION_SAMPLES,
        || floor_insert(pool, prefix, n.get()),
        || {
            let name = format!("new-{}", next());
            storage.append(
                AppendCriteria::of(order(name.clone()), None),
                &stream,
                vec![placed(name)],
            )
        },
    )
    .await;
    let old = std::cell::Cell::new(0);
    let old_order = beside_floor_op(
        CONDITION_SAMPLES,
        || floor_insert(pool, prefix, n.get()),
        || {
            // Nothing of the order since its one event, the expected one.
            let order_n = old.get();
            old.set(order_n + 1);
            storage.append(
                AppendCriteria::of(order(format!("o-{order_n}")), Some(first[order_n])),
                &stream,
                vec![EventToStore::new("Noted", json!({}))],
            )
        },
    )
    .await;
    let head = std::cell::Cell::new(storage.head(&stream).await.unwrap());
    let stream_version = beside_floor_op(
        CONDITION_SAMPLES,
        || floor_insert(pool, prefix, n.get()),
        || async {
            let appended = storage
                .append(
                    AppendCriteria::of(EventFilter::match_all(), head.get()),
                    &stream,
                    vec![EventToStore::new("Noted", json!({}))],
                )
                .await?;
            head.set(appended.last().map(|event| event.reference));
            Ok(())
        },
    )
    .await;
    println!("## Conditional appends of one event to a stream of {ORDERS} events\n");
    println!("| condition | p50 | p99 | floor p50 | p50 / floor p50 |");
    println!("|---|---|---|---|---|");
    for (name, (floor, append)) in [
        ("no event of a new order", new_order),
        ("nothing of an old order since its event", old_order),
        ("nothing since the stream's last event", stream_version),
    ] {
        println!(
            "| {name} | {} | {} | {} | {:.2}× |",
            micros(append.p50),
            micros(append.p99),
            micros(floor.p50),
            append.p50.as_secs_f64() / floor.p50.as_secs_f64()
        );
    }
    println!();
}

async fn events(storage: &PostgresEventStorage) {
    let stream = EventStreamId::for_context("bench");
    let event = measured_event;
    let start = Instant::now();
    let batches = 200;
    for b in 0..batches {
        let batch = (0..100).map(|n| event(b * 100 + n)).collect();
        storage
            .append(AppendCriteria::none(), &stream, batch)
            .await
            .unwrap();
    }
    let batch_rate = (batches * 100) as f64 / start.elapsed().as_secs_f64();

    let start = Instant::now();
    let mut after: Option<EventReference> = None;
    let mut read = 0;
    loop {
        let page = storage
            .query(
                &EventFilter::match_all(),
                &stream,
                after.as_ref(),
                Limit::to(1_000),
                Direction::Forward,
            )
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.reference);
        read += page.len();
    }
    let read_rate = read as f64 / start.elapsed().as_secs_f64();
    let filter = EventFilter::for_tags(Tags::from_pairs([("sensor", "s-7")]));
    let start = Instant::now();
    let tagged = storage
        .query(&filter, &stream, None, Limit::none(), Direction::Forward)
        .await
        .unwrap()
        .len();
    let tagged_time = start.elapsed();

    println!("## Events (one client)\n");
    println!("| what | events per second |");
    println!("|---|---|");
    println!("| append, batches of 100 | {batch_rate:.0} |");
    println!("| read forward in pages of 1,000 ({read} events) | {read_rate:.0} |");
    println!(
        "| read by tag ({tagged} of {read} events, GIN index) | {:.0} |",
        tagged as f64 / tagged_time.as_secs_f64()
    );
}

/// Latency with and without prepared statements of a renewal, a lease listing and a read of
/// the clock, each mode sampled in turn so that every mode sees the same load.
async fn statement_modes(named: &PostgresEventStorage, url: &str, prefix: &str) {
    let unnamed_storage = |url: String| async move {
        PostgresEventStorage::builder()
            .url(url)
            .prefix(prefix)
            .max_connections(2)
            .prepared_statements(false)
            .build()
            .await
            .expect("a storage without prepared statements")
    };
    let mut modes: Vec<(&str, PostgresEventStorage)> = vec![
        ("prepared (named, cached)", named.clone()),
        (
            "unnamed, each call in a transaction",
            unnamed_storage(url.to_owned()).await,
        ),
    ];
    if let Ok(pooler) = std::env::var("PGBOUNCER_URL") {
        modes.push((
            "unnamed, through PgBouncer (transaction mode)",
            unnamed_storage(pooler).await,
        ));
    }
    for operation in ["`request_lease` renewal", "`get_leases`", "`storage_time`"] {
        let run = |storage: PostgresEventStorage, mode: usize| async move {
            let start = Instant::now();
            match operation {
                "`get_leases`" => {
                    storage.get_leases().await.unwrap();
                }
                "`storage_time`" => {
                    storage.storage_time().await.unwrap();
                }
                _ => {
                    let lease = LeaseRequest::new(format!("renewed-{mode}"), "holder", 0, TTL);
                    let r = storage.request_lease(lease).await.unwrap();
                    assert_eq!(r.status, LeaseStatus::Leader);
                }
            }
            start.elapsed()
        };
        for _ in 0..SAMPLES / 10 {
            for (mode, (_, storage)) in modes.iter().enumerate() {
                run(storage.clone(), mode).await;
            }
        }
        let mut samples = vec![Vec::with_capacity(SAMPLES); modes.len()];
        for _ in 0..SAMPLES {
            for (mode, (_, storage)) in modes.iter().enumerate() {
                samples[mode].push(run(storage.clone(), mode).await);
            }
        }
        println!("\n## Statements: {operation}\n");
        println!("| statements | p50 | p99 | p50 / prepared p50 |");
        println!("|---|---|---|---|");
        let stats: Vec<Stats> = samples.into_iter().map(Stats::of).collect();
        for ((name, _), s) in modes.iter().zip(&stats) {
            println!(
                "| {name} | {} | {} | {:.3} |",
                micros(s.p50),
                micros(s.p99),
                s.p50.as_secs_f64() / stats[0].p50.as_secs_f64()
            );
        }
    }
    for (_, storage) in modes.drain(1..) {
        storage.close().await.unwrap();
    }
}

/// The events table's indexes that no constraint needs (the primary key and the unique ids
/// back the bookmarks' foreign key), each dropped in turn.
const DROPPABLE_INDEXES: [&str; 5] = [
    "events_order_idx",
    "events_context_idx",
    "events_type_idx",
    "events_tags_idx",
    "events_idempotency_idx",
];

/// Appends in batches of 100 on storages with every index, and with each droppable index
/// dropped, in rounds that rotate which goes first: what each index costs a batched append.
async fn index_costs(url: &str, prefix: &str) {
    const ROUNDS: usize = 5;
    const BATCHES: usize = 50;
    let variants: Vec<Option<&str>> = std::iter::once(None)
        .chain(DROPPABLE_INDEXES.iter().copied().map(Some))
        .collect();
    let mut storages = Vec::new();
    for (n, dropped) in variants.iter().enumerate() {
        let storage = PostgresEventStorage::builder()
            .url(url)
            .prefix(format!("{}i{n}_", prefix.trim_end_matches('_')))
            .max_connections(2)
            .build()
            .await
            .expect("a storage per variant");
        if let Some(index) = dropped {
            sqlx::query(&format!("DROP INDEX {}{index}", storage.prefix()))
                .execute(storage.pool())
                .await
                .unwrap();
        }
        storages.push(storage);
    }
    let stream = EventStreamId::for_context("bench");
    let mut rates = vec![Vec::new(); variants.len()];
    for round in 0..ROUNDS {
        // Each round starts with another variant, so that none always goes first.
        for k in 0..storages.len() {
            let n = (round + k) % storages.len();
            let storage = &storages[n];
            let start = Instant::now();
            for b in 0..BATCHES {
                let first = (round * BATCHES + b) * 100;
                let batch = (first..first + 100).map(measured_event).collect();
                storage
                    .append(AppendCriteria::none(), &stream, batch)
                    .await
                    .unwrap();
            }
            rates[n].push((BATCHES * 100) as f64 / start.elapsed().as_secs_f64());
        }
    }
    println!("## What each index costs appends in batches of 100 (medians of {ROUNDS})\n");
    println!("| index dropped | events per second | vs every index |");
    println!("|---|---|---|");
    let medians: Vec<f64> = rates.into_iter().map(median).collect();
    for (dropped, rate) in variants.iter().zip(&medians) {
        println!(
            "| {} | {rate:.0} | {:.2}× |",
            dropped.unwrap_or("none"),
            rate / medians[0]
        );
    }
    for storage in storages {
        storage.close().await.unwrap();
    }
}
