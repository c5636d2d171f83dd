//! Partitioned work, end to end, as a timeline.
//!
//! Orders go to twelve partitions (order number modulo 12), each a stream of its own. Three
//! instances share the partitions with a `PartitionElector` each and project the partitions
//! they hold with a `PartitionedProjector`. Then a fourth instance joins, one crashes, and one
//! shuts down. The demo prints the assignment after each step and every handover with its
//! token, and ends by checking that every order was projected and that no partition ever had
//! two writers: every batch committed under a partition's token came from one instance, and
//! tokens only rose.
//!
//! ```sh
//! cargo run --example partitions      # local files in a temporary directory, no server
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use eventstore::partitions::{PartitionElector, PartitionWatch};
use eventstore::projector::{PartitionedProjector, Projection, ProjectionError, Projector};
use eventstore::{
    AppendCriteria, EventReference, EventStorage, EventStorageError, EventStreamId, EventToStore,
    Fence, StoredEvent,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The group the instances share.
const GROUP: &str = "orders";
/// Its partitions.
const PARTITIONS: u32 = 12;
/// Short, so that the crash is taken over quickly.
const TTL: Duration = Duration::from_secs(1);
/// How long the demo waits for anything before it gives up.
const PATIENCE: Duration = Duration::from_secs(10);

fn partition_of(order: u64) -> u32 {
    (order % u64::from(PARTITIONS)) as u32
}

fn partition_stream(partition: u32) -> EventStreamId {
    EventStreamId::new("orders", partition.to_string())
}

fn started() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// One line of the timeline: seconds since the start, who, what.
fn say(who: &str, what: impl Display) {
    let at = started().elapsed().as_secs_f64();
    println!("{at:7.3}s  {who:<8}  {what}");
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

/// The projection's own store, shared by all instances as a database would be: every batch
/// committed, in commit order, with the partition, the instance and the token it ran under.
#[derive(Debug, Default)]
struct ReadModel {
    commits: Mutex<Vec<Commit>>,
}

#[derive(Debug, Clone)]
struct Commit {
    partition: u32,
    instance: String,
    token: u64,
    orders: Vec<u64>,
}

/// Projects one partition's orders, committing once per batch under the partition's token.
struct PartitionTotals {
    partition: u32,
    instance: String,
    watch: PartitionWatch,
    model: Arc<ReadModel>,
    pending: Vec<u64>,
}

#[async_trait]
impl Projection for PartitionTotals {
    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
        let order = event.payload["order"]
            .as_u64()
            .ok_or("an order without a number")?;
        self.pending.push(order);
        Ok(())
    }

    async fn after_batch(&mut self, _last: &EventReference) -> Result<(), ProjectionError> {
        // A real read model would check the token in its own transaction; the demo records
        // it so that the end can prove each token had one writer.
        let fence = self.watch.held().remove(&self.partition);
        let token = fence.ok_or("committing a partition this instance no longer holds")?;
        self.model.commits.lock().expect("read model").push(Commit {
            partition: self.partition,
            instance: self.instance.clone(),
            token: token.token.0,
            orders: std::mem::take(&mut self.pending),
        });
        Ok(())
    }

    async fn cancel_batch(&mut self) {
        self.pending.clear();
    }
}

// ---------------------------------------------------------------------------------------------
// An instance: a partition elector, a partitioned projector, and a narrator
// ---------------------------------------------------------------------------------------------

struct Instance {
    name: String,
    elector: PartitionElector,
    watch: PartitionWatch,
    projector: JoinHandle<()>,
    narrator: JoinHandle<()>,
    stop: oneshot::Sender<()>,
}

impl Instance {
    fn start(name: &str, storage: Arc<dyn EventStorage>, model: &Arc<ReadModel>) -> Instance {
        let elector = PartitionElector::builder(Arc::clone(&storage), GROUP, PARTITIONS)
            .owner(name)
            .ttl(TTL)
            .start()
            .expect("valid settings");
        let watch = elector.watch();
        let (stop, stopped) = oneshot::channel();
        let make = {
            let (name, watch, model) = (name.to_owned(), watch.clone(), Arc::clone(model));
            move |partition| {
                let totals = PartitionTotals {
                    partition,
                    instance: name.clone(),
                    watch: watch.clone(),
                    model: Arc::clone(&model),
                    pending: Vec::new(),
                };
                Projector::builder(Arc::clone(&storage), totals)
                    .stream(partition_stream(partition))
                    .bookmark(format!("order-totals-{partition}"))
                    .batch_size(5)
                    .build()
            }
        };
        let mut projector =
            PartitionedProjector::new(watch.clone(), make).poll_interval(Duration::from_millis(50));
        let projector = tokio::spawn(async move {
            if let Err(error) = projector
                .run_until(async { stopped.await.unwrap_or(()) })
                .await
            {
                eprintln!("projector failed: {}", error.report());
            }
        });
        let narrator = tokio::spawn(narrate(name.to_owned(), watch.clone()));
        say(name, "starts");
        Instance {
            name: name.to_owned(),
            elector,
            watch,
            projector,
            narrator,
            stop,
        }
    }

    async fn shut_down(self) {
        say(
            &self.name,
            "shuts down: stops projecting, leaves the group, releases",
        );
        let _ = self.stop.send(());
        let _ = self.projector.await;
        self.elector.shutdown().await.expect("shutdown releases");
        let _ = self.narrator.await;
    }

    fn crash(self) {
        say(&self.name, "crashes: renews nothing, releases nothing");
        self.projector.abort();
        self.narrator.abort();
        self.elector.abort();
    }
}

/// Prints every partition this instance takes or gives up, with its token.
async fn narrate(name: String, mut watch: PartitionWatch) {
    let mut before: BTreeMap<u32, Fence> = BTreeMap::new();
    loop {
        let now = watch.held();
        let taken: Vec<String> = now
            .iter()
            .filter(|(partition, _)| !before.contains_key(partition))
            .map(|(partition, fence)| format!("{partition} (token {})", fence.token))
            .collect();
        let given: Vec<String> = before
            .keys()
            .filter(|partition| !now.contains_key(partition))
            .map(ToString::to_string)
            .collect();
        if !taken.is_empty() {
            say(&name, format!("holds {}", taken.join(", ")));
        }
        if !given.is_empty() {
            say(&name, format!("gives up {}", given.join(", ")));
        }
        before = now;
        if watch.changed().await.is_err() {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The steps
// ---------------------------------------------------------------------------------------------

/// Waits until every partition is held by exactly one instance, balanced, and prints who holds
/// what.
async fn wait_balanced(instances: &[Instance]) -> Result<(), String> {
    let deadline = Instant::now() + PATIENCE;
    let floor = PARTITIONS as usize / instances.len();
    let ceil = (PARTITIONS as usize).div_ceil(instances.len());
    loop {
        let held: Vec<BTreeMap<u32, Fence>> = instances.iter().map(|i| i.watch.held()).collect();
        let all: BTreeSet<u32> = held.iter().flat_map(|h| h.keys().copied()).collect();
        let total: usize = held.iter().map(BTreeMap::len).sum();
        let balanced = held.iter().all(|h| h.len() == floor || h.len() == ceil);
        if balanced && total == PARTITIONS as usize && all.len() == total {
            for (instance, held) in instances.iter().zip(&held) {
                let partitions: Vec<String> = held.keys().map(ToString::to_string).collect();
                println!("           {:<8}  {}", instance.name, partitions.join(" "));
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("not balanced after {PATIENCE:?}: {held:?}"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Appends orders `numbers`, each to its partition's stream.
async fn place_orders(
    storage: &Arc<dyn EventStorage>,
    numbers: std::ops::RangeInclusive<u64>,
) -> Result<(), EventStorageError> {
    let (first, last) = (*numbers.start(), *numbers.end());
    for order in numbers {
        let event = EventToStore::new("OrderPlaced", serde_json::json!({ "order": order }));
        storage
            .append(
                AppendCriteria::none(),
                &partition_stream(partition_of(order)),
                vec![event],
            )
            .await?;
    }
    say("shop", format!("placed orders #{first}–#{last}"));
    Ok(())
}

/// Waits until every order up to `last` is in the read model.
async fn wait_projected(model: &ReadModel, last: u64) -> Result<(), String> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let projected: BTreeSet<u64> = model
            .commits
            .lock()
            .expect("read model")
            .iter()
            .flat_map(|commit| commit.orders.iter().copied())
            .collect();
        if (1..=last).all(|order| projected.contains(&order)) {
            say("check", format!("orders #1–#{last} projected"));
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("orders missing after {PATIENCE:?}"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Every token of a partition committed from one instance, and tokens only rose.
fn check_one_writer_per_partition(model: &ReadModel) -> Result<(), String> {
    let commits = model.commits.lock().expect("read model").clone();
    let mut last: BTreeMap<u32, (u64, String)> = BTreeMap::new();
    let mut writers: BTreeMap<(u32, u64), BTreeSet<String>> = BTreeMap::new();
    for commit in &commits {
        writers
            .entry((commit.partition, commit.token))
            .or_default()
            .insert(commit.instance.clone());
        if let Some((token, instance)) = last.get(&commit.partition) {
            if commit.token < *token {
                return Err(format!(
                    "partition {}: {} committed under token {} after {instance} under {token}",
                    commit.partition, commit.instance, commit.token
                ));
            }
        }
        last.insert(commit.partition, (commit.token, commit.instance.clone()));
    }
    if let Some(((partition, token), who)) = writers.iter().find(|(_, who)| who.len() > 1) {
        return Err(format!(
            "partition {partition}, token {token}: written by {who:?}"
        ));
    }
    let tenures = writers.len();
    say(
        "check",
        format!(
            "{} batches in {tenures} tenures over {PARTITIONS} partitions: one writer per token, \
             tokens only rose",
            commits.len()
        ),
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    started();
    let dir = tempfile::tempdir()?;
    let storage = eventstore_file::FileEventStorage::open(dir.path()).await?;
    // One process holds the directory; its handles share the storage like separate services
    // sharing a database (leases live in memory on the file backend).
    let handle = || Arc::new(storage.clone()) as Arc<dyn EventStorage>;
    let shop = handle();
    let model = Arc::new(ReadModel::default());

    act("three instances share twelve partitions");
    let mut instances: Vec<Instance> = ["pod-a", "pod-b", "pod-c"]
        .iter()
        .map(|name| Instance::start(name, handle(), &model))
        .collect();
    wait_balanced(&instances).await?;
    place_orders(&shop, 1..=48).await?;
    wait_projected(&model, 48).await?;

    act("a fourth instance joins: three partitions move to it");
    instances.push(Instance::start("pod-d", handle(), &model));
    wait_balanced(&instances).await?;
    place_orders(&shop, 49..=96).await?;
    wait_projected(&model, 96).await?;

    act("pod-b crashes: its partitions are taken once their ttl runs out");
    let crashed_at = Instant::now();
    instances.remove(1).crash();
    wait_balanced(&instances).await?;
    say("check", format!("taken over in {:?}", crashed_at.elapsed()));
    place_orders(&shop, 97..=144).await?;
    wait_projected(&model, 144).await?;

    act("pod-a shuts down: the others take its partitions at once");
    let left_at = Instant::now();
    instances.remove(0).shut_down().await;
    wait_balanced(&instances).await?;
    say("check", format!("taken over in {:?}", left_at.elapsed()));
    place_orders(&shop, 145..=192).await?;
    wait_projected(&model, 192).await?;

    act("the end");
    check_one_writer_per_partition(&model)?;
    for instance in instances {
        instance.shut_down().await;
    }
    Ok(())
}
