//! How a backend hands the kit fresh storages.

use async_trait::async_trait;
use eventstore_api::EventStorage;

/// Makes the storages the scenarios run against.
///
/// `create` must return a fresh, empty storage each time (scenarios run in parallel, so
/// storages must not see each other's data); `another_handle` opens a second, independent
/// handle onto the *same* storage, as a second process would: a clone for an in-memory
/// backend, a separate connection pool on the same tables for a database.
///
/// The storage type is `Clone`: clones are handles of one storage *in one process*, and
/// `close` on any clone closes all of them. A handle from `another_handle` stands for another
/// process, which one process's `close` does not reach.
#[async_trait]
pub trait StorageFactory: Send + Sync {
    /// The backend's storage type (`Arc<dyn EventStorage>` works too).
    type Storage: EventStorage + Clone + 'static;

    /// Why the backend cannot be tested here (say, its server is unreachable), or `None`.
    ///
    /// When this answers `Some`, each scenario prints the reason and passes without running.
    /// Answer `None` under CI (`CI=true`), so that a missing server fails the run instead.
    async fn unavailable(&self) -> Option<String> {
        None
    }

    /// A fresh, empty storage.
    async fn create(&self) -> Self::Storage;

    /// Another handle onto the storage `storage` is a handle of.
    async fn another_handle(&self, storage: &Self::Storage) -> Self::Storage;

    /// Steps the clock of `storage` (the storage's clock: `storage_time`, lease expiry, the
    /// times it stamps) forward by `by` at once, as a step of the system clock would move it,
    /// and answers `Some(())`; or answers `None` when the factory cannot (the default).
    ///
    /// The scenarios of [`storage_clock`](crate::storage_clock) need it: they step the clock
    /// and check that everything the storage judges or stamps by time follows it, which
    /// catches a time read from the wall clock instead (they agree until the system clock
    /// steps). Where this answers `None` they print why and pass without running. A backend
    /// whose clock is in its process can offer it (the memory and file backends step their
    /// `eventstore_api::in_process::StorageClock` with `advance`); one whose clock is a
    /// database server's cannot.
    async fn step_clock(&self, storage: &Self::Storage, by: chrono::TimeDelta) -> Option<()> {
        let _ = (storage, by);
        None
    }
}
