//! An in-memory [`EventStorage`](eventstore_api::EventStorage) with leases.
//!
//! Everything lives in process memory; handles made with `clone()` share one storage and
//! contend for its leases for real, from any number of tasks and threads. Use it in tests, in
//! examples, and wherever a process elects between its own components.
//!
//! [`LeaseTable`] and [`StorageClock`] are public so that other in-process backends apply the
//! same lease rules instead of writing them again.

mod clock;
mod event_log;
mod lease_table;
mod storage;

pub use clock::StorageClock;
pub use lease_table::LeaseTable;
pub use storage::MemoryEventStorage;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
