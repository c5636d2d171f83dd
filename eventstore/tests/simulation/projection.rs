//! The events a producer appends throughout a run, and the projection every member runs
//! over them: elected (the leader projects all) or partitioned (each partition its own).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use eventstore::projector::ProjectionError;
use eventstore::{
    AppendCriteria, EventFilter, EventReference, EventStorage, EventStreamId, EventToStore,
    Projection, StoredEvent, Tags,
};
use eventstore_memory::MemoryEventStorage;

use crate::faults::at_once;
use crate::world::{lock, World};
use crate::PARTITIONS;

/// The stream the producer appends to and the projections read.
pub(crate) fn orders() -> EventStreamId {
    EventStreamId::for_context("orders")
}

/// The bookmark reader of the elected projection, or of one partition's.
pub(crate) fn reader(partition: Option<u32>) -> String {
    match partition {
        None => "orders-view".to_owned(),
        Some(partition) => format!("orders-view-{partition}"),
    }
}

fn partition_tags(partition: u32) -> Tags {
    Tags::from_pairs([("partition", partition.to_string())])
}

/// What was appended and what was projected, by sequence number.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    appended: Mutex<Vec<u64>>,
    projected: Mutex<BTreeSet<u64>>,
    bookmarks: Mutex<BTreeMap<String, EventReference>>,
}

impl Ledger {
    /// Appends the next event, straight to the storage: the producer is not under test.
    pub(crate) fn produce(&self, storage: &MemoryEventStorage) {
        let mut appended = lock(&self.appended);
        let seq = appended.len() as u64;
        let event = EventToStore::new("Ordered", serde_json::json!({ "seq": seq }))
            .with_tags(partition_tags((seq % u64::from(PARTITIONS)) as u32));
        at_once(storage.append(AppendCriteria::none(), &orders(), vec![event]))
            .expect("the producer's append");
        appended.push(seq);
    }

    /// Every bookmark the storage holds has not moved back since the last look.
    pub(crate) fn check_bookmarks(&self, storage: &MemoryEventStorage, world: &World) {
        let now = at_once(storage.get_bookmarks()).expect("bookmarks");
        let mut seen = lock(&self.bookmarks);
        for bookmark in now {
            if let Some(before) = seen.get(&bookmark.reader) {
                if bookmark.reference.order_key() < before.order_key() {
                    world.violation(format!(
                        "bookmark {:?} moved back from {:?} to {:?}",
                        bookmark.reader,
                        before.order_key(),
                        bookmark.reference.order_key()
                    ));
                }
            }
            seen.insert(bookmark.reader, bookmark.reference);
        }
    }

    /// Every event appended before `count` events were has been projected at least once.
    pub(crate) fn check_projected(&self, count: usize, world: &World) {
        let projected = lock(&self.projected);
        let missing: Vec<u64> = lock(&self.appended)
            .iter()
            .take(count)
            .filter(|seq| !projected.contains(seq))
            .copied()
            .collect();
        if !missing.is_empty() {
            world.violation(format!(
                "{} of the first {count} events never projected, from {:?}",
                missing.len(),
                missing.first()
            ));
        }
    }

    pub(crate) fn appended(&self) -> usize {
        lock(&self.appended).len()
    }
}

/// A projection that notes every event it handles (at least once is the promise).
#[derive(Debug)]
pub(crate) struct Recording {
    pub(crate) partition: Option<u32>,
    pub(crate) ledger: Arc<Ledger>,
}

#[async_trait]
impl Projection for Recording {
    fn filter(&self) -> EventFilter {
        match self.partition {
            None => EventFilter::match_all(),
            Some(partition) => EventFilter::for_tags(partition_tags(partition)),
        }
    }

    async fn handle(&mut self, event: &StoredEvent) -> Result<(), ProjectionError> {
        let seq = event.payload["seq"]
            .as_u64()
            .ok_or("an event without seq")?;
        lock(&self.ledger.projected).insert(seq);
        Ok(())
    }
}

/// A projector of `partition` (or of the whole stream) for a member.
pub(crate) fn projector(
    storage: Arc<dyn EventStorage>,
    partition: Option<u32>,
    ledger: &Arc<Ledger>,
) -> Result<eventstore::Projector<Recording>, eventstore::EventStorageError> {
    let recording = Recording {
        partition,
        ledger: ledger.clone(),
    };
    eventstore::Projector::builder(storage, recording)
        .stream(orders())
        .bookmark(reader(partition))
        .batch_size(20)
        .build()
}
