//! How a backend hands the kit fresh storages.

use async_trait::async_trait;
use eventstore_api::EventStorage;

/// Makes the storages the scenarios run against.
///
/// `create` must return a fresh, empty storage each time (scenarios run in parallel, so
/// storages must not see each other's data); `another_handle` opens a second, independent
/// handle onto the *same* storage, as a second process would: a clone for an in-memory
/// backend, a separate connection pool on the same tables for a database.
#[async_trait]
pub trait StorageFactory: Send + Sync {
    /// The backend's storage type (`Arc<dyn EventStorage>` works too).
    type Storage: EventStorage + 'static;

    /// A fresh, empty storage.
    async fn create(&self) -> Self::Storage;

    /// Another handle onto the storage `storage` is a handle of.
    async fn another_handle(&self, storage: &Self::Storage) -> Self::Storage;
}
