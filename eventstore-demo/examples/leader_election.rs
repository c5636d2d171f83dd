//! Leader-elected projectors, end to end, as a timeline.
//!
//! Three instances of an order projection run in this process, each with its own elector
//! and its own handle of one storage. The demo shows, in order: an election; the leader
//! projecting orders and bookmarking after every batch; a planned handover to a
//! higher-priority instance; a crashed leader taken over once its lease's ttl runs out; and
//! the crashed leader, woken up as a zombie, refused by its fence. It ends by checking that
//! every order was projected.
//!
//! ```sh
//! cargo run --example leader_election                 # local files in a temporary directory
//! cargo run --example leader_election -- --postgres   # PostgreSQL at $DATABASE_URL
//! ```
//!
//! With `DATABASE_URL` set the demo runs on PostgreSQL too, each instance with its own
//! connection pool as separate processes would have (tables prefixed `leader_demo_`,
//! recreated at start).
//!
//! It ends with the metrics the run recorded: the demo installs a recorder of its own, as an
//! application installs its exporter (see `eventstore::telemetry`).

use std::collections::BTreeMap;
use std::fmt::Display;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use eventstore::elector::{LeaderElector, Leadership, LeadershipWatch};
use eventstore::projector::{ElectedProjector, Projection, ProjectionError, Projector};
use eventstore::{
    AppendCriteria, EventReference, EventStorage, EventStorageError, EventStreamId, EventToStore,
    Fence, Lease, StoredEvent, Tags,
};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The lease the instances elect on.
const LEASE: &str = "order-projector";
/// The bookmark reader of the projection.
const READER: &str = "order-totals";
/// Short, so that the crash is taken over quickly.
const TTL: Duration = Duration::from_secs(1);
/// Small batches, so that every run bookmarks several times.
const BATCH_SIZE: u64 = 4;
/// How long the demo waits for anything before it gives up.
const PATIENCE: Duration = Duration::from_secs(10);

fn orders() -> EventStreamId {
    EventStreamId::for_context("orders")
}

// ---------------------------------------------------------------------------------------------
// The timeline
// ---------------------------------------------------------------------------------------------

fn started() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// One line of the timeline: seconds since the start, who, what.
fn say(who: &str, what: impl Display) {
    let at = started().elapsed().as_secs_f64();
    println!("{at:7.3}s  {who:<11}  {what}");
}

fn act(title: &str) {
    println!(
        "\n── {title} {}",
        "─".repeat(70_usize.saturating_sub(title.len()))
    );
}

// ---------------------------------------------------------------------------------------------
// The read model and its projection
// ---------------------------------------------------------------------------------------------

/// The projection's own store, shared by all instances as a database would be: which order
/// was projected by whom, under which token.
#[derive(Debug, Default)]
struct ReadModel {
    projected: Mutex<Vec<(u64, String, u64)>>,
}

/// Projects orders into the read model, committing once per batch.
struct OrderTotals {
    instance: String,
    leadership: LeadershipWatch,
    model: Arc<ReadModel>,
    pending: Vec<u64>,
}

#[async_trait]
impl Projection for OrderTotals {
    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
        let number = event.payload["order"]
            .as_u64()
            .ok_or("an order without a number")?;
        self.pending.push(number);
        Ok(())
    }

    async fn after_batch(&mut self, _last: &EventReference) -> Result<(), ProjectionError> {
        let token = self.leadership.token().map_or(0, |token| token.0);
        let (first, last) = (self.pending[0], self.pending[self.pending.len() - 1]);
        let mut projected = self.model.projected.lock().expect("read model");
        for number in self.pending.drain(..) {
            projected.push((number, self.instance.clone(), token));
        }
        say(
            &self.instance,
            format!("projected orders #{first}–#{last}, bookmarks #{last}   (token {token})"),
        );
        Ok(())
    }

    async fn cancel_batch(&mut self) {
        self.pending.clear();
    }
}

