//! The whole conformance kit against the memory backend, directly and through
//! `Arc<dyn EventStorage>` (which proves the forwarding impl passes every method on).

use std::sync::Arc;

use async_trait::async_trait;
use chrono::TimeDelta;
use eventstore_api::EventStorage;
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::StorageFactory;

/// Fresh storages; another handle is a clone, which shares the storage.
struct Memory;

#[async_trait]
impl StorageFactory for Memory {
    type Storage = MemoryEventStorage;

    async fn create(&self) -> MemoryEventStorage {
        MemoryEventStorage::new()
    }

    async fn another_handle(&self, storage: &MemoryEventStorage) -> MemoryEventStorage {
        storage.clone()
    }

    /// The storage's clock is in this process: step it.
    async fn step_clock(&self, storage: &MemoryEventStorage, by: TimeDelta) -> Option<()> {
        storage.clock().advance(by);
        Some(())
    }
}

/// The same storages, seen only as `Arc<dyn EventStorage>`.
struct MemoryBehindArcDyn;

#[async_trait]
impl StorageFactory for MemoryBehindArcDyn {
    type Storage = Arc<dyn EventStorage>;

    async fn create(&self) -> Arc<dyn EventStorage> {
        Arc::new(MemoryEventStorage::new())
    }

    async fn another_handle(&self, storage: &Arc<dyn EventStorage>) -> Arc<dyn EventStorage> {
        Arc::clone(storage)
    }
}

mod direct {
    eventstore_tck::tck_tests!(
        super::Memory,
        capabilities = [
            Lease,
            FencedWrites,
            LeaseChanges,
            LeaseOutcomes,
            AppendHints
        ]
    );
}

mod arc_dyn {
    eventstore_tck::tck_tests!(
        super::MemoryBehindArcDyn,
        capabilities = [
            Lease,
            FencedWrites,
            LeaseChanges,
            LeaseOutcomes,
            AppendHints
        ]
    );
}
