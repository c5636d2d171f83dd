//! The whole kit on a memory storage that pushes nothing (`PollOnly`): electors, partition
//! electors and projectors must work by polling alone, as on a backend without notifications
//! or a database reached only through a pooler.

use async_trait::async_trait;
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::wrappers::PollOnly;
use eventstore_tck::StorageFactory;

/// Fresh memory storages with their notifications hidden; another handle shares the storage.
struct Polling;

#[async_trait]
impl StorageFactory for Polling {
    type Storage = PollOnly<MemoryEventStorage>;

    async fn create(&self) -> Self::Storage {
        PollOnly::new(MemoryEventStorage::new())
    }

    async fn another_handle(&self, storage: &Self::Storage) -> Self::Storage {
        PollOnly::new(storage.inner().clone())
    }
}

// Leases and fenced writes of the memory storage; its pushes hidden.
eventstore_tck::tck_tests!(Polling, capabilities = [Lease, FencedWrites, LeaseOutcomes]);
