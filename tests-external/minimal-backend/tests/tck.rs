//! The whole conformance kit against `VecStorage`, which declares no capability: the
//! scenarios that need one are reported as ignored, naming it, and the `capabilities`
//! scenarios check that every lease method answers `Unsupported`.

use async_trait::async_trait;
use eventstore_tck::StorageFactory;
use minimal_backend::VecStorage;

struct Fresh;

#[async_trait]
impl StorageFactory for Fresh {
    type Storage = VecStorage;

    async fn create(&self) -> VecStorage {
        VecStorage::new()
    }

    /// A clone shares the storage: the only kind of second handle a storage in memory has.
    async fn another_handle(&self, storage: &VecStorage) -> VecStorage {
        storage.clone()
    }
}

eventstore_tck::tck_tests!(Fresh, capabilities = []);
