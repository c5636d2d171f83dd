//! The whole kit against a backend that does not declare `Capability::Lease`: events and
//! bookmarks behave as the kit demands, the scenarios that need a capability are reported as
//! ignored, naming it, and the `capabilities` scenarios prove that each lease method refuses
//! with `Unsupported`. With `--include-ignored`, every lease scenario proves that refusal
//! too. This is how capability gating is proven.

use async_trait::async_trait;
use eventstore::{Capability, EventStorage};
use eventstore_memory::MemoryEventStorage;
use eventstore_tck::wrappers::EventsOnly;
use eventstore_tck::StorageFactory;

/// Fresh memory storages with their leases hidden; another handle is a clone, which shares
/// the storage.
struct EventsOnlyMemory;

#[async_trait]
impl StorageFactory for EventsOnlyMemory {
    type Storage = EventsOnly<MemoryEventStorage>;

    async fn create(&self) -> Self::Storage {
        EventsOnly::new(MemoryEventStorage::new())
    }

    async fn another_handle(&self, storage: &Self::Storage) -> Self::Storage {
        storage.clone()
    }
}

#[tokio::test]
async fn the_wrapper_hides_the_lease_capability_of_the_storage_it_wraps() {
    let storage = EventsOnlyMemory.create().await;
    assert!(
        storage.inner().supports(Capability::Lease),
        "the wrapped memory storage offers leases, so hiding them proves the gating"
    );
    assert!(!storage.supports(Capability::Lease));
    eventstore_tck::support::assert_lease_methods_unsupported(&storage).await;
}

eventstore_tck::tck_tests!(EventsOnlyMemory, capabilities = []);