// ---------------------------------------------------------------------------------------------
// An instance: elector, leader-elected projector, and a narrator for its leadership
// ---------------------------------------------------------------------------------------------

struct Instance {
    name: String,
    elector: LeaderElector,
    stop: oneshot::Sender<()>,
    work: JoinHandle<()>,
    narrator: JoinHandle<()>,
}

impl Instance {
    fn start(
        storage: Arc<dyn EventStorage>,
        name: &str,
        priority: i64,
        model: &Arc<ReadModel>,
    ) -> Self {
        say(name, format!("starts (priority {priority})"));
        // In production the owner comes from `elector::unique_owner_id()`; readable names
        // keep this timeline short.
        let elector = LeaderElector::builder(storage.clone(), LEASE)
            .owner(name)
            .priority(priority)
            .ttl(TTL)
            .start()
            .expect("the storage offers leases");
        let narrator = tokio::spawn(narrate(name.to_owned(), elector.watch()));
        let projection = OrderTotals {
            instance: name.to_owned(),
            leadership: elector.watch(),
            model: Arc::clone(model),
            pending: Vec::new(),
        };
        let projector = Projector::builder(storage, projection)
            .stream(orders())
            .bookmark(READER)
            .batch_size(BATCH_SIZE)
            .build()
            .expect("valid projector settings");
        let mut elected = ElectedProjector::new(projector, elector.watch())
            .poll_interval(Duration::from_millis(20));
        let (stop, stopped) = oneshot::channel::<()>();
        let work = tokio::spawn(async move {
            let stop = async {
                let _ = stopped.await;
            };
            if let Err(error) = elected.run_until(stop).await {
                eprintln!("projection failed: {}", error.report());
            }
        });
        Instance {
            name: name.to_owned(),
            elector,
            stop,
            work,
            narrator,
        }
    }

    /// Stops the work, then releases the lease.
    async fn shut_down(self) {
        let _ = self.stop.send(());
        let _ = self.work.await;
        if let Err(error) = self.elector.shutdown().await {
            eprintln!("{}: releasing the lease failed: {error}", self.name);
        }
        let _ = self.narrator.await;
    }

    /// Dies on the spot: no more renewals, no release.
    fn crash(self) {
        self.narrator.abort();
        self.work.abort();
        self.elector.abort();
        say(&self.name, "💥 crashes: stops renewing, never releases");
    }
}

/// Prints every change of an instance's leadership.
async fn narrate(name: String, mut leadership: LeadershipWatch) {
    let mut previous = Leadership::Unknown;
    loop {
        let current = leadership.current();
        if current != previous {
            let line = match (&previous, &current) {
                (_, Leadership::Leader { token }) => format!("★ LEADER with token {token}"),
                (_, Leadership::StepDownRequested { token }) => {
                    format!("asked to step down (token {token}): finishing the batch in hand")
                }
                (
                    Leadership::Leader { .. } | Leadership::StepDownRequested { .. },
                    Leadership::SteppedDown { token },
                ) => {
                    format!("stepped down: released the lease (token {token}), standing by")
                }
                // Acquisition ignores priority: a standby may win the released lease first,
                // and then it is asked to step down at once.
                (_, Leadership::SteppedDown { token }) => format!(
                    "won the released lease first (token {token}), but a higher priority waits: \
                     stepped down at once"
                ),
                (_, Leadership::Unknown) => "not leading: renewal not confirmed in time".to_owned(),
                (_, Leadership::Standby { holder, token }) => {
                    format!("standby: {holder} leads with token {token}")
                }
                (_, Leadership::Stopped) => "stopped; lease released".to_owned(),
            };
            say(&name, line);
            previous = current;
        }
        if previous == Leadership::Stopped || leadership.changed().await.is_err() {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The story
// ---------------------------------------------------------------------------------------------

/// Handles of one storage: one per instance, plus one for the order producer.
struct Backend {
    description: String,
    handles: Vec<Arc<dyn EventStorage>>,
    _dir: Option<tempfile::TempDir>,
}

async fn file_backend() -> Result<Backend, EventStorageError> {
    let dir = tempfile::tempdir()
        .map_err(|error| EventStorageError::backend("creating a temporary directory", error))?;
    let storage = eventstore_file::FileEventStorage::open(dir.path()).await?;
    // One process holds the directory; its handles share the storage like separate services
    // sharing a database (leases live in memory on the file backend).
    let handles = (0..4)
        .map(|_| Arc::new(storage.clone()) as Arc<dyn EventStorage>)
        .collect();
    Ok(Backend {
        description: format!("the file backend in {}", dir.path().display()),
        handles,
        _dir: Some(dir),
    })
}

async fn postgres_backend(url: &str) -> Result<Backend, EventStorageError> {
    use eventstore_postgres::{DatabaseInitMode, PostgresEventStorage};
    let mut handles: Vec<Arc<dyn EventStorage>> = Vec::new();
    for i in 0..4 {
        // Each instance gets its own pool, as separate processes would.
        let mode = if i == 0 {
            DatabaseInitMode::Recreate
        } else {
            DatabaseInitMode::Ensure
        };
        let storage = PostgresEventStorage::builder()
            .url(url)
            .prefix("leader_demo_")
            .init_mode(mode)
            .build()
            .await?;
        handles.push(Arc::new(storage));
    }
    Ok(Backend {
        description: "PostgreSQL (tables leader_demo_*, one pool per instance)".to_owned(),
        handles,
        _dir: None,
    })
}

/// Appends orders `numbers` and says so.
async fn place_orders(
    storage: &Arc<dyn EventStorage>,
    numbers: std::ops::RangeInclusive<u64>,
) -> Vec<EventReference> {
    let (first, last) = (*numbers.start(), *numbers.end());
    let events = numbers
        .map(|n| {
            EventToStore::new(
                "OrderPlaced",
                serde_json::json!({ "order": n, "amount": n * 10 }),
            )
        })
        .collect();
    let stored = storage
        .append(AppendCriteria::none(), &orders(), events)
        .await
        .expect("append orders");
    say("shop", format!("places orders #{first}–#{last}"));
    stored.into_iter().map(|event| event.reference).collect()
}

/// The storage's record of the lease.
async fn lease_record(storage: &Arc<dyn EventStorage>) -> Result<Lease, EventStorageError> {
    let leases = storage.get_leases().await?;
    Ok(leases
        .into_iter()
        .find(|lease| lease.lease_name == LEASE)
        .expect("the lease was granted"))
}

/// Waits until the bookmark stands at the last order placed.
async fn until_bookmarked(storage: &Arc<dyn EventStorage>, placed: &[EventReference]) {
    let last = placed.last().expect("orders placed").id;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let bookmark = storage.get_bookmark(READER).await.expect("get_bookmark");
        if bookmark.is_some_and(|reference| reference.id == last) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for the bookmark to reach the last order"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits for `condition`, or ends the demo naming what did not happen.
async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn leader_of(instances: &[Instance]) -> Option<&Instance> {
    let leaders: Vec<&Instance> = instances.iter().filter(|i| i.elector.is_leader()).collect();
    match leaders[..] {
        [one] => Some(one),
        _ => None,
    }
}

async fn wait_for_leader(instances: &[Instance]) -> usize {
    until("exactly one leader", || leader_of(instances).is_some()).await;
    let leader = leader_of(instances).expect("one leader");
    instances
        .iter()
        .position(|i| i.name == leader.name)
        .expect("listed")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    started();
    let metrics = DemoMetrics::install()?;
    let postgres_url = std::env::var("DATABASE_URL").ok();
    let wants_postgres = std::env::args().any(|arg| arg == "--postgres");
    let backend = match (wants_postgres, &postgres_url) {
        (true, None) => {
            return Err(
                "--postgres needs DATABASE_URL, e.g. postgres://postgres@127.0.0.1:5432/test"
                    .into(),
            )
        }
        (_, Some(url)) => postgres_backend(url).await?,
        (false, None) => file_backend().await?,
    };
    let shop = Arc::clone(&backend.handles[3]);
    let model = Arc::new(ReadModel::default());
    println!("Leader-elected projectors on {}", backend.description);
    println!("lease {LEASE:?}, ttl {TTL:?}, renewal every ttl/3, batches of {BATCH_SIZE}");

    act("1. Election");
    let mut instances = vec![Instance::start(
        backend.handles[0].clone(),
        "instance-a",
        0,
        &model,
    )];
    wait_for_leader(&instances).await;
    instances.push(Instance::start(
        backend.handles[1].clone(),
        "instance-b",
        0,
        &model,
    ));
    until("instance-b to stand by", || {
        matches!(
            instances[1].elector.leadership(),
            Leadership::Standby { .. }
        )
    })
    .await;

    act("2. The leader projects, bookmarking after every batch");
    let mut placed = place_orders(&shop, 1..=10).await;
    until_bookmarked(&shop, &placed).await;

    act("3. Planned handover to a higher-priority instance");
    instances.push(Instance::start(
        backend.handles[2].clone(),
        "instance-c",
        10,
        &model,
    ));
    let asked = Instant::now();
    until("instance-c to lead", || instances[2].elector.is_leader()).await;
    say(
        "",
        format!(
            "handover done {} ms after instance-c asked: the holder heard of it at once, \
             finished its batch and released",
            asked.elapsed().as_millis()
        ),
    );
    placed.extend(place_orders(&shop, 11..=18).await);
    until_bookmarked(&shop, &placed).await;

    act("4. The leader crashes; a standby takes over once its ttl runs out");
    let crashed = instances.remove(2);
    let zombie_fence = Fence::new(LEASE, crashed.elector.token().expect("instance-c leads"));
    crashed.crash();
    let crashed_at = shop.storage_time().await?;
    let expires_at = lease_record(&shop).await?.expires_at();
    placed.extend(place_orders(&shop, 19..=22).await);
    let next = wait_for_leader(&instances).await;
    let taken_over_at = lease_record(&shop).await?.acquired_at;
    say(
        "",
        format!(
            "on the storage's clock: lease expired {} ms after the crash (last renewal + ttl {} ms); \
             {} acquired it {} ms later",
            (expires_at - crashed_at).num_milliseconds(),
            TTL.as_millis(),
            instances[next].name,
            (taken_over_at - expires_at).num_milliseconds(),
        ),
    );
    until_bookmarked(&shop, &placed).await;

    act("5. The crashed leader wakes up as a zombie; its fence stops it");
    let bookmark = shop.get_bookmark(READER).await?;
    say(
        "instance-c",
        format!(
            "(zombie, still holding token {}) appends an order and moves the bookmark back to #1",
            zombie_fence.token
        ),
    );
    let zombie_append = shop
        .append_fenced(
            &zombie_fence,
            AppendCriteria::none(),
            &orders(),
            vec![EventToStore::new(
                "OrderPlaced",
                serde_json::json!({ "order": 666, "amount": 0 }),
            )],
        )
        .await;
    report_refusal("append", &zombie_append);
    let zombie_bookmark = shop
        .bookmark_fenced(&zombie_fence, READER, &placed[0], Tags::none())
        .await;
    report_refusal("bookmark", &zombie_bookmark);
    let unchanged = shop.get_bookmark(READER).await? == bookmark;
    say("", format!("bookmark still at #22: {unchanged}"));

    act("6. Shutdown: the leader releases and a standby leads at once, then the rest stop");
    let leader = wait_for_leader(&instances).await;
    let leaving = instances.remove(leader);
    let leaving_name = leaving.name.clone();
    let released = Instant::now();
    leaving.shut_down().await;
    let next = wait_for_leader(&instances).await;
    say(
        "",
        format!(
            "{} leads {} ms after {} began to release (pushed, not polled: the request \
             interval is {} ms)",
            instances[next].name,
            released.elapsed().as_millis(),
            leaving_name,
            (TTL / 3).as_millis()
        ),
    );
    for instance in instances {
        instance.shut_down().await;
    }

    let projected = model.projected.lock().expect("read model").clone();
    let mut times: BTreeMap<u64, usize> = BTreeMap::new();
    for (number, _, _) in &projected {
        *times.entry(*number).or_default() += 1;
    }
    let lost: Vec<u64> = (1..=22).filter(|n| !times.contains_key(n)).collect();
    let twice = times.values().filter(|&&count| count > 1).count();
    let tokens: std::collections::BTreeSet<u64> = projected.iter().map(|(_, _, t)| *t).collect();
    println!(
        "\n{} orders placed; {} projected; lost: {lost:?}; projected more than once (at-least-once \
         redelivery): {twice}; tokens seen: {tokens:?}",
        placed.len(),
        times.len(),
    );
    for handle in &backend.handles {
        handle.close().await?;
    }
    if !lost.is_empty() || !unchanged || zombie_append.is_ok() || zombie_bookmark.is_ok() {
        return Err("the demo's story did not hold; see above".into());
    }
    metrics.print();
    println!("done in {:.1} s", started().elapsed().as_secs_f64());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Metrics: what an exporter would publish
// ---------------------------------------------------------------------------------------------

/// The demo's metrics recorder: keeps every value for the summary at the end.
struct DemoMetrics {
    registry: Arc<Registry<Key, AtomicStorage>>,
}

impl DemoMetrics {
    fn install() -> Result<DemoMetrics, Box<dyn std::error::Error>> {
        let registry = Arc::new(Registry::atomic());
        metrics::set_global_recorder(DemoMetrics {
            registry: Arc::clone(&registry),
        })
        .map_err(|error| error.to_string())?;
        Ok(DemoMetrics { registry })
    }

    fn print(&self) {
        act("Metrics recorded (an application's exporter would publish these)");
        let name = |key: &Key| {
            let labels: Vec<String> = key
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            if labels.is_empty() {
                key.name().to_owned()
            } else {
                format!("{}{{{}}}", key.name(), labels.join(","))
            }
        };
        let mut lines = Vec::new();
        for (key, counter) in self.registry.get_counter_handles() {
            lines.push((name(&key), counter.load(Ordering::Relaxed).to_string()));
        }
        for (key, gauge) in self.registry.get_gauge_handles() {
            let value = f64::from_bits(gauge.load(Ordering::Relaxed));
            lines.push((name(&key), value.to_string()));
        }
        for (key, histogram) in self.registry.get_histogram_handles() {
            let mut values = histogram.data();
            values.sort_by(f64::total_cmp);
            let Some(&max) = values.last() else { continue };
            let median = values[values.len() / 2];
            let summary = if key.name().ends_with("_seconds") {
                format!(
                    "{} recorded, median {:.2} ms, max {:.2} ms",
                    values.len(),
                    median * 1e3,
                    max * 1e3
                )
            } else {
                format!("{} recorded, median {median}, max {max}", values.len())
            };
            lines.push((name(&key), summary));
        }
        lines.sort();
        let width = lines.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
        for (name, value) in lines {
            println!("  {name:<width$}  {value}");
        }
    }
}

impl Recorder for DemoMetrics {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.registry
            .get_or_create_counter(key, |counter| Counter::from_arc(counter.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.registry
            .get_or_create_gauge(key, |gauge| Gauge::from_arc(gauge.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.registry
            .get_or_create_histogram(key, |histogram| Histogram::from_arc(histogram.clone()))
    }
}

fn report_refusal<T>(what: &str, result: &Result<T, EventStorageError>) {
    match result {
        Err(error @ EventStorageError::Fenced { .. }) => {
            say("storage", format!("✗ refuses the zombie's {what}: {error}"));
        }
        Err(other) => say(
            "storage",
            format!("refuses the zombie's {what} for another reason: {other}"),
        ),
        Ok(_) => say(
            "storage",
            format!("accepted the zombie's {what} (it should not have)"),
        ),
    }
}
